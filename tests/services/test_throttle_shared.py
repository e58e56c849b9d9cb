"""The API throttle on Redis (the cache a deployment with a broker gets), shared by every
server process; and a Redis that is down lets requests through rather than failing them."""

from __future__ import annotations

from django.conf import settings

from tests.web_server import api_token, migrated_home, web_server


def test_the_api_throttle_on_redis_is_shared_by_every_server_process(services_ready, tmp_path):
    from django.core.cache import cache

    assert settings.CACHES["default"]["BACKEND"].endswith("RedisCache")
    cache.clear()  # the suite's Redis database: no counts of an earlier run
    home = migrated_home(tmp_path / "home")
    token = api_token(home, "ada")
    # The child processes count in the suite's Redis (embedded SQLite for their rows).
    redis = {"ETHAN_CACHE_URL": settings.CACHES["default"]["LOCATION"]}
    with web_server(home, workers=3, ETHAN_API_RATE="10/min", **redis) as server:
        statuses = [
            server.request("GET", "/api/facts", headers={"Authorization": f"Token {token}"}).status
            for _ in range(40)
        ]
    assert (statuses.count(200), statuses.count(429)) == (10, 30)
    cache.clear()


def test_a_cache_that_is_down_does_not_fail_requests(tmp_path):
    home = migrated_home(tmp_path / "home")
    token = api_token(home, "ada")
    with web_server(home, ETHAN_CACHE_URL="redis://127.0.0.1:1/0", ETHAN_API_RATE="2/min") as s:
        statuses = [
            s.request("GET", "/api/facts", headers={"Authorization": f"Token {token}"}).status
            for _ in range(4)
        ]
    assert statuses == [200] * 4
