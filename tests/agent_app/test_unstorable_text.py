"""Text no one can store (ethan_shared.limits.storable_text: a NUL, a lone surrogate) is refused
with nothing written at every door: the services every door calls, the REST API, the pages and
MCP. /v1 is in test_openai_api.py (the openai SDK), import in tests/transfer, PostgreSQL in
tests/services/test_unstorable_text.py."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from django.core.exceptions import ValidationError
from rest_framework.authtoken.models import Token

from agent_app.turn import TurnInputError, turn_plan
from ethan_shared.limits import UnstorableText, storable_text
from memory_app import services as memory_services
from memory_app.models import Fact, FactEvent, Procedure
from profile_app.markdown import ProfileParseError
from profile_app.models import ProfileRevision, ProfileSection
from profile_app.services import profile_replace, profile_update
from sessions_app.models import ChatSession, Message
from tests.mcp_client import error_text, over_http, served_in_thread, structured

pytestmark = pytest.mark.django_db

NUL = "a\x00b"
SURROGATE = "a\ud800b"
HOSTILE = [NUL, SURROGATE]


def _json(text_by_field: dict) -> str:
    """A JSON body as a JavaScript client writes one: a lone surrogate escaped ("\\ud800")."""
    return json.dumps(text_by_field)


def _fact(owner, content: str = "Ada lives in Lisbon") -> Fact:
    return memory_services.fact_write(
        owner=owner, content=content, category="knowledge", confidence=0.8, source="api"
    )


def _memory_unchanged(fact: Fact | None = None, procedure: Procedure | None = None) -> None:
    """Nothing written: no other fact, rule, profile text or message, no history row."""
    assert list(Fact.objects.all()) == ([fact] if fact else [])
    if fact is not None:
        fact.refresh_from_db()
        assert fact.content == "Ada lives in Lisbon" and fact.events.count() == 1
    else:
        assert not FactEvent.objects.exists()
    assert list(Procedure.objects.all()) == ([procedure] if procedure else [])
    if procedure is not None:
        procedure.refresh_from_db()
        assert (procedure.rule, procedure.context) == ("be brief", "")
    assert not ProfileSection.objects.exclude(content="").exists()
    assert not ProfileRevision.objects.exists()
    assert not ChatSession.objects.exists() and not Message.objects.exists()


# --- the rule ----------------------------------------------------------------------------------


def test_storable_text_names_the_character_in_one_wording():
    assert storable_text("a fact", "用户喜欢茶 🍵") == "用户喜欢茶 🍵"
    with pytest.raises(UnstorableText) as nul:
        storable_text("a fact", NUL)
    assert str(nul.value) == (
        "a fact contains a NUL character (U+0000), which text cannot hold: remove it"
    )
    with pytest.raises(UnstorableText) as surrogate:
        storable_text("the message", "x\udc00")
    assert str(surrogate.value) == (
        "the message contains a lone surrogate (U+DC00, half of a UTF-16 pair, not a "
        "character), which text cannot hold: remove it"
    )


@pytest.mark.parametrize("text", HOSTILE)
def test_the_turn_refuses_it_in_the_message_history_and_system_text(owner, text):
    for where in (
        {"text": text},
        {"text": "hi", "history": (("user", "hello"), ("assistant", text))},
        {"text": "hi", "instructions": text},
    ):
        with pytest.raises(TurnInputError, match="which text cannot hold"):
            turn_plan(owner=owner, session=None, model="offline", **where)
    assert not ChatSession.objects.exists()


@pytest.mark.parametrize("text", HOSTILE)
def test_the_memory_and_profile_services_refuse_it(owner, text):
    fact = _fact(owner)
    procedure, _ = memory_services.procedure_write(owner=owner, rule="be brief")
    writes = [
        lambda: _fact(owner, f"Ada likes {text}"),
        lambda: memory_services.fact_edit(fact=fact, actor="user", content=text),
        lambda: memory_services.procedure_write(owner=owner, rule=f"never {text}"),
        lambda: memory_services.procedure_write(owner=owner, rule="be kind", context=text),
        lambda: memory_services.procedure_edit(procedure=procedure, rule=text),
        lambda: memory_services.procedure_edit(procedure=procedure, context=text),
    ]
    for write in writes:
        with pytest.raises(ValidationError, match="which text cannot hold"):
            write()
    for mode in ("append", "merge", "overwrite"):
        with pytest.raises(ValueError, match="which text cannot hold"):
            profile_update(owner=owner, section="goals", entry=text, mode=mode)
    with pytest.raises(ProfileParseError, match="the profile contains"):
        profile_replace(owner=owner, markdown=f"## 目标与方向\n\n- {text}\n")
    _memory_unchanged(fact, procedure)


# --- REST ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE)
def test_rest_writes_refuse_it_with_a_400(api_for, owner, text):
    """DRF's CharField refuses both (ProhibitNullCharactersValidator and
    ProhibitSurrogateCharactersValidator) before any service is called."""
    fact = _fact(owner)
    procedure, _ = memory_services.procedure_write(owner=owner, rule="be brief")
    api = api_for(owner)
    writes = [
        ("post", "/api/chat", {"message": text}, "message"),
        ("post", "/api/facts", {"content": text, "category": "knowledge"}, "content"),
        ("patch", f"/api/facts/{fact.pk}", {"content": text}, "content"),
        ("post", "/api/procedures", {"rule": "be kind", "context": text}, "context"),
        ("patch", f"/api/procedures/{procedure.pk}", {"rule": text}, "rule"),
        ("put", "/api/profile", {"markdown": f"## 目标与方向\n\n- {text}\n"}, "markdown"),
        ("patch", "/api/profile/sections/goals", {"entry": text}, "entry"),
    ]
    for method, url, body, field in writes:
        answer = getattr(api, method)(url, _json(body), content_type="application/json")
        assert answer.status_code == 400 and field in answer.json(), url
    _memory_unchanged(fact, procedure)


def test_the_context_preview_refuses_a_nul(api_for, owner):
    """(A query string cannot carry a lone surrogate: it is UTF-8, decoded with U+FFFD.)"""
    answer = api_for(owner).get("/api/context", {"message": NUL})
    assert answer.status_code == 400 and "which text cannot hold" in json.dumps(answer.json())


# --- the pages -----------------------------------------------------------------------------------


def test_page_edits_refuse_a_nul_and_keep_the_text(client, owner):
    """A browser cannot send a lone surrogate (a form is UTF-8; it sends U+FFFD instead), but a
    NUL it can: the fact editor, the rule editor and 我的画像 each refuse it with the reason."""
    fact = _fact(owner)
    procedure, _ = memory_services.procedure_write(owner=owner, rule="be brief")
    client.force_login(owner, backend="django.contrib.auth.backends.ModelBackend")
    refused = client.post(f"/memory/facts/{fact.pk}/edit/", {"content": NUL})
    assert refused.status_code == 400
    assert "a fact contains a NUL character (U+0000)" in refused.text
    refused = client.post(
        f"/memory/procedures/{procedure.pk}/edit/", {"rule": "be brief", "context": NUL}
    )
    assert refused.status_code == 400
    assert "a rule&#x27;s context contains a NUL character" in refused.text
    refused = client.post("/profile/", {"markdown": f"## 目标与方向\n\n- {NUL}\n"})
    assert refused.status_code == 400
    assert "the profile contains a NUL character (U+0000)" in refused.text
    _memory_unchanged(fact, procedure)


# --- MCP -----------------------------------------------------------------------------------------


@pytest.fixture
def mcp_url(transactional_db):
    with served_in_thread() as url:
        yield url


def test_mcp_tools_refuse_a_nul_as_a_tool_error(mcp_url, owner):
    async def use(client):
        return [
            await client.call_tool("memory_write", {"content": NUL}),
            await client.call_tool("procedure_write", {"rule": "be brief", "context": NUL}),
            await client.call_tool("profile_update", {"section": "goals", "entry": NUL}),
            await client.call_tool("memory_write", {"content": "用户喜欢茶"}),
        ]

    token = Token.objects.get_or_create(user=owner)[0].key
    *refused, fine = over_http(mcp_url, token, use)
    reasons = [
        "content: a fact contains a NUL character (U+0000), which text cannot hold: remove it",
        "context: a rule's context contains a NUL character (U+0000), which text cannot hold: "
        "remove it",
        "a profile entry contains a NUL character (U+0000), which text cannot hold: remove it",
    ]
    for result, reason in zip(refused, reasons, strict=True):
        assert error_text(result).endswith(reason)
    structured(fine)
    assert list(Fact.objects.values_list("content", flat=True)) == ["用户喜欢茶"]
    assert not Procedure.objects.exists() and not ProfileRevision.objects.exists()


def test_mcp_refuses_a_lone_surrogate_before_any_tool(mcp_url, owner):
    """The mcp client cannot send one (its JSON is UTF-8); a JavaScript host's escaped "\\ud800"
    is not JSON to the SDK's parser, which answers a JSON-RPC parse error (a 400)."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "memory_write", "arguments": {"content": SURROGATE}},
    }
    request = urllib.request.Request(
        mcp_url,
        data=_json(call).encode(),
        headers={
            "Authorization": f"Bearer {Token.objects.get_or_create(user=owner)[0].key}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert json.load(refused.value)["error"]["code"] == -32700  # JSON-RPC's parse error
    assert not Fact.objects.exists()
