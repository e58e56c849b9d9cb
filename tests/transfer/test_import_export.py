"""The ~/.ethan layout: import → export reproduces it; repeatable; bad files refused whole."""

from __future__ import annotations

import json
import sqlite3
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from agent_app.models import OwnerSettings
from episodes_app.models import Episode
from memory_app.models import Fact, FactEvent, Procedure
from profile_app.models import ProfileSection
from sessions_app.models import ChatSession, Message

pytestmark = pytest.mark.django_db

TOOL_CALLS = [
    {
        "id": "call_1",
        "type": "function",
        "function": {"name": "memory_write", "arguments": '{"content": "用户喜欢美式咖啡"}'},
    }
]
SESSIONS = [
    (
        "s_20260611_1753_d139",
        "记住我喜欢美式咖啡",
        "claude-sonnet-4-6",
        1749635580.5,
        1749635999.25,
    ),
    (
        "s_20260612_0151_b18c",
        "Plan the Lisbon trip",
        "gemini-2.5-flash",
        1749692000.0,
        1749692100.0,
    ),
]
MESSAGES = [
    ("s_20260611_1753_d139", "user", "记住我喜欢美式咖啡", None, None),
    ("s_20260611_1753_d139", "assistant", "", json.dumps(TOOL_CALLS, ensure_ascii=False), None),
    ("s_20260611_1753_d139", "tool", "ok", None, "call_1"),
    ("s_20260611_1753_d139", "assistant", "好的，记住了。", None, None),
    ("s_20260612_0151_b18c", "user", "Plan the Lisbon trip", None, None),
    ("s_20260612_0151_b18c", "assistant", "Sure: day one…", None, None),
]
FACTS = [
    {
        "id": "f1",
        "content": "用户喜欢美式咖啡",
        "category": "preference",
        "confidence": 0.95,
        "source": "agent_proactive",
        "created_at": 1749635600.0,
        "last_accessed": 1749700000.0,
        "hit_count": 3,
    },
    {
        "id": "f2",
        "content": "The user's sister lives in Lisbon",
        "category": "knowledge",
        "confidence": 0.8,
        "source": "consolidator",
        "created_at": 1749692050.0,
        "last_accessed": 1749692050.0,
        "hit_count": 1,
    },
]
PROCEDURES = [
    {
        "id": "p1",
        "rule": "Always reply in Chinese",
        "context": "用户明确要求",
        "created_at": 1749635700.0,
        "active": True,
    },
    {"id": "p2", "rule": "不要用韩语", "context": "", "created_at": 1749635800.0, "active": False},
]
EPISODES = [
    {
        "session_id": "s_20260612_0151_b18c",
        "summary": "讨论了里斯本旅行",
        "timestamp": 1749744812.3,
        "model": "gemini-2.5-flash-lite",
        "turn_count": 18,
        "keywords": ["里斯本", "旅行", "Lisbon"],
    },
    {
        "session_id": "s_20250101_0000_gone",
        "summary": "an old session, long deleted",
        "timestamp": 1735689600.0,
        "model": "offline",
        "turn_count": 2,
        "keywords": ["old"],
    },
]
PROFILE = (
    "# 用户画像\n\n## 基础特征\n\n- 名字：张三\n\n## 身份与背景\n\n- 后端工程师\n\n"
    "## 目标与方向\n\n- 2026 年底前完成独立产品上线\n\n## 工作与沟通方式\n\n## 心理与情绪\n\n"
    "## 个人语言与激励\n\n## 与 Agent 的约定\n\n- 周报用英文\n"
)
CONFIG = {"model": "claude-sonnet-4-6", "memory": {"hot_size": 10}}


def build_layout(home: Path, *, facts=FACTS, wrap: bool = False) -> Path:
    (home / "memory").mkdir(parents=True)
    db = sqlite3.connect(home / "sessions.db")
    db.execute("CREATE TABLE sessions (id TEXT, title TEXT, model TEXT, created_at, updated_at)")
    db.execute(
        "CREATE TABLE messages (session_id TEXT, role TEXT, content TEXT, "
        "tool_calls TEXT, tool_call_id TEXT)"
    )
    db.executemany("INSERT INTO sessions VALUES (?, ?, ?, ?, ?)", SESSIONS)
    db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?)", MESSAGES)
    db.commit()
    db.close()
    dump = (lambda key, data: {key: data}) if wrap else (lambda key, data: data)
    (home / "memory/facts.json").write_text(json.dumps(dump("facts", facts), ensure_ascii=False))
    (home / "memory/procedures.json").write_text(json.dumps(dump("procedures", PROCEDURES)))
    (home / "memory/episodes.json").write_text(json.dumps(dump("episodes", EPISODES)))
    (home / "memory/user_profile.md").write_text(PROFILE)
    (home / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    return home


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def read_db(path: Path):
    db = sqlite3.connect(path)
    try:
        sessions = db.execute("SELECT * FROM sessions ORDER BY rowid").fetchall()
        messages = db.execute("SELECT * FROM messages ORDER BY rowid").fetchall()
    finally:
        db.close()
    return sessions, messages


def without_ids(items):
    return [{k: v for k, v in item.items() if k != "id"} for item in items]


@pytest.mark.parametrize("wrap", [False, True])
def test_import_then_export_reproduces_the_layout(tmp_path, owner, wrap):
    source = build_layout(tmp_path / "in", wrap=wrap)
    out = run("ethan_import", "--home", str(source), "--user", "ada")
    assert "sessions: 2 new" in out and "messages: 6 new" in out and "facts: 2 new" in out
    assert "episodes: 2 new" in out
    session = ChatSession.objects.get(pk="s_20260611_1753_d139")
    assert (session.owner, session.channel, session.last_seq, session.round_count) == (
        owner,
        "import",
        4,
        1,
    )
    assert Message.objects.get(session=session, seq=2).tool_calls == TOOL_CALLS
    assert Fact.objects.get(content="用户喜欢美式咖啡").hit_count == 3
    assert FactEvent.objects.filter(actor="import").count() == 2
    assert Episode.objects.get(session_ref="s_20250101_0000_gone").session is None

    target = tmp_path / "out"
    run("ethan_export", "--home", str(target), "--user", "ada")
    assert read_db(target / "sessions.db") == (SESSIONS, MESSAGES)
    assert without_ids(json.loads((target / "memory/facts.json").read_text())) == without_ids(FACTS)
    assert without_ids(json.loads((target / "memory/procedures.json").read_text())) == without_ids(
        PROCEDURES
    )
    assert json.loads((target / "memory/episodes.json").read_text()) == sorted(
        EPISODES, key=lambda e: e["timestamp"]
    )
    assert (target / "memory/user_profile.md").read_text() == PROFILE
    assert yaml.safe_load((target / "config.yaml").read_text()) == CONFIG


def test_importing_twice_adds_nothing_and_a_grown_session_gets_its_new_messages(tmp_path, owner):
    source = build_layout(tmp_path / "in")
    run("ethan_import", "--home", str(source), "--user", "ada")
    again = run("ethan_import", "--home", str(source), "--user", "ada")
    assert "messages: 0 new, 6 already there" in again and "facts: 0 new, 2 already there" in again
    assert (
        ChatSession.objects.count(),
        Message.objects.count(),
        Fact.objects.count(),
        Procedure.objects.count(),
        Episode.objects.count(),
    ) == (2, 6, 2, 2, 2)
    db = sqlite3.connect(source / "sessions.db")
    db.execute(
        "INSERT INTO messages VALUES ('s_20260612_0151_b18c', 'user', '再加一天', NULL, NULL)"
    )
    db.commit()
    db.close()
    assert "messages: 1 new, 6 already there" in run(
        "ethan_import", "--home", str(source), "--user", "ada"
    )
    assert ChatSession.objects.get(pk="s_20260612_0151_b18c").round_count == 2


def test_the_profile_and_settings_apply(tmp_path, owner, llm_config):
    run("ethan_import", "--home", str(build_layout(tmp_path / "in")), "--user", "ada")
    assert ProfileSection.objects.get(owner=owner, key="basic").content == "- 名字：张三"
    assert OwnerSettings.objects.get(owner=owner).values == CONFIG
    from agent_app.turn import owner_model

    assert owner_model(owner) == "claude-sonnet-4-6"  # the imported model is their default


def _corrupt(home: Path, name: str) -> None:
    if name == "sessions.db":
        db = sqlite3.connect(home / "sessions.db")
        db.execute(
            "INSERT INTO messages VALUES ('s_20260611_1753_d139', 'narrator', 'x', NULL, NULL)"
        )
        db.commit()
        db.close()
    elif name == "facts.json":
        (home / "memory/facts.json").write_text('[{"content": "x", "confidence": 7}]')
    elif name == "procedures.json":
        (home / "memory/procedures.json").write_text('[{"rule": "x"},\n {"rule": 3}]')
    elif name == "episodes.json":
        (home / "memory/episodes.json").write_text('[{"session_id": "s", "summary": "x",\n')
    elif name == "user_profile.md":
        (home / "memory/user_profile.md").write_text("## goals\n- a\n## 目标与方向\n- b\n")
    elif name == "config.yaml":
        (home / "config.yaml").write_text("model: [gpt-4o\n")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("sessions.db", "sessions.db, messages rowid 7: role must be one of"),
        ("facts.json", "memory/facts.json, item 0: confidence must be a number from 0 to 1"),
        ("procedures.json", "memory/procedures.json, item 1: rule must be text"),
        ("episodes.json", "memory/episodes.json, line 2 column 1"),
        ("user_profile.md", "memory/user_profile.md: section 目标与方向 appears twice"),
        ("config.yaml", "config.yaml, line 2"),
    ],
)
def test_a_malformed_file_is_named_and_nothing_is_written(tmp_path, owner, name, message):
    source = build_layout(tmp_path / "in")
    _corrupt(source, name)
    with pytest.raises(CommandError, match="nothing imported") as error:
        run("ethan_import", "--home", str(source), "--user", "ada")
    assert message in str(error.value)
    assert not ChatSession.objects.exists() and not Fact.objects.exists()
    assert not Procedure.objects.exists() and not ProfileSection.objects.exists()


def test_missing_files_are_skipped_with_a_note(tmp_path, owner):
    home = tmp_path / "in"
    (home / "memory").mkdir(parents=True)
    (home / "memory/facts.json").write_text('{"facts": [{"content": "likes tea"}]}')
    out = run("ethan_import", "--home", str(home), "--user", "ada")
    assert "note: sessions.db: not found, skipped" in out
    assert "note: memory/episodes.json: not found, skipped" in out
    fact = Fact.objects.get()
    assert (fact.content, fact.category, fact.confidence, fact.source) == (
        "likes tea",
        "knowledge",
        0.8,
        "import",
    )


def test_dry_run_writes_nothing(tmp_path, owner):
    out = run(
        "ethan_import", "--home", str(build_layout(tmp_path / "in")), "--user", "ada", "--dry-run"
    )
    assert "would import for ada" in out and "messages: 6 new" in out
    assert out.rstrip().endswith("dry run: nothing was written")
    assert not ChatSession.objects.exists() and not Fact.objects.exists()


def test_another_users_session_id_refuses_the_whole_import(tmp_path, owner, other_owner):
    ChatSession.objects.create(id="s_20260612_0151_b18c", owner=other_owner)
    with pytest.raises(CommandError, match="belongs to another user"):
        run("ethan_import", "--home", str(build_layout(tmp_path / "in")), "--user", "ada")
    assert not Fact.objects.exists()


def test_export_refuses_a_folder_that_is_not_empty(tmp_path, owner):
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(CommandError, match="is not empty: nothing written"):
        run("ethan_export", "--home", str(target), "--user", "ada")
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    run("ethan_export", "--home", str(target), "--user", "ada", "--force")
    assert (target / "sessions.db").exists() and (target / "keep.txt").exists()


def test_iso_times_are_accepted(tmp_path, owner):
    home = tmp_path / "in"
    (home / "memory").mkdir(parents=True)
    (home / "memory/facts.json").write_text(
        json.dumps([{"content": "x", "created_at": "2026-06-11T17:53:00+08:00"}])
    )
    run("ethan_import", "--home", str(home), "--user", "ada")
    assert Fact.objects.get().created_at.timestamp() == 1781171580.0


@pytest.mark.parametrize(
    ("facts", "procedures", "message"),
    [
        (
            [*FACTS, {"content": "x" * 31_000}],
            PROCEDURES,
            "memory/facts.json, item 2: a fact is at most 2000 characters; this one is 31000",
        ),
        (
            FACTS,
            [*PROCEDURES, {"rule": "always " + "x" * 600}],
            "memory/procedures.json, item 2: a rule is at most 500 characters; this one is 607",
        ),
        (
            FACTS,
            [{"rule": "be brief", "context": "c" * 1001}],
            "memory/procedures.json, item 0: a rule's context is at most 1000 characters; "
            "this one is 1001",
        ),
    ],
)
def test_an_over_long_item_refuses_the_whole_import(tmp_path, owner, facts, procedures, message):
    source = build_layout(tmp_path / "in", facts=facts)
    (source / "memory/procedures.json").write_text(json.dumps(procedures))
    with pytest.raises(CommandError, match="nothing imported") as error:
        run("ethan_import", "--home", str(source), "--user", "ada")
    assert message in str(error.value)
    assert not ChatSession.objects.exists() and not Message.objects.exists()
    assert not Fact.objects.exists() and not Procedure.objects.exists()
    assert not ProfileSection.objects.exists() and not Episode.objects.exists()


def test_rules_past_the_capacity_are_imported_switched_off(tmp_path, owner):
    from memory_app.services import procedure_write

    for n in range(25):
        procedure_write(owner=owner, rule=f"rule already here {n}")
    home = tmp_path / "in"
    (home / "memory").mkdir(parents=True)
    rules = [{"rule": f"imported rule {n}"} for n in range(8)]
    rules.insert(2, {"rule": "rule already here 1"})  # known: matched, changes nothing
    rules.insert(3, {"rule": "an inactive one", "active": False})
    (home / "memory/procedures.json").write_text(json.dumps(rules))
    out = run("ethan_import", "--home", str(home), "--user", "ada")
    assert "procedures: 9 new, 1 already there" in out
    assert (
        "note: memory/procedures.json: 3 active rule(s) imported switched off: at most 30 rules "
        "are active at once (ETHAN_PROCEDURE_CAPACITY); switch one off to switch another on"
    ) in out
    imported = Procedure.objects.filter(owner=owner, source="import").order_by("id")
    assert [(p.rule, p.active) for p in imported] == [
        ("imported rule 0", True),
        ("imported rule 1", True),
        ("an inactive one", False),
        ("imported rule 2", True),
        ("imported rule 3", True),
        ("imported rule 4", True),
        ("imported rule 5", False),
        ("imported rule 6", False),
        ("imported rule 7", False),
    ]
    assert Procedure.objects.filter(owner=owner, active=True).count() == 30


def test_a_profile_that_would_pass_the_cap_refuses_the_import(tmp_path, owner):
    from profile_app.services import profile_update

    profile_update(owner=owner, section="psych", entry="p" * 99_000, mode="overwrite")
    source = build_layout(tmp_path / "in")
    profile = "## 个人语言与激励\n\n" + "w" * 5_000 + "\n"
    (source / "memory/user_profile.md").write_text(profile)
    with pytest.raises(CommandError, match="nothing imported") as error:
        run("ethan_import", "--home", str(source), "--user", "ada")
    assert "memory/user_profile.md: the profile would be" in str(error.value)
    assert not ChatSession.objects.exists() and not Fact.objects.exists()
    assert ProfileSection.objects.get(owner=owner).key == "psych"


def test_fact_sources_survive_a_round_trip_and_unknown_ones_are_noted(tmp_path, owner):
    with_sources = [
        {
            **FACTS[0],
            "sources": [
                {"session_id": "s_20260611_1753_d139", "seq": 1},
                {"session_id": "s_20250101_0000_gone", "seq": 3},  # not in the import
            ],
        },
        FACTS[1],
    ]
    source = build_layout(tmp_path / "in", facts=with_sources)
    out = run("ethan_import", "--home", str(source), "--user", "ada")
    assert "1 source(s) name a message that is not in this import" in out
    coffee = Fact.objects.get(content="用户喜欢美式咖啡")
    assert [(m.session_id, m.seq, m.content) for m in coffee.sources.all()] == [
        ("s_20260611_1753_d139", 1, "记住我喜欢美式咖啡")
    ]
    assert coffee.events.get().sources == [{"session_id": "s_20260611_1753_d139", "seq": 1}]
    assert not Fact.objects.get(content__contains="Lisbon").sources.exists()

    target = tmp_path / "out"
    run("ethan_export", "--home", str(target), "--user", "ada")
    exported = {f["content"]: f for f in json.loads((target / "memory/facts.json").read_text())}
    assert exported["用户喜欢美式咖啡"]["sources"] == [
        {"session_id": "s_20260611_1753_d139", "seq": 1}
    ]
    assert "sources" not in exported["The user's sister lives in Lisbon"]


def test_malformed_fact_sources_refuse_the_import(tmp_path, owner):
    bad = [{**FACTS[0], "sources": [{"session_id": "s_x", "seq": "one"}]}]
    source = build_layout(tmp_path / "in", facts=bad)
    with pytest.raises(CommandError, match=r"memory/facts.json, item 0: a source must be"):
        run("ethan_import", "--home", str(source), "--user", "ada")
    assert not Fact.objects.exists() and not ChatSession.objects.exists()


def _hostile_layout(home: Path, where: str, text: str) -> tuple[Path, str]:
    """The layout with `text` (a NUL or a lone surrogate) in one place; and the place as the
    refusal names it."""
    build_layout(home)
    if where == "facts":
        facts = [FACTS[0], {**FACTS[1], "content": f"sister in {text}"}]
        (home / "memory/facts.json").write_text(json.dumps(facts))
        return home, "memory/facts.json, item 1: content contains"
    if where == "procedures":
        rules = [{**PROCEDURES[0], "context": text}]
        (home / "memory/procedures.json").write_text(json.dumps(rules))
        return home, "memory/procedures.json, item 0: context contains"
    if where == "episodes":
        episodes = [{**EPISODES[0], "keywords": ["里斯本", text]}]
        (home / "memory/episodes.json").write_text(json.dumps(episodes))
        return home, "memory/episodes.json, item 0: keywords contains"
    if where == "config":
        # YAML's escapes ("\0", "\ud800") make them as JSON's do.
        escape = "\\0" if text == "\x00" else "\\ud800"
        (home / "config.yaml").write_text(f'model: "gpt-4o{escape}"\n')
        return home, "config.yaml: a value contains"
    db = sqlite3.connect(home / "sessions.db")
    if where == "message":
        db.execute("UPDATE messages SET content = ? WHERE content = 'ok'", (f"o{text}k",))
        place = "sessions.db, messages rowid 3: the content contains"
    else:  # tool calls, JSON in a text column
        calls = json.dumps([{**TOOL_CALLS[0], "id": f"call{text}"}])
        db.execute("UPDATE messages SET tool_calls = ? WHERE tool_calls IS NOT NULL", (calls,))
        place = "sessions.db, messages rowid 2: tool_calls contains"
    db.commit()
    db.close()
    return home, place


@pytest.mark.parametrize(
    ("where", "text"),
    [
        *(
            (where, text)
            for where in ("facts", "procedures", "episodes", "config", "tool_calls")
            for text in ("\x00", "\ud800")
        ),
        # (sqlite3 cannot write a lone surrogate into a text column: UTF-8 has none.)
        ("message", "\x00"),
    ],
)
def test_text_no_one_can_store_refuses_the_whole_import(tmp_path, owner, where, text):
    """A NUL (PostgreSQL cannot store it; SQLite did) or a lone surrogate (JSON's "\\ud800"),
    anywhere: one line naming the file and the place, and nothing imported."""
    named = "a NUL character (U+0000)" if text == "\x00" else "a lone surrogate (U+D800"
    source, place = _hostile_layout(tmp_path / "in", where, text)
    with pytest.raises(CommandError, match="nothing imported") as error:
        run("ethan_import", "--home", str(source), "--user", "ada")
    assert f"{place} {named}" in str(error.value)
    assert "\n" not in str(error.value)
    assert not ChatSession.objects.exists() and not Message.objects.exists()
    assert not Fact.objects.exists() and not Procedure.objects.exists()
    assert not ProfileSection.objects.exists() and not Episode.objects.exists()
    assert not OwnerSettings.objects.exists()


def test_a_profile_with_a_nul_refuses_the_whole_import(tmp_path, owner):
    """(A file of UTF-8 cannot hold a lone surrogate: it is refused as not UTF-8.)"""
    source = build_layout(tmp_path / "in")
    (source / "memory/user_profile.md").write_text(PROFILE.replace("张三", "张\x00三"))
    with pytest.raises(CommandError, match="nothing imported") as error:
        run("ethan_import", "--home", str(source), "--user", "ada")
    assert "memory/user_profile.md: the profile contains a NUL character" in str(error.value)
    assert not ChatSession.objects.exists() and not ProfileSection.objects.exists()
