"""Reads of layer 1, every one scoped to an owner."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import OuterRef, Q, QuerySet, Subquery

from sessions_app.errors import SessionAmbiguous, SessionNotFound
from sessions_app.models import ChatSession, Message

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


def session_search(
    *, owner: AbstractBaseUser, query: str, limit: int | None = None
) -> list[ChatSession]:
    """Sessions whose title or any message contains `query`, case-insensitively, newest first.

    A plain LIKE, as in the original design: fine for one person's history; a ranked index comes
    with the search issue. Each result carries `match`, the first matching message (or None when
    only the title matched).
    """
    query = query.strip()
    if not query:
        raise ValueError("search text is empty")
    limit = limit or settings.ETHAN_SESSION_LIST_LIMIT
    first_match = (
        Message.objects.filter(session=OuterRef("pk"), content__icontains=query)
        .order_by("seq")
        .values("content")[:1]
    )
    return list(
        sessions_for_owner(owner=owner)
        .annotate(match=Subquery(first_match))
        .filter(Q(title__icontains=query) | Q(match__isnull=False))
        .order_by("-updated_at", "-created_at")[:limit]
    )
