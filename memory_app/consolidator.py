"""The consolidator: moves rounds from the hot zone to the warm zone (summaries) and from the
warm zone to the cold zone (facts), on a Celery worker or, embedded, after the reply.

Safe to run twice and to race: every model call happens first, outside any transaction; then
one transaction moves a cursor of the session's WorkingState with a conditional UPDATE
(WHERE cursor = the value read) and writes the result only if that UPDATE claimed the row. A
second worker, or a redelivered task, finds the cursor moved and writes nothing. A model
outage raises before any write, so the cursors stay and the work is done on the next run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

import llm
from llm import memory as llm_memory
from llm.text import terms
from llm.types import Message as LLMMessage
from memory_app import confidence as rules
from memory_app import services
from memory_app.models import Fact, Summary, WorkingState
from memory_app.normalize import content_key
from memory_app.working import MemoryConfig, memory_config
from profile_app.services import profile_apply_extraction
from sessions_app.models import ChatSession, Message
from sessions_app.rounds import rounds_messages, rounds_rows

log = logging.getLogger(__name__)

# Existing facts shown to a language model with an extraction, closest to the rounds first.
KNOWN_FACTS_SHOWN = 10
# The offline decision rules (see decide_offline).
UPDATE_SIMILARITY = 0.6
CORRECTION_SIMILARITY = 0.2


@dataclass
class ConsolidationReport:
    summaries: int = 0
    extractions: int = 0
    facts: list[str] = field(default_factory=list)  # "add", "reinforce", "update", "supersede"
    psych: int = 0
    evicted: int = 0


def compression_model(session: ChatSession) -> str:
    return llm.compression_model(session.model or llm.default_model())


def consolidation_run(
    *, session_id: str, config: MemoryConfig | None = None
) -> ConsolidationReport:
    """Compress every batch that is due, then extract when the warm zone is full."""
    report = ConsolidationReport()
    session = ChatSession.objects.select_related("owner").filter(pk=session_id).first()
    if session is None:
        return report  # deleted since the task was queued
    config = config or memory_config()
    WorkingState.objects.get_or_create(session=session)
    while _compress_next(session, config, report):
        pass
    while _extract_if_due(session, config, report):
        pass
    return report


def consolidation_catch_up() -> int:
    """Sessions of the last week whose consolidation is due but did not run (the broker was
    down when their turn ended, or a task gave up) are consolidated now; returns how many.
    Safe alongside the regular tasks: consolidation_run claims each batch."""
    from datetime import timedelta

    from django.conf import settings
    from django.db.models import F, Value
    from django.db.models.functions import Coalesce

    due = (
        ChatSession.objects.filter(updated_at__gte=timezone.now() - timedelta(days=7))
        .annotate(done=Coalesce(F("working_state__compressed_through"), Value(0)))
        .filter(
            round_count__gte=F("done")
            + settings.ETHAN_MEMORY_HOT_SIZE
            + settings.ETHAN_MEMORY_COMPRESS_BATCH
        )
        .values_list("pk", flat=True)
    )
    count = 0
    for session_id in due:
        consolidation_run(session_id=session_id)
        count += 1
    return count


def _state(session: ChatSession) -> WorkingState:
    return WorkingState.objects.get(session=session)


def _compress_next(session: ChatSession, config: MemoryConfig, report: ConsolidationReport) -> bool:
    """Summarise the next compress_batch rounds that left the hot zone. True if the cursor
    moved (by us or by a racing worker), so there may be more to do."""
    session.refresh_from_db(fields=["round_count"])
    state = _state(session)
    start = state.compressed_through
    left_hot = session.round_count - config.hot_size
    if left_hot - start < config.compress_batch:
        return False
    end = start + config.compress_batch
    model = compression_model(session)
    text = llm_memory.summarize(
        model=model, rounds=rounds_messages(session=session, first=start + 1, last=end)
    )
    # Durable, as every cursor move: another worker must see the cursor once this returns.
    with transaction.atomic(durable=True):
        claimed = WorkingState.objects.filter(session=session, compressed_through=start).update(
            compressed_through=end, updated_at=timezone.now()
        )
        if claimed != 1:
            log.info(
                "%s: rounds %d-%d were summarised by another worker", session.pk, start + 1, end
            )
            return True
        Summary.objects.create(
            session=session, first_round=start + 1, last_round=end, text=text, model=model
        )
    report.summaries += 1
    return True


def closest_facts(*, owner, text: str, limit: int) -> list[Fact]:
    """The owner's active facts sharing the most terms with `text` (none that share nothing)."""
    wanted = terms(text)
    scored = []
    for fact in Fact.objects.filter(owner=owner, status=Fact.Status.ACTIVE).order_by("-id")[
        : max(1000, limit)
    ]:
        score = len(wanted & terms(fact.content))
        if score:
            scored.append((score, fact.confidence, fact.pk, fact))
    scored.sort(key=lambda item: (-item[0], -item[1], -item[2]))
    return [item[3] for item in scored[:limit]]


def _similarity(a: str, b: str) -> float:
    ta, tb = terms(a), terms(b)
    return len(ta & tb) / len(ta | tb) if ta and tb else 0.0


def decide_offline(item: llm_memory.ExtractedFact, known: list[Fact]) -> tuple[str, Fact | None]:
    """The documented rules used when the model did not judge (the offline model):

    - the same words (ignoring case, spacing, punctuation) as an active fact → NONE
      (the fact is reinforced);
    - a correction sharing at least 20% of its terms with a fact → SUPERSEDE that fact;
    - otherwise at least 60% shared terms (Jaccard) → UPDATE (the same fact, reworded);
    - otherwise → ADD.
    """
    key = content_key(item.content)
    for fact in known:
        if fact.content_key == key:
            return "NONE", fact
    best = max(known, key=lambda fact: _similarity(item.content, fact.content), default=None)
    if best is None:
        return "ADD", None
    similarity = _similarity(item.content, best.content)
    if item.category == Fact.Category.CORRECTION and similarity >= CORRECTION_SIMILARITY:
        return "SUPERSEDE", best
    if similarity >= UPDATE_SIMILARITY:
        return "UPDATE", best
    return "ADD", None


def apply_fact(
    *,
    session: ChatSession,
    item: llm_memory.ExtractedFact,
    action: str,
    target: Fact | None,
    sources: list[Message] | None = None,
) -> str:
    """Write one extracted fact as `action` says, with the messages it came from; returns what
    happened ("skip" for a fact the services refuse, e.g. longer than FACT_MAX_CHARS: the rest
    of the batch is still stored, and the cursor moves on instead of failing the same batch
    forever)."""
    try:
        return _apply_fact(
            session=session, item=item, action=action, target=target, sources=sources or []
        )
    except ValidationError as exc:
        log.warning("%s: extracted fact skipped: %s", session.pk, " ".join(exc.messages))
        return "skip"


def _apply_fact(
    *,
    session: ChatSession,
    item: llm_memory.ExtractedFact,
    action: str,
    target: Fact | None,
    sources: list[Message],
) -> str:
    owner = session.owner
    confidence = rules.from_importance(item.importance)
    actor = Fact.Source.CONSOLIDATOR
    if target is not None:
        target.refresh_from_db()
        if target.status != Fact.Status.ACTIVE:
            action, target = "ADD", None  # changed since it was shown: treat as new
    if action in ("NONE", "UPDATE") and target is not None:
        if action == "NONE" or target.content_key == content_key(item.content):
            services.fact_reinforce(
                fact=target, confidence=confidence, actor=actor, sources=sources
            )
            return "reinforce"
        services.fact_update(
            fact=target, content=item.content, confidence=confidence, actor=actor, sources=sources
        )
        return "update"
    new = services.fact_write(
        owner=owner,
        content=item.content,
        category=item.category,
        confidence=confidence,
        source=Fact.Source.CONSOLIDATOR,
        session=session,
        sources=sources,
    )
    if action == "SUPERSEDE" and target is not None and new.pk != target.pk:
        services.fact_supersede(old=target, new=new, actor=actor)
        return "supersede"
    return "add" if new.hit_count == 1 else "reinforce"


def _extract_if_due(
    session: ChatSession, config: MemoryConfig, report: ConsolidationReport
) -> bool:
    """Once the warm zone covers warm_capacity rounds: extract facts from those rounds, fold
    their summaries into the rolling summary. True if the cursor moved."""
    state = _state(session)
    start, end = state.extracted_through, state.compressed_through
    if end - start < config.warm_capacity:
        return False
    model = compression_model(session)
    # The stored messages the extraction reads, in the order it numbers them: only those
    # that say something (as llm.memory.turns_of keeps them), so turn n is said[n - 1].
    said = [
        row
        for row in rounds_rows(session=session, first=start + 1, last=end)
        if row.content.strip()
    ]
    rounds = [LLMMessage(role=row.role, content=row.content) for row in said]
    transcript = llm_memory.render_transcript(llm_memory.turns_of(rounds))
    known = closest_facts(owner=session.owner, text=transcript, limit=KNOWN_FACTS_SHOWN)
    companion = session.mode == ChatSession.Mode.COMPANION
    extraction = llm_memory.extract(
        model=model, rounds=rounds, psych=companion, known=[fact.content for fact in known]
    )
    warm = list(
        Summary.objects.filter(session=session, folded=False, last_round__lte=end).order_by(
            "first_round"
        )
    )
    rolling = llm_memory.fold(
        model=model, rolling=state.rolling_summary, summaries=[summary.text for summary in warm]
    )
    with transaction.atomic(durable=True):
        claimed = WorkingState.objects.filter(session=session, extracted_through=start).update(
            extracted_through=end, rolling_summary=rolling, updated_at=timezone.now()
        )
        if claimed != 1:
            log.info(
                "%s: rounds %d-%d were extracted by another worker", session.pk, start + 1, end
            )
            return True
        Summary.objects.filter(pk__in=[summary.pk for summary in warm]).update(folded=True)
        for item in extraction.facts:
            if not extraction.judged:  # the offline model: the documented rules decide
                pool = closest_facts(owner=session.owner, text=item.content, limit=50)
                action, target = decide_offline(item, pool)
            else:
                action = item.action
                target = known[item.target - 1] if item.target else None
            sources = [said[number - 1] for number in item.turns if 1 <= number <= len(said)]
            report.facts.append(
                apply_fact(
                    session=session, item=item, action=action, target=target, sources=sources
                )
            )
        if companion and extraction.psych:
            report.psych += profile_apply_extraction(
                owner=session.owner, items=list(extraction.psych)
            )
        report.evicted += services.facts_evict_over_capacity(owner=session.owner)
    report.extractions += 1
    return True
