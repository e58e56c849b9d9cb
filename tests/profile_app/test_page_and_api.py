"""The 我的画像 page (Django client) and the profile API."""

from __future__ import annotations

import html
import re

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from profile_app.markdown import parse
from profile_app.models import ProfileRevision, ProfileSection
from profile_app.selectors import profile_markdown, profile_sections
from profile_app.services import profile_update

pytestmark = pytest.mark.django_db


EDITOR = re.compile(r'<textarea name="markdown" id="markdown"[^>]*>(.*?)</textarea>', re.S)


def editor(page: str) -> str:
    """What the editor holds, as the browser reads it."""
    return html.unescape(EDITOR.search(page)[1])


def test_page_needs_a_login(client):
    response = client.get("/profile/")
    assert response.status_code == 302 and response.url.startswith("/accounts/login/")


def test_page_shows_edits_and_refuses_invalid(client, owner):
    profile_update(owner=owner, section="basic", entry="名字：Ada")
    client.force_login(owner)
    page = client.get("/profile/")
    assert page.status_code == 200
    assert '<h2>基础特征 <small class="gloss" lang="en">· Basics</small></h2>' in page.text
    assert "<li>名字：Ada</li>" in page.text
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


def test_an_empty_profile_shows_each_heading_with_its_english_gloss(client, owner):
    client.force_login(owner, backend="django.contrib.auth.backends.ModelBackend")
    page = client.get("/profile/").text
    rendered = page[page.index('id="rendered"') : page.index("</section>")]

    assert re.findall(r"<h([12])>(.*?)</h\1>", rendered) == [
        ("1", '用户画像 <small class="gloss" lang="en">· User profile</small>'),
        *(
            ("2", f'{title} <small class="gloss" lang="en">· {english}</small>')
            for title, english in (
                ("基础特征", "Basics"),
                ("身份与背景", "Identity and background"),
                ("目标与方向", "Goals and direction"),
                ("工作与沟通方式", "Work and communication"),
                ("心理与情绪", "Mind and mood"),
                ("个人语言与激励", "Personal language and motivation"),
                ("与 Agent 的约定", "Agreements with Ethan"),
            )
        ),
    ]
    # The document itself keeps its Chinese headings, and reads back exactly as it is written.
    stored = profile_markdown(owner=owner)
    assert "Basics" not in stored and editor(page) == stored
    assert parse(stored).sections == profile_sections(owner=owner)


def test_a_users_own_heading_text_gets_no_gloss(client, owner):
    profile_update(owner=owner, section="goals", entry="## 基础特征")  # her words
    client.force_login(owner, backend="django.contrib.auth.backends.ModelBackend")
    page = client.get("/profile/").text
    rendered = page[page.index('id="rendered"') : page.index("</section>")]
    assert rendered.count('<small class="gloss"') == 8  # the title and the seven sections
    assert "<h2>基础特征</h2>" in rendered  # hers, in a list item


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
