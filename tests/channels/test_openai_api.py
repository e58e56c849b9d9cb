"""/v1/chat/completions and /v1/models through the official openai SDK, over a real loopback
socket (pytest-django's live server, on the test database), the turn's model a loopback fake or
the offline model. Under the server at the end, as `make serve` runs it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import replace

import openai
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from openai.types.chat import ChatCompletion
from rest_framework.authtoken.models import Token

from channels_app.models import ClientConversation
from channels_app.openai import apis
from channels_app.openai.conversations import ClientChat, conversation_place, digest
from channels_app.openai.names import ModelName
from memory_app.models import Fact
from memory_app.services import fact_write
from sessions_app.ids import new_session_id
from sessions_app.models import ChatSession, Message
from tests.live_client import settling_client
from tests.web_server import stored_contents

pytestmark = pytest.mark.django_db(transaction=True)


def stored(session: ChatSession) -> list[tuple[str, str]]:
    """The session's user messages and replies, in order."""
    rows = session.messages.order_by("seq").filter(role__in=["user", "assistant"])
    return [
        (role, content)
        for role, content, calls in rows.values_list("role", "content", "tool_calls")
        if content and not calls
    ]


def sent_messages(fake_request) -> list[tuple[str, str]]:
    """The conversation a turn sent to the OpenAI fake, system prompt aside."""
    return [(m["role"], m["content"]) for m in fake_request.body["messages"][1:]]


# --- the two answers ----------------------------------------------------------------------------


def test_a_completion_is_ethan_with_memory_and_the_turn_is_stored(client_for, owner, fakes):
    openai_fake = fakes["openai"]
    fact_write(
        owner=owner,
        content="用户喜欢喝美式咖啡",
        category="preference",
        confidence=0.9,
        source="api",
    )
    openai_fake.fake.reply(openai_fake.text("An Americano, as usual?", 40, 6))
    completion = client_for(owner).chat.completions.create(
        model="ethan/gpt-4o",
        messages=[
            {"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": "What coffee do I like?"},
        ],
    )
    assert completion.object == "chat.completion" and completion.id.startswith("chatcmpl-")
    assert completion.model == "ethan/gpt-4o"
    [choice] = completion.choices
    assert choice.message.role == "assistant" and choice.finish_reason == "stop"
    assert choice.message.content == "An Americano, as usual?"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (40, 6)
    assert completion.usage.total_tokens == 46

    session = ChatSession.objects.get()
    assert (session.owner, session.channel, session.model) == (owner, "openai", "gpt-4o")
    assert stored(session) == [
        ("user", "What coffee do I like?"),
        ("assistant", "An Americano, as usual?"),
    ]
    # Ethan's own prompt, memory injected, with the client's system message after it.
    [request] = openai_fake.fake.requests
    assert request.body["model"] == "gpt-4o"
    system = openai_fake.system_of(request.body)
    assert system.startswith("You are Ethan")
    assert "<memory_context>" in system and "用户喜欢喝美式咖啡" in system
    assert system.index("</memory_context>") < system.index("Answer in one short sentence.")
    assert "<client_instructions>\nAnswer in one short sentence.\n</client_instructions>" in system
    assert sent_messages(request) == [("user", "What coffee do I like?")]
    assert not Message.objects.filter(role="system").exists()  # never stored as a message


def test_a_streamed_completion_is_chunks_then_usage_then_done(client_for, owner, fakes):
    openai_fake = fakes["openai"]
    answer = "Streaming means the first words arrive while the model is still writing."
    openai_fake.fake.reply(openai_fake.text(answer, 30, 12))
    raw = client_for(owner).chat.completions.with_raw_response.create(
        model="ethan/gpt-4o",
        messages=[{"role": "user", "content": "what is streaming?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    session_id = raw.headers["x-ethan-session"]
    chunks = list(raw.parse())
    assert raw.headers["content-type"] == "text/event-stream"
    assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == answer
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "stop" and set(finish[:-1]) == {None}
    # The usage chunk is the last, with no choices; the ones before it carry usage null.
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 42
    assert all(chunk.usage is None for chunk in chunks[:-1])
    assert openai_fake.fake.requests[0].streamed
    session = ChatSession.objects.get()
    assert session.pk == session_id and stored(session)[-1] == ("assistant", answer)


@pytest.mark.parametrize("include_usage", [True, False])
def test_a_delta_chunk_is_the_whole_chunk_encoded(include_usage):
    """A delta's chunk is built from the rest of the chunk encoded once: the bytes are those of
    the whole chunk encoded, whatever the words hold."""
    chunks = apis._Chunks(name=ModelName(mode="medium", model=None), include_usage=include_usage)
    chunks.label = "ethan"
    for words in [
        "Hello",
        "",
        'say "hi"\n\tthen \\ go',
        "你好，世界",
        "\u0000words\u0000",
        "😀 </s>",
    ]:
        assert chunks._words_chunk(words) == chunks._chunk({"content": words})
        assert json.loads(chunks._words_chunk(words)[len(b"data: ") :])["choices"][0]["delta"] == {
            "content": words
        }


def test_a_stream_without_include_usage_has_no_usage(client_for, owner, llm_config):
    stream = client_for(owner).chat.completions.create(
        model="ethan", messages=[{"role": "user", "content": "hello"}], stream=True
    )
    chunks = list(stream)
    assert all(chunk.usage is None for chunk in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == (
        "Hi! I'm Ethan (offline mode)."
    )


def test_the_memory_tools_run_inside_and_the_client_sees_the_reply(client_for, owner, fakes):
    """The offline model writes a fact with memory_write; the client sees words only. The fact
    is in /api/facts, and in the system prompt of the next console turn (on the OpenAI fake)."""
    from io import StringIO

    from django.core.management import call_command
    from rest_framework.test import APIClient

    stream = client_for(owner).chat.completions.create(
        model="ethan/offline",
        messages=[{"role": "user", "content": "记住我喜欢喝美式咖啡"}],
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text and all(c.choices[0].delta.tool_calls is None for c in chunks)
    fact = Fact.objects.get(owner=owner)
    assert "美式咖啡" in fact.content
    written = ChatSession.objects.get(channel="openai")
    assert Message.objects.filter(session=written, role="tool").exists()  # the step is stored

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get(user=owner).key}")
    assert [f["content"] for f in api.get("/api/facts").json()["results"]] == [fact.content]

    openai_fake = fakes["openai"]
    openai_fake.fake.reply(openai_fake.text("An Americano."))
    openai_fake.fake.reply(openai_fake.text('{"facts": []}'))  # the console's end: its facts
    call_command(
        "ethan_chat",
        "--user",
        "ada",
        "--model",
        "gpt-4o",
        stdout=StringIO(),
        stdin=StringIO("我喜欢喝什么咖啡？\n"),
    )
    [request] = [r for r in openai_fake.fake.requests if r.body["model"] == "gpt-4o"]
    system = openai_fake.system_of(request.body)
    assert "<memory_context>" in system and fact.content in system
    console = ChatSession.objects.get(channel="console")
    assert stored(console) == [("user", "我喜欢喝什么咖啡？"), ("assistant", "An Americano.")]


# --- conversations ------------------------------------------------------------------------------


def test_the_next_request_of_a_conversation_continues_its_session(client_for, owner, fakes):
    openai_fake = fakes["openai"]
    client = client_for(owner)
    openai_fake.fake.reply(openai_fake.text("Hello Ada."))
    first = client.chat.completions.create(
        model="ethan/gpt-4o", messages=[{"role": "user", "content": "Hi, I'm Ada"}]
    )
    openai_fake.fake.reply(openai_fake.text("You said you are Ada."))
    client.chat.completions.create(
        model="ethan/gpt-4o",
        messages=[
            {"role": "user", "content": "Hi, I'm Ada"},
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "Who am I?"},
        ],
    )
    session = ChatSession.objects.get()  # one session: the history was not stored again
    assert stored(session) == [
        ("user", "Hi, I'm Ada"),
        ("assistant", "Hello Ada."),
        ("user", "Who am I?"),
        ("assistant", "You said you are Ada."),
    ]
    assert session.round_count == 2
    # The second turn's context came from the session.
    assert sent_messages(openai_fake.fake.requests[1]) == stored(session)[:3]


def test_a_regenerate_answers_again_without_storing_the_question_twice(client_for, owner, fakes):
    openai_fake = fakes["openai"]
    client = client_for(owner)
    opening = [
        {"role": "user", "content": "Name a colour"},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one"},
    ]
    openai_fake.fake.reply(openai_fake.text("Blue."))
    client.chat.completions.create(model="ethan/gpt-4o", messages=opening[:1])
    openai_fake.fake.reply(openai_fake.text("Green."))
    client.chat.completions.create(model="ethan/gpt-4o", messages=opening)
    openai_fake.fake.reply(openai_fake.text("Red."))
    again = client.chat.completions.create(model="ethan/gpt-4o", messages=opening)  # the same
    assert again.choices[0].message.content == "Red."
    session = ChatSession.objects.get()
    assert [content for role, content in stored(session) if role == "user"] == [
        "Name a colour",
        "Another one",
    ]
    assert stored(session)[-2:] == [("assistant", "Green."), ("assistant", "Red.")]  # both kept
    # The regenerated answer was asked for without the reply it replaces.
    assert sent_messages(openai_fake.fake.requests[2]) == [
        ("user", "Name a colour"),
        ("assistant", "Blue."),
        ("user", "Another one"),
    ]
    # Going on from the kept reply continues the session; the model sees the kept reply.
    openai_fake.fake.reply(openai_fake.text("Yellow."))
    client.chat.completions.create(
        model="ethan/gpt-4o",
        messages=[
            *opening,
            {"role": "assistant", "content": "Red."},
            {"role": "user", "content": "More"},
        ],
    )
    assert ChatSession.objects.count() == 1
    assert sent_messages(openai_fake.fake.requests[3])[-3:] == [
        ("user", "Another one"),
        ("assistant", "Red."),
        ("user", "More"),
    ]


def test_the_same_first_message_sent_twice_at_once_is_stored_in_one_session(
    client_for, owner, fakes, monkeypatch
):
    """Two requests with the same first message, the second placed before the first had stored
    its conversation: the second's fence (conversation_claim) finds it in the transaction that
    would store its question, gives way (that write undone) and is placed again, into the
    first's session, as a regenerate."""
    openai_fake = fakes["openai"]
    client = client_for(owner)
    hello = [{"role": "user", "content": "Hi, I'm Ada"}]
    placed, fenced = [], []
    real_place, real_claim = apis.conversation_place, apis.conversation_claim

    def place_late(**kwargs):
        placement = real_place(**kwargs)
        placed.append(placement)
        # The second request's first placement: as if the first had not stored it yet.
        return replace(placement, session=None, again=False) if len(placed) == 2 else placement

    def claim_counted(**kwargs):
        fence = real_claim(**kwargs)

        def counted(session, question):
            if question is None:  # the turn's later writes: nothing to claim
                return fence(session, question)
            with CaptureQueriesContext(connection) as statements:
                kept = fence(session, question)
            fenced.append((kept, len(statements)))
            return kept

        return counted

    monkeypatch.setattr(apis, "conversation_place", place_late)
    monkeypatch.setattr(apis, "conversation_claim", claim_counted)
    openai_fake.fake.reply(openai_fake.text("Hello Ada."))
    client.chat.completions.create(model="ethan/gpt-4o", messages=hello)
    openai_fake.fake.reply(openai_fake.text("Hello again, Ada."))
    second = client.chat.completions.create(model="ethan/gpt-4o", messages=hello)

    assert second.choices[0].message.content == "Hello again, Ada."
    session = ChatSession.objects.get()
    assert stored(session) == [
        ("user", "Hi, I'm Ada"),
        ("assistant", "Hello Ada."),
        ("assistant", "Hello again, Ada."),
    ]
    assert ClientConversation.objects.filter(owner=owner).count() == 1
    assert len(openai_fake.fake.requests) == 2  # the request that gave way asked no model
    # A new session's claim: a read and one insert (PostgreSQL takes its lock first); the
    # request that gave way only read.
    lock = 1 if connection.vendor == "postgresql" else 0
    assert fenced == [(True, 2 + lock), (False, 1 + lock)]


def test_regenerating_the_first_reply_stays_in_its_session(client_for, owner, llm_config):
    client = client_for(owner)
    for _ in range(2):
        client.chat.completions.create(model="ethan", messages=[{"role": "user", "content": "hi"}])
    session = ChatSession.objects.get()
    assert [role for role, _ in stored(session)] == ["user", "assistant", "assistant"]


def test_a_first_message_after_its_session_ended_starts_a_new_one(client_for, owner, llm_config):
    client = client_for(owner)
    client.chat.completions.create(model="ethan", messages=[{"role": "user", "content": "hi"}])
    ChatSession.objects.update(ended_at=timezone.now())  # closed as idle
    client.chat.completions.create(model="ethan", messages=[{"role": "user", "content": "hi"}])
    assert ChatSession.objects.count() == 2


def test_an_old_conversation_goes_on_in_its_ended_session_and_opens_it(
    client_for, owner, llm_config
):
    client = client_for(owner)
    first = client.chat.completions.create(
        model="ethan", messages=[{"role": "user", "content": "hello"}]
    )
    ChatSession.objects.update(ended_at=timezone.now())  # closed as idle, its episode written
    client.chat.completions.create(
        model="ethan",
        messages=[
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "back again"},
        ],
    )
    session = ChatSession.objects.get()
    assert session.round_count == 2
    assert session.ended_at is None  # ended again when it next goes idle: a new episode


def test_an_edited_history_continues_in_a_new_session_holding_it(client_for, owner, llm_config):
    client = client_for(owner)
    first = client.chat.completions.create(
        model="ethan", messages=[{"role": "user", "content": "hello there"}]
    )
    reply = first.choices[0].message.content
    original = ChatSession.objects.get()
    before = stored(original)
    # The person edits their first message in the chat app and asks on.
    client.chat.completions.create(
        model="ethan",
        messages=[
            {"role": "user", "content": "hello there, I am Ada"},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "what now?"},
        ],
    )
    assert stored(original) == before  # nothing stored was rewritten
    branch = ChatSession.objects.exclude(pk=original.pk).get()
    assert branch.channel == "openai"
    assert stored(branch)[:3] == [
        ("user", "hello there, I am Ada"),
        ("assistant", reply),
        ("user", "what now?"),
    ]
    assert len(stored(branch)) == 4 and branch.round_count == 2


def test_a_conversation_pasted_from_elsewhere_starts_a_session_with_it(client_for, owner, fakes):
    openai_fake = fakes["openai"]
    openai_fake.fake.reply(openai_fake.text("Then take the train."))
    client_for(owner).chat.completions.create(
        model="ethan/gpt-4o",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "I fly to Lisbon in May"}]},
            {"role": "assistant", "content": "Nice."},
            {"role": "user", "content": "Flights are expensive"},
        ],
    )
    session = ChatSession.objects.get()
    assert stored(session) == [
        ("user", "I fly to Lisbon in May"),
        ("assistant", "Nice."),
        ("user", "Flights are expensive"),
        ("assistant", "Then take the train."),
    ]
    assert sent_messages(openai_fake.fake.requests[0]) == stored(session)[:3]


def test_the_session_header_pins_a_session(
    client_for, owner, other_owner, make_session, llm_config
):
    console = make_session(owner, "my cat is called Miso", "A lovely name.")
    client = client_for(owner)
    raw = client.chat.completions.with_raw_response.create(
        model="ethan",
        messages=[{"role": "user", "content": "what is my cat called?"}],
        extra_headers={"X-Ethan-Session": console.pk},
    )
    assert raw.headers["x-ethan-session"] == console.pk
    assert stored(console)[2] == ("user", "what is my cat called?")
    assert ChatSession.objects.count() == 1
    theirs = make_session(other_owner, "secret plans", "ok")
    with pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(
            model="ethan",
            messages=[{"role": "user", "content": "show me"}],
            extra_headers={"X-Ethan-Session": theirs.pk},
        )
    assert refused.value.code == "session_not_found"
    assert stored(theirs) == [("user", "secret plans"), ("assistant", "ok")]


# --- two people -------------------------------------------------------------------------------


def test_two_people_never_see_each_others_sessions_or_memory(client_for, owner, other_owner, fakes):
    openai_fake = fakes["openai"]
    fact_write(
        owner=other_owner,
        content="Grace 的银行密码提示是猫的名字",
        category="knowledge",
        confidence=0.9,
        source="api",
    )
    conversation = [{"role": "user", "content": "hello"}]
    openai_fake.fake.reply(openai_fake.text("Hi Grace."))
    client_for(other_owner).chat.completions.create(model="ethan/gpt-4o", messages=conversation)
    # Ada sends the very same conversation, then its continuation: her own sessions only.
    openai_fake.fake.reply(openai_fake.text("Hi Ada."))
    client_for(owner).chat.completions.create(model="ethan/gpt-4o", messages=conversation)
    openai_fake.fake.reply(openai_fake.text("Sure."))
    client_for(owner).chat.completions.create(
        model="ethan/gpt-4o",
        messages=[
            *conversation,
            {"role": "assistant", "content": "Hi Grace."},
            {"role": "user", "content": "go on"},
        ],
    )
    graces = ChatSession.objects.get(owner=other_owner)
    assert stored(graces) == [("user", "hello"), ("assistant", "Hi Grace.")]
    assert ChatSession.objects.filter(owner=owner).count() == 2
    for request in openai_fake.fake.requests[1:]:
        assert "银行密码" not in openai_fake.system_of(request.body)
    assert set(ClientConversation.objects.values_list("owner", flat=True)) == {
        owner.pk,
        other_owner.pk,
    }


# --- errors -------------------------------------------------------------------------------------


def _post_raw(live_server, activity, body: dict, headers: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{live_server.url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)
    finally:
        activity.wait_idle()


def test_no_token_or_a_bad_one_is_401_in_openais_shape(
    live_server, activity, client_for, owner, llm_config
):
    body = {"model": "ethan", "messages": [{"role": "user", "content": "hi"}]}
    status, answer = _post_raw(live_server, activity, body, {})
    assert status == 401
    assert answer["error"]["code"] == "invalid_api_key"
    assert answer["error"]["type"] == "invalid_request_error"
    assert "Bearer" in answer["error"]["message"]
    # The REST API's own scheme is not this endpoint's.
    token, _ = Token.objects.get_or_create(user=owner)
    assert _post_raw(live_server, activity, body, {"Authorization": f"Token {token.key}"})[0] == 401
    bad = openai.OpenAI(
        base_url=f"{live_server.url}/v1",
        api_key="not-a-token",
        max_retries=0,
        http_client=settling_client(activity),
    )
    with pytest.raises(openai.AuthenticationError) as refused:
        bad.chat.completions.create(model="ethan", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert not ChatSession.objects.exists()


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"messages": []}, None, "messages"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, None, "messages"),
        (
            {"messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "x"}]},
            None,
            "messages",
        ),
        ({"messages": [{"role": "user", "content": "   "}]}, None, "messages"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:,"}}],
                    }
                ]
            },
            None,
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [
                    {"type": "function", "function": {"name": "no spaces", "parameters": {}}}
                ],
            },
            None,
            "tools[0].function",
        ),
        (
            {
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            None,
            "tool_choice",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
                    {"role": "tool", "tool_call_id": "1", "content": "42"},
                    {"role": "user", "content": "so?"},
                ]
            },
            None,
            "messages[1].tool_calls",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, None, "n"),
        ({"messages": "hi"}, None, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, None, "messages"),
    ],
)
def test_a_bad_body_is_400_and_writes_nothing(client_for, owner, llm_config, body, code, param):
    with pytest.raises(openai.BadRequestError) as refused:
        client_for(owner).chat.completions.create(model="ethan", **body)
    error = refused.value.body
    assert refused.value.status_code == 400
    assert error["type"] == "invalid_request_error" and error["message"]
    assert (error["code"], error["param"]) == (code, param)
    assert not ChatSession.objects.exists() and not Message.objects.exists()


def test_a_message_over_the_limit_is_400(client_for, owner, llm_config, settings):
    settings.ETHAN_MESSAGE_MAX_CHARS = 100
    with pytest.raises(openai.BadRequestError, match="the limit is 100"):
        client_for(owner).chat.completions.create(
            model="ethan", messages=[{"role": "user", "content": "x" * 101}]
        )
    assert not Message.objects.exists()


def _conversation(history_chars: int, rounds: int = 2) -> list[dict]:
    """`rounds` earlier rounds (each message `history_chars` long), then the question."""
    messages = []
    for n in range(rounds):
        messages.append({"role": "user", "content": f"{n}" * history_chars})
        messages.append({"role": "assistant", "content": f"{n}" * history_chars})
    return [*messages, {"role": "user", "content": "and now?"}]


@pytest.mark.parametrize(
    ("messages", "code", "param", "words"),
    [
        # A pasted history message over ETHAN_MESSAGE_MAX_CHARS (100 here).
        (_conversation(101), "string_above_max_length", "messages[0].content", "the limit is 100"),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "tell me everything"},
                {"role": "assistant", "content": "y" * 101},
                {"role": "user", "content": "so?"},
            ],
            "string_above_max_length",
            "messages[3].content",
            "messages[3].content is 101 characters long",
        ),
        (
            [{"role": "system", "content": "s" * 101}, *_conversation(10)],
            "string_above_max_length",
            "messages[0].content",
            "messages[0].content is 101 characters long",
        ),
        (
            [
                {"role": "system", "content": "s" * 60},
                {"role": "developer", "content": "d" * 60},
                *_conversation(10),
            ],
            "string_above_max_length",
            "messages",
            "the system messages are 122 characters long",
        ),
        # More messages than ETHAN_V1_MAX_MESSAGES (8 here).
        (_conversation(1, rounds=4), "array_above_max_length", "messages", "at most 8"),
        # A history over ETHAN_V1_MAX_HISTORY_CHARS (300 here): 4 messages of 100.
        (_conversation(100), "context_length_exceeded", "messages", "400 characters long"),
    ],
)
def test_a_conversation_over_the_limits_is_400_and_stores_nothing(
    client_for, owner, llm_config, settings, messages, code, param, words
):
    settings.ETHAN_MESSAGE_MAX_CHARS = 100
    settings.ETHAN_V1_MAX_MESSAGES = 8
    settings.ETHAN_V1_MAX_HISTORY_CHARS = 300
    client = client_for(owner)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="ethan", messages=messages)
    error = refused.value.body
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
    assert words in error["message"]
    assert not ChatSession.objects.exists() and not Message.objects.exists()
    # Within every limit, the same kind of conversation is taken and stored whole.
    client.chat.completions.create(model="ethan", messages=_conversation(75))
    assert Message.objects.filter(role__in=["user", "assistant"]).count() == 6


def test_a_pasted_history_of_thousands_of_messages_is_refused_before_any_is_read(
    client_for, owner, llm_config
):
    """The default ETHAN_V1_MAX_MESSAGES (1000): 20,000 messages stored 20,000 rows before."""
    with pytest.raises(openai.BadRequestError) as refused:
        client_for(owner).chat.completions.create(
            model="ethan", messages=_conversation(1, rounds=10_000)
        )
    assert refused.value.code == "array_above_max_length"
    assert "messages holds 20001 messages; at most 1000" in refused.value.message
    assert not ChatSession.objects.exists() and not Message.objects.exists()


# A NUL (PostgreSQL's text cannot hold it; SQLite stored it) and a lone surrogate (JSON's
# "\ud800", which a JavaScript chat app sends as is; it was a 500).
HOSTILE = {"nul": "a\x00b", "surrogate": "a\ud800b"}


def _with(where: str, text: str) -> list[dict]:
    question = text if where == "question" else "what now?"
    history = [{"role": "user", "content": text if where == "history" else "hi"}]
    history.append({"role": "assistant", "content": "hello"})
    system = [{"role": "system", "content": text}] if where == "system" else []
    return [*system, *history, {"role": "user", "content": question}]


@pytest.mark.parametrize("where", ["question", "history", "system"])
@pytest.mark.parametrize("kind", ["nul", "surrogate"])
def test_hostile_text_is_400_and_stores_nothing(client_for, owner, llm_config, where, kind):
    client = client_for(owner)
    messages = _with(where, HOSTILE[kind])
    with pytest.raises(openai.BadRequestError) as refused:
        if kind == "nul":
            client.chat.completions.create(model="ethan", messages=messages)
        else:
            # The SDK encodes its JSON as UTF-8, which has no lone surrogates: the body as a
            # JavaScript client writes it (JSON.stringify escapes it), through the same SDK.
            body = json.dumps({"model": "ethan", "messages": messages}).encode()
            client.post("/chat/completions", cast_to=ChatCompletion, content=body)
    error = refused.value.body
    assert (error["type"], error["param"]) == ("invalid_request_error", "messages")
    character = "a NUL character (U+0000)" if kind == "nul" else "a lone surrogate (U+D800"
    assert character in error["message"] and "which text cannot hold" in error["message"]
    assert not ChatSession.objects.exists() and not Message.objects.exists()
    assert not ClientConversation.objects.exists()


def test_an_unknown_model_is_404(client_for, owner, llm_config):
    client = client_for(owner)
    for name in ("gpt-4o", "ethan/llama", "ethan/", "ethan/gpt-4o"):  # the last: no key here
        with pytest.raises(openai.NotFoundError) as refused:
            client.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}])
        assert refused.value.code == "model_not_found" and refused.value.param == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("claude-3")
    assert not ChatSession.objects.exists()


def test_throttled_requests_are_429(client_for, owner, llm_config, monkeypatch):
    from ethan_shared.throttles import PerUserThrottle

    monkeypatch.setattr(PerUserThrottle, "THROTTLE_RATES", {"user": "1/min"})
    client = client_for(owner)
    client.models.list()
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="ethan", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.code == "rate_limit_exceeded" and refused.value.body["type"] == "requests"
    assert refused.value.response.headers["retry-after"]
    assert not Message.objects.exists()


def test_a_model_outage_is_503_and_keeps_the_message_once(client_for, owner, fakes):
    """The SDK retries a 503 by itself (twice by default): each retry is the same
    conversation asked again, so the message is stored once, and a later retry answers it."""
    openai_fake = fakes["openai"]
    from tests.fakes.base import Reply

    overloaded = Reply(status=503, body=openai_fake.error(503, "overloaded"))
    openai_fake.fake.responder = lambda request: overloaded
    client = client_for(owner, max_retries=2)
    question = [{"role": "user", "content": "are you there?"}]
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model="ethan/gpt-4o", messages=question)
    assert failed.value.status_code == 503
    assert failed.value.code == "model_unavailable"
    session = ChatSession.objects.get()
    assert failed.value.body["session_id"] == session.pk
    assert "your message is stored" in failed.value.message
    assert stored(session) == [("user", "are you there?")]
    assert len(openai_fake.fake.requests) == 9  # three requests, each with the turn's retries

    openai_fake.fake.responder = None
    openai_fake.fake.reply(openai_fake.text("Yes, back now."))
    answer = client.chat.completions.create(model="ethan/gpt-4o", messages=question)
    assert answer.choices[0].message.content == "Yes, back now."
    assert stored(session) == [("user", "are you there?"), ("assistant", "Yes, back now.")]


def test_a_stream_that_fails_midway_raises_in_the_sdk_and_stores_no_half_reply(
    client_for, owner, fakes
):
    openai_fake = fakes["openai"]
    openai_fake.fake.reply(
        openai_fake.text("a long answer that will not be finished at all"), fail_after=3
    )
    stream = client_for(owner).chat.completions.create(
        model="ethan/gpt-4o", messages=[{"role": "user", "content": "tell me"}], stream=True
    )
    received = []
    with pytest.raises(openai.APIError) as failed:
        for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received)  # the first words arrived before the failure
    assert failed.value.code in ("model_unavailable", "model_failed")
    session = ChatSession.objects.get()
    assert stored(session) == [("user", "tell me")]


def test_models_lists_the_names_and_each_one_works(client_for, owner, fakes):
    client = client_for(owner)
    names = [model.id for model in client.models.list()]
    assert names[:2] == ["ethan", "ethan-companion"]
    for expected in (
        "ethan/claude-sonnet-4-6",
        "ethan/gpt-5",
        "ethan/gemini-2.5-flash",
        "ethan/offline",
        "ethan-companion/offline",
    ):
        assert expected in names
    assert client.models.retrieve("ethan/offline").id == "ethan/offline"
    completion = client.chat.completions.create(
        model="ethan-companion/offline", messages=[{"role": "user", "content": "我今天有点累"}]
    )
    assert completion.model == "ethan-companion/offline"
    session = ChatSession.objects.get()
    assert (session.mode, session.model) == ("companion", "offline")


def test_ethan_uses_the_sessions_model_else_the_persons_default(client_for, owner, llm_config):
    from agent_app.models import OwnerSettings

    OwnerSettings.objects.create(owner=owner, values={"model": "offline"})
    completion = client_for(owner).chat.completions.create(
        model="ethan", messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.model == "ethan/offline"


# --- under the server, as `make serve` runs it ------------------------------------------------

ANSWER = "Streaming means the first words arrive while the model is still writing the rest."


@pytest.fixture
def served(tmp_path, paced_openai):
    """The server on a home of its own, its model the OpenAI fake: (server, openai client)."""
    from tests.web_server import served_on_openai_fake

    with served_on_openai_fake(tmp_path / "home", paced_openai) as (server, token):
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{server.port}/v1", api_key=token, max_retries=0
        )
        yield server, client


def test_under_the_server_the_first_words_arrive_before_the_model_has_finished(
    served, paced_openai
):
    import time

    server, client = served
    # 20 chunks, the first after 100 ms and one every 50 ms: about a second of writing.
    paced_openai.reply(paced_openai.text(ANSWER), first_chunk_ms=100, chunk_ms=50)
    stream = client.chat.completions.create(
        model="ethan/gpt-4o",
        messages=[{"role": "user", "content": "what is streaming?"}],
        stream=True,
    )
    first_words_at = None
    text = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            first_words_at = first_words_at or time.monotonic()
            text.append(chunk.choices[0].delta.content)
    assert "".join(text) == ANSWER
    [request] = paced_openai.requests
    assert request.streamed and len(request.chunk_times) > 10
    assert first_words_at < request.chunk_times[-1]
    assert stored_contents(server.home, "assistant") == [ANSWER]
    # The conversation goes on in the same session, under the server too.
    paced_openai.reply(paced_openai.text("Yes."))
    client.chat.completions.create(
        model="ethan/gpt-4o",
        messages=[
            {"role": "user", "content": "what is streaming?"},
            {"role": "assistant", "content": ANSWER},
            {"role": "user", "content": "got it?"},
        ],
    )
    assert stored_contents(server.home, "user") == ["what is streaming?", "got it?"]


def test_under_the_server_a_client_that_leaves_mid_stream_still_gets_its_turn_kept(
    served, paced_openai
):
    """The reply is stored and the conversation recorded: the same conversation sent next
    continues the session instead of starting another."""
    import time

    server, client = served
    paced_openai.reply(paced_openai.text(ANSWER), first_chunk_ms=50, chunk_ms=50)
    stream = client.chat.completions.create(
        model="ethan/gpt-4o", messages=[{"role": "user", "content": "tell me"}], stream=True
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break  # the first words, then the client is gone
    stream.close()
    deadline = time.monotonic() + 30
    while not stored_contents(server.home, "assistant") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stored_contents(server.home, "assistant") == [ANSWER]
    paced_openai.reply(paced_openai.text("Good."))
    raw = client.chat.completions.with_raw_response.create(
        model="ethan/gpt-4o",
        messages=[
            {"role": "user", "content": "tell me"},
            {"role": "assistant", "content": ANSWER},
            {"role": "user", "content": "thanks"},
        ],
    )
    import sqlite3

    with sqlite3.connect(server.home / "ethan.sqlite3") as db:
        sessions = [row[0] for row in db.execute("SELECT id FROM sessions_app_chatsession")]
    assert sessions == [raw.headers["x-ethan-session"]]


def test_errors_outside_the_views_are_in_openais_shape_too(client, owner, settings):
    """Django's 404 and 405 and a body over the limit, refused by the middleware. /v1's limit
    is its own (a chat app's images travel in the body)."""
    settings.ETHAN_MAX_BODY_BYTES = 100
    settings.ETHAN_V1_MAX_BODY_BYTES = 1000
    token, _ = Token.objects.get_or_create(user=owner)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token.key}"}
    missing = client.get("/v1/embeddings", **auth)
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {
            "message": "not found",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    wrong_method = client.get("/v1/chat/completions", **auth)
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"
    too_big = client.post(
        "/v1/chat/completions", "x" * 2000, content_type="application/json", **auth
    )
    assert too_big.status_code == 413 and "the limit is 1000" in too_big.json()["error"]["message"]
    not_json = client.post("/v1/chat/completions", "{", content_type="application/json", **auth)
    assert (
        not_json.status_code == 400 and not_json.json()["error"]["type"] == "invalid_request_error"
    )
    assert not Message.objects.exists()


def test_a_json_turn_answered_in_the_requests_thread_gives_its_place_back_at_once(
    client, owner, llm_config, settings
):
    """Under WSGI (a WSGI server, Django's test client) a non-streamed turn's place under the
    per-person cap is given back when it is answered, not when the collector finds its
    generator: more turns than the cap, one after another, are all answered."""
    import gc

    settings.ETHAN_TURNS_PER_PERSON = 2
    token, _ = Token.objects.get_or_create(user=owner)
    gc.disable()  # nothing collected behind the test's back
    try:
        statuses = [
            client.post(
                "/v1/chat/completions",
                json.dumps(
                    {"model": "ethan/offline", "messages": [{"role": "user", "content": f"hi {n}"}]}
                ),
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {token.key}",
            ).status_code
            for n in range(5)
        ]
    finally:
        gc.enable()
    assert statuses == [200] * 5


def test_a_placed_session_is_the_stored_row_and_only_its_owners(owner, other_owner):
    """conversation_place reads the conversation and its session in one statement compiled
    once (ethan_shared.compiled): the session it places is the stored row, field for field,
    in both of its forms (a first message; a history sent back), and never another person's."""
    first = ClientChat(instructions="", history=(), question="hi", said=(("user", "hi"),))
    later = ClientChat(
        instructions="",
        history=(("user", "hi"), ("assistant", "hello")),
        question="and now?",
        said=(("user", "hi"), ("assistant", "hello"), ("user", "and now?")),
    )
    for person in (owner, other_owner):
        session = ChatSession.objects.create(
            id=new_session_id(),
            owner=person,
            channel="api",
            title=f"{person.username}s",
            turn_claimed_at=timezone.now(),
        )
        ClientConversation.objects.create(
            session=session,
            owner=person,
            asked=digest(first.said),
            shown=digest(later.before),
        )
    for person in (owner, other_owner):
        stored_row = ChatSession.objects.get(owner=person)
        for chat in (first, later):
            placed = conversation_place(owner=person, chat=chat).session
            assert placed is not None and placed.pk == stored_row.pk
            for field in ChatSession._meta.concrete_fields:
                assert getattr(placed, field.attname) == getattr(stored_row, field.attname)
    assert (
        conversation_place(owner=owner, chat=replace(first, said=(("user", "bye"),))).session
        is None
    )
