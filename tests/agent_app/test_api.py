"""POST /api/chat and GET /api/context."""

from __future__ import annotations

import pytest

from memory_app.models import Fact
from sessions_app.models import ChatSession, Message

pytestmark = pytest.mark.django_db


def test_chat_starts_and_continues_a_session(api_for, owner, llm_config):
    api = api_for(owner)
    first = api.post("/api/chat", {"message": "记住我喜欢喝美式咖啡"}, format="json")
    assert first.status_code == 200
    body = first.json()
    assert set(body) == {"session_id", "reply", "path", "model", "usage"}
    assert (body["reply"], body["path"], body["model"]) == (
        "好的，我记住了：你喜欢喝美式咖啡",
        "full",
        "offline",
    )
    assert body["usage"]["input_tokens"] > 0 and body["usage"]["output_tokens"] > 0
    session = ChatSession.objects.get(pk=body["session_id"])
    assert (session.owner, session.channel) == (owner, "api")
    assert Fact.objects.get().source == "agent_proactive"

    again = api.post(
        "/api/chat",
        {"message": "我喝什么咖啡？", "session_id": session.pk, "path": "medium", "mode": "work"},
        format="json",
    ).json()
    assert (again["session_id"], again["path"]) == (session.pk, "medium")
    assert again["reply"] == "你说过你喜欢喝美式咖啡。"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "message"),
        ({"message": "  "}, "message"),
        ({"message": "x" * 32_001}, "message"),
        ({"message": "hi", "mode": "party"}, "mode"),
        ({"message": "hi", "path": "slow"}, "path"),
        ({"message": "hi", "model": "llama"}, "model"),
        # A known model whose provider has no key: refused before anything is written.
        ({"message": "hi", "model": "claude-sonnet-4-6"}, "model"),
        ({"message": "hi", "model": "gpt-5"}, "model"),
    ],
)
def test_chat_refusals_write_nothing(api_for, owner, llm_config, payload, field):
    response = api_for(owner).post("/api/chat", payload, format="json")
    assert response.status_code == 400
    body = response.json()
    assert field in body and isinstance(body["detail"], str)
    assert not ChatSession.objects.exists() and not Message.objects.exists()


def test_a_session_whose_model_lost_its_key_is_400_and_writes_nothing(
    api_for, owner, make_session, llm_config
):
    session = make_session(owner, "hi", "hello")
    ChatSession.objects.filter(pk=session.pk).update(model="claude-sonnet-4-6")
    response = api_for(owner).post(
        "/api/chat", {"message": "again", "session_id": session.pk}, format="json"
    )
    assert response.status_code == 400
    assert "ANTHROPIC_API_KEY" in response.json()["detail"]
    assert session.messages.count() == 2


def test_chat_malformed_json_and_foreign_sessions(
    api_for, owner, other_owner, make_session, llm_config
):
    api = api_for(owner)
    broken = api.generic("POST", "/api/chat", "{not json", content_type="application/json")
    assert broken.status_code == 400 and "detail" in broken.json()
    theirs = make_session(other_owner, "secret", "ok")
    response = api.post("/api/chat", {"message": "hi", "session_id": theirs.pk}, format="json")
    assert response.status_code == 404
    assert theirs.messages.count() == 2


def test_a_model_failure_is_503_and_the_message_stays(api_for, owner, fakes):
    openai = fakes["openai"]
    for _ in range(3):
        openai.fake.reply(openai.error(503, "overloaded"), status=503)
    response = api_for(owner).post(
        "/api/chat", {"message": "hello", "model": "gpt-4o"}, format="json"
    )
    assert response.status_code == 503
    body = response.json()
    assert body["retryable"] is True and "HTTP 503" in body["detail"]
    session = ChatSession.objects.get(pk=body["session_id"])
    assert list(session.messages.values_list("role", "content")) == [("user", "hello")]

    openai.fake.reply(openai.error(401, "bad key"), status=401)
    refused = api_for(owner).post(
        "/api/chat",
        {"message": "again", "model": "gpt-4o", "session_id": session.pk},
        format="json",
    )
    assert refused.status_code == 502
    assert "OPENAI_API_KEY" in refused.json()["detail"]
    assert session.messages.count() == 2


def test_context_shows_the_next_turn_without_changing_anything(
    api_for, owner, other_owner, make_session, llm_config
):
    fact = Fact.objects.create(
        owner=owner, content="用户喜欢喝美式咖啡", content_key="k", confidence=0.9, source="admin"
    )
    before = fact.last_accessed
    session = make_session(owner, "早上好", "早！")
    api = api_for(owner)
    body = api.get("/api/context", {"session_id": session.pk, "message": "咖啡推荐？"}).json()
    assert body["path"] == "medium"
    assert "- [knowledge, 0.90] 用户喜欢喝美式咖啡" in body["system"]
    assert body["messages"] == [
        {"role": "user", "content": "早上好"},
        {"role": "assistant", "content": "早！"},
        {"role": "user", "content": "咖啡推荐？"},
    ]
    fact.refresh_from_db()
    assert fact.last_accessed == before and session.messages.count() == 2
    fresh = api.get("/api/context", {"message": "hi"}).json()
    assert (fresh["path"], fresh["messages"]) == ("fast", [{"role": "user", "content": "hi"}])
    assert ChatSession.objects.count() == 1
    assert api.get("/api/context", {"message": ""}).status_code == 400
    theirs = make_session(other_owner, "x")
    assert api.get("/api/context", {"session_id": theirs.pk, "message": "hi"}).status_code == 404


def test_schema_and_docs(client, owner):
    schema = client.get("/api/schema")
    assert schema.status_code == 200
    text = schema.content.decode()
    for path in (
        "/api/chat",
        "/api/context",
        "/api/sessions/{session_id}/messages",
        "/api/facts/{fact_id}/history",
        "/api/procedures/{procedure_id}",
        "/api/profile/sections/{key}",
        "/api/episodes",
    ):
        assert path in text, path
    docs = client.get("/api/docs")
    assert docs.status_code == 200 and b"swagger-ui" in docs.content
    assert b"cdn." not in docs.content  # served by the sidecar, works offline


def test_token_command(owner):
    from io import StringIO

    from django.core.management import CommandError, call_command
    from rest_framework.authtoken.models import Token

    out = StringIO()
    call_command("ethan_token", "ada", stdout=out)
    key = out.getvalue().strip()
    assert Token.objects.get(user=owner).key == key
    call_command("ethan_token", "ada", "--reset", stdout=out)
    assert Token.objects.get(user=owner).key != key
    out = StringIO()
    call_command("ethan_token", "--user", "ada", stdout=out)  # the same person, as elsewhere
    assert out.getvalue().strip() == Token.objects.get(user=owner).key
    with pytest.raises(CommandError, match="name one person"):
        call_command("ethan_token", "grace", "--user", "ada", stdout=out)


def test_requests_are_throttled_per_user(api_for, owner, other_owner, monkeypatch):
    from django.core.cache import cache

    from ethan_shared.throttles import PerUserThrottle

    cache.clear()
    monkeypatch.setattr(PerUserThrottle, "THROTTLE_RATES", {"user": "2/min"})
    api = api_for(owner)
    assert [api.get("/api/facts").status_code for _ in range(3)] == [200, 200, 429]
    assert api_for(other_owner).get("/api/facts").status_code == 200  # each user has their own
    cache.clear()


def test_search_endpoint_is_owner_scoped(api_for, owner, other_owner, make_session):
    from memory_app.services import fact_write

    mine = make_session(owner, "我们下个月去里斯本旅行", "好的")
    make_session(other_owner, "里斯本的秘密计划", "嘘")
    fact_write(
        owner=owner,
        content="用户的妹妹住在里斯本",
        category="knowledge",
        confidence=0.9,
        source="api",
    )
    api = api_for(owner)
    hits = api.get("/api/search", {"q": "里斯本", "scope": "all", "limit": 10}).json()
    assert {(h["kind"], h["session_id"]) for h in hits} == {("message", mine.pk), ("fact", None)}
    assert set(hits[0]) == {"kind", "id", "session_id", "seq", "content", "score", "created_at"}
    messages = api.get("/api/search", {"q": "里斯本", "scope": "messages"}).json()
    # The reply is found too: a message is indexed with the turn before it.
    assert [(h["kind"], h["seq"]) for h in messages] == [("message", 1), ("message", 2)]
    assert api_for(other_owner).get("/api/search", {"q": "妹妹"}).json() == []
    assert api.get("/api/search", {"q": "x", "scope": "everything"}).status_code == 400
    assert api.get("/api/search").status_code == 400


def test_memory_search_tool_through_a_provider(owner, other_owner, fakes, make_session):
    from channels_app.turns import turn_run

    old = make_session(owner, "我的自行车是红色的", "记住了")
    make_session(other_owner, "我的自行车是蓝色的", "好")
    openai = fakes["openai"]
    openai.fake.reply(
        openai.fake.tool_calls(
            ("s1", "memory_search", {"query": "自行车 颜色", "scope": "messages", "limit": 3})
        )
    )
    openai.fake.reply(openai.text("你的自行车是红色的。"))
    result = turn_run(
        owner=owner, session=None, text="我之前说过我的自行车是什么颜色吗？", model="gpt-4o"
    )
    assert result.reply == "你的自行车是红色的。"
    tool_result = result.session.messages.get(role="tool").content
    assert tool_result.startswith(f"[message {old.pk} #1 ")
    assert "我的自行车是红色的" in tool_result and "蓝色" not in tool_result
