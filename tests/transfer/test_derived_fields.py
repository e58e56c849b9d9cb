"""An import derives what the live paths derive: a message's search tokens (its neighbouring
turns included) and its session's counters as message_append keeps them, a fact's key and tokens
as fact_write, an episode's tokens as episode_write."""

from __future__ import annotations

import json
import sqlite3
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from episodes_app.models import Episode
from memory_app.models import Fact
from memory_app.services import fact_write
from sessions_app.models import ChatSession, Message
from sessions_app.search import search_tokens
from sessions_app.services import message_append, session_start
from tests.transfer.test_import_export import EPISODES, MESSAGES, SESSIONS, TOOL_CALLS

pytestmark = pytest.mark.django_db

CHAT = "s_20260611_1753_d139"


def write_home(home: Path, messages) -> Path:
    (home / "memory").mkdir(parents=True, exist_ok=True)
    (home / "sessions.db").unlink(missing_ok=True)
    db = sqlite3.connect(home / "sessions.db")
    db.execute("CREATE TABLE sessions (id TEXT, title TEXT, model TEXT, created_at, updated_at)")
    db.execute(
        "CREATE TABLE messages (session_id TEXT, role TEXT, content TEXT, "
        "tool_calls TEXT, tool_call_id TEXT)"
    )
    db.executemany("INSERT INTO sessions VALUES (?, ?, ?, ?, ?)", SESSIONS)
    db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?)", messages)
    db.commit()
    db.close()
    return home


def imported(home: Path) -> None:
    call_command("ethan_import", "--home", str(home), "--user", "ada", stdout=StringIO())


def appended_live(owner, messages) -> ChatSession:
    """The same conversation, appended one message at a time as a turn does."""
    session = session_start(owner=owner)
    for _sid, role, content, calls, call_id in messages:
        message_append(
            session=session,
            role=role,
            content=content or "",
            tool_calls=json.loads(calls) if calls else None,
            tool_call_id=call_id or "",
        )
    return session


def tokens(session_id: str) -> list[tuple[int, str, str]]:
    rows = Message.objects.filter(session_id=session_id).order_by("seq")
    return list(rows.values_list("seq", "role", "search_tokens"))


def counters(session_id: str) -> tuple[int, int]:
    return ChatSession.objects.values_list("last_seq", "round_count").get(pk=session_id)


def test_imported_messages_carry_the_tokens_and_counters_of_live_appends(
    tmp_path, owner, other_owner
):
    chat = [m for m in MESSAGES if m[0] == CHAT]
    imported(write_home(tmp_path / "in", MESSAGES))
    live = appended_live(other_owner, chat)
    assert tokens(CHAT) == tokens(live.pk)
    assert counters(CHAT) == counters(live.pk) == (4, 1)
    # The tool-call step has no words of its own; it is found by the turn before it.
    assert Message.objects.get(session_id=CHAT, seq=2).tool_calls == TOOL_CALLS


def test_a_grown_session_gets_the_tokens_of_its_new_messages_as_appends_would(
    tmp_path, owner, other_owner
):
    home = write_home(tmp_path / "in", MESSAGES)
    imported(home)
    grown = [
        *MESSAGES,
        (CHAT, "user", "再来一杯拿铁", None, None),
        (CHAT, "assistant", "好的，拿铁。", None, None),
    ]
    imported(write_home(home, grown))
    live = appended_live(other_owner, [m for m in grown if m[0] == CHAT])
    # The reply stored before gains the words of the next question, as an append gives it.
    assert tokens(CHAT) == tokens(live.pk)
    assert counters(CHAT) == counters(live.pk) == (6, 2)


def test_imported_facts_and_episodes_are_keyed_and_tokenised_as_written_live(
    tmp_path, owner, other_owner
):
    home = write_home(tmp_path / "in", MESSAGES)
    (home / "memory/facts.json").write_text(json.dumps([{"content": "用户喜欢  美式咖啡"}]))
    (home / "memory/episodes.json").write_text(json.dumps(EPISODES, ensure_ascii=False))
    imported(home)
    fact = Fact.objects.get(owner=owner)
    live = fact_write(
        owner=other_owner,
        content="用户喜欢 美式咖啡",
        category="knowledge",
        confidence=0.8,
        source="consolidator",
    )
    assert (fact.content, fact.content_key, fact.search_tokens) == (
        live.content,
        live.content_key,
        live.search_tokens,
    )
    again = fact_write(
        owner=owner,
        content="用户喜欢美式咖啡。",
        category="knowledge",
        confidence=0.9,
        source="api",
    )
    assert (again.pk, again.hit_count) == (fact.pk, 2)  # the same fact, by its key
    episode = Episode.objects.get(owner=owner, session_ref="s_20260612_0151_b18c")
    assert episode.search_tokens == search_tokens("讨论了里斯本旅行 里斯本 旅行 Lisbon")
