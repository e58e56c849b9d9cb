"""Reads of layer 1, every one scoped to an owner."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import OuterRef, Q, QuerySet, Subquery, Sum

from sessions_app.errors import SessionAmbiguous, SessionNotFound
from sessions_app.models import ChatSession, Message
from sessions_app.search import CANDIDATE_CAP, Ranked, bm25, matching, query_terms

# Enough to tell sessions apart in an error message without flooding the terminal.
AMBIGUOUS_SHOWN = 10


def sessions_for_owner(*, owner: AbstractBaseUser) -> QuerySet[ChatSession]:
    """The one place that scopes sessions to their owner."""
    return ChatSession.objects.filter(owner=owner)


def session_get_for_owner(*, owner: AbstractBaseUser, session_id: str) -> ChatSession:
    try:
        return sessions_for_owner(owner=owner).get(pk=session_id)
    except ChatSession.DoesNotExist:
        raise SessionNotFound(f"no session '{session_id}'") from None


def session_resolve(*, owner: AbstractBaseUser, ref: str) -> ChatSession:
    """A full id, `last` (the most recently active), or a unique tail such as `d139`."""
    ref = ref.strip()
    if not ref:
        raise SessionNotFound("no session id given")
    owned = sessions_for_owner(owner=owner)
    if ref == "last":
        session = owned.order_by("-updated_at", "-created_at").first()
        if session is None:
            raise SessionNotFound("there are no sessions yet")
        return session
    exact = owned.filter(pk=ref).first()
    if exact is not None:
        return exact
    matches = list(
        owned.filter(pk__endswith=ref)
        .order_by("-updated_at")
        .values_list("pk", flat=True)[: AMBIGUOUS_SHOWN + 1]
    )
    if not matches:
        raise SessionNotFound(f"no session matches '{ref}'")
    if len(matches) > 1:
        raise SessionAmbiguous(ref, matches[:AMBIGUOUS_SHOWN])
    return owned.get(pk=matches[0])


def session_list(*, owner: AbstractBaseUser, limit: int | None = None) -> list[ChatSession]:
    """The latest sessions by activity (20 by default)."""
    limit = limit or settings.ETHAN_SESSION_LIST_LIMIT
    return list(sessions_for_owner(owner=owner).order_by("-updated_at", "-created_at")[:limit])


def session_messages(*, session: ChatSession) -> QuerySet[Message]:
    return Message.objects.filter(session=session).order_by("seq")


def messages_search(
    *,
    owner: AbstractBaseUser,
    query: str,
    limit: int = 10,
    session_id: str | None = None,
    exclude_after: tuple[str, int] | None = None,
) -> list[Ranked]:
    """The owner's user and assistant messages ranked by BM25 against `query` (sessions_app.
    search); on PostgreSQL through the GIN index."""
    terms = query_terms(query)
    messages = Message.objects.filter(session__owner=owner)
    if session_id:
        messages = messages.filter(session_id=session_id)
    if exclude_after:  # (session id, seq): the current round, already in the model's context
        messages = messages.exclude(session_id=exclude_after[0], seq__gte=exclude_after[1])
    # N for BM25: the owner's messages, summed from the sessions' counters (no table scan).
    total = sessions_for_owner(owner=owner).aggregate(n=Sum("last_seq"))["n"] or 0
    candidates = (
        matching(messages, terms)
        .order_by("-id")
        .only("id", "session_id", "seq", "role", "content", "created_at", "search_tokens")[
            :CANDIDATE_CAP
        ]
    )
    return bm25(terms, ((m, m.search_tokens) for m in candidates), total)[:limit]


def session_search(
    *, owner: AbstractBaseUser, query: str, limit: int | None = None
) -> list[ChatSession]:
    """Sessions whose messages match `query` (ranked by their best message, BM25) or whose
    title contains it, newest first among equals. Each result carries `match`, its best
    matching message (None when only the title matched).

    Words go through the search engine; a query with no words in it (`100%`, `d139`) falls
    back to a plain case-insensitive substring match, as the original design had it.
    """
    query = query.strip()
    if not query:
        raise ValueError("search text is empty")
    limit = limit or settings.ETHAN_SESSION_LIST_LIMIT
    best: dict[str, tuple[float, str]] = {}
    for ranked in messages_search(owner=owner, query=query, limit=CANDIDATE_CAP):
        message = ranked.item
        if message.session_id not in best:
            best[message.session_id] = (ranked.score, message.content)
    owned = sessions_for_owner(owner=owner)
    if not query_terms(query):
        first_match = (
            Message.objects.filter(session=OuterRef("pk"), content__icontains=query)
            .order_by("seq")
            .values("content")[:1]
        )
        return list(
            owned.annotate(match=Subquery(first_match))
            .filter(Q(title__icontains=query) | Q(match__isnull=False))
            .order_by("-updated_at", "-created_at")[:limit]
        )
    found = list(owned.filter(Q(pk__in=list(best)) | Q(title__icontains=query)))
    for session in found:
        session.match = best.get(session.pk, (0.0, None))[1]
    found.sort(key=lambda s: (-best.get(s.pk, (0.0, None))[0], -s.updated_at.timestamp()))
    return found[:limit]
