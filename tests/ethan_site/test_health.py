from __future__ import annotations

import pytest

from ethan_site.celery import app as celery_app


@pytest.fixture
def broker(settings, monkeypatch):
    """Point the Celery app at a broker URL for one test, then put the old one back."""
    old = celery_app.conf.broker_url

    def use(url: str) -> None:
        settings.ETHAN_EMBEDDED = False
        # Celery reads the environment variable before its own configuration.
        monkeypatch.setenv("CELERY_BROKER_URL", url)
        celery_app.conf.broker_url = url

    yield use
    celery_app.conf.broker_url = old


@pytest.mark.django_db
def test_healthz_embedded(client, settings):
    settings.ETHAN_EMBEDDED = True
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "embedded"}


@pytest.mark.django_db
def test_healthz_unreachable_broker_is_503(client, broker):
    broker("redis://127.0.0.1:1/0")  # port 1: nothing listens there
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "error" and body["database"] == "ok"
    assert body["broker"].startswith("error: ")
    assert "127.0.0.1" not in body["broker"]  # no connection details leak out


@pytest.mark.django_db
def test_healthz_is_get_only(client):
    assert client.post("/healthz").status_code == 405


def test_admin_static_files_are_served_without_collectstatic(client):
    response = client.get("/static/admin/css/base.css")
    assert response.status_code == 200
    assert b"body" in b"".join(response.streaming_content)


# About 30 s (the connection pool's own wait for a database that refuses): make test-slow.
@pytest.mark.slow
def test_healthz_database_down_is_503(tmp_path):
    """A real unreachable PostgreSQL (nothing listens on port 1), in a child process."""
    from tests.conftest import run_manage

    probe = (
        "from django.test import Client; r = Client(HTTP_HOST='localhost').get('/healthz'); "
        "print(r.status_code, r.json()['status'], r.json()['database'][:6])"
    )
    result = run_manage(
        ["shell", "-v", "0", "-c", probe],
        tmp_path,
        DATABASE_URL="postgres://nobody@127.0.0.1:1/none",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "503 error error:"
