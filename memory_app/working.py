"""Working memory: what of a conversation goes to the model on each turn (the design's
build_context: context_parts reads, context_assemble builds), with one MemoryConfig for every
channel."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.db.models.lookups import GreaterThanOrEqual
from django.utils import timezone

from ethan_llm.types import Message as LLMMessage
from sessions_app.models import ChatSession, Message

if TYPE_CHECKING:
    from memory_app.models import WorkingState
from sessions_app.rounds import conversation

LONG_TERM_LABEL = "[长期记忆]"
SUMMARY_LABEL = "[对话摘要]"
ACKNOWLEDGE = "好的。"
# Promoted facts shown in the long-term block at most.
LONG_TERM_LIMIT = 15


@dataclass(frozen=True)
class MemoryConfig:
    hot_size: int = 10  # rounds kept verbatim
    compress_batch: int = 5  # rounds summarised together once they leave the hot zone
    warm_capacity: int = 20  # rounds the warm summaries cover before they fold into the rolling
    # A session's end waits for the person's next ones until together they hold this many rounds
    # not extracted, or until the oldest has waited end_wait_minutes (ends_due): short chats
    # share one call instead of a call each.
    end_batch_rounds: int = 4
    end_wait_minutes: int = 60

    def __post_init__(self) -> None:
        if min(self.hot_size, self.compress_batch, self.warm_capacity, self.end_batch_rounds) < 1:
            raise ValueError(
                "hot_size, compress_batch, warm_capacity and end_batch_rounds must be at least 1"
            )


def memory_config() -> MemoryConfig:
    return MemoryConfig(
        hot_size=settings.ETHAN_MEMORY_HOT_SIZE,
        compress_batch=settings.ETHAN_MEMORY_COMPRESS_BATCH,
        warm_capacity=settings.ETHAN_MEMORY_WARM_CAPACITY,
        end_batch_rounds=settings.ETHAN_MEMORY_END_BATCH_ROUNDS,
        end_wait_minutes=settings.ETHAN_MEMORY_END_WAIT_MINUTES,
    )


# However far consolidation lags (a model outage, a backlog), the verbatim part of the context
# holds at most this many rounds beyond the hot zone: the context stays bounded, and the rounds
# it skips are still in the database, summarised once consolidation catches up.
MAX_PENDING_BATCHES = 2


def verbatim_from(*, round_count: int, compressed_through: int, config: MemoryConfig) -> int:
    """The first round sent verbatim: right after the last summarised round, so rounds that
    left the hot zone but wait for their batch are not lost, yet never more than
    MAX_PENDING_BATCHES batches beyond the hot zone."""
    floor = round_count - config.hot_size - MAX_PENDING_BATCHES * config.compress_batch
    return max(1, compressed_through + 1, floor)


def long_term_block(*, session: ChatSession, state: WorkingState, exclude_fact_ids=()) -> str:
    """Facts this conversation's consolidation promoted to the cold zone, minus those already
    in <memory_context>: the most trusted first."""
    from memory_app.models import Fact

    if not state.extracted_through:
        # Only an extraction promotes facts, and it moves extracted_through in the same
        # transaction: before the first one there is nothing to read.
        return ""
    # The owner and status lead, so the fact_injection_order index serves the order and the
    # walk stops at the 15th fact of this session; by the session alone, every fact it ever
    # promoted was read and sorted on each turn (bench.turn_overhead).
    facts = (
        Fact.objects.filter(
            owner_id=session.owner_id,
            status=Fact.Status.ACTIVE,
            session=session,
            source=Fact.Source.CONSOLIDATOR,
        )
        .exclude(pk__in=list(exclude_fact_ids))
        .order_by("-confidence", "-last_accessed")
        .values_list("content", flat=True)[:LONG_TERM_LIMIT]
    )
    return "\n".join(f"- {content}" for content in facts)


def summary_block(*, session: ChatSession, state: WorkingState) -> str:
    """The rolling summary, then the newer warm summaries, oldest first."""
    from memory_app.models import Summary

    parts = [state.rolling_summary.strip()] if state.rolling_summary.strip() else []
    # Every summary up to folded_through is folded (a fold marks all of them in the
    # transaction that moves the cursor), so the warm ones start after it: a range of the
    # (session, first_round) index instead of every summary the session ever had; and while
    # the warm zone is empty (compressed_through = folded_through) there is none to read.
    if state.compressed_through > state.folded_through:
        warm = Summary.objects.filter(
            session=session, first_round__gt=state.folded_through, folded=False
        ).order_by("first_round")
        parts += [text.strip() for text in warm.values_list("text", flat=True)]
    return "\n".join(parts)


def latest_rounds_messages(*, session: ChatSession, first: int) -> list[LLMMessage]:
    """Rounds first..the session's last, as rounds_messages gives them. One query, counted
    from the newest message: rounds_messages finds round `first` by an OFFSET of first - 1
    user messages, which walks the whole history (about 30 ms a turn at 100,000 messages on
    SQLite, bench.turn_overhead); walking back over the verbatim rounds only costs the same at
    any history size. Where they start is a subquery of the same statement."""
    count = session.round_count - first + 1
    if count < 1:
        return []
    # Every turn reads them: SQL, run by Model.objects.raw (the ORM's conversion of each
    # column, tool_calls' JSON included), as the turn's other reads (selectors.procedures_active).
    messages = Message._meta.db_table
    where, params = "session_id = %s", [session.pk]
    if first > 1:  # round 1 holds what was said before the first user message too
        # Round `first` starts at the count-th question from the newest (session_questions:
        # the person's messages, latest first).
        where += (
            f" AND seq >= (SELECT seq FROM {messages} WHERE session_id = %s AND role = %s"
            " ORDER BY seq DESC LIMIT 1 OFFSET %s)"
        )
        params += [session.pk, Message.Role.USER, count - 1]
    rows = Message.objects.raw(
        f"SELECT id, role, content, tool_calls FROM {messages} WHERE {where} ORDER BY seq", params
    )
    return conversation((row.role, row.content, row.tool_calls) for row in rows)


@dataclass(frozen=True)
class ContextParts:
    """What the context of a turn is made of, read once: the session's working state (None
    before its first consolidation) and the verbatim rounds (the current input last)."""

    state: WorkingState | None
    rounds: list[LLMMessage]


def context_parts(
    *,
    session: ChatSession,
    config: MemoryConfig | None = None,
    current_input: str | None = None,
) -> ContextParts:
    """The working state and the verbatim rounds: two queries, whatever the history size.
    The current input is the session's last user message, already stored by the turn; a
    preview (GET /api/context) passes `current_input` instead, and nothing is stored."""
    from memory_app.models import WorkingState

    config = config or memory_config()
    state = None
    if session.is_persisted:
        # Every turn reads it: SQL, as the turn's other reads (selectors.procedures_active).
        found = WorkingState.objects.raw(
            f"SELECT * FROM {WorkingState._meta.db_table} WHERE session_id = %s", [session.pk]
        )
        state = next(iter(found), None)
    compressed = state.compressed_through if state is not None else 0
    stored_rounds = session.round_count if session.is_persisted else 0
    rounds = stored_rounds + (1 if current_input is not None else 0)
    first = verbatim_from(round_count=rounds, compressed_through=compressed, config=config)
    verbatim = latest_rounds_messages(session=session, first=first) if stored_rounds else []
    if current_input is not None:
        verbatim.append(LLMMessage.user(current_input))
    return ContextParts(state=state, rounds=verbatim)


def context_assemble(
    *, session: ChatSession, parts: ContextParts, exclude_fact_ids=()
) -> list[LLMMessage]:
    """[user "[长期记忆]\\n…", assistant "好的。", user "[对话摘要]\\n…", assistant "好的。",
    the verbatim rounds…]. A block with nothing in it is left out together with its 好的。
    A query more for each block the working state says can have something (promoted facts
    once an extraction ran, warm summaries while the warm zone holds rounds)."""
    long_term = summary = ""
    state = parts.state
    if state is not None:
        long_term = long_term_block(session=session, state=state, exclude_fact_ids=exclude_fact_ids)
        summary = summary_block(session=session, state=state)
    context: list[LLMMessage] = []
    for label, text in ((LONG_TERM_LABEL, long_term), (SUMMARY_LABEL, summary)):
        if text.strip():
            context.append(LLMMessage.user(f"{label}\n{text.strip()}"))
            context.append(LLMMessage.assistant(ACKNOWLEDGE))
    return context + parts.rounds


def _due_rules(*, round_count, compressed, extracted, folded, config: MemoryConfig):
    """The one rule of what memory work a session has, as (work, left, right): the work is due
    when left >= right. Written once over operands that are numbers (work_due) or query
    expressions (sessions_consolidation_due), so the turn, the consolidator and the sweep
    cannot disagree. In the order the consolidator does them:

    - extraction lags behind compression (rounds compressed before extraction went with the
      batches): those rounds first;
    - a compress batch left the hot zone (its one call also extracts its facts);
    - the warm zone covers warm_capacity rounds: they fold into the rolling summary.

    A session's end is the other rule, ends_due."""
    return (
        ("extract", compressed, extracted + 1),
        ("compress", round_count, compressed + config.hot_size + config.compress_batch),
        ("fold", compressed, folded + config.warm_capacity),
    )


def work_due(
    *,
    round_count: int,
    compressed: int,
    extracted: int,
    folded: int,
    config: MemoryConfig | None = None,
) -> str | None:
    """The memory work a session of these counts and cursors has next ("extract", "compress",
    "fold"), or None: a pure function, the rule of _due_rules."""
    rules = _due_rules(
        round_count=round_count,
        compressed=compressed,
        extracted=extracted,
        folded=folded,
        config=config or memory_config(),
    )
    return next((work for work, left, right in rules if left >= right), None)


def consolidation_due(
    *, session: ChatSession, state: WorkingState | None, config: MemoryConfig | None = None
) -> bool:
    """Whether the consolidator has work on this session now, from what the turn has read
    already: no query, and no task queued for nothing. What is missed (a worker down) the
    catch-up sweep finds (sessions_consolidation_due)."""
    return (
        work_due(
            round_count=session.round_count,
            compressed=state.compressed_through if state is not None else 0,
            extracted=state.extracted_through if state is not None else 0,
            folded=state.folded_through if state is not None else 0,
            config=config,
        )
        is not None
    )


def sessions_consolidation_due(sessions: QuerySet, *, config: MemoryConfig | None = None):
    """The sessions of `sessions` work_due holds due, in one query: _due_rules over the
    session's cursors as expressions (0 with no working state)."""
    cursors = {
        name: Coalesce(F(f"working_state__{name}_through"), Value(0))
        for name in ("compressed", "extracted", "folded")
    }
    rules = _due_rules(
        round_count=F("round_count"),
        **{name: F(f"due_{name}") for name in cursors},
        config=config or memory_config(),
    )
    due = Q()
    for _work, left, right in rules:
        due |= Q(GreaterThanOrEqual(left, right))
    return sessions.annotate(**{f"due_{name}": value for name, value in cursors.items()}).filter(
        due
    )


def sessions_ending(sessions: QuerySet) -> QuerySet:
    """The sessions of `sessions` whose end is still to be consolidated: ended, with rounds not
    extracted yet (every session ends with its hot zone so). Each carries `end_extracted` and
    `end_compressed`, its cursors (0 with no working state)."""
    return sessions.annotate(
        end_extracted=Coalesce(F("working_state__extracted_through"), Value(0)),
        end_compressed=Coalesce(F("working_state__compressed_through"), Value(0)),
    ).filter(ended_at__isnull=False, round_count__gt=F("end_extracted"))


def ends_due(
    waiting: Sequence[ChatSession], *, config: MemoryConfig | None = None, now=None
) -> bool:
    """Whether one person's ended sessions waiting for their end's consolidation
    (sessions_ending) are due now: together they hold end_batch_rounds rounds not extracted,
    or the oldest has waited end_wait_minutes. The one rule of a session's end and of the
    sweep that finds ends left waiting; the console does not wait (its person is there)."""
    if not waiting:
        return False
    config = config or memory_config()
    now = now or timezone.now()
    rounds = sum(session.round_count - session.end_extracted for session in waiting)
    oldest = min(session.ended_at for session in waiting)
    return rounds >= config.end_batch_rounds or oldest <= now - timedelta(
        minutes=config.end_wait_minutes
    )
