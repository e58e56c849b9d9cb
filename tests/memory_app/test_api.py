"""Facts (with history) and procedures over HTTP."""

from __future__ import annotations

import pytest

from memory_app.confidence import reinforced
from memory_app.models import Fact, Procedure
from memory_app.services import fact_write

pytestmark = pytest.mark.django_db


def test_fact_lifecycle(api_for, owner):
    api = api_for(owner)
    created = api.post(
        "/api/facts",
        {"content": "lives in Porto", "category": "knowledge", "confidence": 0.7},
        format="json",
    )
    assert created.status_code == 201
    fact = created.json()
    assert set(fact) == {
        "id",
        "content",
        "category",
        "confidence",
        "source",
        "source_client",
        "status",
        "superseded_by",
        "hit_count",
        "created_at",
        "last_accessed",
        "session_id",
        "sources",
    }
    assert fact["sources"] == []  # written by hand: said in no message
    assert fact["superseded_by"] is None
    assert fact["source_client"] == ""  # set for facts an MCP client wrote (docs/mcp.md)
    assert (fact["source"], fact["confidence"], fact["status"], fact["session_id"]) == (
        "api",
        0.7,
        "active",
        None,
    )
    patched = api.patch(
        f"/api/facts/{fact['id']}", {"content": "lives in Lisbon", "confidence": 0.9}, format="json"
    )
    assert (patched.json()["content"], patched.json()["confidence"]) == ("lives in Lisbon", 0.9)
    assert api.delete(f"/api/facts/{fact['id']}").status_code == 204
    history = api.get(f"/api/facts/{fact['id']}/history").json()["results"]
    assert [
        (
            h["event"],
            h["old_content"],
            h["new_content"],
            h["old_confidence"],
            h["new_confidence"],
            h["actor"],
        )
        for h in history
    ] == [
        ("add", "", "lives in Porto", None, 0.7, "api"),
        ("edit", "lives in Porto", "lives in Lisbon", 0.7, 0.9, "api:ada"),
        ("evict", "lives in Lisbon", "lives in Lisbon", 0.9, 0.9, "api:ada"),
    ]
    assert api.get("/api/facts").json()["count"] == 0  # evicted facts are not listed
    assert api.get("/api/facts", {"status": "evicted"}).json()["count"] == 1
    assert api.get("/api/facts", {"status": "all"}).json()["count"] == 1


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"content": "x", "confidence": 1.5}, "confidence"),
        ({"content": "x", "confidence": -0.1}, "confidence"),
        ({"content": "x", "category": "gossip"}, "category"),
        ({"content": ""}, "content"),
        ({"content": "!!!"}, "content"),
        ({}, "content"),
    ],
)
def test_fact_refusals_write_nothing(api_for, owner, payload, field):
    response = api_for(owner).post("/api/facts", payload, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not Fact.objects.exists()


def test_foreign_facts_are_404(api_for, owner, other_owner):
    theirs = fact_write(
        owner=other_owner, content="secret", category="knowledge", confidence=0.8, source="api"
    )
    api = api_for(owner)
    for method in ("get", "patch", "delete"):
        assert (
            getattr(api, method)(
                f"/api/facts/{theirs.pk}", {"confidence": 0.1}, format="json"
            ).status_code
            == 404
        )
    assert api.get(f"/api/facts/{theirs.pk}/history").status_code == 404
    theirs.refresh_from_db()
    assert (theirs.status, theirs.confidence) == ("active", 0.8)
    assert api.get("/api/facts", {"status": "nonsense"}).status_code == 400
    assert api.patch(f"/api/facts/{theirs.pk}", {}, format="json").status_code == 404


def test_procedures(api_for, owner, other_owner):
    api = api_for(owner)
    made = api.post("/api/procedures", {"rule": "Always reply in English"}, format="json")
    assert made.status_code == 201
    again = api.post("/api/procedures", {"rule": "always reply in english."}, format="json")
    assert (again.status_code, again.json()["id"]) == (200, made.json()["id"])
    pid = made.json()["id"]
    off = api.patch(f"/api/procedures/{pid}", {"active": False}, format="json").json()
    assert off == {**made.json(), "active": False}
    assert api.get("/api/procedures").json()["results"][0]["active"] is False
    assert api.post("/api/procedures", {"rule": " "}, format="json").status_code == 400
    other = api_for(other_owner)
    assert other.patch(f"/api/procedures/{pid}", {"active": True}, format="json").status_code == 404
    assert other.delete(f"/api/procedures/{pid}").status_code == 404
    assert api.delete(f"/api/procedures/{pid}").status_code == 204
    assert not Procedure.objects.exists()


@pytest.mark.parametrize("count", [3, 40])
def test_fact_list_queries_are_pinned(api_for, owner, count, django_assert_num_queries):
    for n in range(count):
        fact_write(
            owner=owner, content=f"fact {n}", category="knowledge", confidence=0.8, source="api"
        )
    api = api_for(owner)
    with django_assert_num_queries(4):  # token, count, page, the page's sources (one query)
        assert api.get("/api/facts").status_code == 200


def test_a_failing_database_is_a_json_503_not_an_html_500(api_for, owner):
    from django.db import connection

    api = api_for(owner)  # the token is read before the table goes
    with connection.cursor() as cursor:  # inside the test's transaction: undone afterwards
        cursor.execute("ALTER TABLE memory_app_procedure RENAME TO memory_app_procedure_gone")
    response = api.get("/api/procedures")
    assert response.status_code == 503
    assert response.json() == {
        "detail": "the database is unavailable: retry later",
        "retryable": True,
    }


def test_a_fact_shows_the_messages_it_came_from(api_for, owner, other_owner, llm_config):
    from channels_app.turns import turn_run

    result = turn_run(owner=owner, session=None, text="记住我喜欢喝美式咖啡", model="offline")
    api = api_for(owner)
    [fact] = api.get("/api/facts").json()["results"]
    question = result.session.messages.get(seq=1)
    assert fact["sources"] == [
        {"message_id": question.pk, "session_id": result.session.pk, "seq": 1, "role": "user"}
    ]
    [added] = api.get(f"/api/facts/{fact['id']}/history").json()["results"]
    assert added["sources"] == [{"session_id": result.session.pk, "seq": 1}]
    # The session it points to is the caller's own, shown by the sessions API.
    shown = api.get(f"/api/sessions/{result.session.pk}").json()
    assert shown["id"] == result.session.pk
    assert api_for(other_owner).get("/api/facts").json()["count"] == 0


def preference(owner, content: str, confidence: float = 0.8, **extra) -> Fact:
    return fact_write(
        owner=owner,
        content=content,
        category="preference",
        confidence=confidence,
        source=extra.pop("source", "consolidator"),
        **extra,
    )


def history(api, fact_id: int) -> list[tuple]:
    rows = api.get(f"/api/facts/{fact_id}/history").json()["results"]
    return [
        (h["event"], h["old_content"], h["new_content"], h["new_confidence"], h["actor"])
        for h in rows
    ]


def test_a_fact_patched_into_another_facts_words_is_merged_into_it(
    api_for, owner, other_owner, make_session
):
    session = make_session(owner, "I drink espresso", "noted")
    said = session.messages.get(seq=1)
    kept = preference(owner, "Likes a flat white")
    edited = preference(owner, "likes espresso", 0.9, session=session, sources=[said])
    # Another person's equal fact is not theirs to merge with.
    theirs = preference(other_owner, "likes a flat white", source="api")
    api = api_for(owner)

    patched = api.patch(
        f"/api/facts/{edited.pk}", {"content": "likes a  flat white!"}, format="json"
    )

    assert patched.status_code == 200
    body = patched.json()
    assert (body["id"], body["content"], body["status"], body["superseded_by"]) == (
        edited.pk,
        "likes a flat white!",
        "superseded",
        kept.pk,
    )
    [active] = api.get("/api/facts").json()["results"]
    merged = reinforced(0.8, 0.9)
    assert (active["id"], active["content"], active["hit_count"], active["confidence"]) == (
        kept.pk,
        "Likes a flat white",
        2,
        merged,
    )
    # The merged fact takes over where the edited one was said.
    assert [s["message_id"] for s in active["sources"]] == [said.pk]
    assert history(api, kept.pk) == [
        ("add", "", "Likes a flat white", 0.8, "consolidator"),
        (
            "reinforce",
            "Likes a flat white",
            "Likes a flat white",
            merged,
            f"api:ada (merged #{edited.pk} into it)",
        ),
    ]
    assert history(api, edited.pk) == [
        ("add", "", "likes espresso", 0.9, "consolidator"),
        (
            "supersede",
            "likes espresso",
            "likes a flat white!",
            0.9,
            f"api:ada (edit merged into #{kept.pk})",
        ),
    ]
    theirs.refresh_from_db()
    assert (theirs.status, theirs.hit_count) == ("active", 1)


def test_a_patch_that_keeps_a_facts_own_words_merges_nothing(api_for, owner):
    fact = preference(owner, "likes tea", source="api")
    api = api_for(owner)
    patched = api.patch(f"/api/facts/{fact.pk}", {"content": "Likes tea."}, format="json").json()
    assert (patched["status"], patched["superseded_by"], patched["content"]) == (
        "active",
        None,
        "Likes tea.",
    )
    assert [h[0] for h in history(api, fact.pk)] == ["add", "edit"]
