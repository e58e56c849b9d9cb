"""`ethan import --from` on hostile and broken exports, as a person runs it: a file past the
limits is refused in one line naming it (exit 1, nothing written); an export with broken
conversations among good ones imports the good ones, prints a line for each broken one and
their count, and exits 0; exit 1 only when no conversation could be read."""

from __future__ import annotations

import json
import sqlite3
import zipfile

from tests.conftest import run_ethan
from tests.imports.exports import ChatGPT, claude, write_json


def ethan(args: list[str], home, **env: str):
    return run_ethan([*args, "--user", "ada", "--no-learn"], home, ETHAN_MODEL="offline", **env)


def sessions(home) -> int:
    with sqlite3.connect(home / "ethan.sqlite3") as db:
        return db.execute("SELECT count(*) FROM sessions_app_chatsession").fetchone()[0]


def last_line(ran) -> str:
    """The refusal: the last line on stderr (a fresh home says first that it prepares it)."""
    return ran.stderr.strip().splitlines()[-1]


def test_files_past_the_limits_are_refused_in_one_line_naming_them(tmp_path):
    home = tmp_path / "home"
    good = claude("u-1", "Home", [("human", "I live in Lisbon"), ("assistant", "Lovely")])
    text = json.dumps([good])
    deep = tmp_path / "deep.json"
    deep.write_text(text[:-2] + ', "junk": ' + "[" * 40_000 + "]" * 40_000 + "}]")
    ran = ethan(["import", "--from", "claude", str(deep)], home)
    assert ran.returncode == 1
    assert last_line(ran).endswith(
        "nothing imported: deep.json: refused: nested deeper than 64 levels (no real export "
        "has one)"
    )
    # A zip bomb: a 40 MB message of one letter in a zip of about 40 KB.
    good["chat_messages"][0]["text"] = "a" * (40 * 1_048_576)
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("conversations.json", json.dumps([good]))
    ran = ethan(["import", "--from", "claude", str(bomb)], home)
    assert ran.returncode == 1
    assert "nothing imported: bomb.zip: refused: conversations.json inflates " in last_line(ran)
    # Past a smaller expanded size, set as a person would.
    ran = ethan(["import", "--from", "claude", str(bomb)], home, ETHAN_IMPORT_MAX_RATIO="100000")
    assert last_line(ran).endswith(
        "nothing imported: bomb.zip: refused: a value over 16 MB (no real export has one)"
    )
    # An integer of 5,000 digits crashed the reader's process (yajl2_c): now broken JSON.
    huge = tmp_path / "huge.json"
    huge.write_text(text[:-2] + ', "n": ' + "1" * 5000 + "}]")
    ran = ethan(["import", "--from", "claude", str(huge)], home)
    assert ran.returncode == 1
    assert last_line(ran).endswith(
        "nothing imported: huge.json: broken JSON in conversation 1 (parse error: integer overflow)"
    )
    assert sessions(home) == 0


def test_broken_conversations_are_skipped_and_the_rest_imported(tmp_path):
    home = tmp_path / "home"
    good = [ChatGPT(f"c-{n}", f"Chat {n}").exchange(("hi", "hello")).export() for n in range(2)]
    lost = {"id": "c-lost", "title": "Lost", "create_time": 1.7e9}  # no mapping
    path = write_json(tmp_path / "conversations.json", [good[0], lost, 42, good[1]])
    ran = ethan(["import", "--from", "chatgpt", str(path)], home)
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.strip().splitlines()[-2:] == [
        "conversations.json: skipped conversation 2 ('Lost'): it has no mapping of messages",
        "conversations.json: skipped conversation 3: it is not an object",
    ]
    assert (
        "from conversations.json: 2 conversations, 2 new, 4 new messages, 0 already there, "
        "2 skipped (could not be read)" in ran.stdout
    )
    assert sessions(home) == 2
    dry = ethan(["import", "--from", "chatgpt", str(path), "--dry-run"], home)
    assert dry.returncode == 0
    assert "2 skipped (could not be read); dry run" in dry.stdout

    nothing = write_json(tmp_path / "c.json", [lost, 42])
    ran = ethan(["import", "--from", "chatgpt", str(nothing)], home)
    assert ran.returncode == 1
    assert last_line(ran).endswith(
        "nothing imported: c.json: no conversation could be read: conversation 1 ('Lost') has "
        "no mapping of messages (and 1 more like it)"
    )
    assert sessions(home) == 2
