"""The consolidator: moves rounds from the hot zone to the warm zone (summaries) and to the
cold zone (facts), on a Celery worker or, embedded, after the reply.

Every round is extracted soon: a compress batch's one call to the compression model gives its
summary and its facts together (ethan_llm.memory.consolidate), and a session's end extracts what is
left, the hot zone (consolidation_finish, with the episode's summary in the same call). Once
the warm summaries cover warm_capacity rounds they fold into the rolling summary.

What is due is one rule, memory_app.working.work_due. Safe to run twice and to race: a worker
first claims the session's memory work (memory_app.claims), so a second worker, or a
redelivered task, makes no model call while the first holds it. Every model call happens
outside any transaction; then one transaction moves a cursor of the session's WorkingState with
a conditional UPDATE (WHERE cursor = the value read) and writes the result only if that UPDATE
moved it: stored exactly once, even when a claim ran out mid-call. A model outage raises before
any write, so the cursors stay and the work is done on the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

import ethan_llm
from ethan_llm import memory as llm_memory
from ethan_llm.text import dated, fact_slot, terms
from ethan_llm.types import Message as LLMMessage
from memory_app import confidence as rules
from memory_app import selectors, services
from memory_app.claims import memory_work_claimed
from memory_app.models import Fact, Summary, WorkingState
from memory_app.normalize import content_key
from memory_app.working import (
    MemoryConfig,
    memory_config,
    sessions_consolidation_due,
    work_due,
)
from profile_app.services import profile_apply_extraction
from sessions_app import meaning
from sessions_app.models import ChatSession, Message
from sessions_app.rounds import rounds_rows

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
    folds: int = 0
    facts: list[str] = field(default_factory=list)  # "add", "reinforce", "update", "supersede"
    psych: int = 0
    evicted: int = 0


def compression_model(session: ChatSession) -> str:
    return ethan_llm.compression_model(session.model or ethan_llm.default_model())


def consolidation_run(
    *, session_id: str, config: MemoryConfig | None = None
) -> ConsolidationReport:
    """Do the memory work the session has (memory_app.working.work_due) until none is left:
    compress (and extract) every batch that left the hot zone, fold a full warm zone. A
    session's end (its episode and the facts of its last rounds) is agent_app.lifecycle's,
    batched with the person's other ends (memory_app.working.ends_due). Under a claim
    (memory_app.claims): a run that finds another worker on the session leaves it to that one,
    which looks for work again once it lets go."""
    report = ConsolidationReport()
    session = ChatSession.objects.select_related("owner").filter(pk=session_id).first()
    if session is None:
        return report  # deleted since the task was queued
    config = config or memory_config()
    while _work_next(session, config)[0] is not None:
        with memory_work_claimed([session.pk]) as claim:
            if not claim.held:
                log.info("%s: its memory work is another worker's", session.pk)
                return report
            done = None  # the step before, and the cursors it started from
            while claim.renew():
                work, state = _work_next(session, config)
                if done is not None and _cursors(state) == done[1]:
                    log.warning(
                        "%s: %s moved no cursor; left for the next run", session.pk, done[0]
                    )
                    return report
                if work is None:
                    break
                done = (work, _cursors(state))
                STEPS[work](session, state, config, report)
        # Work that came in while we held the claim, after our last look, was left to us by
        # the worker that found the session claimed: look again now that it is free.
    return report


def _work_next(
    session: ChatSession, config: MemoryConfig
) -> tuple[str | None, WorkingState | None]:
    """The session's next memory work (None: none due), and its state as read to decide it
    (None before its first claim made the row)."""
    session.refresh_from_db(fields=["round_count"])
    state = WorkingState.objects.filter(session=session).first()
    work = work_due(
        round_count=session.round_count,
        compressed=state.compressed_through if state else 0,
        extracted=state.extracted_through if state else 0,
        folded=state.folded_through if state else 0,
        config=config,
    )
    return work, state


def _cursors(state: WorkingState) -> tuple[int, int, int]:
    return state.compressed_through, state.extracted_through, state.folded_through


def consolidation_catch_up() -> int:
    """Sessions of the last week whose consolidation is due but did not run (the broker was
    down when their turn ended, a task gave up) are consolidated now; returns how many. "Due"
    is the live path's rule (memory_app.working.consolidation_due, as a query). Safe
    alongside the regular tasks: consolidation_run claims each batch."""
    from datetime import timedelta

    recent = ChatSession.objects.filter(updated_at__gte=timezone.now() - timedelta(days=7)).exclude(
        # An imported conversation not learnt yet is its import's to learn, in order
        # (agent_app.history_import), or not at all (--no-learn).
        channel=ChatSession.Channel.IMPORT,
        ended_at__isnull=True,
    )
    count = 0
    for session_id in sessions_consolidation_due(recent).values_list("pk", flat=True):
        consolidation_run(session_id=session_id)
        count += 1
    return count


@dataclass(frozen=True)
class SaidRounds:
    """The stored messages of some rounds that memory work reads, in the order it numbers
    them (turn n is rows[n - 1], as ethan_llm.memory.turns_of keeps them), with each one's round."""

    rows: list[Message]
    rounds: list[int]

    @classmethod
    def read(cls, session: ChatSession, *, first: int, last: int) -> SaidRounds:
        rows, rounds, current = [], [], first - 1
        for row in rounds_rows(session=session, first=first, last=last):
            current += row.role == Message.Role.USER  # a user message opens the next round
            if row.content.strip():
                rows.append(row)
                rounds.append(max(current, first))  # an opening before round 1 is round 1's
        return cls(rows=rows, rounds=rounds)

    def messages(self) -> list[LLMMessage]:
        return [LLMMessage(role=row.role, content=row.content) for row in self.rows]

    def turns_through(self, last_round: int) -> int:
        """How many of the turns belong to rounds up to last_round."""
        return sum(1 for number in self.rounds if number <= last_round)


def _extract_lagging(
    session: ChatSession, state: WorkingState, config: MemoryConfig, report: ConsolidationReport
) -> None:
    """Rounds compressed before extraction went with the batches: extract them."""
    _extract_through(session, report, start=state.extracted_through, end=state.compressed_through)


def _compress_next(
    session: ChatSession, state: WorkingState, config: MemoryConfig, report: ConsolidationReport
) -> None:
    """Summarise the next compress_batch rounds that left the hot zone and, in the same call,
    extract the facts of those not extracted yet."""
    start, extracted = state.compressed_through, state.extracted_through
    end = start + config.compress_batch
    model = compression_model(session)
    said = SaidRounds.read(session, first=start + 1, last=end)
    known: list[Fact] = []
    extraction = None
    if extracted >= end:  # a session's end extracted these rounds already
        text = llm_memory.summarize(model=model, rounds=said.messages())
    else:
        known = _known_facts(session, said.messages())
        result = llm_memory.consolidate(
            model=model,
            rounds=said.messages(),
            psych=_companion(session),
            known=[fact.content for fact in known],
            extract_from=said.turns_through(extracted) + 1,
        )
        text, extraction = result.summary, result.extraction
    vectors = fact_vectors(extraction)
    # Durable, as every cursor move: another worker must see the cursor once this returns.
    with transaction.atomic(durable=True):
        claims = WorkingState.objects.filter(session=session, compressed_through=start)
        moves = {"compressed_through": end, "updated_at": timezone.now()}
        if extraction is not None:
            # Both cursors or neither: the facts are stored exactly once with their batch.
            claims = claims.filter(extracted_through=extracted)
            moves["extracted_through"] = end
        if claims.update(**moves) != 1:
            log.info(
                "%s: rounds %d-%d were summarised by another worker", session.pk, start + 1, end
            )
            return
        Summary.objects.create(
            session=session, first_round=start + 1, last_round=end, text=text, model=model
        )
        if extraction is not None:
            _store_extraction(
                session, extraction, said=said.rows, known=known, report=report, vectors=vectors
            )
    if extraction is not None:
        facts_embed_new(owner_id=session.owner_id)
    report.summaries += 1


def _companion(session: ChatSession) -> bool:
    """Companion mode also extracts the person's feelings (the profile's psych section)."""
    return session.mode == ChatSession.Mode.COMPANION


def _known_facts(session: ChatSession, messages: list[LLMMessage]) -> list[Fact]:
    """The stored facts a judging model is shown with rounds: the closest to them."""
    transcript = llm_memory.render_transcript(llm_memory.turns_of(messages))
    return closest_facts(owner=session.owner, text=transcript, limit=KNOWN_FACTS_SHOWN)


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
    - the same slot as a fact with another value (where the person lives, whom they work
      for, what they work as: ethan_llm.text.fact_slot) → SUPERSEDE that fact: "I moved to
      Porto" replaces "I live in Lisbon";
    - a correction sharing at least 20% of its terms with a fact → SUPERSEDE that fact;
    - otherwise at least 60% shared terms (Jaccard) → UPDATE (the same fact, reworded);
    - otherwise → ADD.
    """
    key = content_key(item.content)
    for fact in known:
        if fact.content_key == key:
            return "NONE", fact
    slot = fact_slot(item.content)
    if slot is not None:
        for fact in known:
            held = fact_slot(fact.content)
            if held is not None and held[0] == slot[0] and held[1] != slot[1]:
                return "SUPERSEDE", fact
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
    vector: meaning.Query | None = None,
) -> str:
    """Write one extracted fact as `action` says, with the messages it came from; returns what
    happened ("skip" for a fact the services refuse, e.g. longer than FACT_MAX_CHARS: the rest
    of the batch is still stored, and the cursor moves on instead of failing the same batch
    forever)."""
    try:
        return _apply_fact(
            session=session,
            item=item,
            action=action,
            target=target,
            sources=sources or [],
            vector=vector,
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
    vector: meaning.Query | None,
) -> str:
    owner = session.owner
    said = [message.content for message in sources if message.role == Message.Role.USER]
    confidence = rules.from_importance(item.importance, said=said)
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
    if action == "ADD" and vector is not None:
        # The same fact in other words ("lives in Lisbon", "home is in Lisbon") reinforces the
        # one already held, as the same words do (normalize.same_in_other_words).
        twin = selectors.fact_twin(owner=owner, content=item.content, vector=vector)
        if twin is not None:
            services.fact_reinforce(fact=twin, confidence=confidence, actor=actor, sources=sources)
            return "reinforce"
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


def _fold(
    session: ChatSession, state: WorkingState, config: MemoryConfig, report: ConsolidationReport
) -> None:
    """The warm summaries cover warm_capacity rounds: fold them into the rolling summary."""
    start, end = state.folded_through, state.compressed_through
    warm = list(
        Summary.objects.filter(
            session=session, first_round__gt=start, folded=False, last_round__lte=end
        ).order_by("first_round")
    )
    rolling = llm_memory.fold(
        model=compression_model(session),
        rolling=state.rolling_summary,
        summaries=[summary.text for summary in warm],
    )
    with transaction.atomic(durable=True):
        claimed = WorkingState.objects.filter(session=session, folded_through=start).update(
            folded_through=end, rolling_summary=rolling, updated_at=timezone.now()
        )
        if claimed != 1:
            log.info("%s: rounds %d-%d were folded by another worker", session.pk, start + 1, end)
            return
        Summary.objects.filter(pk__in=[summary.pk for summary in warm]).update(folded=True)
    report.folds += 1


# The step that does each kind of work memory_app.working.work_due names.
STEPS = {"extract": _extract_lagging, "compress": _compress_next, "fold": _fold}


def _extract_through(
    session: ChatSession, report: ConsolidationReport, *, start: int, end: int
) -> bool:
    """Extract the facts of rounds start+1..end in one call and move extracted_through from
    start to end. True if the cursor moved (by us or by a racing worker)."""
    said = SaidRounds.read(session, first=start + 1, last=end)
    known = _known_facts(session, said.messages()) if said.rows else []
    extraction = (
        llm_memory.extract(
            model=compression_model(session),
            rounds=said.messages(),
            psych=_companion(session),
            known=[fact.content for fact in known],
        )
        if said.rows
        else llm_memory.Extraction(facts=(), psych=())  # nothing said (messages deleted)
    )
    return _claim_extraction(
        session, extraction, start=start, end=end, said=said.rows, known=known, report=report
    )


def _claim_extraction(
    session: ChatSession,
    extraction: llm_memory.Extraction,
    *,
    start: int,
    end: int,
    said: list[Message],
    known: list[Fact],
    report: ConsolidationReport,
    offset: int = 0,
    then: Callable[[], object] | None = None,
) -> bool:
    """Move extracted_through from start to end and store the extraction in one transaction
    (with `then`, e.g. the session's episode); nothing if another worker moved it first."""
    vectors = fact_vectors(extraction)
    with transaction.atomic(durable=True):
        claimed = WorkingState.objects.filter(session=session, extracted_through=start).update(
            extracted_through=end, updated_at=timezone.now()
        )
        if claimed != 1:
            log.info(
                "%s: rounds %d-%d were extracted by another worker", session.pk, start + 1, end
            )
            return True
        _store_extraction(
            session,
            extraction,
            said=said,
            known=known,
            report=report,
            offset=offset,
            vectors=vectors,
        )
        if then is not None:
            then()
    facts_embed_new(owner_id=session.owner_id)
    return True


# Writes a session's episode from its summary, inside the transaction that claims the session's
# last rounds (agent_app.lifecycle passes episodes_app's): the facts and the episode of a
# session's end are stored together or not at all, so a worker killed between them leaves the
# whole end to be done again, never an end with facts and no episode.
EpisodeRecord = Callable[[ChatSession, str], object]


def consolidation_finish(
    *,
    session: ChatSession,
    episode_first: int | None = None,
    earlier_summary: str = "",
    report: ConsolidationReport | None = None,
    record_episode: EpisodeRecord | None = None,
) -> str | None:
    """A session ended: extract the facts of its rounds not extracted yet (the hot zone) and,
    when `episode_first` is given, summarise rounds episode_first.. for its episode in the same
    call (`earlier_summary`, its rolling summary, read before them), handed to `record_episode`
    in the transaction that stores the facts. Returns that summary (None without an episode).
    Exactly once under kills and retries: the facts are stored in the transaction that moves
    extracted_through, and a second run finds nothing left to extract."""
    report = report or ConsolidationReport()
    # A consolidation running on the session is waited for: its batch first, then the end.
    with memory_work_claimed([session.pk], wait=True) as claim:
        if not claim.held:
            log.warning(
                "%s: its end waits for another worker's claim; left for the sweep", session.pk
            )
            return None
        return _finish(session, episode_first, earlier_summary, report, record_episode)


def _finish(
    session: ChatSession,
    episode_first: int | None,
    earlier_summary: str,
    report: ConsolidationReport,
    record_episode: EpisodeRecord | None,
) -> str | None:
    session.refresh_from_db(fields=["round_count"])
    state, _ = WorkingState.objects.get_or_create(session=session)
    start, end = state.extracted_through, session.round_count
    if episode_first is None:
        if start < end:
            _extract_through(session, report, start=start, end=end)
        return None
    first = max(1, min(episode_first, start + 1))
    said = SaidRounds.read(session, first=first, last=end)
    if not said.rows:  # nothing said any more (its messages deleted): nothing to learn or tell
        if start < end:
            _extract_through(session, report, start=start, end=end)
        return None
    messages = said.messages()
    offset = 0
    if earlier_summary.strip() and first > 1:
        messages = [LLMMessage.user(f"[对话摘要]\n{earlier_summary.strip()}"), *messages]
        offset = 1
    model = compression_model(session)
    if start >= end:
        summary = llm_memory.summarize(model=model, rounds=messages)
        if record_episode is not None:
            record_episode(session, summary)
        return summary
    known = _known_facts(session, said.messages())
    result = llm_memory.consolidate(
        model=model,
        rounds=messages,
        psych=_companion(session),
        known=[fact.content for fact in known],
        extract_from=offset + said.turns_through(start) + 1,
    )
    _claim_extraction(
        session,
        result.extraction,
        start=start,
        end=end,
        said=said.rows,
        known=known,
        report=report,
        offset=offset,
        then=(lambda: record_episode(session, result.summary)) if record_episode else None,
    )
    return result.summary


def consolidation_finish_sessions(
    *,
    sessions: list[ChatSession],
    report: ConsolidationReport | None = None,
    record_episode: EpisodeRecord | None = None,
) -> list[ChatSession]:
    """Several short sessions that ended and were never consolidated (no batch left their hot
    zone), finished in one call: a summary of each for its episode (`record_episode`), and the
    facts of all their rounds, each fact with its source messages and the session they are in.
    Returns the sessions this run finished. Exactly once: one transaction claims every
    session's rounds (extracted_through from 0 to its round count); a session another worker
    claimed first gets nothing from this run, neither facts nor episode."""
    report = report or ConsolidationReport()
    with memory_work_claimed([session.pk for session in sessions]) as claim:
        # A session another worker is ending is left to it.
        held = [session for session in sessions if session.pk in claim.held]
        if not held:
            return []
        return _finish_sessions(held, report, record_episode)


def _finish_sessions(
    sessions: list[ChatSession], report: ConsolidationReport, record_episode: EpisodeRecord | None
) -> list[ChatSession]:
    for session in sessions:
        session.refresh_from_db(fields=["round_count"])
    saids = [SaidRounds.read(session, first=1, last=session.round_count) for session in sessions]
    every = [message for said in saids for message in said.messages()]
    known = _known_facts(sessions[0], every)
    result = llm_memory.consolidate_sessions(
        model=compression_model(sessions[0]),
        sessions=[said.messages() for said in saids],
        psych=_companion(sessions[0]),
        known=[fact.content for fact in known],
    )
    finished = []
    vectors = fact_vectors(result.extraction)
    with transaction.atomic(durable=True):
        for session in sessions:
            claimed = WorkingState.objects.filter(session=session, extracted_through=0).update(
                extracted_through=session.round_count, updated_at=timezone.now()
            )
            if claimed == 1:
                finished.append(session)
            else:
                log.info("%s: its end was consolidated by another worker", session.pk)
        if not finished:
            return []
        mine = {session.pk: session for session in finished}
        # Turn n is rows[n - 1]; rows of a session another worker finished are not sources.
        rows = [row for said in saids for row in said.rows]
        rows = [row if row.session_id in mine else None for row in rows]
        _store_extraction(
            finished[-1],
            result.extraction,
            said=rows,
            known=known,
            report=report,
            sessions=mine,
            vectors=vectors,
        )
        if record_episode is not None:
            for session, summary in zip(sessions, result.summaries, strict=True):
                if session.pk in mine:
                    record_episode(session, summary)
    facts_embed_new(owner_id=finished[-1].owner_id)
    return finished


def fact_vectors(extraction: llm_memory.Extraction | None) -> dict[str, meaning.Query]:
    """The vectors of an extraction's facts, by content, computed before the transaction that
    stores them (an embedder may be a provider's API: no call is made while rows are locked),
    for finding their twins (selectors.fact_twin). Empty when the embedder is off."""
    contents = list(dict.fromkeys(item.content for item in extraction.facts)) if extraction else []
    found = meaning.vectors_of(contents) if contents else None
    if found is None:
        return {}
    name, vectors = found
    return {content: meaning.Query(name, vector=vectors[at]) for at, content in enumerate(contents)}


def facts_embed_new(*, owner_id: int) -> None:
    """After a transaction that stored facts: their vectors, so the next batch's facts can find
    them as twins (the background's pass would write them after the whole consolidation)."""
    written = services.EMBED_BATCH
    while written == services.EMBED_BATCH:  # a full batch: there may be more
        written = services.facts_embed(owner_ids=[owner_id])


def _said_at(sources: list[Message]):
    """When a fact was said, in the person's time zone: its last source's time (an imported
    message keeps its own), else now. A relative date in the fact counts from it (dated)."""
    times = [message.created_at for message in sources if message.created_at]
    return timezone.localtime(max(times)) if times else timezone.localtime()


def _store_extraction(
    session: ChatSession,
    extraction: llm_memory.Extraction,
    *,
    said: list[Message],
    known: list[Fact],
    report: ConsolidationReport,
    offset: int = 0,
    sessions: dict[str, ChatSession] | None = None,
    vectors: dict[str, meaning.Query] | None = None,
) -> None:
    """Write an extraction's facts (and, in companion mode, feelings), inside the transaction
    that claimed its rounds. A fact's turn n is said[n - 1 - offset] (`offset` turns shown
    before the stored ones, e.g. an episode's earlier summary; None for a turn that is not to
    be a source). Over several sessions (`sessions`, by id), a fact belongs to the session of
    its first source; a fact with sources, none of them in `sessions`, is not stored."""
    vectors = vectors or {}
    for item in extraction.facts:
        vector = vectors.get(item.content)  # computed before the transaction, undated
        sources = [
            said[number - 1 - offset]
            for number in item.turns
            if offset < number <= len(said) + offset and said[number - 1 - offset] is not None
        ]
        item = replace(item, content=dated(item.content, said_at=_said_at(sources)))
        if not extraction.judged:  # the offline model: the documented rules decide
            pool = closest_facts(owner=session.owner, text=item.content, limit=50)
            action, target = decide_offline(item, pool)
        else:
            action = item.action
            target = known[item.target - 1] if item.target else None
        owner_of = session
        if sessions is not None:
            if item.turns and not sources:
                continue  # said in a session another worker finished: its facts are there
            owner_of = sessions[sources[0].session_id] if sources else session
        report.facts.append(
            apply_fact(
                session=owner_of,
                item=item,
                action=action,
                target=target,
                sources=sources,
                vector=vector,
            )
        )
    if _companion(session) and extraction.psych:
        report.psych += profile_apply_extraction(owner=session.owner, items=list(extraction.psych))
    report.evicted += services.facts_evict_over_capacity(owner=session.owner)
    report.extractions += 1
