"""The console driven through a pipe, on the offline model and on a fake provider."""

from __future__ import annotations

import os
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from memory_app.models import Fact
from sessions_app.models import ChatSession, Message

pytestmark = pytest.mark.django_db


def chat(*args: str, stdin: str) -> str:
    out = StringIO()
    call_command("ethan_chat", *args, stdout=out, stdin=StringIO(stdin))
    return out.getvalue()


def test_new_session_gets_answers_and_lists_sessions(owner, llm_config, monkeypatch):
    # This venv's `ethan` is on PATH: the resume hint is the short command (tests/ethan_site
    # test_cli.py has the others).
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    out = chat("--user", "ada", stdin="hello\n/sessions\n/exit\n")
    session = ChatSession.objects.get()
    assert (session.owner, session.title, session.model, session.channel) == (
        owner,
        "hello",
        "offline",
        "console",
    )
    assert list(session.messages.values_list("seq", "role", "content")) == [
        (1, "user", "hello"),
        (2, "assistant", "Hi! I'm Ethan (offline mode)."),
    ]
    assert session.ended_at is not None
    lines = out.splitlines()
    assert lines[0] == f"Ethan (offline): new session {session.id}. /help for commands."
    assert lines[1].startswith("Using the offline model: a rule-based stand-in")
    assert "ANTHROPIC_API_KEY, OPENAI_API_KEY or GOOGLE_API_KEY" in lines[1]
    assert lines[2] == "Hi! I'm Ethan (offline mode)."
    assert lines[3].startswith(f"{session.id}  ")  # /sessions
    # Started with --user (not the OS login): the way back names them too.
    assert lines[-1] == f"Saved as {session.id}. Resume with: ethan -r {session.id} --user ada"


def test_exit_without_a_message_writes_nothing(owner, llm_config):
    out = chat("--user", "ada", stdin="/help\n/new\n/exit\n")
    assert "/resume ID" in out
    assert not ChatSession.objects.exists()
    assert "Saved as" not in out


def test_resume_by_tail_last_and_in_console(owner, make_session, llm_config):
    old = make_session(owner, "first topic", "first answer")
    out = chat("--user", "ada", "-r", old.id[-4:], stdin="more on that\n")
    assert out.startswith(
        f"Resumed {old.id}: first topic\n  user: first topic\n  assistant: first answer\n"
    )
    assert list(old.messages.values_list("seq", "content")) == [
        (1, "first topic"),
        (2, "first answer"),
        (3, "more on that"),
        (4, "(offline mode) Noted: more on that"),
    ]
    chat("--user", "ada", "-r", "last", stdin="again\n")
    assert old.messages.count() == 6

    out = chat("--user", "ada", stdin=f"/resume {old.id[-4:]}\n/resume nope\n/new\nfresh\n")
    assert f"Resumed {old.id}" in out
    assert "Error: no session matches 'nope'" in out
    assert ChatSession.objects.count() == 2


def test_memory_instruction_runs_the_tool_and_stores_every_step(owner, llm_config):
    out = chat("--user", "ada", stdin="记住我喜欢喝美式咖啡\n")
    assert "好的，我记住了：你喜欢喝美式咖啡" in out
    fact = Fact.objects.get()
    assert (fact.owner, fact.content, fact.category, fact.confidence, fact.source) == (
        owner,
        "用户喜欢喝美式咖啡",
        "preference",
        0.95,
        "agent_proactive",
    )
    rows = list(Message.objects.order_by("seq").values_list("role", "tool_call_id"))
    assert rows == [("user", ""), ("assistant", ""), ("tool", "offline_call_1"), ("assistant", "")]
    assert fact.message.role == "assistant" and fact.message.tool_calls[0]["id"] == "offline_call_1"


def test_companion_mode_and_bad_options(owner, llm_config):
    chat("--user", "ada", "--mode", "陪伴", stdin="今天有点累\n")
    assert ChatSession.objects.get().mode == "companion"
    with pytest.raises(CommandError, match="unknown mode 'play'"):
        chat("--user", "ada", "--mode", "play", stdin="")
    with pytest.raises(CommandError, match="no session matches 'zz'"):
        chat("--user", "ada", "-r", "zz", stdin="")
    with pytest.raises(CommandError, match="needs OPENAI_API_KEY"):
        chat("--user", "ada", "--model", "gpt-4o", stdin="hi\n")
    with pytest.raises(CommandError, match="unknown model 'llama'"):
        chat("--user", "ada", "--model", "llama", stdin="hi\n")
    assert Message.objects.count() == 2


def test_console_exit_removes_empty_sessions(owner, make_session, llm_config):
    ChatSession.objects.create(id="s_20260101_0000_empt", owner=owner)
    kept = make_session(owner, "keep")
    chat("--user", "ada", stdin="/exit\n")
    assert list(ChatSession.objects.values_list("pk", flat=True)) == [kept.pk]


def test_a_failing_model_keeps_the_message_and_the_console_goes_on(owner, fakes):
    openai = fakes["openai"]
    for _ in range(3):
        openai.fake.reply(openai.error(503, "overloaded"), status=503)
    openai.fake.reply(openai.text("back again"))
    out = chat("--user", "ada", "--model", "gpt-4o", stdin="first try\nsecond try\n")
    session = ChatSession.objects.get()
    assert "Error: the model is unavailable right now (openai 'gpt-4o': HTTP 503" in out, out
    assert f"(your message is saved in {session.id})" in out
    assert "back again" in out
    assert list(session.messages.values_list("role", "content")) == [
        ("user", "first try"),
        ("user", "second try"),
        ("assistant", "back again"),
    ]


def test_a_database_error_mid_turn_is_one_line_and_keeps_only_the_message(
    owner, llm_config, tool_results_refused
):
    out = chat("--user", "ada", stdin="记住我喜欢喝美式咖啡\nhello\n")
    session = ChatSession.objects.get()
    lines = out.splitlines()
    assert (
        "Error: a database error interrupted the reply; your message is stored and the step it "
        "interrupted was not kept: retry on this session"
    ) in lines
    assert "(the database failed: the disk is full)" in lines
    assert f"(your message is saved in {session.id})" in lines
    # The console went on; the tool step the error interrupted left nothing behind.
    assert list(session.messages.values_list("seq", "role", "content")) == [
        (1, "user", "记住我喜欢喝美式咖啡"),
        (2, "user", "hello"),
        (3, "assistant", "Hi! I'm Ethan (offline mode)."),
    ]
    assert not Fact.objects.exists()


def test_the_console_answers_with_the_persons_own_model(owner, fakes, settings):
    """An imported config.yaml's `model` applies in the console as everywhere (the one rule
    of agent_app.turn.model_choose), unless --model says otherwise."""
    from agent_app.models import OwnerSettings

    # The session's end runs in this process, as with no broker (with one, a worker's).
    settings.ETHAN_EMBEDDED = True

    openai = fakes["openai"]
    OwnerSettings.objects.create(owner=owner, values={"model": "gpt-4o"})
    openai.fake.reply(openai.text("from gpt-4o"))
    openai.fake.reply(openai.text('{"facts": []}'))  # its end: the round's facts, on gpt-4o-mini
    out = chat("--user", "ada", stdin="hello\n")
    session = ChatSession.objects.get()
    assert out.splitlines()[0].startswith("Ethan (gpt-4o): new session")
    assert "from gpt-4o" in out and session.model == "gpt-4o"
    chat("--user", "ada", "--model", "offline", stdin="hello\n")
    assert ChatSession.objects.latest("created_at").model == "offline"
    assert [r.body["model"] for r in openai.fake.requests] == ["gpt-4o", "gpt-4o-mini"]


def test_the_reply_is_printed_as_it_streams(owner, fakes):
    openai = fakes["openai"]
    openai.fake.reply(openai.text("one two three four five six"))
    out = chat("--user", "ada", "--model", "gpt-4o", stdin="count\n")
    assert "one two three four five six\n" in out
    assert len(openai.fake.requests) == 1 and openai.fake.requests[0].streamed


def test_an_interrupted_reply_is_kept_as_shown_and_reaches_the_next_context(owner, make_session):
    from agent_app.turn import turn_interrupted
    from memory_app.working import context_assemble, context_parts

    session = make_session(owner, "tell me a story")
    turn_interrupted(session=session, shown="Once upon a")
    stopped = session.messages.get(seq=2)
    assert (stopped.role, stopped.content, stopped.interrupted) == (
        "assistant",
        "Once upon a",
        True,
    )
    session.refresh_from_db()
    parts = context_parts(session=session, current_input="go on")
    context = context_assemble(session=session, parts=parts)
    assert [(m.role, m.content) for m in context][-2:] == [
        ("assistant", "Once upon a"),
        ("user", "go on"),
    ]


# A thread's timeout: the old failure waited for ENTER, and swallowed pytest-timeout's signal.
@pytest.mark.timeout(30, method="thread")
def test_a_hang_up_inside_the_prompts_event_loop_ends_the_prompt():
    """A SIGHUP that lands while prompt_toolkit's loop runs one of its callbacks ends the
    prompt with TerminalClosed, so the console ends as /exit does; raised inside the callback,
    it was the loop's error, and prompt_toolkit waited for ENTER on a closed terminal."""
    import asyncio
    import signal

    from prompt_toolkit import PromptSession
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from channels_app.console import TerminalClosed, _hang_up

    previous = signal.signal(signal.SIGHUP, _hang_up)
    try:
        with create_pipe_input() as pipe:

            def hang_up_in_a_callback() -> None:
                asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGHUP)

            session = PromptSession(input=pipe, output=DummyOutput())
            with pytest.raises(TerminalClosed):
                session.prompt("> ", pre_run=hang_up_in_a_callback)
    finally:
        signal.signal(signal.SIGHUP, previous)
