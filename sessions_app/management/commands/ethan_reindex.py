"""ethan_reindex: rewrite the stored search tokens after the tokenizer changed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from sessions_app.models import ChatSession
from sessions_app.search import messages_reindex, rows_reindex, search_tokens

KINDS = ("messages", "facts", "episodes")


@contextmanager
def kind_progress(stream: TextIO, kind: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar of the rows of one kind gone through, on `stream` when it is a terminal
    (nothing when the output goes to a file or a pipe)."""
    if not stream.isatty():
        yield lambda _done: None
        return
    columns = (TextColumn(f"  {kind:<9}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=stream)) as bar:
        task = bar.add_task(kind, total=total)
        yield lambda done: bar.update(task, completed=done)


def _fact_rows() -> tuple[QuerySet, Callable[[Any], str]]:
    # Imported here: facts are memory_app's (a layer above this one), indexed its way.
    from memory_app.models import Fact
    from memory_app.services import fact_search_tokens

    rows = Fact.objects.select_related("message").only(
        "id", "content", "search_tokens", "message__content"
    )
    return rows, lambda fact: fact_search_tokens(fact.content, fact.message)


def _episode_rows() -> tuple[QuerySet, Callable[[Any], str]]:
    from episodes_app.models import Episode

    rows = Episode.objects.only("id", "summary", "keywords", "search_tokens")
    # As episodes_app.services writes them: the summary and the keywords.
    return rows, lambda episode: search_tokens(f"{episode.summary} {' '.join(episode.keywords)}")


class Command(BaseCommand):
    help = (
        "Rewrite the search tokens of stored messages (with their neighbouring turns' words), "
        "facts and episodes with the current tokenizer, in batches; rows already up to date "
        "are left alone, so it is safe to run again. Run it after an upgrade that changes how "
        "text is tokenized (docs/search.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--only", choices=KINDS, action="append", help="only this kind (may be repeated)"
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
            if kind == "messages":
                changed, total = self._messages(batch)
            else:
                rows, tokens_of = _fact_rows() if kind == "facts" else _episode_rows()
                changed, total = self._rows(kind, rows, tokens_of, batch)
            self.stdout.write(f"{kind}: {changed} of {total} rewritten")

    def _messages(self, batch: int) -> tuple[int, int]:
        """Whole sessions at a time (a message's tokens carry its neighbours'), by id."""
        sessions = ChatSession.objects.order_by("pk").values_list("pk", "last_seq")
        total = sum(size for _pk, size in sessions)
        changed = done = 0
        with kind_progress(self.stderr._out, "messages", total) as shown:
            group: list[str] = []
            size = 0
            for pk, last_seq in sessions.iterator():
                group.append(pk)
                size += last_seq
                if size >= batch:
                    changed += messages_reindex(group)
                    done += size
                    shown(done)
                    group, size = [], 0
            if group:
                changed += messages_reindex(group)
                shown(total)
        return changed, total

    def _rows(
        self, kind: str, rows: QuerySet, tokens_of: Callable[[Any], str], batch: int
    ) -> tuple[int, int]:
        """A batch of ids at a time, in id order."""
        ids = list(rows.order_by("pk").values_list("pk", flat=True))
        changed = 0
        with kind_progress(self.stderr._out, kind, len(ids)) as shown:
            for start in range(0, len(ids), batch):
                chunk = ids[start : start + batch]
                changed += rows_reindex(rows.filter(pk__in=chunk), tokens_of)
                shown(start + len(chunk))
        return changed, len(ids)
