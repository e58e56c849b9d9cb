"""JSON errors on the API, secrets off the debug page (in-process; the same over a real socket
is tests/ethan_site/test_security.py; the sign-in throttle is tests/ethan_site/test_signin.py)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import path

from ethan_site.errors import MASK, mask_url_passwords

pytestmark = pytest.mark.django_db


def test_api_errors_are_json_with_a_detail(api_for, owner):
    api = api_for(owner)
    answers = {
        "unknown id": api.get("/api/facts/abc"),
        "unknown path": api.get("/api/nothing-here"),
        "method": api.delete("/api/chat"),
        "field": api.post("/api/facts", {}, format="json"),
        "too big": api.generic(
            "POST", "/api/chat", b"{}", "application/json", CONTENT_LENGTH="2000000"
        ),
        "bad length": api.generic(
            "POST", "/api/chat", b"{}", "application/json", CONTENT_LENGTH="lots"
        ),
    }
    assert {name: a.status_code for name, a in answers.items()} == {
        "unknown id": 404,
        "unknown path": 404,
        "method": 405,
        "field": 400,
        "too big": 413,
        "bad length": 400,
    }
    for answer in answers.values():
        assert answer["Content-Type"] == "application/json"
        assert isinstance(answer.json()["detail"], str)
    # Field errors keep their fields beside the detail.
    assert answers["field"].json() == {
        "detail": "content: This field is required.",
        "content": ["This field is required."],
    }


def _explode(request):
    broker_url = "redis://:hunter2-broker@127.0.0.1:6379/0"
    lark_app_secret = "in-a-local-" + request.method  # noqa: F841 (not in the source shown)
    raise RuntimeError(f"failed talking to {broker_url}")


urlpatterns = [path("explode/", _explode), path("api/explode/", _explode)]


@pytest.mark.urls(__name__)
def test_the_debug_page_masks_settings_locals_and_url_passwords(settings):
    settings.DEBUG = True
    settings.LARK_APP_SECRET = "lark-app-secret-on-the-page"
    settings.ETHAN_MODEL_API_ENV = {"OPENAI_API_KEY": "sk-on-the-page-123"}
    settings.CELERY_BROKER_URL = "redis://:hunter2-broker@127.0.0.1:6379/0"
    client = Client(raise_request_exception=False)
    page = client.get("/explode/")
    assert page.status_code == 500
    text = page.content.decode()
    assert "RuntimeError" in text and "LARK_APP_SECRET" in text  # it is the debug page
    for secret in ("lark-app-secret-on-the-page", "sk-on-the-page-123", "hunter2-broker"):
        assert secret not in text
    assert "in-a-local-GET" not in text
    api = client.get("/api/explode/")
    assert (api.status_code, api["Content-Type"]) == (500, "application/json")
    assert "hunter2" not in api.content.decode()


def test_url_passwords_are_masked():
    assert mask_url_passwords("postgres://ethan:s3cret@db:5432/ethan") == (
        f"postgres://ethan:{MASK}@db:5432/ethan"
    )
    assert (
        mask_url_passwords("redis://:pw@h/0 and redis://h/1")
        == f"redis://:{MASK}@h/0 and redis://h/1"
    )
