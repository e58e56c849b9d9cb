"""The 我的画像 page (Django client) and the profile API."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from profile_app.models import ProfileRevision, ProfileSection
from profile_app.selectors import profile_markdown
from profile_app.services import profile_update

pytestmark = pytest.mark.django_db


def test_page_needs_a_login(client):
    response = client.get("/profile/")
    assert response.status_code == 302 and response.url.startswith("/accounts/login/")


def test_page_shows_edits_and_refuses_invalid(client, owner):
    profile_update(owner=owner, section="basic", entry="名字：Ada")
    client.force_login(owner)
    page = client.get("/profile/")
    assert page.status_code == 200
    assert "<h2>基础特征</h2>" in page.text and "<li>名字：Ada</li>" in page.text
    assert "## 基础特征\n\n- 名字：Ada" in page.text  # in the editor

    edited = profile_markdown(owner=owner).replace("## 目标与方向", "## 目标与方向\n\n- 年底上线")
    saved = client.post("/profile/", {"markdown": edited}, follow=True)
    assert "已保存 / Saved." in saved.text
    assert ProfileSection.objects.get(owner=owner, key="goals").content == "- 年底上线"
    assert ProfileRevision.objects.filter(actor="user:ada").count() == 1

    broken = edited + "\n## goals\n- again\n"
    refused = client.post("/profile/", {"markdown": broken})
    assert refused.status_code == 400
    assert "没有保存 / Not saved: section 目标与方向 appears twice" in refused.text
    assert "- again" in refused.text  # what was typed is still in the editor
    assert ProfileSection.objects.get(owner=owner, key="goals").content == "- 年底上线"


def test_raw_html_is_not_rendered(client, owner):
    profile_update(owner=owner, section="basic", entry="<script>alert(1)</script>")
    client.force_login(owner)
    assert "<script>alert(1)</script>" not in client.get("/profile/").text


@pytest.fixture
def api(owner):
    client = APIClient()
    token = Token.objects.create(user=owner)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def test_api_get_put_patch(api, owner, other_owner):
    profile_update(owner=other_owner, section="basic", entry="名字：Grace")
    body = api.get("/api/profile").json()
    assert body["markdown"].startswith("# 用户画像\n\n## 基础特征\n")
    assert [s["key"] for s in body["sections"]] == [
        "basic",
        "identity",
        "goals",
        "work_style",
        "psych",
        "language",
        "agreements",
    ]
    assert all(s["content"] == "" for s in body["sections"])  # never another owner's

    put = api.put("/api/profile", {"markdown": "## goals\n- ship it\n"}, format="json")
    assert put.status_code == 200
    assert put.json()["sections"][2] == {
        "key": "goals",
        "title": "目标与方向",
        "content": "- ship it",
    }
    assert "section 基础特征 is not in the document: it was left as it is" in put.json()["notes"]

    patched = api.patch(
        "/api/profile/sections/目标与方向", {"entry": "run", "mode": "append"}, format="json"
    )
    assert patched.json() == {"key": "goals", "title": "目标与方向", "content": "- ship it\n- run"}


@pytest.mark.parametrize(
    ("method", "url", "payload", "field"),
    [
        ("put", "/api/profile", {"markdown": "## basic\n## basic\n"}, "markdown"),
        ("put", "/api/profile", {}, "markdown"),
        ("patch", "/api/profile/sections/hobbies", {"entry": "x"}, "key"),
        ("patch", "/api/profile/sections/goals", {"entry": "x", "mode": "replace"}, "mode"),
        ("patch", "/api/profile/sections/goals", {"entry": "  "}, "entry"),
    ],
)
def test_api_refusals_write_nothing(api, method, url, payload, field):
    response = getattr(api, method)(url, payload, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not ProfileSection.objects.exists() and not ProfileRevision.objects.exists()


def test_api_needs_credentials():
    assert APIClient().get("/api/profile").status_code == 401
