"""JSON answers for memory work: ask with a stated schema, validate, repair once, then fail loudly.

A failure is logged and counted (`failures`, per model) and raised as ModelOutputError: the
caller never mistakes a broken answer for "nothing to remember".
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections import Counter
from typing import Any

import jsonschema

from llm.client import complete
from llm.errors import ModelOutputError
from llm.types import Message

log = logging.getLogger(__name__)

# How many structured answers stayed invalid after their repair, per model, in this process.
failures: Counter[str] = Counter()

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)

REPAIR_PROMPT = (
    "Your previous answer could not be used: {problem}. Answer again with only the corrected "
    "JSON document, matching the schema, and nothing else."
)


def parse_json(text: str, schema: dict[str, Any]) -> Any:
    """The JSON document in `text` (code fences allowed), validated; ValueError says why not."""
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text.strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from exc
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the top level"
        raise ValueError(f"does not match the schema at {where}: {exc.message}") from exc
    return value


def complete_json(
    *,
    model: str,
    system: str,
    prompt: str,
    schema: dict[str, Any],
    label: str = "extract",
    max_tokens: int = 1200,
) -> Any:
    """The JSON answer of `model` to `prompt`, validated against `schema`; an invalid answer is
    sent back once to be repaired. ModelOutputError (naming `label`, what the answer was for)
    when the repair is invalid too."""
    instruction = (
        f"{system}\n\nAnswer with one JSON document only, no prose, matching this JSON schema:\n"
        f"{json.dumps(schema, ensure_ascii=False)}"
    )
    ask = functools.partial(
        complete, model=model, system=instruction, max_tokens=max_tokens, json_mode=True
    )
    messages = [Message.user(prompt)]
    first = ask(messages=messages)
    try:
        return parse_json(first.text, schema)
    except ValueError as problem:
        log.warning("structured answer from %s invalid, asking once to repair: %s", model, problem)
        repair = [
            *messages,
            first.as_message(),
            Message.user(REPAIR_PROMPT.format(problem=problem)),
        ]
    second = ask(messages=repair)
    try:
        return parse_json(second.text, schema)
    except ValueError as problem:
        failures[model] += 1
        log.error(
            "structured answer from %s still invalid after repair (%d so far): %s",
            model,
            failures[model],
            problem,
        )
        raise ModelOutputError(
            f"{model} gave no valid JSON for {label} after one repair: {problem}", raw=second.text
        ) from problem
