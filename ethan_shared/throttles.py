"""The throttles: API requests per user, sign-in attempts per username and per address, and
the file cache they count in when several processes serve without a broker.

Their own module, importing nothing of DRF's views: DRF resolves DEFAULT_THROTTLE_CLASSES while
its APIView class is being built, so a module that imports rest_framework.views cannot hold them.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time

from django.core.cache.backends.filebased import FileBasedCache
from redis import RedisError
from rest_framework.exceptions import Throttled
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


class SignInThrottled(Throttled):
    """A sign-in refused before its password was checked: DRF answers it as a 429 on its own
    views, ethan_site.signin.SignInThrottleMiddleware on the pages."""


class LoginThrottle(SimpleRateThrottle):
    """Sign-in attempts (ETHAN_LOGIN_RATE, e.g. "10/min"), counted twice: per username, which
    stops guessing one person's password from many addresses, and per client address, which
    stops one address trying a password on many names. Either count past the rate refuses.

    Every attempt counts, successful or not, and it is counted before the password is checked:
    counting failures only would need the answer first, so guesses sent in parallel would all
    be checked before any failure was recorded. A person who knows their password needs one or
    two attempts, far below the rate. The counts are fixed windows of the rate's period (the
    wall-clock minute for "/min"), so a window's count is one atomic increment in Redis.
    """

    scope = "login"

    def wait_after(self, request, *, username: str) -> int | None:
        """Count one attempt; the whole seconds to wait if it is past the rate, else None. A
        cache that is down lets the attempt through, as it does API requests."""
        now = self.timer()
        window = int(now // self.duration)
        # Past the window's end: expiry only cleans up, a new window has new keys.
        ttl = int((window + 1) * self.duration - now) + self.duration
        name = hashlib.sha256(username.casefold().encode()).hexdigest()[:32]
        try:
            counts = [
                self._count(f"throttle_login_{kind}_{ident}_{window}", ttl)
                for kind, ident in (("name", name), ("addr", self.get_ident(request)))
            ]
        except (RedisError, OSError) as exc:
            log.warning("sign-in not counted (cache unavailable: %s)", type(exc).__name__)
            return None
        if max(counts) <= self.num_requests:
            return None
        return math.ceil((window + 1) * self.duration - now)

    def _count(self, key: str, ttl: int) -> int:
        self.cache.add(key, 0, ttl)
        try:
            count = self.cache.incr(key)
        except ValueError:  # evicted between the two: this attempt starts it again
            self.cache.set(key, 1, ttl)
            count = 1
        # The file cache's incr writes the entry again with the cache's default expiry.
        self.cache.touch(key, ttl)
        return count


class HomeFileCache(FileBasedCache):
    """Django's file cache under $ETHAN_HOME/cache, which the processes of `ethan serve
    --workers N` share without a broker, with its folder listed at most once a second.

    Django's lists the folder before every write, to delete a third of its files at random
    once there are MAX_ENTRIES: 270 µs of CPU a request with one person's counts, 590 µs with
    250 (docs/benchmarks/streams.md), and at its default 300 entries, counts were deleted
    once 300 people or addresses had been counted in a period. Listed once a second, the cap
    can be set high (settings: 10,000) and holds within a second's writes."""

    LIST_SECONDS = 1.0

    def __init__(self, dir, params):
        super().__init__(dir, params)
        self._listed_at = -self.LIST_SECONDS

    def _cull(self):
        # Two threads past the second at once both list: harmless, the cull is Django's.
        now = time.monotonic()
        if now - self._listed_at < self.LIST_SECONDS:
            return
        self._listed_at = now
        super()._cull()
