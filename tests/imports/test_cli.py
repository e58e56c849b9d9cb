"""`ethan import --from chatgpt|claude PATH` as a person runs it: the import, the estimate and
the learning in one command (embedded), the same file again adding nothing, a bad file
refused in one line, and the original layout import beside it."""

from __future__ import annotations

import json
import sqlite3
import sys

import pexpect
import pytest

from tests.conftest import ROOT, clean_env, run_ethan
from tests.imports.exports import ChatGPT, claude, write_json, write_zip


def rows(home, sql: str) -> list[tuple]:
    with sqlite3.connect(home / "ethan.sqlite3") as db:
        return db.execute(sql).fetchall()


def refusal(ran) -> str:
    """What the command said on stderr, past a fresh home's one line of preparation."""
    return ran.stderr.removeprefix("Preparing the database…\n")


def ethan(args: list[str], home):
    return run_ethan([*args, "--user", "ada"], home, ETHAN_MODEL="offline")


def test_a_chatgpt_export_is_imported_and_learnt_from(tmp_path):
    home = tmp_path / "home"
    chats = [
        ChatGPT("c-1", "Moving").exchange(("I live in Lisbon", "Lovely."), ("Thanks", "Any time.")),
        ChatGPT("c-2", "Cooking").exchange(("I prefer vegetarian food", "Noted.")),
    ]
    export = write_zip(tmp_path / "chatgpt-export.zip", [chat.export() for chat in chats])
    ran = ethan(["import", "--from", "chatgpt", str(export)], home)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == (
        "imported for ada from chatgpt-export.zip: 2 conversations, 2 new, 6 new messages, "
        "0 already there"
    )
    # Two short conversations: their ends share one call.
    assert lines[1].startswith(
        "to learn: 2 conversations, 3 rounds: about 1 compression-model call reading"
    )
    assert lines[2] == "learnt from 2 conversations"
    assert rows(home, "SELECT channel, title FROM sessions_app_chatsession ORDER BY title") == [
        ("import", "Cooking"),
        ("import", "Moving"),
    ]
    facts = rows(home, "SELECT content FROM memory_app_fact")
    assert any("Lisbon" in content for (content,) in facts), facts

    again = ethan(["import", "--from", "chatgpt", str(export)], home)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "imported for ada from chatgpt-export.zip: 2 conversations, 0 new, 0 new messages, "
        "2 already there",
        "nothing new to learn",
    ]
    assert rows(home, "SELECT count(*) FROM memory_app_fact") == [(len(facts),)]


def test_no_learn_then_learn(tmp_path):
    home = tmp_path / "home"
    conversation = claude("u-1", "Hi", [("human", "I work as a nurse"), ("assistant", "Noted.")])
    export = write_json(tmp_path / "conversations.json", [conversation])
    ran = ethan(["import", "--from", "claude", str(export), "--no-learn"], home)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-1].startswith("not learning from them now (--no-learn)")
    assert rows(home, "SELECT count(*) FROM memory_app_fact") == [(0,)]
    learnt = ethan(["import", "--learn"], home)
    assert learnt.returncode == 0, learnt.stderr
    assert learnt.stdout.splitlines()[-1] == "learnt from 1 conversations"
    assert rows(home, "SELECT count(*) FROM memory_app_fact") != [(0,)]


def test_a_bad_file_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    home = tmp_path / "home"
    broken = tmp_path / "conversations.json"
    good = ChatGPT("c-1", "x").exchange(("a", "b")).export()
    broken.write_text(f'[{json.dumps(good)}, {{"title": ')
    ran = ethan(["import", "--from", "chatgpt", str(broken)], home)
    assert ran.returncode == 1
    assert refusal(ran) == (
        "ethan import: nothing imported: conversations.json: broken JSON in conversation 2 "
        "(parse error: premature EOF)\n"
    )
    assert rows(home, "SELECT count(*) FROM sessions_app_chatsession") == [(0,)]
    wrong = ethan(["import", "--from", "claude", str(write_json(broken, [good]))], home)
    assert wrong.returncode == 1
    assert wrong.stderr == (
        "ethan import: nothing imported: conversations.json: not a claude export: conversation "
        "1 has no uuid and no chat_messages; it looks like a chatgpt export: --from chatgpt\n"
    )
    missing = ethan(["import", "--from", "claude", str(tmp_path / "nope.zip")], home)
    assert (missing.returncode, missing.stderr) == (
        1,
        "ethan import: nothing imported: nope.zip: no such file\n",
    )
    no_source = ethan(["import", str(broken)], home)
    assert no_source.returncode == 1
    assert "needs --from chatgpt or --from claude" in no_source.stderr


def test_progress_bars_on_a_terminal(tmp_path):
    home = tmp_path / "home"
    chats = [ChatGPT(f"c-{n}", f"t{n}").exchange((f"I like tea {n}", "ok")) for n in range(3)]
    export = write_json(tmp_path / "conversations.json", [chat.export() for chat in chats])
    shown = pexpect.spawn(
        sys.executable,
        ["-m", "ethan_site.cli", "import", "--from", "chatgpt", str(export), "--user", "ada"],
        cwd=str(ROOT),
        env=clean_env(home, ETHAN_MODEL="offline", TERM="xterm"),
        encoding="utf-8",
        timeout=60,
        dimensions=(30, 120),
    )
    shown.expect(r"conversations .*3/3")
    shown.expect("to learn: 3 conversations")
    shown.expect(r"learning .*3/3")
    shown.expect("learnt from 3 conversations")
    shown.expect(pexpect.EOF)
    shown.close()
    assert shown.exitstatus == 0


def test_a_dry_run_reads_the_whole_export_and_writes_nothing(tmp_path):
    home = tmp_path / "home"
    chats = [ChatGPT("c-1", "x").exchange(("a", "b"), ("c", "d")).export()]
    export = write_json(tmp_path / "conversations.json", chats)
    ran = ethan(["import", "--from", "chatgpt", str(export), "--dry-run"], home)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == (
        "conversations.json holds 1 conversations, 4 messages, 2 rounds; dry run: nothing was "
        "written\n"
    )
    assert rows(home, "SELECT count(*) FROM sessions_app_chatsession") == [(0,)]


# A process loading the embedder's weights: make test-slow.
@pytest.mark.slow
def test_an_import_writes_its_vectors_when_the_embedder_is_on(tmp_path):
    """Embedded, `ethan import` embeds what it imported (search by meaning) before learning;
    nothing is embedded with the embedder off (the other tests here)."""
    home = tmp_path / "home"
    chats = [ChatGPT("c-1", "Hobbies").exchange(("I play Zelda on weekends", "Fun!"))]
    export = write_zip(tmp_path / "chatgpt-export.zip", [chat.export() for chat in chats])
    ran = run_ethan(
        ["import", "--from", "chatgpt", str(export), "--user", "ada"],
        home,
        ETHAN_MODEL="offline",
        ETHAN_EMBEDDER="default",
    )
    assert ran.returncode == 0, ran.stderr
    assert "embedded 2 messages for search by meaning" in ran.stdout.splitlines()
    assert rows(home, "SELECT DISTINCT embedding_model FROM sessions_app_message") == [
        ("use-multilingual-v3",)
    ]
