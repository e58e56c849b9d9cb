"""Faults against the real services: what a person keeps when Redis goes away."""

from __future__ import annotations

import logging
import time

import pytest

from ethan_site.celery import app as celery_app
from memory_app.models import Summary
from memory_app.tasks import catch_up
from sessions_app.models import ChatSession, Message


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
    caplog.set_level(logging.WARNING, logger="ethan_site.queue")
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
    assert catch_up() == 1
    session = ChatSession.objects.get(pk=session_id)
    assert list(
        Summary.objects.filter(session=session)
        .order_by("first_round")
        .values_list("first_round", "last_round")
    ) == [(1, 1), (2, 2), (3, 3)]
    assert catch_up() == 0  # nothing left to do


@pytest.mark.django_db(transaction=True)
def test_two_clients_chatting_on_one_session_at_once_lose_no_turn(
    services_ready, owner, make_session, llm_config
):
    import threading

    from django.db import connection

    from agent_app.services import turn_run

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
