"""The console and the delete prompt on a real pseudo-terminal, as a person uses them."""

from __future__ import annotations

import io
import sqlite3
import sys

import pexpect
import pytest

from tests.conftest import ROOT, clean_env
from tests.web_server import migrated_home


@pytest.fixture(autouse=True)
def _migrated(tmp_path):
    """Each test's home (tmp_path) with its tables made, a copy (migrated_home): what is tested
    here is the terminal, not a fresh home's preparation (tests/transfer/test_fresh_home.py),
    which took most of each test's CPU."""
    migrated_home(tmp_path)


def spawn(args: list[str], home) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable,
        ["-m", "ethan_site.cli", *args],
        cwd=str(ROOT),
        env=clean_env(home),
        encoding="utf-8",
        timeout=30,
    )


def spawn_on(fake, home) -> pexpect.spawn:
    """The console on gpt-4o, served by the OpenAI fake `fake`, on a real terminal."""
    return pexpect.spawn(
        sys.executable,
        ["-m", "ethan_site.cli", "--user", "ada", "--model", "gpt-4o"],
        cwd=str(ROOT),
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 120),
        env=clean_env(
            home,
            PROMPT_TOOLKIT_NO_CPR="1",
            TERM="xterm",
            OPENAI_API_KEY="test-key",
            OPENAI_BASE_URL=f"{fake.url}/v1",
        ),
    )


def leave(console: pexpect.spawn) -> None:
    """/exit at the next prompt; the console ends cleanly."""
    console.expect(PROMPT)
    console.send("/exit\r")
    console.expect(pexpect.EOF)
    console.close()
    assert console.exitstatus == 0


def watch(console: pexpect.spawn):
    """What a person would see: every byte the console writes, replayed on a terminal
    emulator of its size. Returns a function giving the screen's lines (scrolled-off ones
    first), right spaces trimmed."""
    import pyte

    rows, columns = console.getwinsize()
    screen = pyte.HistoryScreen(columns, rows, history=1000)
    stream = pyte.Stream(screen)
    written = io.StringIO()
    console.logfile_read = written

    def lines() -> list[str]:
        stream.feed(written.getvalue())
        written.seek(0)
        written.truncate()
        scrolled = ["".join(line[x].data for x in range(columns)) for line in screen.history.top]
        return [line.rstrip() for line in [*scrolled, *screen.display]]

    return lines


def stored(home, session_id: str, columns: str) -> list[tuple]:
    """A session's messages in order, read from the console's SQLite file."""
    with sqlite3.connect(home / "ethan.sqlite3") as db:
        return db.execute(
            f"SELECT {columns} FROM sessions_app_message WHERE session_id = ? ORDER BY seq",
            (session_id,),
        ).fetchall()


# prompt_toolkit draws its "> " prompt with cursor moves and ends by showing the cursor; only
# then is the terminal surely in raw mode (entering it discards keys typed earlier).
PROMPT = r"\x1b\[\?2004h.*?>.*?\x1b\[\?25h"


def test_console_on_a_terminal_then_delete_asks(tmp_path):
    console = spawn(["--user", "ada"], tmp_path)
    console.expect(r"new session (s_\d{8}_\d{4}_[a-z0-9]{4})\.")
    session_id = console.match.group(1)
    console.expect(PROMPT)
    console.send("你好，我叫 Ada\r")  # Enter is a carriage return in raw mode
    # The offline model calls profile_update, then confirms (rendered by rich).
    console.expect_exact("好的，已更新你的画像（基础特征）：名字：Ada")
    console.expect(PROMPT)
    console.send("/exit\r")
    console.expect_exact(f"Saved as {session_id}.")
    console.expect(pexpect.EOF)
    console.close()
    assert console.exitstatus == 0

    declined = spawn(["session", "--user", "ada", "delete", session_id[-4:]], tmp_path)
    declined.expect_exact(f"Delete {session_id} (你好，我叫 Ada, 4 messages)? [y/N] ")
    declined.sendline("")
    declined.expect(pexpect.EOF)
    declined.close()
    assert declined.exitstatus == 1

    accepted = spawn(["session", "--user", "ada", "delete", session_id[-4:]], tmp_path)
    accepted.expect_exact("[y/N] ")
    accepted.sendline("y")
    accepted.expect_exact(f"Deleted {session_id} and its 4 messages.")
    accepted.expect(pexpect.EOF)
    accepted.close()
    assert accepted.exitstatus == 0


def test_ctrl_d_leaves_the_console_cleanly(tmp_path):
    console = spawn(["--user", "ada"], tmp_path)
    console.expect(PROMPT)
    console.sendeof()
    console.expect(pexpect.EOF)
    console.close()
    assert console.exitstatus == 0
    assert "Traceback" not in console.before


def test_ctrl_c_during_a_model_call_keeps_the_message(tmp_path):
    """A slow model (the OpenAI fake waits 10 s) interrupted with Ctrl-C."""
    from tests.fakes.openai_fake import FakeOpenAI

    fake = FakeOpenAI()
    fake.reply(FakeOpenAI.text("too late"), delay=10)
    try:
        console = spawn_on(fake, tmp_path)
        console.expect(PROMPT)
        console.send("a question that takes long\r")
        # The request reached the model, which answers 10 s later: Ctrl-C lands during the
        # call however long the turn took to get there on a loaded machine (a Ctrl-C before
        # it cancels the question, "nothing was saved").
        deadline = 300
        while not fake.requests and deadline:
            console.expect([pexpect.TIMEOUT], timeout=0.1)
            deadline -= 1
        assert fake.requests, "the model was never called"
        console.sendintr()
        console.expect(r"\(cancelled; your message is saved in (s_\w+)\)")
        session_id = console.match.group(1)
        leave(console)
    finally:
        fake.close()
    rows = stored(tmp_path, session_id, "role, content")
    assert rows == [("user", "a question that takes long")]


def test_ctrl_c_while_the_reply_streams_keeps_what_was_shown(tmp_path):
    """A slowly streamed reply stopped half-way: what the person saw is the stored reply,
    marked interrupted, shown once on the screen, and the console goes on."""
    from tests.fakes.openai_fake import FakeOpenAI

    fake = FakeOpenAI()
    words = " ".join(f"word{n:02d}" for n in range(60))
    # 30 s to write the reply: Ctrl-C, sent once word03 is on the screen, lands while it is
    # still being written even when the test is slow to read the screen on a loaded machine.
    fake.reply(FakeOpenAI.text(words), first_chunk_ms=10, chunk_ms=500)
    try:
        console = spawn_on(fake, tmp_path)
        screen = watch(console)
        console.expect(PROMPT)
        console.send("a long answer please\r")
        console.expect("word03")  # the reply is on screen, and still being written
        console.sendintr()
        console.expect(r"\(stopped; the reply so far is saved in (s_\w+)\)")
        session_id = console.match.group(1)
        leave(console)
    finally:
        fake.close()
    rows = stored(tmp_path, session_id, "role, content, interrupted")
    [(user_role, question, _), (role, shown, interrupted)] = rows
    assert (user_role, question, role, interrupted) == (
        "user",
        "a long answer please",
        "assistant",
        1,
    )
    assert words.startswith(shown) and "word03" in shown and shown != words
    # On the screen (a terminal emulator replaying every byte the console wrote), the reply
    # so far appears once, with the stopped line right under it: not redrawn a second time
    # below the "^C" the terminal echoed, nor pushed off by it.
    lines = screen()
    at = next(n for n, line in enumerate(lines) if line.startswith("word00"))
    stopped = next(n for n, line in enumerate(lines) if line.startswith("(stopped; the reply"))
    assert "\n".join(lines).count("word00") == 1
    assert " ".join(lines[at:stopped]).split() == shown.split()


def test_a_reply_taller_than_the_terminal_is_shown_once(tmp_path):
    """Sixty paragraphs on a forty-row terminal: while it streams the console shows its end,
    and the scrollback then holds the whole reply once, in order."""
    from tests.fakes.openai_fake import FakeOpenAI

    fake = FakeOpenAI()
    paragraphs = [f"paragraph{n:02d} of a long reply" for n in range(60)]
    fake.reply(FakeOpenAI.text("\n\n".join(paragraphs)), first_chunk_ms=10, chunk_ms=5)
    try:
        console = spawn_on(fake, tmp_path)
        screen = watch(console)
        console.expect(PROMPT)
        console.send("a long answer please\r")
        console.expect_exact("paragraph59")
        leave(console)
    finally:
        fake.close()
    shown = [line for line in screen() if line.startswith("paragraph")]
    assert shown == paragraphs
