"""ethan_embed: write the vectors memory search compares for data stored before them, or after
the embedder changed (docs/search.md, "Memory found by meaning").

Resumable by design: each batch is written and committed on its own, and every pass starts from
what still has no vector of the configured embedder (sessions_app.meaning.pending), so a run
stopped half-way (Ctrl-C, a kill, a crash) is finished by running it again, which skips what is
done. Each app embeds its own rows (sessions_app.services.messages_embed, memory_app's
facts_embed, episodes_app's episodes_embed), as the background does after each turn
(agent_app.vectors); this command only walks every owner and shows the progress.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent_app.management.commands.ethan_reindex import kind_progress
from embedder import embedder_name
from episodes_app.models import Episode
from episodes_app.services import episodes_embed
from memory_app.models import Fact
from memory_app.services import facts_embed
from sessions_app import meaning
from sessions_app.models import Message
from sessions_app.search import SPOKEN, ReindexStep
from sessions_app.services import messages_embed


def _messages(batch: int) -> Iterator[ReindexStep]:
    name = embedder_name()
    rows = Message.objects.filter(role__in=SPOKEN).exclude(content="")
    pending = meaning.pending(rows, name)
    total = pending.count()
    done = 0
    yield ReindexStep(total=total, done=0, changed=0)
    sessions = sorted(set(pending.values_list("session_id", flat=True).distinct()))
    for session_id in sessions:
        while True:
            written = messages_embed(session_id=session_id, limit=batch)
            done += written
            yield ReindexStep(total=total, done=min(done, total), changed=written)
            if written < batch:
                break


def _per_owner(model: type, embed: Callable[..., int]) -> Callable[[int], Iterator[ReindexStep]]:
    def run(batch: int) -> Iterator[ReindexStep]:
        pending = meaning.pending(model.objects.all(), embedder_name())
        total = pending.count()
        done = 0
        yield ReindexStep(total=total, done=0, changed=0)
        for owner_id in get_user_model().objects.order_by("pk").values_list("pk", flat=True):
            while True:
                written = embed(owner_ids=[owner_id], limit=batch)
                done += written
                if written:
                    yield ReindexStep(total=total, done=min(done, total), changed=written)
                if written < batch:
                    break

    return run


KINDS: dict[str, Callable[[int], Iterator[ReindexStep]]] = {
    "messages": _messages,
    "facts": _per_owner(Fact, facts_embed),
    "episodes": _per_owner(Episode, episodes_embed),
}


class Command(BaseCommand):
    help = (
        "Write the vectors memory search compares (by meaning) for stored messages, facts and "
        "episodes that have none of the configured embedder's: after an upgrade, or after "
        "changing ETHAN_EMBEDDER. Each batch commits on its own; run it again to finish a run "
        "that was stopped (what is done is skipped)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--only", choices=list(KINDS), action="append", help="only this kind (may be repeated)"
        )
        parser.add_argument(
            "--batch", type=int, default=256, help="rows embedded and committed at a time"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        batch = options["batch"]
        if batch < 1:
            raise CommandError(f"--batch must be at least 1, not {batch}")
        name = embedder_name()
        if name is None:
            raise CommandError(
                "the embedder is off (ETHAN_EMBEDDER=off): search is by words alone, there is "
                "nothing to embed"
            )
        self.stdout.write(f"embedding with {name}")
        for kind in options["only"] or KINDS:
            written = total = 0
            with kind_progress(self.stderr._out, kind) as shown:
                for step in KINDS[kind](batch):
                    written += step.changed
                    total = step.total
                    shown(step)
                    if step.changed and options["verbosity"] > 1:
                        self.stdout.write(f"{kind}: {written} of {total} written", ending="\n")
                        self.stdout.flush()
            self.stdout.write(f"{kind}: {written} written ({total} had no vector)")
