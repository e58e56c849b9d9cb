"""Lengths and the rule capacity (ethan_shared.limits, ETHAN_PROCEDURE_CAPACITY), the same at
every door: the chat tools, the services, the REST API and the admin."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from agent_app.tools import run_tool
from ethan_llm.types import ToolCall
from ethan_shared.limits import FACT_MAX_CHARS, RULE_CONTEXT_MAX_CHARS, RULE_MAX_CHARS
from memory_app import selectors, services
from memory_app.models import Fact, FactEvent, Procedure

pytestmark = pytest.mark.django_db
CAPACITY = 30  # settings.ETHAN_PROCEDURE_CAPACITY's default


def tool(owner, session, name: str, **arguments) -> str:
    call = ToolCall(id="call_1", name=name, arguments=arguments)
    return run_tool(owner=owner, session=session, message=None, call=call)


def fill_rules(owner, count: int = CAPACITY) -> None:
    for n in range(count):
        services.procedure_write(owner=owner, rule=f"rule number {n}")


def test_tool_long_fact_refused_and_nothing_written(owner, make_session):
    session = make_session(owner, "hi")
    result = tool(owner, session, "memory_write", content="x" * 31_000, category="knowledge")
    assert result == "error: content: a fact is at most 2000 characters; this one is 31000"
    assert not Fact.objects.exists() and not FactEvent.objects.exists()
    # At the limit it is taken.
    assert tool(owner, session, "memory_write", content="y" * FACT_MAX_CHARS, category="knowledge")
    assert Fact.objects.get().content == "y" * FACT_MAX_CHARS


def test_tool_long_rule_refused_and_nothing_written(owner, make_session):
    session = make_session(owner, "hi")
    result = tool(owner, session, "procedure_write", rule="always " + "x" * 31_005)
    assert result == "error: rule: a rule is at most 500 characters; this one is 31012"
    result = tool(owner, session, "procedure_write", rule="be brief", context="c" * 1001)
    assert result == (
        "error: context: a rule's context is at most 1000 characters; this one is 1001"
    )
    assert not Procedure.objects.exists()


def test_tool_capacity_refuses_the_31st_rule(owner, other_owner, make_session):
    session = make_session(owner, "hi")
    fill_rules(owner)
    result = tool(owner, session, "procedure_write", rule="never use emoji")
    assert result == (
        "error: rule: you have 30 active rules, the most Ethan keeps is 30; switch one off first"
    )
    assert Procedure.objects.filter(owner=owner).count() == CAPACITY
    # The same rule again is not a new one; another owner has room of their own.
    assert tool(owner, session, "procedure_write", rule="rule number 3").startswith("ok: rule")
    other_session = make_session(other_owner, "hi")
    assert tool(other_owner, other_session, "procedure_write", rule="never use emoji").startswith(
        "ok: rule"
    )


def test_procedure_write_reactivation_counts_against_the_capacity(owner):
    first, _ = services.procedure_write(owner=owner, rule="reply in English")
    services.procedure_edit(procedure=first, active=False)
    fill_rules(owner)
    with pytest.raises(ValidationError) as refused:
        services.procedure_write(owner=owner, rule="Reply in English.")
    assert refused.value.message_dict == {
        "rule": ["you have 30 active rules, the most Ethan keeps is 30; switch one off first"]
    }
    with pytest.raises(ValidationError, match="switch one off first"):
        services.procedure_edit(procedure=first, active=True)
    first.refresh_from_db()
    assert first.active is False
    # Switching one off makes room.
    services.procedure_edit(procedure=Procedure.objects.get(rule="rule number 0"), active=False)
    again, created = services.procedure_write(owner=owner, rule="Reply in English.")
    assert (again.pk, again.active, created) == (first.pk, True, False)


def test_fact_services_refuse_long_content(owner):
    fact = services.fact_write(
        owner=owner, content="lives in Porto", category="knowledge", confidence=0.8, source="api"
    )
    long = "word " * 1000  # 4999 characters once its spacing is collapsed
    with pytest.raises(
        ValidationError, match="a fact is at most 2000 characters; this one is 4999"
    ):
        services.fact_write(
            owner=owner, content=long, category="knowledge", confidence=0.8, source="api"
        )
    with pytest.raises(ValidationError, match="this one is 4999"):
        services.fact_update(fact=fact, content=long, confidence=0.9, actor="consolidator")
    with pytest.raises(ValidationError, match="this one is 4999"):
        services.fact_edit(fact=fact, content=long, actor="api:ada")
    fact.refresh_from_db()
    assert (fact.content, fact.confidence, fact.events.count()) == ("lives in Porto", 0.8, 1)


def test_rows_stored_before_the_limits_can_still_be_rerated_and_switched_off(owner):
    # Written straight to the table, as before the limits existed.
    fact = Fact.objects.create(owner=owner, content="z" * 5000, content_key="k", source="api")
    rule = Procedure.objects.create(owner=owner, rule="r" * 600, rule_key="k")
    services.fact_edit(fact=fact, confidence=0.5, actor="admin:root")
    services.procedure_edit(procedure=rule, active=False)
    fact.refresh_from_db()
    rule.refresh_from_db()
    assert (fact.confidence, rule.active) == (0.5, False)


def test_procedures_active_is_bounded_by_the_capacity(owner):
    for n in range(CAPACITY + 5):  # stored before the capacity existed
        Procedure.objects.create(owner=owner, rule=f"old rule {n}", rule_key=str(n))
    rules = selectors.procedures_active(owner=owner)
    assert [p.rule for p in rules] == [f"old rule {n}" for n in range(CAPACITY)]


def test_api_refuses_long_texts_and_the_31st_rule(api_for, owner):
    api = api_for(owner)
    long_fact = api.post("/api/facts", {"content": "x" * (FACT_MAX_CHARS + 1)}, format="json")
    long_rule = api.post("/api/procedures", {"rule": "x" * (RULE_MAX_CHARS + 1)}, format="json")
    long_context = api.post(
        "/api/procedures",
        {"rule": "be brief", "context": "x" * (RULE_CONTEXT_MAX_CHARS + 1)},
        format="json",
    )
    assert (long_fact.status_code, long_rule.status_code, long_context.status_code) == (
        400,
        400,
        400,
    )
    assert "rule" in long_rule.json() and "context" in long_context.json()
    assert not Fact.objects.exists() and not Procedure.objects.exists()

    fill_rules(owner)
    full = api.post("/api/procedures", {"rule": "never use emoji"}, format="json")
    assert (full.status_code, full.json()["rule"]) == (
        400,
        ["you have 30 active rules, the most Ethan keeps is 30; switch one off first"],
    )
    first = Procedure.objects.get(rule="rule number 0")
    api.patch(f"/api/procedures/{first.pk}", {"active": False}, format="json")
    back = api.patch(f"/api/procedures/{first.pk}", {"active": True}, format="json")
    assert back.status_code == 200  # its own place is free again
    made = api.post("/api/procedures", {"rule": "never use emoji"}, format="json")
    assert made.status_code == 400
    assert Procedure.objects.filter(owner=owner, active=True).count() == CAPACITY


ADMIN_URL = "/admin/memory_app/fact/"


def test_admin_form_refuses_a_long_fact(admin_client, owner):
    form = {
        "owner": owner.pk,
        "content": "x" * (FACT_MAX_CHARS + 1),
        "category": "knowledge",
        "confidence": "0.8",
        "supersede_with": "",
        "events-TOTAL_FORMS": "0",
        "events-INITIAL_FORMS": "0",
        "events-MIN_NUM_FORMS": "0",
        "events-MAX_NUM_FORMS": "1000",
    }
    page = admin_client.post(f"{ADMIN_URL}add/", form)
    assert page.status_code == 200  # the form again, with the error
    assert "a fact is at most 2000 characters; this one is 2001" in page.text
    assert not Fact.objects.exists()
    page = admin_client.post(f"{ADMIN_URL}add/", {**form, "content": "lives in Porto"})
    assert page.status_code == 302
    assert Fact.objects.get().content == "lives in Porto"


def test_admin_procedure_form_refuses_a_long_rule_and_the_31st(admin_client, owner):
    url = "/admin/memory_app/procedure/add/"
    form = {"owner": owner.pk, "rule": "x" * (RULE_MAX_CHARS + 1), "context": "", "active": "on"}
    page = admin_client.post(url, form)
    assert page.status_code == 200
    assert "a rule is at most 500 characters; this one is 501" in page.text
    fill_rules(owner)
    page = admin_client.post(url, {**form, "rule": "never use emoji"})
    assert page.status_code == 200
    assert "you have 30 active rules, the most Ethan keeps is 30" in page.text
    # Stored switched off it is taken; switching it on in the form is refused.
    page = admin_client.post(url, {**form, "rule": "never use emoji", "active": ""})
    assert page.status_code == 302
    stored = Procedure.objects.get(rule="never use emoji")
    assert (stored.active, stored.source) == (False, "admin")
    change = f"/admin/memory_app/procedure/{stored.pk}/change/"
    page = admin_client.post(change, {**form, "rule": "never use emoji"})
    assert page.status_code == 200 and "switch one off first" in page.text
    assert Procedure.objects.filter(owner=owner, active=True).count() == CAPACITY


def test_consolidator_skips_an_over_long_extracted_fact(owner, make_session):
    from ethan_llm.memory import ExtractedFact
    from memory_app.consolidator import apply_fact

    session = make_session(owner, "hi")
    long = ExtractedFact(content="x" * (FACT_MAX_CHARS + 1), category="knowledge", importance=0.8)
    short = ExtractedFact(content="lives in Porto", category="knowledge", importance=0.8)
    assert apply_fact(session=session, item=long, action="ADD", target=None) == "skip"
    assert apply_fact(session=session, item=short, action="ADD", target=None) == "add"
    assert list(Fact.objects.values_list("content", flat=True)) == ["lives in Porto"]
