"""Open WebUI 0.12.4 with its defaults, replayed: the requests it really sent to /v1 (recorded on
the wire, tests/fixtures/clients/open-webui-0.12.4/), in order, over a real socket against `ethan
serve` as `make serve` runs it (embedded: SQLite, no broker, the offline model). Its chats carry
its 36 built-in tools; beside them it asks for titles, tags, follow-ups and an autocomplete.

The replay plays the app's part: each chat's history holds the replies Ethan gave, as the app
would show and send them back, not the ones recorded."""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.web_server import Server, api_token, migrated_home, web_server

RECORDED = ROOT / "tests" / "fixtures" / "clients" / "open-webui-0.12.4"
# What a fact or a stored message must never hold: the app's task prompts and transcript markup.
MARKUP = re.compile(
    r"### Task|<chat_history>|</chat_history>|^(USER|ASSISTANT):|#### Example", re.M
)

# The JSON each housekeeping answer must be, as Open WebUI parses it (the key it reads).
SHAPES = {"title": "title", "tags": "tags", "follow_ups": "follow_ups", "autocomplete": "text"}


def _recorded() -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(RECORDED.glob("*.json"))]


def _post(server: Server, token: str, body: dict) -> tuple[int, str]:
    """The request as the app sends it; the reply's text (a stream read to its end)."""
    answer = server.request(
        "POST",
        "/v1/chat/completions",
        json.dumps(body),
        {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    if answer.status != 200:
        return answer.status, answer.text
    if not body.get("stream"):
        return 200, answer.json()["choices"][0]["message"]["content"] or ""
    text = []
    for line in answer.text.splitlines():
        if line.startswith("data: {"):
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            text += [c["delta"].get("content") or "" for c in chunk["choices"]]
    assert answer.text.rstrip().endswith("data: [DONE]")
    return 200, "".join(text)


def _rows(home: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(home / "ethan.sqlite3") as db:
        return db.execute(sql).fetchall()


def _wait(predicate, seconds: float = 90) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return predicate()


# A real server through the app's whole session and its idle close: make test-slow (CI runs it).
@pytest.mark.slow
def test_open_webui_with_its_defaults_is_answered_and_only_its_chats_are_remembered(tmp_path):
    home = migrated_home(tmp_path / "home")
    token = api_token(home, "ada")
    # Idle after 3 s, closed within half a second of it (ethan_site.periodic), and each ended
    # chat's memory written at once (no waiting for more rounds to share the call).
    env = {"ETHAN_SESSION_IDLE_MINUTES": "0.05", "ETHAN_MEMORY_END_BATCH_ROUNDS": "1"}
    answered: dict[str, str] = {}  # a chat's question → the reply the app was shown
    with web_server(home, **env) as server:
        for recorded in _recorded():
            body = json.loads(json.dumps(recorded["body"]))
            chat = recorded["kind"].startswith("chat")
            if chat:  # the app sends back the replies it was shown
                messages = body["messages"]
                for before, message in itertools.pairwise(messages):
                    if message["role"] == "assistant" and before["content"] in answered:
                        message["content"] = answered[before["content"]]
            status, text = _post(server, token, body)
            assert status == 200, (recorded["order"], recorded["kind"], text)
            if chat:
                answered[body["messages"][-1]["content"]] = text
            else:
                # The app's housekeeping: answered in the shape it asked for, stored nowhere.
                assert "### Task" not in text
                key = SHAPES[recorded["kind"]]
                assert key in json.loads(text), (recorded["kind"], text)

        stored = [content for (content,) in _rows(home, "SELECT content FROM sessions_app_message")]
        assert stored and not any(MARKUP.search(content) for content in stored)
        questions = {
            content
            for (content,) in _rows(
                home, "SELECT content FROM sessions_app_message WHERE role = 'user'"
            )
        }
        chats = {
            r["body"]["messages"][-1]["content"]
            for r in _recorded()
            if r["kind"].startswith("chat")
        }
        assert questions == chats  # every chat's question, and nothing of the tasks
        assert _rows(home, "SELECT count(*) FROM agent_app_housekeepingtally") != [(0,)]

        # Idle, closed and learnt from by the server alone: no console, no worker.
        def learnt() -> bool:
            open_sessions = _rows(
                home, "SELECT count(*) FROM sessions_app_chatsession WHERE ended_at IS NULL"
            )
            return open_sessions == [(0,)] and bool(_rows(home, "SELECT 1 FROM memory_app_fact"))

        assert _wait(learnt), server.log()[-3000:]
        assert _wait(lambda: bool(_rows(home, "SELECT 1 FROM episodes_app_episode")))
        facts = [content for (content,) in _rows(home, "SELECT content FROM memory_app_fact")]
        assert not any(MARKUP.search(fact) or "offline mode" in fact for fact in facts), facts

        status, reply = _post(
            server,
            token,
            {
                "model": "ethan",
                "stream": True,
                "messages": [{"role": "user", "content": "What do you know about me?"}],
            },
        )
    assert status == 200
    assert re.search(r"Porto|Lisbon|marine biologist|sardines|Ana", reply), reply
    assert not MARKUP.search(reply) and "Examples" not in reply, reply
