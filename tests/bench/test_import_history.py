"""The import benchmark's generated export at a tiny size, on the test database (nothing is
recorded): it parses as a ChatGPT export with the conversations and rounds it says, and its
table reads."""

from __future__ import annotations

from bench import import_history
from sessions_app.imports.services import export_check, export_import


def test_the_generated_export_imports_with_its_branches_and_parts(tmp_path, owner):
    path = tmp_path / "conversations.json"
    assert import_history.write_export(path, 10) > 0
    check = export_check(path, source="chatgpt")
    rounds = sum(import_history.rounds_of(n) for n in range(10))
    assert (check.conversations, check.rounds, check.messages) == (10, rounds, 2 * rounds)
    report = export_import(owner=owner, path=path, source="chatgpt")
    assert (report.sessions_created, report.messages_created) == (10, 2 * rounds)
    first = owner.chat_sessions.get(external_id="chatgpt:bench-0").messages.order_by("seq")
    # Conversation 0: its first question edited (the first try left behind), with an image.
    assert first[0].content.startswith("[image]\nI live in Lisbon")
    assert "(first try)" not in " ".join(message.content for message in first)


def test_the_table():
    row = {
        "conversations": 5_000,
        "messages": 60_000,
        "export_mb": 30.0,
        "import_s": 20.0,
        "reimport_s": 5.0,
        "reimport_added": 0,
        "rss_before_mb": 100,
        "rss_peak_mb": 110,
        "estimate": [5_000, 30_000, 6_000, 3_000_000],
        "learnt_sessions": 500,
        "learnt_rounds": 3_000,
        "learnt_calls": 600,
        "learn_s": 10.0,
        "facts": 42,
    }
    shown = import_history.table([row])
    assert "| 5,000 | 60,000 | 30.0 | 20.0 | 250 | 3,000 | 5.0 (0) | 100 → 110 |" in shown
    assert "| 5,000 imported | 500 | 3,000 | 600 | 10.0 | 50.0 | 300 | 42 |" in shown
    assert "about 6,000 compression-model calls reading about 3,000,000 tokens" in shown
