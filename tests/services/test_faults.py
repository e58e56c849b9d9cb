"""Faults against the real services: what a person keeps when Redis goes away."""

from __future__ import annotations

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
        celery_app._pool = None  # connections already open to the real broker are dropped

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
