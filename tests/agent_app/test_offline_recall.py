"""The offline model shows memory working through real turns: a question about memory writes
nothing and is answered from memory (a fact learnt in an earlier session, else the best past
message with its day), and news about where the person lives supersedes the old fact."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agent_app.lifecycle import sessions_end_write, sessions_finish_idle_task
from ethan_shared import queue
from memory_app import confidence
from memory_app.consolidator import consolidation_run
from memory_app.models import Fact, FactEvent
from memory_app.working import MemoryConfig
from sessions_app import services as session_services
from sessions_app.models import ChatSession, Message

pytestmark = pytest.mark.django_db

SMALL = MemoryConfig(hot_size=1, compress_batch=1, warm_capacity=2)
QUESTIONS = [
    "What do you remember about me?",
    "Do you remember where I live?",
    "你还记得我女儿叫什么吗？",
    "你还记得我叫什么吗？",
]


def _said(owner, texts: list[str]) -> ChatSession:
    """An earlier conversation: each text a round, with a short reply."""
    session = session_services.session_start(owner=owner, mode="work", model="offline")
    for text in texts:
        session_services.message_append(session=session, role="user", content=text)
        session_services.message_append(session=session, role="assistant", content="OK.")
    return session


def _ask(api, question: str, session_id: str | None = None) -> dict:
    payload = {"message": question} | ({"session_id": session_id} if session_id else {})
    response = api.post("/api/chat", payload, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def _tool_calls(session_id: str) -> list[str]:
    rows = Message.objects.filter(session_id=session_id).exclude(tool_calls=None)
    return [call["name"] for row in rows for call in row.tool_calls or []]


def test_questions_about_memory_write_nothing_in_both_languages(api_for, owner, llm_config):
    api = api_for(owner)
    session_id = None
    for question in QUESTIONS:
        session_id = _ask(api, question, session_id)["session_id"]
    assert "memory_write" not in _tool_calls(session_id)
    assert "profile_update" not in _tool_calls(session_id)
    # Nor does the background extraction find a fact in them.
    report = consolidation_run(session_id=session_id, config=SMALL)
    assert report.extractions >= 1
    assert not Fact.objects.exists()


def test_a_strong_signal_word_in_a_question_is_no_strong_signal():
    assert confidence.from_importance(0.95, said=["Do you remember where I live?"]) == 0.8
    assert confidence.from_importance(0.95, said=["你还记得我女儿叫什么吗？"]) == 0.8
    assert confidence.from_importance(0.95, said=["Remember that I live in Lisbon."]) == 0.95
    assert confidence.from_importance(0.95) == 0.95


@pytest.mark.parametrize(
    ("said", "question", "answer"),
    [
        ("I live in Lisbon.", "Where do I live?", "You told me you live in Lisbon."),
        ("我住在里斯本。", "我住在哪里？", "你说过你住在里斯本。"),
        ("我女儿叫小米。", "你还记得我女儿叫什么吗？", "你说过你女儿叫小米。"),
    ],
)
def test_a_question_is_answered_from_a_fact_learnt_in_an_earlier_session(
    api_for, owner, llm_config, said, question, answer
):
    earlier = _said(owner, [said, "ok", "thanks"])
    consolidation_run(session_id=earlier.pk, config=SMALL)
    assert Fact.objects.filter(owner=owner).count() == 1

    body = _ask(api_for(owner), question)
    assert body["session_id"] != earlier.pk
    assert body["reply"] == answer
    assert Fact.objects.filter(owner=owner).count() == 1  # the question wrote nothing


def test_a_conversation_closed_idle_is_remembered_and_a_new_one_asks_about_it(
    api_for, owner, llm_config, settings, django_capture_on_commit_callbacks
):
    """Over /api/chat with no key: "I live in Lisbon." and a question; the session's end (four
    rounds: due at once, memory_app.working.ends_due) extracts the fact (not the question); a
    new conversation asks and is answered from it."""
    settings.ETHAN_EMBEDDED = True
    api = api_for(owner)
    session_id = None
    for text in (
        "I live in Lisbon.",
        "What do you remember about me?",
        "我对花生过敏。",
        "Thanks!",
    ):
        with django_capture_on_commit_callbacks(execute=True):
            session_id = _ask(api, text, session_id)["session_id"]
        queue.run_deferred()
    ChatSession.objects.filter(pk=session_id).update(
        updated_at=timezone.now() - timedelta(minutes=settings.ETHAN_SESSION_IDLE_MINUTES + 1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions_finish_idle_task() == 1
    queue.run_deferred()
    assert sorted(Fact.objects.values_list("content", flat=True)) == [
        "The user lives in Lisbon",
        "用户对花生过敏",
    ]

    with django_capture_on_commit_callbacks(execute=True):
        body = _ask(api, "Where do I live?")
    assert body["session_id"] != session_id
    assert body["reply"] == "You told me you live in Lisbon."
    with django_capture_on_commit_callbacks(execute=True):
        body = _ask(api, "我对什么过敏？", body["session_id"])
    assert body["reply"] == "你说过你对花生过敏。"


def test_with_no_fact_it_answers_from_the_best_past_message_with_its_day(
    api_for, owner, llm_config
):
    earlier = _said(owner, ["Where do I live?", "I live in Lisbon, near the river.", "ok"])
    told = earlier.messages.get(content__startswith="I live")
    day = timezone.localtime(told.created_at)

    body = _ask(api_for(owner), "Where do I live?")
    assert body["reply"] == (
        f"On {day.day} {day.strftime('%B')} you said: “I live in Lisbon, near the river”"
    )
    assert _tool_calls(body["session_id"]) == ["memory_search"]
    assert not Fact.objects.exists()


def test_a_question_nothing_in_memory_answers_says_so(api_for, owner, llm_config):
    body = _ask(api_for(owner), "Where do I live?")
    assert body["reply"] == "I don't remember you telling me that."
    assert _tool_calls(body["session_id"]) == ["memory_search"]


@pytest.mark.parametrize(
    ("before", "after", "question", "answer"),
    [
        (
            "I live in Lisbon.",
            "I moved to Porto.",
            "Where do I live?",
            "You told me you moved to Porto.",
        ),
        ("我住在里斯本。", "我搬到波尔图了。", "我住在哪里？", "你说过你搬到波尔图了。"),
        (
            "I work at Acme.",
            "I work at Globex now.",
            "Where do I work?",
            "You told me you work at Globex now.",
        ),
    ],
)
def test_news_about_the_same_slot_supersedes_the_old_fact(
    api_for, owner, llm_config, before, after, question, answer
):
    first = _said(owner, [before, "ok", "thanks"])
    consolidation_run(session_id=first.pk, config=SMALL)
    old = Fact.objects.get(owner=owner)

    second = _said(owner, [after, "ok", "thanks"])
    report = consolidation_run(session_id=second.pk, config=SMALL)
    assert "supersede" in report.facts

    old.refresh_from_db()
    new = Fact.objects.get(owner=owner, status=Fact.Status.ACTIVE)
    assert (old.status, old.superseded_by) == (Fact.Status.SUPERSEDED, new)
    assert list(old.events.values_list("event", flat=True)) == [
        FactEvent.Kind.ADD,
        FactEvent.Kind.SUPERSEDE,
    ]
    assert _ask(api_for(owner), question)["reply"] == answer


def test_someone_elses_home_supersedes_nothing(owner, llm_config):
    first = _said(owner, ["I live in Lisbon.", "ok", "thanks"])
    consolidation_run(session_id=first.pk, config=SMALL)
    second = _said(owner, ["My sister lives in Paris.", "ok", "thanks"])
    consolidation_run(session_id=second.pk, config=SMALL)
    assert Fact.objects.filter(owner=owner, status=Fact.Status.ACTIVE).count() == 2


def test_chats_closed_idle_together_are_learnt_in_the_order_they_were_had(owner, llm_config):
    """Chats closed by the same idle sweep share their end time, and ids drawn in the same
    minute sort by their random part: the newer news still supersedes the older."""
    lisbon = session_services.session_start(owner=owner, channel="api", model="offline")
    lisbon.id = "s_20261206_1200_zzzz"  # sorts after the newer chat's id
    for text in ["I live in Lisbon.", "ok"]:
        session_services.message_append(session=lisbon, role="user", content=text)
        session_services.message_append(session=lisbon, role="assistant", content="OK.")
    porto = session_services.session_start(owner=owner, channel="api", model="offline")
    porto.id = "s_20261206_1200_aaaa"
    for text in ["I live in Porto now.", "ok"]:
        session_services.message_append(session=porto, role="user", content=text)
        session_services.message_append(session=porto, role="assistant", content="OK.")
    an_hour_ago = timezone.now() - timedelta(hours=1)
    ChatSession.objects.filter(pk=lisbon.pk).update(updated_at=an_hour_ago)
    ChatSession.objects.filter(pk=porto.pk).update(updated_at=an_hour_ago + timedelta(minutes=5))
    assert sorted(session_services.sessions_close_idle(idle_minutes=30)) == [porto.pk, lisbon.pk]
    assert (
        ChatSession.objects.filter(ended_at__isnull=False).values("ended_at").distinct().count()
        == 1
    )

    assert sessions_end_write(owner_id=owner.pk, now=True) == 2
    old = Fact.objects.get(owner=owner, content__contains="Lisbon")
    assert old.status == Fact.Status.SUPERSEDED
    assert old.superseded_by.content == "The user lives in Porto now"
