"""GET /healthz: is the database reachable, and the broker when one is configured.

Two doors onto one report: the Django view (runserver, the WSGI baseline, tests' client) and
`healthz_asgi`, which ethan_site.asgi answers before Django's middleware. A load balancer's
probe is a request like any other to the one server, and each of Django's synchronous
middleware hooks is a hop to a thread and back through the event loop: under a thousand
streams every hop waits behind the streams' work (bench.concurrent_streams), where this waits
for one. It also answers whatever Host the probe sends (a load balancer probes by IP, which
ALLOWED_HOSTS need not list): it reveals nothing but "ok".
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import redis
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import load_backend
from django.http import JsonResponse
from django.views.decorators.http import require_GET
from redis.backoff import NoBackoff
from redis.retry import Retry

from ethan_shared.pooled import pooled_connection

BROKER_TIMEOUT_SECONDS = 2.0
HEALTH_CLIENT_NAME = "ethan-healthz"
# /healthz's checks run on a thread of their own, not on the turns' database threads
# (agent_app.turn_io): there a probe would queue behind the turns' steps, and answer as late
# as the busiest of them.
_HEALTH_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="healthz")


def _check_database(database: BaseDatabaseWrapper = connection) -> str:
    with database.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return "ok"


# The server's /healthz thread's own connection, on a database whose connections come from a
# pool (PostgreSQL): kept between probes, outside the pool. From the pool a probe paid a
# checkout, with the pool's own check of the connection (a round trip), and under a thousand
# streams it waited up to 38 ms for it (bench.concurrent_streams); its SELECT 1 is check enough.
_probe = threading.local()


def _probe_database() -> BaseDatabaseWrapper | None:
    """The kept connection's wrapper, None where the database has no pool (SQLite: the
    server's threads keep theirs anyway, ethan_site.asgi)."""
    database = getattr(_probe, "database", None)
    if database is None:
        shared = connections.settings[DEFAULT_DB_ALIAS]
        if not shared.get("OPTIONS", {}).get("pool"):
            return None
        own = {
            **shared,
            "OPTIONS": {k: v for k, v in shared["OPTIONS"].items() if k != "pool"},
            "CONN_HEALTH_CHECKS": False,
        }
        database = load_backend(own["ENGINE"]).DatabaseWrapper(own, alias="healthz")
        _probe.database = database
    return database


def _check_probe_database() -> str:
    database = _probe_database()
    try:
        return _check_database(database)
    except DatabaseError:
        # A connection the database dropped (a restart) is not a database that is down: once
        # more, on a new connection.
        database.close()
        return _check_database(database)


def _check_broker() -> str:
    if settings.ETHAN_EMBEDDED:
        return "embedded"
    from ethan_site.celery import app

    url = app.conf.broker_url
    if url.startswith(("redis://", "rediss://")):
        # Redis (the documented broker): one PING on a connection kept for it, where a new
        # connection through kombu at every probe took 15-55 ms of a /healthz under a
        # thousand streams (bench.concurrent_streams), most of its answer.
        _redis_broker(url).ping()
        return "ok"
    # Any other transport: one quick connection attempt: a health check must answer fast,
    # not retry for minutes.
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=BROKER_TIMEOUT_SECONDS)
    return "ok"


@functools.lru_cache(maxsize=2)
def _redis_broker(url: str) -> redis.Redis:
    """A client whose connection stays open between probes, named HEALTH_CLIENT_NAME in the
    broker's CLIENT LIST. One retry on a new connection, at once: a kept connection the broker
    dropped (a restart, an idle timeout) is not a broker that is down."""
    return redis.Redis.from_url(
        url,
        socket_timeout=BROKER_TIMEOUT_SECONDS,
        socket_connect_timeout=BROKER_TIMEOUT_SECONDS,
        retry=Retry(NoBackoff(), 1),
        client_name=HEALTH_CLIENT_NAME,
    )


def health_report(check_database=_check_database) -> tuple[int, dict[str, str]]:
    """The status code and the body: 200 when every check passed, else 503."""
    checks: dict[str, str] = {}
    healthy = True
    for name, check in (("database", check_database), ("broker", _check_broker)):
        try:
            checks[name] = check()
        except Exception as exc:  # any failure is "down"; the type tells the operator why
            checks[name] = f"error: {type(exc).__name__}"
            healthy = False
    return (200 if healthy else 503), {"status": "ok" if healthy else "error", **checks}


@require_GET
def healthz(request):
    status, body = health_report()
    return JsonResponse(body, status=status)


def _report_in_thread() -> tuple[int, dict[str, str]]:
    if _probe_database() is not None:
        return health_report(_check_probe_database)
    with pooled_connection():
        return health_report()


async def healthz_asgi(scope, receive, send) -> None:
    """/healthz as an ASGI application: the same report and answers as the view (405 but for
    GET), its checks in one hop to its own thread."""
    if scope["method"] == "GET":
        loop = asyncio.get_running_loop()
        status, body = await loop.run_in_executor(_HEALTH_THREAD, _report_in_thread)
        headers = [(b"content-type", b"application/json"), (b"x-content-type-options", b"nosniff")]
    else:
        status, body = 405, {"detail": "method not allowed"}  # as ethan_site.errors words it
        headers = [(b"content-type", b"application/json"), (b"allow", b"GET")]
    payload = json.dumps(body).encode()
    headers.append((b"content-length", str(len(payload)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
