"""GET /api/sessions, GET/DELETE /api/sessions/{id}, GET /api/sessions/{id}/messages."""

from __future__ import annotations

import pytest

from sessions_app.models import ChatSession

pytestmark = pytest.mark.django_db


def test_list_search_show_and_messages(api_for, owner, other_owner, make_session):
    mine = make_session(owner, "plan the launch", "ok")
    chinese = make_session(owner, "写一封邮件", "好的")
    make_session(other_owner, "grace plans too", "ok")
    api = api_for(owner)
    listed = api.get("/api/sessions").json()
    assert listed["count"] == 2
    assert [s["id"] for s in listed["results"]] == [chinese.pk, mine.pk]
    assert set(listed["results"][0]) == {
        "id",
        "title",
        "model",
        "mode",
        "channel",
        "created_at",
        "updated_at",
    }
    assert [s["id"] for s in api.get("/api/sessions", {"q": "邮件"}).json()["results"]] == [
        chinese.pk
    ]
    assert api.get("/api/sessions", {"q": "PLAN"}).json()["count"] == 1
    assert api.get(f"/api/sessions/{mine.pk}").json()["title"] == "plan the launch"
    messages = api.get(f"/api/sessions/{mine.pk}/messages").json()
    assert [(m["seq"], m["role"], m["content"]) for m in messages["results"]] == [
        (1, "user", "plan the launch"),
        (2, "assistant", "ok"),
    ]


def test_another_owners_session_is_404_everywhere(api_for, owner, outsider, make_session):
    mine = make_session(owner, "private", "ok")
    api = api_for(outsider)
    assert api.get("/api/sessions").json()["count"] == 0
    for method, url in (
        ("get", f"/api/sessions/{mine.pk}"),
        ("get", f"/api/sessions/{mine.pk}/messages"),
        ("delete", f"/api/sessions/{mine.pk}"),
    ):
        assert getattr(api, method)(url).status_code == 404, url
    assert ChatSession.objects.filter(pk=mine.pk).exists()


@pytest.mark.parametrize("hostile", ["\x00", "s_2026\x00", "\ud800"])
def test_a_session_id_no_session_can_hold_is_not_found_not_a_database_error(
    api_for, owner, make_session, hostile
):
    """A NUL or a lone surrogate in a session id (PostgreSQL cannot even compare it): 404."""
    make_session(owner, "hi", "ok")
    if "\x00" in hostile:  # a lone surrogate cannot even be sent in a URL
        context = api_for(owner).get("/api/context", {"message": "hi", "session_id": hostile})
        assert context.status_code == 404, context.content
    from sessions_app import selectors
    from sessions_app.errors import SessionNotFound

    for lookup in (
        lambda: selectors.session_get_for_owner(owner=owner, session_id=hostile),
        lambda: selectors.session_resolve(owner=owner, ref=hostile),
    ):
        with pytest.raises(SessionNotFound):
            lookup()


def test_delete(api_for, owner, make_session):
    session = make_session(owner, "bye", "ok")
    assert api_for(owner).delete(f"/api/sessions/{session.pk}").status_code == 204
    assert not ChatSession.objects.exists()


def test_unauthenticated_is_401(client):
    assert client.get("/api/sessions").status_code in (401, 403)


@pytest.mark.parametrize("count", [3, 30])
def test_list_queries_are_pinned(api_for, owner, make_session, count, django_assert_num_queries):
    for n in range(count):
        make_session(owner, f"topic {n}", "ok")
    api = api_for(owner)
    # token lookup, count, page; the messages page: token, session, count, page
    with django_assert_num_queries(3):
        assert api.get("/api/sessions").status_code == 200
    session = ChatSession.objects.first()
    with django_assert_num_queries(4):
        assert api.get(f"/api/sessions/{session.pk}/messages").status_code == 200


def test_a_search_with_a_nul_character_or_over_the_limit_is_a_400(api_for, owner, make_session):
    """Found by schemathesis on PostgreSQL, which cannot compare text with NUL: a 503 before."""
    make_session(owner, "hello", "hi")
    api = api_for(owner)
    nul = api.get("/api/sessions", {"q": "\x00"})
    assert nul.status_code == 400 and "q" in nul.json()
    assert api.get("/api/sessions", {"q": "x" * 1001}).status_code == 400
    assert api.get("/api/sessions", {"q": "hello"}).json()["count"] == 1
