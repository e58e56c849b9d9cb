"""Forgetting a fact (services.fact_forget), one rule for every door: the REST API, the memory
page and the admin here; MCP's fact_forget over stdio and HTTP in tests/channels/test_mcp.py."""

import pytest
from django.test import Client

from memory_app import selectors, services
from memory_app.models import Fact

pytestmark = pytest.mark.django_db


def write(owner, content, confidence=0.8):
    return services.fact_write(
        owner=owner, content=content, category="knowledge", confidence=confidence, source="api"
    )


def history(fact: Fact) -> list[tuple[str, str]]:
    return list(fact.events.order_by("id").values_list("event", "actor"))


def injected(owner) -> list[str]:
    return [fact.content for fact in selectors.facts_for_injection(owner=owner, limit=20)]


def test_forgetting_evicts_keeps_the_history_and_one_undo_brings_it_back(owner):
    fact = write(owner, "lives in Porto")
    assert services.fact_forget(fact=fact, actor="user:ada") == Fact.Status.ACTIVE
    fact.refresh_from_db()
    assert fact.status == Fact.Status.EVICTED and injected(owner) == []
    # Forgotten again (a double click, a retried request): nothing changes, nothing recorded.
    assert services.fact_forget(fact=fact, actor="api:ada") == Fact.Status.EVICTED
    assert history(fact) == [("add", "api"), ("evict", "user:ada")]
    services.fact_undo(fact=fact, actor="user:ada")
    fact.refresh_from_db()
    assert fact.status == Fact.Status.ACTIVE and injected(owner) == ["lives in Porto"]


def test_two_doors_forgetting_at_once_record_one_eviction(owner):
    """Both read the fact active before either forgets it: the second forgets nothing."""
    page_copy = write(owner, "lives in Porto")
    api_copy = Fact.objects.get(pk=page_copy.pk)
    assert services.fact_forget(fact=page_copy, actor="user:ada") == Fact.Status.ACTIVE
    assert services.fact_forget(fact=api_copy, actor="api:ada") == Fact.Status.EVICTED
    assert api_copy.status == Fact.Status.EVICTED
    assert history(page_copy) == [("add", "api"), ("evict", "user:ada")]
    services.fact_undo(fact=page_copy, actor="user:ada")
    assert Fact.objects.get(pk=page_copy.pk).status == Fact.Status.ACTIVE


def test_a_superseded_fact_forgotten_is_undone_back_to_superseded(owner):
    old, new = write(owner, "lives in Porto"), write(owner, "lives in Lisbon")
    services.fact_supersede(old=old, new=new, actor="consolidator")
    assert services.fact_forget(fact=old, actor="user:ada") == Fact.Status.SUPERSEDED
    old.refresh_from_db()
    assert (old.status, old.superseded_by_id) == (Fact.Status.EVICTED, new.pk)
    services.fact_undo(fact=old, actor="user:ada")
    old.refresh_from_db()
    assert (old.status, old.superseded_by_id) == (Fact.Status.SUPERSEDED, new.pk)


def test_every_door_forgets_the_same_way_naming_itself(owner, api_for, admin_client):
    """Each door forgets its fact, twice: one "evict" event each, its actor naming the door."""
    api_fact, page_fact, admin_fact = (
        write(owner, f"likes {drink}") for drink in ("tea", "coffee", "cocoa")
    )
    api = api_for(owner)
    page = Client()
    page.force_login(owner)
    for _ in range(2):
        assert api.delete(f"/api/facts/{api_fact.pk}").status_code == 204
        assert page.post(f"/memory/facts/{page_fact.pk}/forget/").status_code == 302
        admin_client.post(
            "/admin/memory_app/fact/", {"action": "evict", "_selected_action": [admin_fact.pk]}
        )
    for fact, actor in (
        (api_fact, "api:ada"),
        (page_fact, "user:ada"),
        (admin_fact, "admin:admin"),
    ):
        fact.refresh_from_db()
        assert fact.status == Fact.Status.EVICTED
        assert history(fact) == [("add", "api"), ("evict", actor)]
    assert injected(owner) == []


def test_only_the_owner_forgets_through_their_doors(owner, other_owner, api_for):
    fact = write(owner, "lives in Porto")
    page = Client()
    page.force_login(other_owner)
    assert api_for(other_owner).delete(f"/api/facts/{fact.pk}").status_code == 404
    assert page.post(f"/memory/facts/{fact.pk}/forget/").status_code == 404
    fact.refresh_from_db()
    assert fact.status == Fact.Status.ACTIVE and history(fact) == [("add", "api")]
