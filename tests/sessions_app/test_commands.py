from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sessions_app.models import ChatSession, Message
from tests.conftest import run_ethan

pytestmark = pytest.mark.django_db


def session_cmd(*args: str, stdin: str = "") -> str:
    out = StringIO()
    call_command("ethan_session", *args, stdout=out, stdin=StringIO(stdin))
    return out.getvalue()


def test_list_on_an_empty_database(owner):
    assert session_cmd("--user", "ada", "list") == "No sessions yet.\n"


def test_list_show_and_search(owner, other_owner, make_session):
    session = make_session(owner, "帮我规划 Q3 launch", "好的，先列目标。")
    make_session(other_owner, "grace's launch", "ok")

    listing = session_cmd("--user", "ada", "list")
    assert listing.count("\n") == 1
    assert session.id in listing and "帮我规划 Q3 launch" in listing and "2 msgs" in listing

    shown = session_cmd("--user", "ada", "show", session.id[-4:])
    assert f"id:       {session.id}" in shown
    assert "[1] user: 帮我规划 Q3 launch\n[2] assistant: 好的，先列目标。" in shown

    found = session_cmd("--user", "ada", "search", "LAUNCH")
    assert session.id in found and "grace" not in found
    assert session_cmd("--user", "ada", "search", "列目标").startswith(session.id)
    assert session_cmd("--user", "ada", "search", "nothing", "here") == (
        "Nothing matches 'nothing here'.\n"
    )


def test_unknown_and_ambiguous_ids_are_one_line_errors(owner):
    ChatSession.objects.create(id="s_20260611_1753_a139", owner=owner)
    ChatSession.objects.create(id="s_20260611_1754_b139", owner=owner)
    with pytest.raises(CommandError, match=r"^no session matches 'zzzz'$"):
        session_cmd("--user", "ada", "show", "zzzz")
    with pytest.raises(CommandError, match="ambiguous: it matches") as error:
        session_cmd("--user", "ada", "delete", "139", "--yes")
    assert "\n" not in str(error.value)
    assert ChatSession.objects.count() == 2


def test_delete_with_yes(owner, make_session):
    session = make_session(owner, "bye", "ok")
    out = session_cmd("--user", "ada", "delete", session.id, "--yes")
    assert out == f"Deleted {session.id} and its 2 messages.\n"
    assert not ChatSession.objects.exists() and not Message.objects.exists()


def test_delete_on_a_pipe_takes_a_y_line(owner, make_session):
    session = make_session(owner, "bye", "ok")
    with pytest.raises(CommandError, match="not deleted"):
        session_cmd("--user", "ada", "delete", session.id, stdin="n\n")
    with pytest.raises(CommandError, match="not deleted"):
        session_cmd("--user", "ada", "delete", session.id, stdin="")
    assert ChatSession.objects.filter(pk=session.pk).exists()
    session_cmd("--user", "ada", "delete", session.id, stdin="y\n")
    assert not ChatSession.objects.exists()


@pytest.mark.slow  # many `ethan` processes, 15-20 s: make test-slow (make test under 10 min)
def test_console_script_session_commands_on_a_fresh_home(tmp_path):
    """`ethan session list` on an empty database, then errors as exit 1 and one line."""
    listed = run_ethan(["session", "list", "--help"], tmp_path)
    assert listed.returncode == 0, listed.stderr

    # Help wrote nothing: the first command that works prepares the database.
    listed = run_ethan(["session", "--user", "ada", "list"], tmp_path)
    assert (listed.returncode, listed.stdout, listed.stderr) == (
        0,
        "No sessions yet.\n",
        "Preparing the database…\n",
    )

    chat = run_ethan(["--user", "ada"], tmp_path, stdin="我们今天聊聊记忆系统\n/exit\n")
    assert chat.returncode == 0, chat.stderr
    session_id = chat.stdout.split("Saved as ")[1].split(".")[0]

    missing = run_ethan(["session", "--user", "ada", "show", "zzzz"], tmp_path)
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert missing.stderr.strip() == "ethan session: no session matches 'zzzz'"

    refused = run_ethan(["session", "--user", "ada", "delete", session_id], tmp_path, stdin="no\n")
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    found = run_ethan(["session", "--user", "ada", "search", "记忆"], tmp_path)
    assert found.stdout.startswith(session_id)

    deleted = run_ethan(["session", "--user", "ada", "delete", session_id], tmp_path, stdin="y\n")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == f"Deleted {session_id} and its 2 messages.\n"
