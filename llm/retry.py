"""Bounded retries with exponential backoff, the same for every provider."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from llm.errors import ModelError, ModelUnavailable

T = TypeVar("T")
log = logging.getLogger(__name__)


def backoff_delay(attempt: int, *, base: float, cap: float, retry_after: float | None) -> float:
    """Wait before retry number `attempt` (0-based): base·2^attempt, or the server's
    Retry-After when it gave one, never more than `cap`."""
    wanted = retry_after if retry_after is not None else base * (2**attempt)
    return max(0.0, min(cap, wanted))


def call_with_retries(
    call: Callable[[], T],
    *,
    translate: Callable[[Exception], tuple[ModelError, float | None]],
    retries: int,
    base: float,
    cap: float,
    label: str,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run `call`; retry only ModelUnavailable failures, at most `retries` more times."""
    attempt = 0
    while True:
        try:
            return call()
        except ModelError:
            raise
        except Exception as exc:
            error, retry_after = translate(exc)
            if not isinstance(error, ModelUnavailable) or attempt >= retries:
                if isinstance(error, ModelUnavailable):
                    error = ModelUnavailable(f"{error} (gave up after {attempt + 1} attempts)")
                raise error from exc
            delay = backoff_delay(attempt, base=base, cap=cap, retry_after=retry_after)
            log.warning("%s: %s; retry %d/%d in %.2fs", label, error, attempt + 1, retries, delay)
            sleep(delay)
            attempt += 1
