"""Writes of layer 1: starting, appending to, ending, deleting and cleaning up sessions."""

from __future__ import annotations

import getpass
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, models, transaction
from django.db.models import Exists, F, Min, OuterRef, Q, QuerySet, Value, Window
from django.db.models.functions import Coalesce, RowNumber
from django.utils import timezone

from embedder import embedder_name
from ethan_shared.compiled import Compiled, Marker
from sessions_app import meaning
from sessions_app.ids import new_session_id
from sessions_app.models import ChatSession, Message
from sessions_app.search import SPOKEN, message_search_tokens

log = logging.getLogger(__name__)

TITLE_LENGTH = 40
ID_ATTEMPTS = 10
# How often a turn waiting for its session looks again: soon at first, then at a steady pace.
CLAIM_FIRST_PAUSE = 0.05
CLAIM_MAX_PAUSE = 0.25


class SessionBusy(Exception):
    """Another turn on this session is still being answered and did not finish in time.
    Nothing of this turn was written; it can be sent again."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(f"session {session_id} is still answering an earlier message")


def message_opens_round(role: str) -> bool:
    """A user message opens a round: ChatSession.round_count counts them, last_seq all
    messages (the derived counters of a session, kept by message_append and by an import)."""
    return role == Message.Role.USER


def title_from(text: str) -> str:
    """The first 40 characters of a message, whitespace collapsed (Chinese counts per character)."""
    return " ".join(text.split())[:TITLE_LENGTH]


def local_username() -> str:
    """Who "you" are when no door is told a name: ETHAN_USER, else the OS login name."""
    from django.conf import settings

    return (settings.ETHAN_CONSOLE_USER or getpass.getuser()).strip()


def local_user_get_or_create(*, username: str | None = None) -> AbstractBaseUser:
    """The console's owner: --user, else ETHAN_USER, else the OS login name; made on first use."""
    name = (username or local_username()).strip()
    if not name:
        raise ValueError("a user name is required")
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(**{user_model.USERNAME_FIELD: name})
    if created:
        # A console user signs in by being at the console; it has no password to guess.
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def local_user_password_set(*, user: AbstractBaseUser, password: str) -> None:
    """Give a person a password for the pages (/accounts/login/), checked by the site's
    password validators first: ValidationError, and nothing changed, if it fails them."""
    from django.contrib.auth.password_validation import validate_password

    validate_password(password, user=user)
    user.set_password(password)
    user.save(update_fields=["password"])


def session_start(
    *,
    owner: AbstractBaseUser,
    model: str = "",
    mode: str = ChatSession.Mode.WORK,
    channel: str = ChatSession.Channel.CONSOLE,
) -> ChatSession:
    """A new session in memory only: nothing is written until its first message is appended."""
    now = timezone.now()
    session = ChatSession(
        id=new_session_id(now),
        owner=owner,
        model=model,
        mode=mode,
        channel=channel,
        created_at=now,
        updated_at=now,
    )
    session.full_clean(exclude=["id", "owner"], validate_unique=False)
    return session


def _session_insert(session: ChatSession) -> None:
    """Write a started session, drawing a new id if another session already took this one."""
    for _attempt in range(ID_ATTEMPTS):
        try:
            # A savepoint, so a collision leaves the surrounding transaction usable.
            with transaction.atomic():
                _row_insert(session)
            return
        except IntegrityError:
            if not ChatSession.objects.filter(pk=session.pk).exists():
                raise  # not an id collision: let the real error out
            session.id = new_session_id(session.created_at)
    raise IntegrityError(f"could not find a free session id after {ID_ATTEMPTS} attempts")


def message_append(
    *,
    session: ChatSession,
    role: str,
    content: str,
    tool_calls: list[dict[str, Any]] | None = None,
    tool_call_id: str = "",
    interrupted: bool = False,
    claim_stale_seconds: float | None = None,
    release_token: str = "",
) -> Message:
    """Append one message; the first one writes the session row itself.

    A turn's first and last writes carry its claim on the session (session_turn_claim) in the
    same statement that takes the message's seq: `claim_stale_seconds` claims the session
    with the append (free, or its claim older than that; else SessionBusy and nothing
    written; the token is then `session.turn_claim`), `release_token` gives the claim back
    with it (the reply). Two statements fewer per turn than claiming and releasing apart. A
    session's first append creates it already claimed, by the INSERT of its row."""
    now = timezone.now()
    message = Message(
        session=session,
        seq=0,
        role=role,
        content=content,
        tool_calls=tool_calls,
        tool_call_id=tool_call_id or "",
        interrupted=interrupted,
        created_at=now,
    )
    # Validate before anything is written (role, lengths); the database checks the rest.
    message.full_clean(
        exclude=["session", "seq"], validate_unique=False, validate_constraints=False
    )
    claim = None
    if claim_stale_seconds is not None:
        claim = _Claim(
            token=secrets.token_hex(16),
            stale_before=now - timedelta(seconds=claim_stale_seconds),
        )
    # Inside a caller's transaction (the turn's claim and question, a tool step) the append
    # is part of it: no savepoint of its own (two statements fewer per append), and a
    # database error undoes the whole of the caller's transaction, which every caller wants.
    # The refusals above come first, outside it: they leave a caller's transaction usable.
    with transaction.atomic(savepoint=False):
        written = _message_write(
            session=session, message=message, now=now, claim=claim, release=release_token
        )
    if written is None:
        # Raised out here, like the refusals above: the claim's UPDATE matched no row and
        # wrote nothing, so the caller's transaction stays usable.
        raise SessionBusy(session.pk)
    # The claim as the append left it, noted only once its writes went through: a reply that
    # failed to store leaves the claim held, in the database and here, so the turn's own
    # release still gives it back.
    if claim is not None:
        session.turn_claim, session.turn_claimed_at = claim.token, now
    if release_token and session.turn_claim == release_token:
        session.turn_claim, session.turn_claimed_at = "", None
    return written


@dataclass(frozen=True)
class _Claim:
    token: str
    stale_before: datetime


@dataclass(frozen=True)
class _Seq:
    """What claiming a seq hands back: the new seq and round count, the session's claim after
    the statement, and the last spoken message before the new one (id and content; None when
    there is none, or the new message is tool traffic and needs none)."""

    seq: int
    round_count: int
    turn_claim: str
    previous: tuple[int, str] | None


def _message_write(
    *, session: ChatSession, message: Message, now, claim: _Claim | None, release: str
) -> Message | None:
    """The writes of message_append: the session row for its first message, the next seq
    (with the turn's claim or release), the search tokens (this message's and its
    predecessor's), the message. None when the claim was refused (another turn holds it)."""
    role, content = message.role, message.content
    if not session.is_persisted:
        if role == Message.Role.USER:
            session.title = title_from(content)
        if claim is not None:
            # Created already claimed, in the INSERT itself: from the moment anyone can learn
            # the id (GET /api/sessions, a chat's next message), a second turn on it waits.
            session.turn_claim, session.turn_claimed_at = claim.token, now
            claim = None  # taken: the seq's UPDATE below has nothing left to claim
        _session_insert(session)
    elif role == Message.Role.USER and not session.title:
        ChatSession.objects.filter(pk=session.pk, title="").update(title=title_from(content))
        session.title = title_from(content)

    # Claim the next seq. The UPDATE takes the session row's write lock until commit, so
    # concurrent appends to one session queue here and each reads the seq it just wrote; a
    # rolled-back append gives its seq back, so seqs stay gap-free.
    claimed = _next_seq(
        session=session,
        is_round=message_opens_round(role),
        spoken=role in SPOKEN,
        now=now,
        claim=claim,
        release=release,
    )
    if claimed is None:
        return None
    message.seq, session.round_count = claimed.seq, claimed.round_count
    if release and claimed.turn_claim:
        log.warning("session %s: the turn's claim was no longer held at release", session.pk)
    message.session = session  # the insert may have drawn a new id after a collision
    if role in SPOKEN:
        # Search tokens carry the neighbouring turns (message_search_tokens): this message
        # gets the previous turn's words, and the previous turn gets this one's.
        previous = claimed.previous
        message.search_tokens, gained = message_search_tokens(
            role=role, content=content, previous=previous[1] if previous else ""
        )
        if previous and gained:
            search_tokens_add(gained, id=previous[0])
    _row_insert(message)
    session.last_seq = message.seq
    session.updated_at = now
    return message


def _row_insert(row: ChatSession | Message) -> None:
    """row.save(force_insert=True) in SQL: every turn stores two messages (and a new
    conversation its session), and the ORM's building and compiling of an INSERT cost it more
    than the insert. Every column the model has, each value as its field prepares it for the
    database (Field.pre_save, then get_db_prep_save: JSON, bytes, dates); an id the database
    draws comes back by RETURNING."""
    meta = type(row)._meta
    drawn = meta.pk if isinstance(meta.pk, models.AutoField) else None
    fields = [field for field in meta.concrete_fields if field is not drawn]
    quoted = connection.ops.quote_name
    columns = ", ".join(quoted(field.column) for field in fields)
    marks = ", ".join(["%s"] * len(fields))
    values = [field.get_db_prep_save(field.pre_save(row, True), connection) for field in fields]
    returning = f" RETURNING {quoted(drawn.column)}" if drawn is not None else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quoted(meta.db_table)} ({columns}) VALUES ({marks}){returning}", values
        )
        if drawn is not None:
            row.pk = cursor.fetchone()[0]
    # As a save leaves it: stored, in this database.
    row._state.adding, row._state.db = False, connection.alias


def search_tokens_add(gained: str, **where: Any) -> None:
    """Append `gained` (message_search_tokens' words of the next turn) to a stored message's
    search tokens, in the database: the message given as `id=…`, or as `session_id=…, seq=…`.
    Written as SQL: compiling the ORM's Concat of an F() and a Value made a spoken append cost
    0.485 ms of CPU against 0.274 (SQLite, bench.append_cost), and every turn makes two."""
    quoted = connection.ops.quote_name
    tokens = quoted(Message._meta.get_field("search_tokens").column)
    found = " AND ".join(f"{quoted(Message._meta.get_field(name).column)} = %s" for name in where)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quoted(Message._meta.db_table)} SET {tokens} = COALESCE({tokens}, '') || %s"
            f" WHERE {found}",
            [gained, *where.values()],
        )


def _next_seq(
    *, session: ChatSession, is_round: bool, spoken: bool, now, claim: _Claim | None, release: str
) -> _Seq | None:
    """Claim the session's next seq (and count a round) in one statement, UPDATE … RETURNING
    (SQLite 3.35+, PostgreSQL): with it, a turn's claim taken or given back, and for a spoken
    message the last spoken one before it (scalar subqueries of the RETURNING, over the
    (session, seq) index: it is the row just before, or a few tool messages back). None when
    the claim was refused."""
    chat, messages = ChatSession._meta.db_table, Message._meta.db_table
    field = ChatSession._meta.get_field("updated_at")
    stamp = lambda value: field.get_db_prep_value(value, connection)  # noqa: E731
    sets = ["last_seq = last_seq + 1", "round_count = round_count + %s", "updated_at = %s"]
    where = ["id = %s"]
    set_params: list[Any] = [int(is_round), stamp(now)]
    where_params: list[Any] = [session.pk]
    if claim is not None:
        sets += ["turn_claim = %s", "turn_claimed_at = %s"]
        set_params += [claim.token, stamp(now)]
        # session_turn_claim's condition, compiled from the same Q (once: _CLAIM_FREE).
        free_sql, free_params = _CLAIM_FREE.where(stale_before=claim.stale_before)
        where.append(f"({free_sql})")
        where_params += list(free_params)
    if release:
        # Conditional on the token, as session_turn_release: a claim that went stale and was
        # taken over stays with the turn that has it. (SET's right-hand sides read the row
        # as it was, so both CASEs see the old claim.)
        sets += [
            "turn_claim = CASE WHEN turn_claim = %s THEN '' ELSE turn_claim END",
            "turn_claimed_at = CASE WHEN turn_claim = %s THEN NULL ELSE turn_claimed_at END",
        ]
        set_params += [release, release]
    returning = ["last_seq", "round_count", "turn_claim"]
    returning_params: list[Any] = []
    if spoken:
        previous = (
            f"(SELECT {{}} FROM {messages} WHERE session_id = {chat}.id AND seq < {chat}.last_seq"
            " AND role IN (%s, %s) AND content <> '' ORDER BY seq DESC LIMIT 1)"
        )
        returning += [previous.format("id"), previous.format("content")]
        returning_params += [*SPOKEN, *SPOKEN]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {chat} SET {', '.join(sets)} WHERE {' AND '.join(where)} "
            f"RETURNING {', '.join(returning)}",
            set_params + where_params + returning_params,
        )
        row = cursor.fetchone()
    if row is None:
        exists = ChatSession.objects.filter(pk=session.pk).exists()
        if claim is not None and exists:
            return None
        raise ChatSession.DoesNotExist(f"session {session.pk} does not exist")
    previous_row = (row[3], row[4]) if spoken and row[3] is not None else None
    return _Seq(seq=row[0], round_count=row[1], turn_claim=row[2], previous=previous_row)


def _claim_free(*, stale_before: datetime) -> Q:
    """A session a turn may claim: nobody's, or its claim taken before `stale_before` (by a
    process that died mid-turn)."""
    return Q(turn_claim="") | Q(turn_claimed_at__lt=stale_before)


_CLAIM_FREE = Compiled(
    lambda stale_before: ChatSession.objects.filter(_claim_free(stale_before=stale_before)),
    stale_before=Marker.of_field(
        datetime(1901, 2, 3, 4, 5, 6, 789012, tzinfo=UTC),
        ChatSession._meta.get_field("turn_claimed_at"),
    ),
)


def session_turn_claim(*, session: ChatSession, wait_seconds: float, stale_seconds: float) -> str:
    """Claim a persisted session for one turn and return the claim's token; wait up to
    `wait_seconds` for the turn before it, then raise SessionBusy.

    Turns on one session go one at a time so that each user message is followed by its own
    reply: two interleaved turns would pair rounds wrongly in every later context. The claim is
    a row field, not a lock held in a transaction (no transaction stays open while a model
    thinks), so it holds across processes and machines on SQLite and PostgreSQL alike. To
    wait (wait_seconds > 0), call it outside any transaction: inside one, other connections
    would not see the claim until the commit. With wait_seconds=0 it may run inside one, so
    that the claim commits together with what follows it (the turn's user message).
    """
    token = secrets.token_hex(16)
    deadline = time.monotonic() + wait_seconds
    pause = CLAIM_FIRST_PAUSE
    first = True
    while True:
        # Application clocks, not the database's: a claim goes stale after minutes, so a
        # machine whose clock is a few seconds off changes nothing.
        now = timezone.now()
        free = _claim_free(stale_before=now - timedelta(seconds=stale_seconds))
        # One conditional UPDATE: of two turns racing for a free session, the database lets
        # exactly one change the row (the other re-reads it, sees the claim and matches none).
        # A stale claim (its process died mid-turn) is taken over the same way.
        claimed = ChatSession.objects.filter(free, pk=session.pk).update(
            turn_claim=token, turn_claimed_at=now
        )
        if claimed == 1:
            session.turn_claim, session.turn_claimed_at = token, now
            return token
        if first and not ChatSession.objects.filter(pk=session.pk).exists():
            # Deleted under us: say so now rather than wait for a claim that cannot come.
            raise ChatSession.DoesNotExist(f"session {session.pk} does not exist")
        first = False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SessionBusy(session.pk)
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, CLAIM_MAX_PAUSE)


def session_turn_release(*, session: ChatSession, token: str) -> bool:
    """Give back a turn's claim. Conditional on the token: a claim that went stale and was
    taken over by another turn is theirs now and stays. False if there was nothing to release."""
    released = ChatSession.objects.filter(pk=session.pk, turn_claim=token).update(
        turn_claim="", turn_claimed_at=None
    )
    if session.turn_claim == token:
        session.turn_claim, session.turn_claimed_at = "", None
    if released != 1:
        log.warning("session %s: the turn's claim was no longer held at release", session.pk)
    return released == 1


def session_end(*, session: ChatSession) -> None:
    """Mark a persisted session as ended (console exit); an unsaved one has nothing to end."""
    if session.is_persisted and session.ended_at is None:
        session.ended_at = timezone.now()
        ChatSession.objects.filter(pk=session.pk, ended_at=None).update(ended_at=session.ended_at)


def session_reopen(*, session: ChatSession) -> None:
    """A new turn on an ended session (resumed, or a chat app going on with an old
    conversation): open again, so that it is ended, and its episode brought up to date, when
    it goes idle or its console exits."""
    if session.ended_at is not None:
        session.ended_at = None
        ChatSession.objects.filter(pk=session.pk).update(ended_at=None)


@transaction.atomic
def session_delete(*, session: ChatSession) -> int:
    """Delete a session and its messages; returns how many messages went with it."""
    count = session.messages.count()
    session.delete()
    return count


def sessions_cleanup_empty(
    *, owner: AbstractBaseUser | None = None, session_ids: list[str] | None = None
) -> int:
    """Delete sessions with no messages (the design runs this on console exit).

    Limited to one owner and/or to the given ids when those are passed.
    """
    empty = ChatSession.objects.filter(~Exists(Message.objects.filter(session=OuterRef("pk"))))
    if owner is not None:
        empty = empty.filter(owner=owner)
    if session_ids is not None:
        empty = empty.filter(pk__in=session_ids)
    _, deleted = empty.delete()
    return deleted.get(ChatSession._meta.label, 0)


def session_set_model(*, session: ChatSession, model: str) -> None:
    """The model a session talks to now (a resumed session may switch)."""
    session.model = model
    ChatSession.objects.filter(pk=session.pk).update(model=model)


def sessions_close_idle(
    *,
    idle_minutes: int,
    channels: tuple[str, ...] = (
        ChatSession.Channel.API,
        ChatSession.Channel.LARK,
        ChatSession.Channel.OPENAI,
    ),
) -> list[str]:
    """End API, Lark and chat-app sessions with no activity for `idle_minutes` (a console
    session ends when the console does). Returns the ids it ended, for the episode writer."""
    cutoff = timezone.now() - timezone.timedelta(minutes=idle_minutes)
    idle = ChatSession.objects.filter(
        channel__in=channels, ended_at=None, updated_at__lt=cutoff, last_seq__gt=0
    )
    ids = list(idle.values_list("pk", flat=True))
    # Conditional on ended_at still being empty: a racing second run ends nothing twice.
    ChatSession.objects.filter(pk__in=ids, ended_at=None).update(ended_at=timezone.now())
    return ids


# --- vectors (sessions_app.meaning): written in the background, never on a turn's path -----

# Messages embedded per call at most: a long imported session is embedded over several calls
# (each returns how many it wrote; the caller comes back while there are more).
EMBED_BATCH = 256


def messages_embed(*, session_id: str, limit: int = EMBED_BATCH) -> int:
    """Write the vectors of this session's spoken messages that have none of the configured
    embedder's, oldest first, at most `limit`; returns how many were written (0 when the
    embedder is off or nothing is pending). messages_embed_sessions, for one session."""
    return messages_embed_sessions(session_ids=[session_id], limit=limit).get(session_id, 0)


@dataclass(frozen=True)
class _Pending:
    """What one session embeds: `rows` (pk, content), spoken and in order, of which
    rows[start:end] are written (`count` of them pending until now, the one before them
    written again) and the others are their neighbours."""

    rows: list[tuple[int, str]]
    start: int
    end: int
    count: int


def messages_embed_sessions(
    *, session_ids: Sequence[str], limit: int = EMBED_BATCH
) -> dict[str, int]:
    """Write the vectors of these sessions' spoken messages that have none of the configured
    embedder's, oldest first, at most `limit` a session, in one embedding call and one
    transaction; how many each session had written (none when the embedder is off or nothing
    is pending). The turns a process has just answered are written together this way
    (agent_app.vectors): one call embeds many texts for much less than one call each.

    A message's vector carries its neighbours' text (meaning.combined: the spoken turns before
    and after it), so the spoken message just before the first pending one is written again:
    when it was embedded, the message after it did not exist yet (its own text's vector, and
    its previous turn's, the embedder remembers: embedder.client.REMEMBERED). Idempotent and
    resumable: a pass killed half-way leaves rows with or without a vector, and the next pass
    starts at the first without."""
    name = embedder_name()
    if name is None:
        return {}
    pending = _pending_rows(session_ids, name, limit)
    if not pending:
        return {}
    found = meaning.vectors_of([content for rows in pending.values() for _pk, content in rows.rows])
    if found is None:
        return {}
    name, own = found
    vectors = {}
    offset = 0
    for rows in pending.values():
        for at in range(rows.start, rows.end):
            neighbours = [own[offset + i] for i in (at - 1, at + 1) if 0 <= i < len(rows.rows)]
            vectors[rows.rows[at][0]] = meaning.combined(own[offset + at], neighbours)
        offset += len(rows.rows)
    with transaction.atomic():
        # The processes holding the owners' vectors read these sessions' again. The sessions'
        # rows first, then their messages': the order a turn takes them (message_append), so
        # that the two never wait on each other (on PostgreSQL they deadlocked the other way
        # round).
        ChatSession.objects.filter(pk__in=sorted(pending)).update(
            vectors_version=Coalesce(F("vectors_version"), Value(0)) + 1
        )
        meaning.rows_write(Message, vectors, name)
    return {session_id: rows.count for session_id, rows in pending.items()}


def _pending_rows(session_ids: Sequence[str], name: str, limit: int) -> dict[str, _Pending]:
    """Each session's rows to embed, for all of them in three queries (a query costs the
    process more to build than the database to run, and a batch of turns holds dozens of
    sessions): their first pending messages, then what follows each, then what precedes it.
    Sessions with none pending are left out."""
    spoken = Message.objects.filter(session_id__in=session_ids, role__in=SPOKEN).exclude(content="")
    firsts = dict(
        meaning.pending(spoken, name).order_by().values_list("session_id").annotate(Min("seq"))
    )
    if not firsts:
        return {}
    # The first `limit` from each first pending one, and the one after them: its next neighbour
    # (numbered over all of a session's rows from its first pending one: a few after a turn,
    # what is left of an imported session while it is embedded `limit` at a time).
    after = _per_session(
        spoken.filter(_any(Q(session_id=sid, seq__gte=first) for sid, first in firsts.items()))
        .annotate(place=Window(RowNumber(), partition_by=F("session_id"), order_by=F("seq").asc()))
        .filter(place__lte=limit + 1)
    )
    # The two spoken turns before each first pending one: the one written again, and its own
    # previous turn, its context; looked for among the few messages before it, and further
    # back for a session whose last rounds were mostly tool steps.
    before = _per_session(
        spoken.filter(
            _any(
                Q(session_id=sid, seq__lt=first, seq__gte=first - _LOOKBACK)
                for sid, first in firsts.items()
            )
        )
    )
    pending = {}
    for session_id, first in firsts.items():
        earlier = before.get(session_id, [])[-2:]
        if len(earlier) < 2 and first - _LOOKBACK > 1:  # seq counts from 1
            earlier = list(
                spoken.filter(session_id=session_id, seq__lt=first)
                .order_by("-seq")
                .values_list("pk", "content")[:2]
            )[::-1]
        rows = after[session_id]
        count = min(len(rows), limit)
        pending[session_id] = _Pending(
            rows=earlier + rows,
            start=max(0, len(earlier) - 1),
            end=len(earlier) + count,
            count=count,
        )
    return pending


# How far before a session's first pending message its two previous spoken turns are looked for
# in the batch's query: a round of a question and a reply is two messages, a tool step two more.
_LOOKBACK = 8


def _any(conditions) -> Q:
    found = Q()
    for condition in conditions:
        found |= condition
    return found


def _per_session(rows: QuerySet) -> dict[str, list[tuple[int, str]]]:
    """(pk, content) of `rows`, by session, each session's in order."""
    found: dict[str, list[tuple[int, str]]] = {}
    for session_id, pk, content in rows.order_by("session_id", "seq").values_list(
        "session_id", "pk", "content"
    ):
        found.setdefault(session_id, []).append((pk, content))
    return found
