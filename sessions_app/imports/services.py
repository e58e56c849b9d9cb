"""Writing an export's conversations as sessions: one transaction per conversation, and
idempotent by the conversation's id in its source (ChatSession.external_id).

The same export twice adds nothing; a newer one adds the conversations that are new and the
messages a known conversation gained since. A conversation whose earlier messages changed
since it was imported (the person edited one in ChatGPT, which moved its branch) is kept as
first imported and counted as changed: memory may already have learnt from those messages,
and their facts point at them.

The file is read twice, streamed both times: first whole, to refuse a broken, foreign or
hostile file before anything is written and to count for the progress bar; then to write. A
conversation that cannot be read is skipped, with its line (ImportReport.skipped); an export
none of whose conversations can be read is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import F

from sessions_app.ids import new_session_id
from sessions_app.imports import chatgpt, claude
from sessions_app.imports.export import (
    Conversation,
    ExportError,
    ReadLimits,
    Skipped,
    conversations,
    nothing_read,
)
from sessions_app.models import ChatSession, Message
from sessions_app.search import SPOKEN, message_search_tokens
from sessions_app.services import (
    _session_insert,
    message_opens_round,
    search_tokens_add,
    title_from,
)

__all__ = ["READERS", "ExportCheck", "ExportError", "ImportReport", "export_import"]

READERS = {chatgpt.SOURCE: chatgpt.read, claude.SOURCE: claude.read}


def export_conversations(
    path: Path, *, source: str, limits: ReadLimits | None = None
) -> Iterator[Conversation | Skipped]:
    if source not in READERS:
        raise ExportError(f"{path.name}: unknown source {source!r} (chatgpt or claude)")
    return conversations(path, source=source, read=READERS[source], limits=limits)


@dataclass
class ExportCheck:
    """An export read through once: what it holds, and the lines of the conversations that
    cannot be read (skipped)."""

    conversations: int = 0
    messages: int = 0
    rounds: int = 0
    skipped: list[str] = field(default_factory=list)


def export_check(path: Path, *, source: str) -> ExportCheck:
    """Read the whole export without writing, within the configured limits (time included):
    ExportError for a broken, foreign or hostile file, or one with no readable conversation."""
    check, skipped = ExportCheck(), []
    for conversation in export_conversations(path, source=source):
        if isinstance(conversation, Skipped):
            skipped.append(conversation)
            continue
        check.conversations += 1
        check.messages += len(conversation.turns)
        check.rounds += conversation.rounds
    if skipped and not check.conversations:
        raise nothing_read(path.name, skipped)
    check.skipped = [item.line for item in skipped]
    return check


@dataclass
class ImportReport:
    conversations: int = 0
    sessions_created: int = 0
    messages_created: int = 0
    unchanged: int = 0
    # Conversations whose earlier messages changed since they were imported: kept as they were.
    changed: list[str] = field(default_factory=list)
    # A line for each conversation that could not be read, left out.
    skipped: list[str] = field(default_factory=list)


def export_import(
    *,
    owner: AbstractBaseUser,
    path: Path,
    source: str,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Import every conversation of the export at `path` for `owner`. ExportError, and
    nothing written, for a file that is broken, not of `source` or past the limits;
    `progress(done, total)` after each conversation."""
    check = export_check(path, source=source)
    total = check.conversations
    report = ImportReport(skipped=check.skipped)
    # The second read of the same file: the first, timed and scanned, passed (ReadLimits).
    for conversation in export_conversations(
        path, source=source, limits=ReadLimits.configured(again=True)
    ):
        if isinstance(conversation, Skipped):
            continue
        created, added, same = conversation_import(owner=owner, conversation=conversation)
        report.conversations += 1
        report.sessions_created += created
        report.messages_created += added
        if not same:
            report.changed.append(conversation.title or conversation.external_id)
        elif not created and not added:
            report.unchanged += 1
        if progress:
            progress(report.conversations, total)
    return report


def conversation_import(
    *, owner: AbstractBaseUser, conversation: Conversation
) -> tuple[bool, int, bool]:
    """One conversation as a session, in one transaction: (the session was created, messages
    added, the stored messages are the start of the conversation)."""
    try:
        return _conversation_write(owner, conversation)
    except IntegrityError:
        # Another import of the same export created it meanwhile: now it is known.
        return _conversation_write(owner, conversation)


@transaction.atomic
def _conversation_write(
    owner: AbstractBaseUser, conversation: Conversation
) -> tuple[bool, int, bool]:
    session = (
        ChatSession.objects.select_for_update()
        .filter(owner=owner, external_id=conversation.external_id)
        .first()
    )
    turns = conversation.turns
    created = session is None
    stored: list[tuple[int, str, str]] = []
    if session is None:
        first_user = next((turn.content for turn in turns if turn.role == "user"), "")
        session = ChatSession(
            id=new_session_id(conversation.created_at),
            owner=owner,
            title=conversation.title or title_from(first_user),
            external_model=conversation.model,
            channel=ChatSession.Channel.IMPORT,
            external_id=conversation.external_id,
            created_at=conversation.created_at or turns[0].created_at,
            updated_at=conversation.updated_at or conversation.created_at,
        )
        _session_insert(session)
    else:
        stored = list(session.messages.order_by("seq").values_list("pk", "role", "content"))
        said = [(role, content) for _pk, role, content in stored]
        if said != [(turn.role, turn.content) for turn in turns[: len(stored)]]:
            return False, 0, False
    new = turns[len(stored) :]
    if not new:
        return created, 0, True
    # The last spoken turn so far, which gains the next one's words (message_search_tokens):
    # a stored message (by pk) or one of the rows below.
    last_stored = next(
        ((pk, content) for pk, role, content in reversed(stored) if role in SPOKEN and content),
        None,
    )
    previous_text = last_stored[1] if last_stored else ""
    previous_row: Message | None = None
    rows = []
    for seq, turn in enumerate(new, start=len(stored) + 1):
        tokens, gained = message_search_tokens(
            role=turn.role, content=turn.content, previous=previous_text
        )
        if previous_row is not None:
            previous_row.search_tokens += gained
        elif last_stored is not None and gained:
            search_tokens_add(gained, id=last_stored[0])
        previous_row = Message(
            session=session,
            seq=seq,
            role=turn.role,
            content=turn.content,
            search_tokens=tokens,
            created_at=turn.created_at or session.created_at,
        )
        rows.append(previous_row)
        previous_text = turn.content
    Message.objects.bulk_create(rows)
    rounds = sum(message_opens_round(turn.role) for turn in new)
    updated = max(filter(None, [conversation.updated_at, new[-1].created_at, session.updated_at]))
    ChatSession.objects.filter(pk=session.pk).update(
        last_seq=len(turns), round_count=F("round_count") + rounds, updated_at=updated
    )
    return created, len(rows), True
