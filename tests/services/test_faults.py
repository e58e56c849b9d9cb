"""Faults against the real services (PostgreSQL, Redis, Celery worker processes): what a person
keeps when Redis goes away, the model is unavailable, the database fails in the middle of a
turn, or two clients chat on one session at once."""

from __future__ import annotations

import logging
import time

import psycopg
import pytest
from django.db import connection

from ethan_site.celery import app as celery_app
from memory_app.models import Fact, FactEvent, Summary
from memory_app.tasks import consolidation_catch_up_task
from sessions_app.models import ChatSession, Message
from tests.fakes.base import Reply
from tests.fakes.openai_fake import FakeOpenAI, MiniModel
from tests.services.conftest import wait_for

# Working memory small enough that every round past the first is due for a summary.
SMALL = {
    "ETHAN_MEMORY_HOT_SIZE": "1",
    "ETHAN_MEMORY_COMPRESS_BATCH": "1",
    "ETHAN_MEMORY_WARM_CAPACITY": "1000",
}


@pytest.fixture
def redis_down(monkeypatch):
    """The broker unreachable (nothing listens on port 1) until `restore()` is called."""
    old_url = celery_app.conf.broker_url
    down = "redis://127.0.0.1:1/0"

    def use(url: str) -> None:
        monkeypatch.setenv("CELERY_BROKER_URL", url)
        celery_app.conf.broker_url = url
        # Connections and producers already open to the real broker are dropped.
        celery_app._pool = None
        celery_app.amqp._producer_pool = None

    use(down)
    yield lambda: use(old_url)
    use(old_url)


@pytest.mark.django_db(transaction=True)
def test_redis_down_chats_still_answer_and_consolidation_catches_up_later(
    services_ready, redis_down, api_for, owner, settings, llm_config, client, caplog
):
    settings.ETHAN_MEMORY_HOT_SIZE, settings.ETHAN_MEMORY_COMPRESS_BATCH = 1, 1
    api = api_for(owner)
    session_id = None
    started = time.monotonic()
    caplog.set_level(logging.WARNING, logger="ethan_shared.queue")
    for n in range(4):
        body = {
            "message": f"我们聊第{n + 1}个话题",
            **({"session_id": session_id} if session_id else {}),
        }
        response = api.post("/api/chat", body, format="json")
        assert response.status_code == 200, response.content
        session_id = response.json()["session_id"]
    # The replies did not wait on the dead broker for long (publishing gives up quickly).
    assert time.monotonic() - started < 30
    assert Message.objects.filter(session_id=session_id).count() == 8
    assert not Summary.objects.exists()  # nothing could be queued
    assert "broker unavailable, memory.consolidate_session" in caplog.text
    health = client.get("/healthz")
    assert health.status_code == 503 and health.json()["broker"].startswith("error")

    redis_down()  # Redis is back: the sweep finds the session left behind
    assert consolidation_catch_up_task() == 1
    session = ChatSession.objects.get(pk=session_id)
    assert list(
        Summary.objects.filter(session=session)
        .order_by("first_round")
        .values_list("first_round", "last_round")
    ) == [(1, 1), (2, 2), (3, 3)]
    assert consolidation_catch_up_task() == 0  # nothing left to do


@pytest.mark.django_db(transaction=True)
def test_two_clients_chatting_on_one_session_at_once_lose_no_turn(
    services_ready, owner, make_session, llm_config
):
    import threading

    from django.db import connection

    from channels_app.turns import turn_run

    session = make_session(owner, "开始吧", "好的")
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def chat(name: str) -> None:
        try:
            mine = ChatSession.objects.get(pk=session.pk)
            barrier.wait()
            for n in range(5):
                turn_run(owner=owner, session=mine, text=f"{name} 的第{n}条消息", model="offline")
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=chat, args=(name,)) for name in ("甲", "乙")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    rows = list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "content")
    )
    assert [seq for seq, _role, _content in rows] == list(range(1, 23))  # gap-free
    said = [content for _seq, role, content in rows if role == "user"]
    for name in ("甲", "乙"):  # every turn kept, each client's in its own order
        assert [c for c in said if c.startswith(name)] == [
            f"{name} 的第{n}条消息" for n in range(5)
        ]
    assert sum(1 for _seq, role, _content in rows if role == "assistant") == 11
    assert ChatSession.objects.get(pk=session.pk).round_count == 11
    # One turn at a time: every user message is followed at once by its own reply (the offline
    # model acknowledges the newest user message of its context).
    assert [role for _seq, role, _content in rows] == ["user", "assistant"] * 11
    for (_seq, _role, asked), (_next, _reply_role, reply) in zip(
        rows[2::2], rows[3::2], strict=True
    ):
        assert reply == f"（离线模式）收到：{asked}"


def _messages(session_id: str) -> list[tuple[int, str, str]]:
    return list(
        Message.objects.filter(session_id=session_id)
        .order_by("seq")
        .values_list("seq", "role", "content")
    )


def _summaries(session_id: str) -> list[tuple[int, int]]:
    return list(
        Summary.objects.filter(session_id=session_id)
        .order_by("first_round")
        .values_list("first_round", "last_round")
    )


class OutageModel(MiniModel):
    """MiniModel behind a switch: while `down`, every request (chat or compression) gets the 503
    a provider sends when it is overloaded."""

    def __init__(self, fake: FakeOpenAI) -> None:
        super().__init__()
        self.fake = fake
        self.down = False
        self.refused: list[str] = []  # the models of the requests refused

    def __call__(self, recorded):
        if self.down:
            self.refused.append(recorded.body["model"])
            return Reply(503, self.fake.error_body(503, "The server is overloaded"))
        return super().__call__(recorded)


@pytest.fixture
def outage_model(llm_config):
    """The OpenAI fake answering gpt-4o chats and gpt-4o-mini compression, with a switch."""
    fake = FakeOpenAI()
    fake.model = OutageModel(fake)
    fake.responder = fake.model
    fake.env = {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": f"{fake.url}/v1"}
    llm_config.configure(env=fake.env)
    yield fake
    fake.close()


@pytest.mark.django_db(transaction=True)
def test_model_unavailable_for_a_while_stores_every_message_answers_503_and_catches_up(
    workers, outage_model, api_for, owner, settings
):
    settings.ETHAN_MEMORY_HOT_SIZE, settings.ETHAN_MEMORY_COMPRESS_BATCH = 1, 1
    model = outage_model.model
    workers.start("memory", **SMALL, **outage_model.env, ETHAN_MODEL_RETRIES="0")
    api = api_for(owner)

    def chat(text: str, session_id: str | None = None):
        body = {"message": text, "model": "gpt-4o"}
        if session_id:
            body["session_id"] = session_id
        return api.post("/api/chat", body, format="json")

    first = chat("第1条：我们聊聊旅行计划")
    assert first.status_code == 200, first.content
    session_id = first.json()["session_id"]

    model.down = True
    refused = [chat(f"第{n}条：模型不在的时候说的话", session_id) for n in (2, 3)]
    elsewhere = chat("另一个会话：模型不在时的第一句")
    for response, expected_session in zip(
        [*refused, elsewhere], [session_id, session_id, None], strict=True
    ):
        assert response.status_code == 503, response.content
        body = response.json()
        assert body["retryable"] is True and "unavailable" in body["detail"], body
        assert body["session_id"] == (expected_session or body["session_id"]), body
    other_session = elsewhere.json()["session_id"]
    assert other_session != session_id
    # The worker tried to consolidate during the outage (rounds 1 and 2 left the hot zone),
    # was refused, and wrote nothing.
    assert wait_for(lambda: "gpt-4o-mini" in model.refused, timeout=30)
    assert not Summary.objects.exists()

    model.down = False  # the provider is back: the task's own retry catches up, untriggered
    assert wait_for(lambda: _summaries(session_id) == [(1, 1), (2, 2)], timeout=60), _summaries(
        session_id
    )
    last = chat("第4条：模型回来了", session_id)
    assert last.status_code == 200, last.content
    assert wait_for(lambda: _summaries(session_id) == [(1, 1), (2, 2), (3, 3)], timeout=60)

    # Nothing lost: every message stored in order, the unanswered rounds summarised too.
    assert [(seq, role) for seq, role, _text in _messages(session_id)] == [
        (1, "user"),
        (2, "assistant"),
        (3, "user"),
        (4, "user"),
        (5, "user"),
        (6, "assistant"),
    ]
    assert [text for _seq, role, text in _messages(session_id) if role == "user"] == [
        "第1条：我们聊聊旅行计划",
        "第2条：模型不在的时候说的话",
        "第3条：模型不在的时候说的话",
        "第4条：模型回来了",
    ]
    assert _messages(other_session) == [(1, "user", "另一个会话：模型不在时的第一句")]
    summarised = [
        request.body["messages"][-1]["content"]
        for request in outage_model.requests
        if request.body["model"] == "gpt-4o-mini"
    ]
    for n in (2, 3):  # the rounds nobody answered reached the compression model once back
        assert any(f"第{n}条" in prompt for prompt in summarised[-3:]), summarised
    assert ChatSession.objects.get(pk=session_id).round_count == 4


@pytest.mark.django_db(transaction=True)
def test_a_database_error_in_a_tool_step_keeps_the_message_and_nothing_of_the_step(
    services_ready, tool_results_refused, api_for, owner, llm_config
):
    api = api_for(owner)
    said = "记住我喜欢喝美式咖啡"
    response = api.post("/api/chat", {"message": said, "model": "offline"}, format="json")

    assert response.status_code == 503, response.content
    session_id = response.json()["session_id"]
    assert response.json() == {
        "detail": "a database error interrupted the reply; your message is stored and the "
        "step it interrupted was not kept: retry on this session",
        "session_id": session_id,
        "retryable": True,
    }
    # Only the message: no assistant tool call without its result, no fact from the tool.
    assert _messages(session_id) == [(1, "user", said)]
    session = ChatSession.objects.get(pk=session_id)
    assert (session.last_seq, session.round_count) == (1, 1)
    assert not Fact.objects.exists() and not FactEvent.objects.exists()

    tool_results_refused()  # the disk has room again: the retry goes through whole
    retry = api.post(
        "/api/chat", {"message": said, "session_id": session_id, "model": "offline"}, format="json"
    )
    assert retry.status_code == 200, retry.content
    assert [(seq, role) for seq, role, _text in _messages(session_id)] == [
        (1, "user"),
        (2, "user"),
        (3, "assistant"),
        (4, "tool"),
        (5, "assistant"),
    ]
    fact = Fact.objects.get()
    assert (fact.content, fact.source, fact.message.seq) == (
        "用户喜欢喝美式咖啡",
        Fact.Source.AGENT_PROACTIVE,
        3,
    )
    assert list(FactEvent.objects.values_list("event", flat=True)) == [FactEvent.Kind.ADD]


def _database_connections_dropped() -> None:
    """Terminate every other connection to the test database, as a database restart or a
    failover would, from a connection of its own."""
    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db["PASSWORD"] or None,
        dbname=db["NAME"],
        autocommit=True,
    ) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.mark.django_db(transaction=True)
def test_database_connection_lost_while_the_model_thinks_keeps_the_message_only(
    outage_model, api_for, owner
):
    answered = outage_model.responder

    def drop_then_answer(recorded):
        _database_connections_dropped()  # the turn's connection dies during the model call
        return answered(recorded)

    outage_model.responder = drop_then_answer
    api = api_for(owner)
    response = api.post(
        "/api/chat", {"message": "帮我想想周末去哪", "model": "gpt-4o"}, format="json"
    )
    assert response.status_code == 503, response.content
    session_id = response.json()["session_id"]
    assert response.json()["retryable"] is True and session_id

    outage_model.responder = answered  # the database is back (Django reconnects)
    assert _messages(session_id) == [(1, "user", "帮我想想周末去哪")]
    retry = api.post(
        "/api/chat",
        {"message": "帮我想想周末去哪", "session_id": session_id, "model": "gpt-4o"},
        format="json",
    )
    assert retry.status_code == 200, retry.content
    assert [(seq, role) for seq, role, _text in _messages(session_id)] == [
        (1, "user"),
        (2, "user"),
        (3, "assistant"),
    ]
    assert ChatSession.objects.get(pk=session_id).round_count == 2
