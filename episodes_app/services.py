"""Writing episodes: one per session that had at least two rounds, when it ends."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator

from django.utils import timezone

import ethan_llm
from episodes_app.keywords import keywords_for
from episodes_app.models import Episode
from ethan_llm import memory as llm_memory
from ethan_llm.types import Message as LLMMessage
from sessions_app import meaning
from sessions_app.models import ChatSession
from sessions_app.rounds import rounds_messages
from sessions_app.search import ReindexStep, rows_reindex_batches, search_tokens

log = logging.getLogger(__name__)

MIN_ROUNDS = 2
# The summary reads the rolling summary (if any) and at most this many latest rounds.
SUMMARY_ROUNDS = 40


def episode_text(summary: str, keywords: list[str]) -> str:
    """What an episode is found by, in words and in meaning: its summary and its keywords."""
    return f"{summary} {' '.join(keywords)}"


def episode_search_tokens(summary: str, keywords: list[str]) -> str:
    """An episode's search tokens (written here and by an import)."""
    return search_tokens(episode_text(summary, keywords))


def episodes_embed(*, owner_ids: Collection[int], limit: int = 256) -> int:
    """Write the vectors of these owners' episodes that have none of the configured embedder's,
    at most `limit`, in one embedding call; how many were written. An episode rewritten
    meanwhile (its session resumed and ended again) is left for the next pass."""
    episodes = Episode.objects.filter(owner_id__in=owner_ids).order_by("pk")
    return meaning.pending_embed(episodes, ["summary", "keywords"], episode_text, limit=limit)


def episodes_reindex(*, batch: int) -> Iterator[ReindexStep]:
    """Every episode's search tokens rewritten with the current tokenizer (ethan_reindex)."""
    rows = Episode.objects.only("id", "summary", "keywords", "search_tokens")
    return rows_reindex_batches(
        rows, lambda episode: episode_search_tokens(episode.summary, episode.keywords), batch=batch
    )


def episode_first_round(*, session: ChatSession) -> int | None:
    """The first round the session's episode summarises (its latest SUMMARY_ROUNDS), or None
    when no episode is to be written: fewer than two rounds, or the episode already covers
    every round."""
    session.refresh_from_db(fields=["round_count", "model", "ended_at"])
    if session.round_count < MIN_ROUNDS:
        return None
    existing = Episode.objects.filter(owner_id=session.owner_id, session_ref=session.pk)
    if existing.filter(turn_count=session.round_count).exists():
        return None
    return max(1, session.round_count - SUMMARY_ROUNDS + 1)


def episode_write(
    *, session: ChatSession, earlier_summary: str = "", summary: str | None = None
) -> Episode | None:
    """Write (or, for a resumed session that grew, update) the session's episode. Sessions with
    fewer than two rounds have none. The summary comes from the compression model, reading the
    latest rounds and, for a long session, `earlier_summary` (its rolling summary); or it is
    `summary`, made by the caller from the same rounds (the session's end consolidation, which
    extracts the session's last facts in the same call)."""
    session.refresh_from_db(fields=["round_count", "model", "ended_at"])
    if session.round_count < MIN_ROUNDS:
        return None
    existing = Episode.objects.filter(owner_id=session.owner_id, session_ref=session.pk).first()
    if existing is not None and existing.turn_count == session.round_count:
        return existing  # nothing new since it was written
    first = max(1, session.round_count - SUMMARY_ROUNDS + 1)
    messages = rounds_messages(session=session, first=first, last=session.round_count)
    if earlier_summary.strip() and first > 1:
        messages = [LLMMessage.user(f"[对话摘要]\n{earlier_summary.strip()}"), *messages]
    model = ethan_llm.compression_model(session.model or ethan_llm.default_model())
    if summary is None:
        summary = llm_memory.summarize(model=model, rounds=messages)
    said = [m.content for m in messages if m.role == "user"]
    episode, _ = Episode.objects.update_or_create(
        owner_id=session.owner_id,
        session_ref=session.pk,
        defaults={
            "session": session,
            "summary": summary,
            "keywords": (keywords := keywords_for([*said, summary])),
            "search_tokens": episode_search_tokens(summary, keywords),
            # New words: the background embeds them again (episodes_embed).
            "embedding": None,
            "embedding_model": None,
            "model": model,
            "turn_count": session.round_count,
            # An imported conversation is learnt before it is given its end: its last activity.
            "timestamp": session.ended_at or session.updated_at or timezone.now(),
        },
    )
    return episode
