"""Extraction asks for JSON, repairs an invalid answer once, then fails loudly."""

from __future__ import annotations

import json
import logging

import pytest

from llm import ModelOutputError, memory, structured
from llm.types import Message

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
    if provider.name == "openai":
        assert body["response_format"] == {"type": "json_object"}
    if provider.name == "gemini":
        assert body["generationConfig"]["responseMimeType"] == "application/json"


def test_invalid_json_is_repaired_once(provider, caplog):
    provider.fake.reply(provider.text('{"facts": [{"content": "用户是后端工程师"'))  # cut off
    provider.fake.reply(provider.text("```json\n" + json.dumps(GOOD, ensure_ascii=False) + "\n```"))
    with caplog.at_level(logging.WARNING, logger="llm.structured"):
        extraction = memory.extract(model=provider.model, rounds=CONVERSATION)
    assert len(extraction.facts) == 2
    assert "asking once to repair" in caplog.text
    repair = json.dumps(provider.fake.requests[1].body, ensure_ascii=False)
    assert "could not be used: not valid JSON" in repair
    assert '{\\"facts\\": [{\\"content\\": \\"用户是后端工程师\\"' in repair  # its own answer


def test_still_invalid_after_repair_fails_loudly(provider, caplog):
    before = structured.failures[provider.model]
    provider.fake.reply(provider.text("I found two facts!"))
    provider.fake.reply(provider.text('{"facts": [{"content": "x", "category": "gossip"}]}'))
    with (
        caplog.at_level(logging.ERROR, logger="llm.structured"),
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
