"""JSON answers for memory work: ask with the provider's structured output, validate, repair
once, then fail loudly.

The schema travels twice: stated in the prompt as it is, and sent with the request in the strict
form the providers hold the model to (`strict_schema`). The answer is validated against the
original; a model that ignores the schema gets one repair. A failure is logged and counted
(`failures`, per model) and raised as ModelOutputError: the caller never mistakes a broken answer
for "nothing to remember".
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections import Counter
from typing import Any

import jsonschema

from ethan_llm.client import complete
from ethan_llm.errors import ModelOutputError, ModelRequestError
from ethan_llm.types import JsonSchema, Message

log = logging.getLogger(__name__)

# How many structured answers stayed invalid after their repair, per model, in this process.
failures: Counter[str] = Counter()

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)

REPAIR_PROMPT = (
    "Your previous answer could not be used: {problem}. Answer again with only the corrected "
    "JSON document, matching the schema, and nothing else."
)

# --- the strict form of a schema ---------------------------------------------------------------

# String formats that OpenAI's strict mode and Anthropic's structured outputs both know.
_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
_SCALARS = frozenset({"string", "number", "integer", "boolean"})


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` as strict structured output takes it (OpenAI strict mode; Anthropic and Gemini
    accept the same): every object closed (`additionalProperties: false`) with all of its
    properties in `required`, an optional property made nullable instead (`["integer", "null"]`,
    or `anyOf` with `{"type": "null"}`), `oneOf` as `anyOf`, and only the keywords all three
    take: type, properties, items, enum, const, anyOf, $ref/$defs, description, minItems 0 or 1
    and the common string formats. The rest (minLength, minimum, maximum, pattern, allOf…) is
    left out: the prompt states the original schema, and the answer is validated against it.
    ValueError for a schema whose top level is not an object (OpenAI refuses those)."""
    if not _is_object(schema):
        raise ValueError("structured output needs a schema whose top level is an object")
    return _strict(schema)


def _is_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind is None:
        return "properties" in node
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def _strict(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return {"$ref": node["$ref"]}  # strict mode takes no keywords beside a $ref
    out = {key: node[key] for key in ("type", "description", "enum", "const") if key in node}
    if "enum" in node and "type" not in node:
        out = {**_enum_type(node["enum"]), **out}
    variants = node.get("anyOf", node.get("oneOf"))
    if isinstance(variants, list):
        out["anyOf"] = [_strict(variant) for variant in variants]
    for defs in ("$defs", "definitions"):
        if isinstance(node.get(defs), dict):
            out[defs] = {name: _strict(sub) for name, sub in node[defs].items()}
    if _is_object(node):
        properties = node.get("properties") or {}
        required = set(node.get("required") or ())
        out["properties"] = {
            name: _strict(sub) if name in required else _nullable(_strict(sub))
            for name, sub in properties.items()
        }
        out.setdefault("type", "object")
        out["required"] = list(properties)
        out["additionalProperties"] = False
    if isinstance(node.get("items"), dict):
        out["items"] = _strict(node["items"])
    if node.get("minItems") in (0, 1):
        out["minItems"] = node["minItems"]
    if node.get("format") in _FORMATS:
        out["format"] = node["format"]
    return out


def _enum_type(values: list[Any]) -> dict[str, Any]:
    """The type an enum's values share ({"type": "string"} for ["a", "b"]), stated for servers
    that want one; {} when they are of several types."""
    names = {str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}
    kinds = sorted({names.get(type(value), "?") for value in values} - {"null"})
    if len(kinds) != 1 or kinds[0] == "?":
        return {}
    return {"type": [kinds[0], "null"] if None in values else kinds[0]}


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """`node` that also accepts null: a scalar type gains "null", anything else (an enum, an
    object, an array, a $ref) becomes one side of an anyOf."""
    if _accepts_null(node, None):
        return node
    kind = node.get("type")
    kinds = [kind] if isinstance(kind, str) else kind
    if isinstance(kinds, list) and set(kinds) <= _SCALARS and not {"enum", "const"} & set(node):
        return {**node, "type": [*kinds, "null"]}
    if set(node) == {"anyOf"}:
        return {"anyOf": [*node["anyOf"], {"type": "null"}]}
    return {"anyOf": [node, {"type": "null"}]}


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """The schema a local `$ref` ("#/$defs/name") points to; any other node as it is."""
    ref = node.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#"):
        return node
    target: Any = root
    for part in filter(None, ref[1:].split("/")):
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict):
            target = target.get(key)
        elif isinstance(target, list) and key.isdigit() and int(key) < len(target):
            target = target[int(key)]
        else:
            return {}
    return target if isinstance(target, dict) else {}


def _accepts_null(node: dict[str, Any], root: dict[str, Any] | None) -> bool:
    """Whether null is valid for the schema `node`, its $refs resolved in `root` (with no root,
    a $ref counts as not accepting null)."""
    if "$ref" in node:
        if root is None:
            return False
        node = _resolve(node, root)
    if "enum" in node and None not in node["enum"]:
        return False
    if "const" in node and node["const"] is not None:
        return False
    kind = node.get("type")
    if kind is not None and "null" not in ([kind] if isinstance(kind, str) else kind):
        return False
    for key in ("anyOf", "oneOf"):
        variants = node.get(key)
        if isinstance(variants, list) and not any(_accepts_null(v, root) for v in variants):
            return False
    return all(_accepts_null(v, root) for v in node.get("allOf") or ())


def _drop_added_nulls(value: Any, node: dict[str, Any], root: dict[str, Any]) -> Any:
    """`value` without the nulls strict_schema let in: an optional property that is null where
    the original schema `node` does not allow null is left out, at any depth."""
    node = _resolve(node, root)
    if isinstance(value, dict):
        properties = node.get("properties") or {}
        required = set(node.get("required") or ())
        kept = {}
        for key, item in value.items():
            sub = properties.get(key)
            if not isinstance(sub, dict):
                kept[key] = item
            elif item is None and key not in required and not _accepts_null(sub, root):
                continue
            else:
                kept[key] = _drop_added_nulls(item, sub, root)
        value = kept
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        value = [_drop_added_nulls(item, node["items"], root) for item in value]
    for key in ("anyOf", "oneOf", "allOf"):
        for variant in node.get(key) or ():
            if isinstance(variant, dict):
                value = _drop_added_nulls(value, variant, root)
    return value


# --- asking, checking, repairing ---------------------------------------------------------------


def parse_json(text: str, schema: dict[str, Any]) -> Any:
    """The JSON document in `text` (code fences allowed), validated against `schema` once the
    nulls its strict form let in are dropped; ValueError says why it is not valid."""
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text.strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from exc
    value = _drop_added_nulls(value, schema, schema)
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
    when the repair is invalid too.

    The request carries `strict_schema(schema)` as the provider's structured output. A server
    that refuses it (ModelRequestError: an OpenAI-compatible server without json_schema, a
    model without structured output) is asked again with the schema in the prompt only."""
    instruction = (
        f"{system}\n\nAnswer with one JSON document only, no prose, matching this JSON schema:\n"
        f"{json.dumps(schema, ensure_ascii=False)}"
    )
    ask = functools.partial(complete, model=model, system=instruction, max_tokens=max_tokens)
    shape: JsonSchema | None = JsonSchema(name=_schema_name(label), schema=strict_schema(schema))
    messages = [Message.user(prompt)]
    try:
        first = ask(messages=messages, json_schema=shape)
    except ModelRequestError as refused:
        log.warning(
            "%s refused structured output, asking with the schema in the prompt only: %s",
            model,
            refused,
        )
        shape = None
        first = ask(messages=messages)
    try:
        return parse_json(first.text, schema)
    except ValueError as problem:
        log.warning("structured answer from %s invalid, asking once to repair: %s", model, problem)
        repair = [
            *messages,
            # Plain text, however the answer came: valid on every wire as an assistant turn.
            Message.assistant(first.text),
            Message.user(REPAIR_PROMPT.format(problem=problem)),
        ]
    second = ask(messages=repair, json_schema=shape)
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


def _schema_name(label: str) -> str:
    """`label` as OpenAI takes a schema's name: letters, digits, _ and -, at most 64."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", label)[:64] or "answer"
