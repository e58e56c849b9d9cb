"""GET /healthz: is the database reachable, and the broker when one is configured."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

BROKER_TIMEOUT_SECONDS = 2.0


def _check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return "ok"


def _check_broker() -> str:
    if settings.ETHAN_EMBEDDED:
        return "embedded"
    from ethan_site.celery import app

    # One quick connection attempt: a health check must answer fast, not retry for minutes.
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=BROKER_TIMEOUT_SECONDS)
    return "ok"


@require_GET
def healthz(request):
    checks: dict[str, str] = {}
    healthy = True
    for name, check in (("database", _check_database), ("broker", _check_broker)):
        try:
            checks[name] = check()
        except Exception as exc:  # any failure is "down"; the type tells the operator why
            checks[name] = f"error: {type(exc).__name__}"
            healthy = False
    body = {"status": "ok" if healthy else "error", **checks}
    return JsonResponse(body, status=200 if healthy else 503)
