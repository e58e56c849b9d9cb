"""The throttles: API requests per user, sign-in attempts per address.

Their own module, importing nothing of DRF's views: DRF resolves DEFAULT_THROTTLE_CLASSES while
its APIView class is being built, so a module that imports rest_framework.views cannot hold them.
"""

from __future__ import annotations

import logging

from redis import RedisError
from rest_framework.throttling import SimpleRateThrottle, UserRateThrottle

log = logging.getLogger(__name__)


class _SharedCounts:
    """Throttle counts live in the shared cache (settings.CACHES: Redis with a broker, else
    files), so every web process counts the same requests. A cache that is down lets the
    request through: a chat must not fail because its rate cannot be counted."""

    def allow_request(self, request, view) -> bool:
        try:
            return super().allow_request(request, view)
        except (RedisError, OSError) as exc:
            log.warning("throttle not counted (cache unavailable: %s)", type(exc).__name__)
            return True


class PerUserThrottle(_SharedCounts, UserRateThrottle):
    """Requests per authenticated user (ETHAN_API_RATE, e.g. "600/min")."""

    scope = "user"


class LoginThrottle(_SharedCounts, SimpleRateThrottle):
    """Sign-in attempts per client address (ETHAN_LOGIN_RATE, e.g. "10/min")."""

    scope = "login"

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
