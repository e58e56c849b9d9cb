"""`ethan import --from chatgpt|claude PATH` at the console: the import under a progress bar,
the estimate of learning from it, then the learning itself (embedded: here, under a second
bar; with a broker: queued on the memory queue). `ethan import --learn` goes on with learning
that an earlier import left (a stop, or --no-learn)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from agent_app.history_import import (
    history_import,
    imports_learn,
    imports_learn_start,
    learning_estimate,
)
from agent_app.vectors import vectors_for_owner, vectors_write_all
from embedder import embedder_name
from sessions_app.imports.export import ExportError
from sessions_app.imports.services import export_check


@contextmanager
def progress_bar(stream: TextIO, label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on `stream` when it is a terminal (none into a file or a pipe)."""
    if not stream.isatty():
        yield None
        return
    columns = (TextColumn(f"  {label}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=stream)) as bar:
        task = bar.add_task(label, total=None)

        def show(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield show


def _skipped(command: BaseCommand, lines: list[str]) -> str:
    """A line on stderr for each conversation skipped; the count for the summary."""
    for line in lines:
        command.stderr.write(line)
    return f", {len(lines)} skipped (could not be read)" if lines else ""


def history_import_command(command: BaseCommand, owner: Any, options: dict[str, Any]) -> None:
    """The command's work for --from and --learn; CommandError (exit 1) for a bad file, or one
    none of whose conversations can be read. Conversations that cannot be read are skipped,
    each with its line, and counted; the others are imported (exit 0)."""
    source, path = options["source"], options["path"]
    if source:
        if path is None:
            raise CommandError(f"--from {source} needs the export: a zip or conversations.json")
        path = Path(path).expanduser()
        if options["dry_run"]:
            try:
                check = export_check(path, source=source)
            except ExportError as exc:
                raise CommandError(f"nothing imported: {exc}") from None
            skipped = _skipped(command, check.skipped)
            command.stdout.write(
                f"{path.name} holds {check.conversations} conversations, {check.messages} "
                f"messages, {check.rounds} rounds{skipped}; dry run: nothing was written"
            )
            return
        try:
            with progress_bar(command.stderr._out, "conversations") as progress:
                report = history_import(owner=owner, path=path, source=source, progress=progress)
        except ExportError as exc:
            raise CommandError(f"nothing imported: {exc}") from None
        skipped = _skipped(command, report.skipped)
        command.stdout.write(
            f"imported for {owner.get_username()} from {path.name}: "
            f"{report.conversations} conversations, {report.sessions_created} new, "
            f"{report.messages_created} new messages, {report.unchanged} already there{skipped}"
        )
        for title in report.changed:
            command.stdout.write(
                f"note: {title!r} changed since it was imported; kept as first imported"
            )
        imported_embed(command, owner)
    if options["no_learn"]:
        command.stdout.write("not learning from them now (--no-learn): `ethan import --learn`")
        return
    estimate = learning_estimate(owner=owner)
    command.stdout.write(estimate.line())
    if not estimate.conversations:
        return
    if not settings.ETHAN_EMBEDDED:
        imports_learn_start(owner=owner)
        command.stdout.write("learning in the background, on the memory queue, oldest first")
        return
    with progress_bar(command.stderr._out, "learning") as progress:
        learnt = imports_learn(owner=owner, progress=progress)
    command.stdout.write(f"learnt from {learnt} conversations")


def imported_embed(command: BaseCommand, owner: Any) -> None:
    """The imported messages' vectors (search by meaning): written here under a progress bar
    when embedded, queued on the memory queue with a broker; nothing with the embedder off."""
    if embedder_name() is None:
        return
    if not settings.ETHAN_EMBEDDED:
        vectors_for_owner(owner_id=owner.pk)
        return
    with progress_bar(command.stderr._out, "embedding") as progress:
        written = vectors_write_all(owner_id=owner.pk, progress=progress)
    command.stdout.write(f"embedded {written.messages} messages for search by meaning")
