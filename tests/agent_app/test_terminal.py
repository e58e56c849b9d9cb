"""The console and the delete prompt on a real pseudo-terminal, as a person uses them."""

from __future__ import annotations

import sys

import pexpect

from tests.conftest import ROOT, clean_env


def spawn(args: list[str], home) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable,
        ["-m", "ethan_site.cli", *args],
        cwd=str(ROOT),
        env=clean_env(home),
        encoding="utf-8",
        timeout=30,
    )


def test_console_on_a_terminal_then_delete_asks(tmp_path):
    console = spawn(["--user", "ada"], tmp_path)
    console.expect(r"new session (s_\d{8}_\d{4}_[a-z0-9]{4})\.")
    session_id = console.match.group(1)
    console.expect_exact("> ")
    console.sendline("你好，我叫 Ada")
    console.expect_exact(f"(saved to {session_id};")
    console.expect_exact("> ")
    console.sendline("/exit")
    console.expect_exact(f"Saved as {session_id}.")
    console.expect(pexpect.EOF)
    console.close()
    assert console.exitstatus == 0

    declined = spawn(["session", "--user", "ada", "delete", session_id[-4:]], tmp_path)
    declined.expect_exact(f"Delete {session_id} (你好，我叫 Ada, 1 messages)? [y/N] ")
    declined.sendline("")
    declined.expect(pexpect.EOF)
    declined.close()
    assert declined.exitstatus == 1

    accepted = spawn(["session", "--user", "ada", "delete", session_id[-4:]], tmp_path)
    accepted.expect_exact("[y/N] ")
    accepted.sendline("y")
    accepted.expect_exact(f"Deleted {session_id} and its 1 messages.")
    accepted.expect(pexpect.EOF)
    accepted.close()
    assert accepted.exitstatus == 0


def test_ctrl_d_leaves_the_console_cleanly(tmp_path):
    console = spawn(["--user", "ada"], tmp_path)
    console.expect_exact("> ")
    console.sendeof()
    console.expect(pexpect.EOF)
    console.close()
    assert console.exitstatus == 0
    assert "Traceback" not in console.before
