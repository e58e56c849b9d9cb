"""What memory learns from a person's words: what they said, never the markup around it (a
chat app's transcript, its task prompt, the assistant's replies quoted back), never a request
or a question; plans in both languages, their relative dates resolved against the day they
were said; one form for facts in both languages; and the offline model answering from them.

The message texts below are the ones Open WebUI 0.12.4 really sent (shared/clients), copied."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from memory_app.consolidator import consolidation_run
from memory_app.models import Fact
from memory_app.services import fact_write
from memory_app.working import MemoryConfig
from sessions_app import services as session_services

pytestmark = pytest.mark.django_db

SMALL = MemoryConfig(hot_size=1, compress_batch=1, warm_capacity=2)

# Open WebUI's follow-up task prompt (08-follow_ups.json): its instructions, then the chat.
OPEN_WEBUI_FOLLOW_UPS = """### Task:
Predict 3-5 useful messages this user might naturally send next to advance their current objective.
### Guidelines:
- Write from the user's point of view, directed to the assistant. Match the user's directness, brevity, vocabulary, and latest language; do not deliberately copy typos.
- Respect the user's corrections, constraints, and preferences. Later corrections take precedence over earlier assumptions.
- Never invent user facts, preferences, or answers to clarification questions, or imply authorization the user has not expressed.
- Response must be a JSON object with a "follow_ups" key containing an array of strings, no extra text or formatting.
### Output:
JSON format: { "follow_ups": ["Suggested next message 1", "Suggested next message 2", "Suggested next message 3"] }
### Chat History:
<chat_history>
USER: Hi! I live in Lisbon and I work as a marine biologist.
ASSISTANT: (offline mode) Noted: Hi! I live in Lisbon and I work as a marine biologist.
USER: My favourite food is grilled sardines.
ASSISTANT: (offline mode) Noted: My favourite food is grilled sardines.
</chat_history>"""  # noqa: E501

# Its autocomplete prompt (25-autocomplete.json), the examples that became a fact.
OPEN_WEBUI_AUTOCOMPLETE = """### Task:
You are an autocompletion system. Continue the text in `<text>` based on the **completion type** in `<type>` and the given language.

### **Examples**:
#### Example 1:
Input:
<type>General</type>
<text>The sun was setting over the horizon, painting the sky</text>
Output:
{ "text": "with vibrant shades of orange and pink." }

---
### Context:
<chat_history>

</chat_history>
<type>general</type>
<text>My sister Ana lives in Madrid and sheMy sister Ana lives in Madrid and she</text>
#### Output:
"""  # noqa: E501

# A person who pastes a transcript into a real chat: their own words around it count, and so
# do their lines in it; the assistant's never.
PASTED = (
    "This is what I told the other assistant:\n"
    "Human: I have two cats named Tejo and Douro.\n"
    "AI: Lovely! I'm allergic to cats myself, and I live in Paris.\n"
    "Those are rivers, by the way."
)

MARKUP = ("USER", "ASSISTANT", "Human:", "AI:", "chat_history", "###", "offline mode", "Noted")


def _rounds(owner, texts, *, model="offline", when=None):
    session = session_services.session_start(owner=owner, mode="work", model=model)
    for text in texts:
        session_services.message_append(session=session, role="user", content=text)
        session_services.message_append(session=session, role="assistant", content="OK.")
    if when is not None:
        session.messages.update(created_at=when)
    return session


def _facts(owner) -> list[str]:
    return sorted(Fact.objects.filter(owner=owner).values_list("content", flat=True))


def test_transcript_markup_in_a_message_is_never_part_of_an_offline_fact(owner, llm_config):
    session = _rounds(owner, [OPEN_WEBUI_FOLLOW_UPS, OPEN_WEBUI_AUTOCOMPLETE, PASTED, "ok"])
    consolidation_run(session_id=session.pk, config=SMALL)
    facts = _facts(owner)
    for fact in facts:
        assert not any(mark in fact for mark in MARKUP), fact
        assert "Paris" not in fact and "allergic" not in fact, fact  # the assistant's words
        assert "Example" not in fact and "sun was setting" not in fact, fact
    # An app's task prompt says nothing the person said now; a pasted chat's person lines do.
    assert facts == ["The user has two cats named Tejo and Douro"]


def test_the_prompt_to_a_real_model_carries_the_persons_words_not_the_markup(owner, fakes):
    openai = fakes["openai"]
    session = _rounds(owner, [PASTED, OPEN_WEBUI_FOLLOW_UPS, "ok"], model="gpt-4o")
    openai.fake.reply(openai.text(json.dumps({"summary": "Cats.", "facts": []})))
    openai.fake.reply(openai.text("Cats."))
    consolidation_run(
        session_id=session.pk, config=MemoryConfig(hot_size=1, compress_batch=2, warm_capacity=2)
    )
    system, prompt = (m["content"] for m in openai.fake.requests[0].body["messages"][:2])
    assert prompt.splitlines() == [
        "[1] user: This is what I told the other assistant:",
        "  ",
        "  I have two cats named Tejo and Douro.",
        "[2] assistant: OK.",
        "[3] user: ",
        "[4] assistant: OK.",
    ]
    assert "never the assistant's words" in system


@pytest.mark.parametrize(
    "request_text",
    [
        "Tell me about my daughter please.",
        "Tell me everything you know about my daughter, my allergies and my trip.",
        "Please list my appointments for next week.",
        "Show me my dog's vet records.",
        "Help me plan my trip to Kyoto.",
        "告诉我关于我女儿的事。",
        "帮我查一下我下周的安排。",
        "请给我讲讲我的猫。",
    ],
)
def test_a_request_never_becomes_a_fact(owner, llm_config, request_text):
    session = _rounds(owner, [request_text, "ok", "thanks"])
    consolidation_run(session_id=session.pk, config=SMALL)
    assert _facts(owner) == []


def test_a_request_is_answered_from_memory_never_quoted_back_as_a_fact(owner, llm_config, api_for):
    """The new user's two lines: the request is not stored, and the question after it is not
    answered with the request."""
    api = api_for(owner)
    first = api.post("/api/chat", {"message": "Tell me about my daughter please."}, format="json")
    session_id = first.json()["session_id"]
    consolidation_run(session_id=session_id, config=SMALL)
    assert _facts(owner) == []
    second = api.post(
        "/api/chat",
        {"message": "What is my daughter called", "session_id": session_id},
        format="json",
    ).json()["reply"]
    assert "Tell me" not in second
    assert second == "I don't remember you telling me that."


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        (
            "I'm planning a trip to Kyoto next March.",
            "The user is planning a trip to Kyoto next March (March 2027)",
        ),
        (
            "I'm flying to Oslo next week.",
            "The user is flying to Oslo next week (week of 7 December 2026)",
        ),
        (
            "We're going to Rome tomorrow.",
            "The user and others are going to Rome tomorrow (7 December 2026)",
        ),
        ("下周我要去东京出差。", "下周（2026年12月7日那周）用户要去东京出差"),
        ("我明年打算去读研究生。", "用户明年（2027年）打算去读研究生"),
    ],
)
def test_a_plan_is_learnt_with_its_relative_date_resolved_to_the_day_it_was_said(
    owner, llm_config, said, fact
):
    said_on = timezone.make_aware(datetime(2026, 12, 6, 10, 0))
    session = _rounds(owner, [said, "ok", "thanks"], when=said_on)
    consolidation_run(session_id=session.pk, config=SMALL)
    assert _facts(owner) == [fact]


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        ("I live in Lisbon.", "The user lives in Lisbon"),
        ("I work as a marine biologist.", "The user works as a marine biologist"),
        ("My sister Ana lives in Madrid.", "The user's sister Ana lives in Madrid"),
        ("I have two cats named Tejo and Douro.", "The user has two cats named Tejo and Douro"),
        ("I'm allergic to peanuts.", "The user is allergic to peanuts"),
        ("I don't eat pork.", "The user doesn't eat pork"),
        ("I moved to Porto in May.", "The user moved to Porto in May"),
        ("Our dog is called Max.", "The user's dog is called Max"),
        ("我住在杭州。", "用户住在杭州"),
    ],
)
def test_facts_are_stored_in_one_form_in_both_languages(owner, llm_config, said, fact):
    session = _rounds(owner, [said, "ok", "thanks"])
    consolidation_run(session_id=session.pk, config=SMALL)
    assert _facts(owner) == [fact]


@pytest.mark.parametrize(
    ("said", "question", "answer"),
    [
        (
            "Our dog is called Max.",
            "What is our dog called?",
            "You told me your dog is called Max.",
        ),
        ("我们家的狗叫旺财。", "我们家的狗叫什么？", "你说过你家的狗叫旺财。"),
    ],
)
def test_our_is_told_back_as_your(owner, llm_config, api_for, said, question, answer):
    session = _rounds(owner, [said, "ok", "thanks"])
    consolidation_run(session_id=session.pk, config=SMALL)
    reply = api_for(owner).post("/api/chat", {"message": question}, format="json")
    assert reply.json()["reply"] == answer


SEVEN = [
    "I live in Porto",
    "I work as a marine biologist",
    "My daughter is called Mia",
    "I'm allergic to peanuts",
    "I have two cats named Tejo and Douro",
    "I'm planning a trip to Lisbon",
    "My sister Ana lives in Madrid",
]


def test_what_do_you_remember_lists_every_fact_or_says_how_many_more_and_where(
    owner, llm_config, api_for
):
    for n, text in enumerate(SEVEN):
        fact_write(
            owner=owner, content=text, category="knowledge", confidence=0.9 - n / 100, source="api"
        )
    reply = (
        api_for(owner)
        .post("/api/chat", {"message": "What do you remember about me?"}, format="json")
        .json()["reply"]
    )
    for word in ("Porto", "Mia", "peanuts", "Tejo", "Lisbon", "Madrid", "marine"):
        assert word in reply, (word, reply)

    for n in range(12):
        fact_write(
            owner=owner,
            content=f"My project number {n} is P{n}",
            category="knowledge",
            confidence=0.5,
            source="api",
        )
    reply = (
        api_for(owner)
        .post("/api/chat", {"message": "What do you remember about me?"}, format="json")
        .json()["reply"]
    )
    assert "more" in reply and "/memory/" in reply, reply
    zh = (
        api_for(owner)
        .post("/api/chat", {"message": "你记得我的哪些事？"}, format="json")
        .json()["reply"]
    )
    assert "我的记忆" in zh and "/memory/" in zh, zh


def _imported(owner, texts, *, days_ago=30):
    """An earlier conversation, as an import leaves it: the person's messages, older."""
    session = _rounds(owner, texts, when=timezone.now() - timedelta(days=days_ago))
    return session


def test_from_imported_history_a_fact_comes_before_a_message(owner, llm_config, api_for):
    _imported(owner, ["That worked, thanks", "Why is your query slow?"])
    fact_write(
        owner=owner,
        content="The user is a data engineer at Globex",
        category="knowledge",
        confidence=0.8,
        source="api",
    )
    reply = api_for(owner).post("/api/chat", {"message": "Where do I work?"}, format="json")
    assert reply.json()["reply"] == "You told me you are a data engineer at Globex."


def test_from_imported_history_a_question_is_never_quoted_as_an_answer(owner, llm_config, api_for):
    """An imported conversation's episode, its summary as the offline model wrote it from a
    message with a file: neither the question nor a piece of the placeholder is an answer."""
    from episodes_app.services import episode_write

    session = _imported(owner, ["[file: slow_query.txt] Why is your query slow?", "ok", "thanks"])
    episode = episode_write(
        session=session, summary="The user said: [file: slow_query.txt] Why is your query slow; ok."
    )
    assert episode is not None
    reply = (
        api_for(owner)
        .post("/api/chat", {"message": "Why is my query slow?"}, format="json")
        .json()["reply"]
    )
    assert "txt]" not in reply and "Why is" not in reply, reply
    assert reply == "I don't remember you telling me that."


def test_a_strong_signal_in_a_request_or_a_quoted_assistant_is_no_strong_signal():
    from memory_app import confidence

    assert confidence.from_importance(0.95, said=["Tell me what you remember about Mia."]) == 0.8
    quoted = "<chat_history>\nUSER: Where do I live?\nASSISTANT: Remember, you live in Lisbon.\n"
    assert confidence.from_importance(0.95, said=[quoted + "</chat_history>"]) == 0.8
    assert confidence.from_importance(0.95, said=["Remember that I live in Lisbon."]) == 0.95


def test_a_plan_the_agent_writes_down_is_dated_too(owner, llm_config, api_for):
    reply = api_for(owner).post(
        "/api/chat", {"message": "Remember that I'm flying to Oslo next week."}, format="json"
    )
    assert reply.status_code == 200, reply.content
    [fact] = _facts(owner)
    assert fact.startswith("The user is flying to Oslo next week (week of "), fact
