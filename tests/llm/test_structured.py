"""Extraction asks with the provider's structured output, repairs an invalid answer once, then
fails loudly. Each real SDK runs against its fake, which refuses a schema the real API would."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import ethan_llm
from ethan_llm import ModelOutputError, ModelRequestError, memory, structured
from ethan_llm.structured import strict_schema
from ethan_llm.types import JsonSchema, Message
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.base import ProtocolError
from tests.fakes.openai_fake import FakeOpenAI

CONVERSATION = [
    Message.user("我是后端工程师，住在杭州。记住：我更喜欢简短的回答。"),
    Message.assistant("好的，明白了。"),
]
GOOD = {
    "facts": [
        {"content": "用户是后端工程师，住在杭州", "category": "knowledge", "importance": 0.8},
        {"content": "用户更喜欢简短的回答", "category": "preference", "importance": 0.95},
    ]
}


def test_extraction_prompt_states_the_schema_and_the_language(provider):
    provider.fake.reply(provider.text(json.dumps(GOOD, ensure_ascii=False)))
    extraction = memory.extract(model=provider.model, rounds=CONVERSATION)
    assert [(f.content, f.category, f.importance) for f in extraction.facts] == [
        ("用户是后端工程师，住在杭州", "knowledge", 0.8),
        ("用户更喜欢简短的回答", "preference", 0.95),
    ]
    assert extraction.psych == ()
    body = provider.fake.requests[0].body
    system = provider.system_of(body)
    assert "in the language of the conversation: Chinese for a Chinese conversation" in system
    assert json.dumps(memory.EXTRACT_SCHEMA, ensure_ascii=False) in system  # the schema, stated
    wire = json.dumps(body, ensure_ascii=False)
    assert "user: 我是后端工程师，住在杭州。记住：我更喜欢简短的回答。" in wire
    assert sent_schema(provider.name, body) == strict_schema(memory.EXTRACT_SCHEMA)


def test_invalid_json_is_repaired_once(provider, caplog):
    provider.fake.reply(provider.text('{"facts": [{"content": "用户是后端工程师"'))  # cut off
    provider.fake.reply(provider.text("```json\n" + json.dumps(GOOD, ensure_ascii=False) + "\n```"))
    with caplog.at_level(logging.WARNING, logger="ethan_llm.structured"):
        extraction = memory.extract(model=provider.model, rounds=CONVERSATION)
    assert len(extraction.facts) == 2
    assert "asking once to repair" in caplog.text
    repair = json.dumps(provider.fake.requests[1].body, ensure_ascii=False)
    assert "could not be used: not valid JSON" in repair
    assert '{\\"facts\\": [{\\"content\\": \\"用户是后端工程师\\"' in repair  # its own answer
    # The repair asks with the same structured output.
    assert sent_schema(provider.name, provider.fake.requests[1].body) == strict_schema(
        memory.EXTRACT_SCHEMA
    )


def test_still_invalid_after_repair_fails_loudly(provider, caplog):
    before = structured.failures[provider.model]
    provider.fake.reply(provider.text("I found two facts!"))
    provider.fake.reply(provider.text('{"facts": [{"content": "x", "category": "gossip"}]}'))
    with (
        caplog.at_level(logging.ERROR, logger="ethan_llm.structured"),
        pytest.raises(ModelOutputError, match="after one repair") as error,
    ):
        memory.extract(model=provider.model, rounds=CONVERSATION)
    assert "does not match the schema at facts/0" in str(error.value)
    assert error.value.raw.startswith('{"facts"')
    assert structured.failures[provider.model] == before + 1
    assert "still invalid after repair" in caplog.text
    assert len(provider.fake.requests) == 2


def test_summary_keeps_the_language_instruction(provider):
    provider.fake.reply(provider.text("用户是杭州的后端工程师，偏好简短回答。"))
    summary = memory.summarize(model=provider.model, rounds=CONVERSATION)
    assert summary == "用户是杭州的后端工程师，偏好简短回答。"
    assert "a Chinese conversation gets a Chinese summary" in json.dumps(
        provider.fake.requests[0].body
    )


def test_parse_json_rules():
    schema = memory.EXTRACT_SCHEMA
    assert structured.parse_json('{"facts": []}', schema) == {"facts": []}
    assert structured.parse_json('```\n{"facts": []}\n```', schema) == {"facts": []}
    with pytest.raises(ValueError, match="not valid JSON"):
        structured.parse_json("facts: none", schema)
    with pytest.raises(ValueError, match="at the top level: 'facts' is a required property"):
        structured.parse_json("{}", schema)


# --- structured output on the wire ---------------------------------------------------------------


def sent_schema(name: str, body: dict[str, Any], label: str = "") -> dict[str, Any] | None:
    """The schema a request asked the provider to hold the answer to, where its API takes it
    (None when it asked for free text); OpenAI's names it (`label`, "extract" by default)."""
    if name == "openai":
        response_format = body.get("response_format")
        if response_format is None:
            return None
        assert response_format["type"] == "json_schema"
        assert response_format["json_schema"]["name"] == (label or "extract")
        assert response_format["json_schema"]["strict"] is True
        return response_format["json_schema"]["schema"]
    if name == "anthropic":
        if "output_config" not in body:
            return None
        assert "tools" not in body and "tool_choice" not in body
        assert body["output_config"]["format"]["type"] == "json_schema"
        return body["output_config"]["format"]["schema"]
    config = body.get("generationConfig") or {}
    if "responseJsonSchema" not in config:
        assert "responseMimeType" not in config
        return None
    assert config["responseMimeType"] == "application/json"
    assert "responseSchema" not in config
    return config["responseJsonSchema"]


# A schema with the shapes strict mode cares about: an optional nullable integer, an optional
# enum, an optional array of integers, a nested object in an array, constraints strict mode
# does not take, oneOf, and a $ref into $defs.
WIDE = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 20,
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "minLength": 1, "maxLength": 200},
                    "kind": {"enum": ["a", "b"]},
                    "score": {"type": "number", "minimum": 0, "maximum": 1},
                    "target": {"type": ["integer", "null"], "minimum": 1},
                    "turns": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                    "where": {"$ref": "#/$defs/place"},
                    "when": {"type": "string", "format": "date"},
                },
                "required": ["text"],
            },
        },
        "note": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    },
    "required": ["items"],
    "$defs": {
        "place": {
            "type": "object",
            "properties": {"city": {"type": "string", "pattern": "^[A-Z]"}},
            "required": ["city"],
            "additionalProperties": True,
        }
    },
}


def test_strict_schema_closes_objects_requires_everything_and_drops_constraints():
    strict = strict_schema(WIDE)
    item = strict["properties"]["items"]["items"]
    assert strict["required"] == ["items", "note"]
    assert strict["additionalProperties"] is False
    assert strict["properties"]["items"] == {"type": "array", "minItems": 1, "items": item}
    assert item == {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "kind": {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]},
            "score": {"type": ["number", "null"]},
            "target": {"type": ["integer", "null"]},
            "turns": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
            "where": {"anyOf": [{"$ref": "#/$defs/place"}, {"type": "null"}]},
            "when": {"type": ["string", "null"], "format": "date"},
        },
        "required": ["text", "kind", "score", "target", "turns", "where", "when"],
        "additionalProperties": False,
    }
    assert strict["properties"]["note"] == {
        "anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]
    }
    assert strict["$defs"]["place"] == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    assert WIDE["properties"]["items"]["items"]["required"] == ["text"]  # not mutated
    with pytest.raises(ValueError, match="top level is an object"):
        strict_schema({"type": "array", "items": {"type": "string"}})


@pytest.mark.parametrize("schema", [WIDE, memory.EXTRACT_SCHEMA], ids=["wide", "extract"])
def test_the_fakes_refuse_the_original_schema_and_take_the_strict_one(schema):
    def openai(body_schema):
        FakeOpenAI.check_response_format(
            {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": body_schema, "strict": True},
            }
        )

    def anthropic(body_schema):
        FakeAnthropic.check_output_config(
            {"format": {"type": "json_schema", "schema": body_schema}}
        )

    for check in (openai, anthropic):
        with pytest.raises(ProtocolError):
            check(schema)
        check(strict_schema(schema))


def test_the_openai_fake_refuses_what_strict_mode_refuses():
    def check(schema, name="x"):
        FakeOpenAI.check_response_format(
            {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
        )

    closed = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    with pytest.raises(ProtocolError, match="'additionalProperties' is required"):
        check(closed)
    with pytest.raises(ProtocolError, match="Missing 'a'"):
        check({**closed, "required": [], "additionalProperties": False})
    with pytest.raises(ProtocolError, match="'minLength' is not permitted"):
        check(
            {
                **closed,
                "properties": {"a": {"type": "string", "minLength": 1}},
                "additionalProperties": False,
            }
        )
    with pytest.raises(ProtocolError, match="name"):
        check(strict_schema(closed), name="extract facts")
    check(strict_schema(closed))


def test_the_anthropic_fake_takes_a_forced_tool_choice():
    tools = [{"name": "answer", "description": "d", "input_schema": {"type": "object"}}]
    FakeAnthropic.check_tool_choice({"type": "tool", "name": "answer"}, tools)
    with pytest.raises(ProtocolError, match="not offered"):
        FakeAnthropic.check_tool_choice({"type": "tool", "name": "other"}, tools)
    with pytest.raises(ProtocolError, match="needs tools"):
        FakeAnthropic.check_tool_choice({"type": "any"}, [])


def test_a_request_with_a_non_strict_schema_is_refused_as_the_real_api_would(provider):
    """The fakes check the schema where each API takes it: OpenAI and Anthropic refuse an open
    object, Gemini a $ref with keywords beside it."""
    schema = dict(memory.EXTRACT_SCHEMA)
    if provider.name == "gemini":
        schema = {
            **schema,
            "properties": {"facts": {"$ref": "#/$defs/facts", "description": "the facts"}},
            "$defs": {"facts": memory.EXTRACT_SCHEMA["properties"]["facts"]},
        }
    provider.fake.reply(provider.text("{}"))
    with pytest.raises(ModelRequestError):
        ethan_llm.complete(
            model=provider.model,
            messages=[Message.user("hi")],
            json_schema=JsonSchema("extract", schema),
        )
    assert sent_schema(provider.name, provider.fake.requests[0].body) == schema


def test_a_strict_answer_with_nulls_parses(provider):
    """Strict output names every property, null for the optional ones: the nulls the original
    schema does not allow are dropped before validation, the ones it allows are kept."""
    answer = {
        "facts": [
            {
                "content": "用户更喜欢简短的回答",
                "category": "preference",
                "importance": 0.9,
                "action": None,
                "target": None,
            },
            {
                "content": "用户住在杭州",
                "category": "correction",
                "importance": 0.9,
                "action": "UPDATE",
                "target": 1,
            },
        ],
        "psych": None,
    }
    provider.fake.reply(provider.text(json.dumps(answer, ensure_ascii=False)))
    extraction = memory.extract(model=provider.model, rounds=CONVERSATION, known=["用户住在上海"])
    assert [(f.content, f.action, f.target) for f in extraction.facts] == [
        ("用户更喜欢简短的回答", "ADD", None),
        ("用户住在杭州", "UPDATE", 1),
    ]
    assert len(provider.fake.requests) == 1


def test_a_model_that_ignores_the_schema_gets_one_repair(provider, caplog):
    """Valid JSON of the wrong shape (a server that does not hold the model to the schema) is
    sent back once, with what was wrong, and the schema is asked for again."""
    provider.fake.reply(provider.text('{"memories": ["用户是后端工程师"]}'))
    provider.fake.reply(provider.text(json.dumps(GOOD, ensure_ascii=False)))
    with caplog.at_level(logging.WARNING, logger="ethan_llm.structured"):
        extraction = memory.extract(model=provider.model, rounds=CONVERSATION)
    assert len(extraction.facts) == 2
    assert "'facts' is a required property" in caplog.text
    first, second = (request.body for request in provider.fake.requests)
    assert sent_schema(provider.name, first) == sent_schema(provider.name, second)
    assert sent_schema(provider.name, second) is not None
    wire = json.dumps(second, ensure_ascii=False)
    assert "could not be used: does not match the schema" in wire
    assert "memories" in wire  # its own answer, sent back as text


def test_a_server_that_refuses_structured_output_is_asked_with_the_prompt_only(provider, caplog):
    provider.fake.reply(
        provider.error(400, "response_format json_schema is not supported"), status=400
    )
    provider.fake.reply(provider.text(json.dumps(GOOD, ensure_ascii=False)))
    with caplog.at_level(logging.WARNING, logger="ethan_llm.structured"):
        extraction = memory.extract(model=provider.model, rounds=CONVERSATION)
    assert len(extraction.facts) == 2
    assert "refused structured output" in caplog.text
    refused, plain = (request.body for request in provider.fake.requests)
    assert sent_schema(provider.name, refused) == strict_schema(memory.EXTRACT_SCHEMA)
    assert sent_schema(provider.name, plain) is None
    # The schema is still stated in the prompt.
    assert json.dumps(memory.EXTRACT_SCHEMA, ensure_ascii=False) in provider.system_of(plain)


def test_parse_json_drops_only_the_nulls_the_schema_does_not_allow():
    schema = memory.EXTRACT_SCHEMA
    fact = {"content": "x", "category": "knowledge", "importance": 0.8}
    text = json.dumps({"facts": [{**fact, "action": None, "target": None}], "psych": None})
    assert structured.parse_json(text, schema) == {"facts": [{**fact, "target": None}]}
    with pytest.raises(ValueError, match="facts/0/content: None is not of type 'string'"):
        structured.parse_json(json.dumps({"facts": [{**fact, "content": None}]}), schema)
    wide = structured.parse_json(
        json.dumps({"items": [{"text": "t", "kind": "a", "where": None}], "note": None}), WIDE
    )
    assert wide == {"items": [{"text": "t", "kind": "a"}]}


def test_the_offline_model_ignores_the_schema():
    completion = ethan_llm.complete(
        model="offline",
        messages=[Message.user("你好")],
        json_schema=JsonSchema("extract", strict_schema(memory.EXTRACT_SCHEMA)),
    )
    assert completion.meta["offline"] is True


def test_one_consolidating_call_gives_the_summary_and_the_facts_of_the_new_turns(provider):
    """A compress batch's one call: the summary of every turn shown, the facts of the turns
    from extract_from on; a fact naming only earlier turns (extracted before) is dropped."""
    rounds = [*CONVERSATION, Message.user("我下周去东京出差。"), Message.assistant("一路顺风。")]
    answer = {
        "summary": "用户是杭州的后端工程师，下周去东京出差。",
        "facts": [
            {"content": "用户住在杭州", "category": "knowledge", "importance": 0.8, "turns": [1]},
            {
                "content": "用户下周去东京出差",
                "category": "decision",
                "importance": 0.8,
                "turns": [3],
            },
        ],
    }
    provider.fake.reply(provider.text(json.dumps(answer, ensure_ascii=False)))
    result = memory.consolidate(model=provider.model, rounds=rounds, extract_from=3)
    assert result.summary == "用户是杭州的后端工程师，下周去东京出差。"
    assert [(f.content, f.category, f.turns) for f in result.extraction.facts] == [
        ("用户下周去东京出差", "decision", (3,))
    ]
    assert len(provider.fake.requests) == 1
    body = provider.fake.requests[0].body
    system = provider.system_of(body)
    assert "take facts only from turn [3] onwards" in system
    assert json.dumps(memory.CONSOLIDATE_SCHEMA, ensure_ascii=False) in system
    assert sent_schema(provider.name, body, "consolidate") == strict_schema(
        memory.CONSOLIDATE_SCHEMA
    )
    assert "[3] user: 我下周去东京出差。" in json.dumps(body, ensure_ascii=False)


def test_the_offline_model_consolidates_by_summarising_and_extracting():
    rounds = [
        Message.user("我住在杭州。"),
        Message.assistant("好的。"),
        Message.user("我更喜欢简短的回答。"),
        Message.assistant("明白。"),
    ]
    whole = memory.consolidate(model="offline", rounds=rounds)
    assert whole.summary == memory.summarize(model="offline", rounds=rounds)
    assert whole.extraction.facts == memory.extract(model="offline", rounds=rounds).facts
    later = memory.consolidate(model="offline", rounds=rounds, extract_from=2)
    assert later.summary == whole.summary
    assert [(f.content, f.turns) for f in later.extraction.facts] == [
        ("用户更喜欢简短的回答", (3,))
    ]
    assert later.extraction.judged is False


def test_one_call_over_several_sessions_gives_a_summary_each_and_their_facts(provider):
    """Short chats' ends batched: the sessions under their own headings, turns numbered across
    them; a summary per session (a wrong count is repaired once), the facts of all."""
    first = [Message.user("我住在杭州。"), Message.assistant("好的。")]
    second = [Message.user("My dog is called Max."), Message.assistant("Nice.")]
    fact = {"category": "knowledge", "importance": 0.8}
    facts = [
        {**fact, "content": "用户住在杭州", "turns": [1]},
        {**fact, "content": "The user's dog is called Max", "turns": [3]},
    ]
    provider.fake.reply(provider.text(json.dumps({"summaries": ["只有一个"], "facts": facts})))
    answer = {"summaries": ["用户住在杭州。", "The user has a dog, Max."], "facts": facts}
    provider.fake.reply(provider.text(json.dumps(answer, ensure_ascii=False)))
    result = memory.consolidate_sessions(model=provider.model, sessions=[first, second])
    assert result.summaries == ("用户住在杭州。", "The user has a dog, Max.")
    assert [(f.content, f.turns) for f in result.extraction.facts] == [
        ("用户住在杭州", (1,)),
        ("The user's dog is called Max", (3,)),
    ]
    asked, repaired = (request.body for request in provider.fake.requests)
    wire = json.dumps(asked, ensure_ascii=False)
    assert "## Conversation 1\\n[1] user: 我住在杭州。\\n[2] assistant: 好的。" in wire
    assert "## Conversation 2\\n[3] user: My dog is called Max." in wire
    assert "is too short" in json.dumps(repaired, ensure_ascii=False)


def test_the_offline_model_consolidates_several_sessions_each_summarised_alone():
    first = [Message.user("我住在杭州。"), Message.assistant("好的。")]
    second = [Message.user("我更喜欢简短的回答。"), Message.assistant("明白。")]
    result = memory.consolidate_sessions(model="offline", sessions=[first, second])
    assert result.summaries == (
        memory.summarize(model="offline", rounds=first),
        memory.summarize(model="offline", rounds=second),
    )
    assert [(f.content, f.turns) for f in result.extraction.facts] == [
        ("用户住在杭州", (1,)),
        ("用户更喜欢简短的回答", (3,)),
    ]
    assert result.extraction.judged is False
