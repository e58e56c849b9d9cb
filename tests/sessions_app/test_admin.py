from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote

from sessions_app.models import ChatSession

pytestmark = pytest.mark.django_db


def test_admin_lists_filters_and_searches_sessions(admin_client, owner, other_owner, make_session):
    mine = make_session(owner, "plan the launch", "ok")
    theirs = make_session(other_owner, "写一封邮件", "好的")
    listing = admin_client.get("/admin/sessions_app/chatsession/")
    assert listing.status_code == 200
    assert mine.id in listing.text and theirs.id in listing.text  # staff see everything

    found = admin_client.get("/admin/sessions_app/chatsession/", {"q": "邮件"})
    assert theirs.id in found.text and mine.id not in found.text
    filtered = admin_client.get("/admin/sessions_app/chatsession/", {"channel__exact": "api"})
    assert mine.id not in filtered.text


def test_admin_shows_messages_read_only(admin_client, owner, make_session):
    session = make_session(owner, "plan the launch", "what is the date?")
    page = admin_client.get(f"/admin/sessions_app/chatsession/{quote(session.pk)}/change/")
    assert page.status_code == 200
    assert "what is the date?" in page.text
    assert 'name="messages-0-content"' not in page.text  # shown, not editable


def test_admin_action_removes_only_selected_empty_sessions(admin_client, owner, make_session):
    full = make_session(owner, "hello")
    ChatSession.objects.create(id="s_20260101_0000_emp1", owner=owner)
    ChatSession.objects.create(id="s_20260101_0000_emp2", owner=owner)
    response = admin_client.post(
        "/admin/sessions_app/chatsession/",
        {"action": "cleanup_empty", "_selected_action": [full.pk, "s_20260101_0000_emp1"]},
        follow=True,
    )
    assert "Removed 1 empty session(s)." in response.text
    assert set(ChatSession.objects.values_list("pk", flat=True)) == {
        full.pk,
        "s_20260101_0000_emp2",
    }


def test_admin_needs_staff(client, owner):
    client.force_login(owner)
    response = client.get("/admin/sessions_app/chatsession/")
    assert response.status_code == 302


def test_admin_lists_import_runs_read_only_without_their_upload(admin_client, owner):
    from sessions_app.models import ImportRun

    run = ImportRun.objects.create(
        owner=owner, source="chatgpt", file_name="chatgpt-export.zip", upload=b"PK-secret-bytes"
    )
    listing = admin_client.get("/admin/sessions_app/importrun/")
    assert listing.status_code == 200 and "chatgpt-export.zip" in listing.text
    page = admin_client.get(f"/admin/sessions_app/importrun/{run.pk}/change/")
    assert page.status_code == 200
    assert "PK-secret-bytes" not in page.text and 'name="file_name"' not in page.text
    assert admin_client.get("/admin/sessions_app/importrun/add/").status_code == 403
