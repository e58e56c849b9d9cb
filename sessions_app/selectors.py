"""Reads of layer 1, every one scoped to an owner."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import BooleanField, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.utils import timezone

from ethan_shared.limits import UnstorableText, storable_text
from sessions_app import meaning, search
from sessions_app.errors import SessionAmbiguous, SessionNotFound
from sessions_app.models import ChatSession, ImportRun, Message
from sessions_app.search import (
    Ranked,
    bm25,
    length_sql,
    newest_matching,
    prefer_time,
    query_parse,
    query_terms,
)

# Enough to tell sessions apart in an error message without flooding the terminal.
AMBIGUOUS_SHOWN = 10


def sessions_for_owner(*, owner: AbstractBaseUser) -> QuerySet[ChatSession]:
    """The one place that scopes sessions to their owner."""
    return ChatSession.objects.filter(owner=owner)


def session_get_for_owner(*, owner: AbstractBaseUser, session_id: str) -> ChatSession:
    _known_form(session_id)
    try:
        return sessions_for_owner(owner=owner).get(pk=session_id)
    except ChatSession.DoesNotExist:
        raise SessionNotFound(f"no session '{session_id}'") from None


def _known_form(ref: str) -> None:
    """An id or tail holding a NUL or a lone surrogate names no session (none can hold one),
    and PostgreSQL cannot even compare it: not found, whatever door it came through, never a
    database error."""
    try:
        storable_text("a session id", ref)
    except UnstorableText:
        raise SessionNotFound("no such session") from None


def session_resolve(*, owner: AbstractBaseUser, ref: str) -> ChatSession:
    """A full id, `last` (the most recently active), or a unique tail such as `d139`."""
    ref = ref.strip()
    if not ref:
        raise SessionNotFound("no session id given")
    _known_form(ref)
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


def import_runs_for_owner(*, owner: AbstractBaseUser) -> QuerySet[ImportRun]:
    """The owner's imports, their uploaded bytes left unread (a foreign id is not found)."""
    return ImportRun.objects.filter(owner=owner).defer("upload")


def session_questions(*, session: ChatSession) -> QuerySet[Message]:
    """The person's messages in a session, the latest first: `.first()` is the session's
    latest question (the one a turn answers, each opening a round), `[1:2]` the one before it,
    `[n - 1:n]` the one opening the n-th round from the end. A queryset, so each reader takes
    only the column it needs (`values_list("seq")`, `"content"`, `"pk"`) in one statement,
    walking the (session, seq) unique index back from the newest message."""
    return Message.objects.filter(session=session, role=Message.Role.USER).order_by("-seq")


def session_locked(*, session_id: str) -> ChatSession:
    """The session's row, locked until the current transaction ends (select_for_update): what
    a writer that must not race another reads first."""
    return ChatSession.objects.select_for_update().get(pk=session_id)


def message_with_session(*, message_id: int) -> Message:
    """One stored message with its session (a door that recorded its id: a Lark event's
    question)."""
    return Message.objects.select_related("session").get(pk=message_id)


def question_latest(*, session: ChatSession, field: str) -> Any:
    """The session's latest question's `field` ("pk", "seq", "content"), None with none."""
    return session_questions(session=session).values_list(field, flat=True).first()


def question_earlier(*, session: ChatSession) -> str:
    """What the person asked in the round before the latest ("" with none)."""
    return next(iter(session_questions(session=session).values_list("content", flat=True)[1:2]), "")


def question_reply(*, session_id: str, seq: int) -> Message | None:
    """The reply stored for the question at `seq`: the last final assistant message (no tool
    calls) of its round, before the next question; None while it has none. The one rule of
    "was this question answered" (a Lark event taken back, a turn stopped by a shutdown)."""
    rows = (
        Message.objects.filter(session_id=session_id, seq__gt=seq)
        .order_by("seq")
        .only("id", "seq", "role", "content", "tool_calls")[:200]
    )
    reply = None
    for row in rows:
        if row.role == Message.Role.USER:
            break
        if row.role == Message.Role.ASSISTANT and not row.tool_calls:
            reply = row
    return reply


def round_tool_messages(*, session: ChatSession) -> list[Message]:
    """The tool traffic of the session's latest round, in order: its assistant tool-call
    steps and the tool results after them (everything after its latest question but the
    replies). One statement; a round holds a few of them."""
    latest = session_questions(session=session).values("seq")[:1]
    rows = Message.objects.filter(session=session, seq__gt=Subquery(latest)).order_by("seq")
    return [
        row
        for row in rows.only("id", "seq", "role", "content", "tool_calls", "tool_call_id")
        if row.role == Message.Role.TOOL or row.tool_calls
    ]


# The sample BM25's mean length is taken over: the messages (at most the second number) of the
# owner's most recently active sessions (the first): read through the (owner, updated_at) and
# (session, seq) indexes, a few milliseconds whatever the size of the history.
LENGTH_SAMPLE = (20, 2000)
# What a candidate message is read as: enough to rank it (its tokens, its time) and to pick a
# session's best match (session, content); the few results are then read whole, by id.
CANDIDATE_FIELDS = ["id", "session_id", "content", "search_tokens", "created_at"]
_ID, _SESSION, _CONTENT, _TOKENS, _CREATED = range(5)
# What a found message shows (memory_search's citations): the rest stays deferred.
RESULT_FIELDS = ["id", "session_id", "seq", "role", "content", "created_at"]


def _session_among(ids: list[str]):
    """A filter for the sessions with these ids. On PostgreSQL one array parameter: a
    thousand placeholders cost more to bind and plan than the lookup itself."""
    if connection.vendor == "postgresql":
        table = ChatSession._meta.db_table
        return RawSQL(f'"{table}"."id" = ANY(%s)', [ids], output_field=BooleanField())
    return Q(pk__in=ids)


def _history_size(*, owner: AbstractBaseUser) -> tuple[int, int | None, float | None]:
    """(the owner's message count, BM25's N; the highest message id; the mean length of the
    owner's messages, BM25's avgdl) in one query. The count is summed from the sessions'
    counters through an index (no message is read); the id bounds search's newest-first
    windows (search.newest_matching). The mean length is taken over a sample that does not
    depend on the query (LENGTH_SAMPLE), so a message's normalisation does not change with the
    words a question happens to share with others."""
    # ORDER BY last_seq: PostgreSQL then reads the (owner_id, last_seq) index alone
    # (session_owner_seq_total) instead of every session row; the sum is the same. SQLite has
    # no such index and would sort for nothing.
    order = " ORDER BY last_seq" if connection.vendor == "postgresql" else ""
    sessions, messages = ChatSession._meta.db_table, Message._meta.db_table
    sessions_sampled, messages_sampled = LENGTH_SAMPLE
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT SUM(last_seq) FROM (SELECT last_seq FROM {sessions}"
            f" WHERE owner_id = %s{order}) owned), (SELECT MAX(id) FROM {messages}),"
            f" (SELECT AVG({length_sql('sample.search_tokens')}) FROM (SELECT search_tokens"
            f" FROM {messages} WHERE session_id IN (SELECT id FROM {sessions} WHERE owner_id = %s"
            f" ORDER BY updated_at DESC LIMIT {sessions_sampled}) AND search_tokens <> ''"
            f" LIMIT {messages_sampled}) sample)",
            [owner.pk, search.TUNING.context_weight, owner.pk],
        )
        total, newest, mean_length = cursor.fetchone()
    return int(total or 0), newest, float(mean_length) if mean_length else None


def _messages_ranked(
    *,
    owner: AbstractBaseUser,
    terms: list[str],
    session_id: str | None = None,
    exclude_after: tuple[str, int] | None = None,
) -> list[Ranked]:
    """Candidate messages ranked by BM25, best first, each item a CANDIDATE_FIELDS tuple."""
    # Everyone's messages, narrowed as asked; scoped to the owner by a join for the walk over
    # the newest ids, and by one lookup of the sessions met for the index steps
    # (search.newest_matching says why).
    messages = _narrowed(Message.objects.all(), session_id, exclude_after)

    def owners_only(batch: list[tuple]) -> list[tuple]:
        mine = set(
            sessions_for_owner(owner=owner)
            .filter(pk__in={row[_SESSION] for row in batch})
            .values_list("pk", flat=True)
        )
        return [row for row in batch if row[_SESSION] in mine]

    total, newest, mean_length = _history_size(owner=owner)
    rows = newest_matching(
        messages.filter(session__owner=owner),
        terms,
        CANDIDATE_FIELDS,
        newest_id=newest,
        unscoped=messages,
        keep=owners_only,
    )
    avgdl = mean_length if search.TUNING.avgdl == "collection" else None
    return bm25(terms, ((row, row[_TOKENS]) for row in rows), total, avgdl=avgdl)


def messages_search(
    *,
    owner: AbstractBaseUser,
    query: str,
    limit: int = 10,
    session_id: str | None = None,
    exclude_after: tuple[str, int] | None = None,
    now: datetime | None = None,
) -> list[Ranked]:
    """The owner's user and assistant messages ranked by BM25 against `query` (sessions_app.
    search); on PostgreSQL through the GIN index. When the query names a time ("last May",
    "上周"; relative ones count from `now`, by default the present), the messages from then
    are preferred (search.prefer_time)."""
    parsed = query_parse(query, now=timezone.localtime(now))
    vector = meaning.query_vector(query)
    if not parsed.terms and vector is None:
        return []
    ranked = []
    if parsed.terms:
        ranked = _messages_ranked(
            owner=owner, terms=parsed.terms, session_id=session_id, exclude_after=exclude_after
        )
    if vector is not None:
        scan = meaning.messages_scan(
            owner.pk, vector, session_id=session_id, exclude_after=exclude_after
        )
        ranked = _messages_fused(ranked, scan)
    if parsed.span:
        ranked = prefer_time(ranked, parsed.span, when=lambda row: row[_CREATED])
    ranked = ranked[:limit]
    if not ranked:
        return []
    found = Message.objects.only(*RESULT_FIELDS).in_bulk([r.item[_ID] for r in ranked])
    return [Ranked(item=found[r.item[_ID]], score=r.score) for r in ranked]


def _narrowed(
    messages: QuerySet[Message], session_id: str | None, exclude_after: tuple[str, int] | None
) -> QuerySet[Message]:
    """`messages` narrowed as a search asks: to one session, and without the current round
    (exclude_after: (session id, seq), already in the model's context)."""
    if session_id:
        messages = messages.filter(session_id=session_id)
    if exclude_after:
        messages = messages.exclude(session_id=exclude_after[0], seq__gte=exclude_after[1])
    return messages


def _messages_fused(ranked: list[Ranked], scan: meaning.Scan) -> list[Ranked]:
    """BM25's candidates (CANDIDATE_FIELDS tuples) fused with the scan's (meaning.fuse); the
    scan's own candidates are read as the same tuples."""
    fused = meaning.fuse([(r.item[_ID], r.score) for r in ranked], scan)
    rows = {r.item[_ID]: r.item for r in ranked}
    missing = [item.key for item in fused if item.key not in rows]
    if missing:
        rows.update(
            (row[_ID], row)
            for row in Message.objects.filter(pk__in=missing).values_list(*CANDIDATE_FIELDS)
        )
    return [Ranked(item=rows[item.key], score=item.score) for item in fused if item.key in rows]


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
    owned = sessions_for_owner(owner=owner)
    terms = query_terms(query)
    if not terms:
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
    best: dict[str, tuple[float, str]] = {}
    for ranked in _messages_ranked(owner=owner, terms=terms):
        session_id = ranked.item[_SESSION]
        if session_id not in best:  # ranked best first: the session's best message
            best[session_id] = (ranked.score, ranked.item[_CONTENT])
    # Every session with a matching message scores above 0 and so ranks before every session
    # that matched by its title alone: order those by score (then activity) on their own, and
    # search titles only when they leave places free, since that search may read every
    # session (see below).
    by_activity = owned.filter(_session_among(list(best))).order_by("-updated_at", "-created_at")
    chosen = sorted(by_activity.values_list("pk", flat=True), key=lambda pk: -best[pk][0])
    chosen = chosen[:limit]
    if len(chosen) < limit:
        titles = owned.exclude(_session_among(list(best))) if best else owned
        if query.upper() == query.lower() and len(query) < 3:
            # No letter with a case (Chinese, digits) and too short for a trigram: a plain LIKE
            # finds the same titles without upper-casing every one of them.
            titles = titles.filter(title__contains=query)
        else:  # through the trigram index on UPPER(title) on PostgreSQL (migration 0005)
            titles = titles.filter(title__icontains=query)
        chosen += titles.order_by("-updated_at", "-created_at").values_list("pk", flat=True)[
            : limit - len(chosen)
        ]
    found = owned.in_bulk(chosen)
    for session in found.values():
        session.match = best.get(session.pk, (0.0, None))[1]
    return [found[pk] for pk in chosen]
