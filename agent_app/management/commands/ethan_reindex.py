"""ethan_reindex: rewrite the stored search tokens after the tokenizer changed.

It lives in agent_app because it spans the layers: each app rewrites its own rows the way its
services write them (sessions_app.search.messages_reindex_batches, memory_app's facts_reindex,
episodes_app's episodes_reindex); this command only runs them in turn and shows the progress.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from episodes_app.services import episodes_reindex
from memory_app.services import facts_reindex
from sessions_app.search import ReindexStep, messages_reindex_batches

# Each kind's reindexing, in the order they run: batches of (total, done, changed).
KINDS: dict[str, Callable[..., Iterator[ReindexStep]]] = {
    "messages": messages_reindex_batches,
    "facts": facts_reindex,
    "episodes": episodes_reindex,
}


@contextmanager
def kind_progress(stream: TextIO, kind: str) -> Iterator[Callable[[ReindexStep], None]]:
    """A progress bar of the rows of one kind gone through, on `stream` when it is a terminal
    (nothing when the output goes to a file or a pipe)."""
    if not stream.isatty():
        yield lambda _step: None
        return
    columns = (TextColumn(f"  {kind:<9}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=stream)) as bar:
        task = bar.add_task(kind, total=None)
        yield lambda step: bar.update(task, total=step.total, completed=step.done)


class Command(BaseCommand):
    help = (
        "Rewrite the search tokens of stored messages (with their neighbouring turns' words), "
        "facts and episodes with the current tokenizer, in batches; rows already up to date "
        "are left alone, so it is safe to run again. Run it after an upgrade that changes how "
        "text is tokenized (docs/search.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--only", choices=list(KINDS), action="append", help="only this kind (may be repeated)"
        )
        parser.add_argument(
            "--batch",
            type=int,
            default=1000,
            help="rows per transaction (for messages: whole sessions, about this many rows)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        batch = options["batch"]
        if batch < 1:
            raise CommandError(f"--batch must be at least 1, not {batch}")
        for kind in options["only"] or KINDS:
            changed = total = 0
            with kind_progress(self.stderr._out, kind) as shown:
                for step in KINDS[kind](batch=batch):
                    changed += step.changed
                    total = step.total
                    shown(step)
            self.stdout.write(f"{kind}: {changed} of {total} rewritten")
