from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sessions_app.models import ChatSession, Message

pytestmark = pytest.mark.django_db


def chat(*args: str, stdin: str) -> str:
    out = StringIO()
    call_command("ethan_chat", *args, stdout=out, stdin=StringIO(stdin))
    return out.getvalue()


def test_console_stores_messages_and_lists_sessions(owner):
    out = chat("--user", "ada", "--model", "offline", stdin="hello Ethan\n/sessions\n/exit\n")
    session = ChatSession.objects.get()
    assert (session.owner, session.title, session.model, session.channel) == (
        owner,
        "hello Ethan",
        "offline",
        "console",
    )
    assert list(session.messages.values_list("seq", "role", "content")) == [
        (1, "user", "hello Ethan")
    ]
    assert session.ended_at is not None
    assert out.startswith(f"Ethan: new session {session.id}.")
    assert f"{session.id}  " in out  # the /sessions listing
    assert out.endswith(f"Saved as {session.id}. Resume with: ethan -r {session.id}\n")


def test_console_without_messages_leaves_no_session(owner):
    out = chat("--user", "ada", stdin="/help\n/new\n/exit\n")
    assert "/resume ID" in out
    assert not ChatSession.objects.exists()


def test_console_resume_last_and_by_tail(owner, make_session):
    old = make_session(owner, "first topic", "first answer")
    out = chat("--user", "ada", "-r", "last", stdin="more on that\n")
    assert out.startswith(f"Resumed {old.id}: first topic\n  user: first topic\n")
    assert list(old.messages.values_list("seq", "content")) == [
        (1, "first topic"),
        (2, "first answer"),
        (3, "more on that"),
    ]

    out = chat("--user", "ada", stdin=f"/resume {old.id[-4:]}\n/resume nope\n/new\nfresh\n")
    assert f"Resumed {old.id}" in out
    assert "Error: no session matches 'nope'" in out
    assert ChatSession.objects.count() == 2


def test_console_companion_mode_and_bad_mode(owner):
    chat("--user", "ada", "--mode", "陪伴", stdin="今天有点累\n")
    assert ChatSession.objects.get().mode == "companion"
    with pytest.raises(CommandError, match="unknown mode 'play'"):
        chat("--user", "ada", "--mode", "play", stdin="")
    with pytest.raises(CommandError, match="no session matches 'zz'"):
        chat("--user", "ada", "-r", "zz", stdin="")
    assert Message.objects.count() == 1


def test_console_exit_removes_empty_sessions(owner, make_session):
    ChatSession.objects.create(id="s_20260101_0000_empt", owner=owner)
    kept = make_session(owner, "keep")
    chat("--user", "ada", stdin="/exit\n")
    assert list(ChatSession.objects.values_list("pk", flat=True)) == [kept.pk]
