"""Bounded retries with exponential backoff, the same for every provider, around one stream.

A failure before the first text delta is retried: the consumer has seen nothing yet, so a second
attempt is invisible. After the first delta nothing is retried silently: the consumer may already
have shown the text, and a second attempt would write a different answer after it. The failure
is raised, typed, to the consumer instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import NoReturn

from llm.errors import ModelError, ModelUnavailable
from llm.types import StreamEvent, TextDelta

log = logging.getLogger(__name__)


def backoff_delay(attempt: int, *, base: float, cap: float, retry_after: float | None) -> float:
    """Wait before retry number `attempt` (0-based): base·2^attempt, or the server's
    Retry-After when it gave one, never more than `cap`."""
    wanted = retry_after if retry_after is not None else base * (2**attempt)
    return max(0.0, min(cap, wanted))


def stream_with_retries(
    attempt: Callable[[], Iterator[StreamEvent]],
    *,
    translate: Callable[[Exception], tuple[ModelError, float | None]],
    retries: int,
    base: float,
    cap: float,
    label: str,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[StreamEvent]:
    """Pass on the events of `attempt()`. Retry ModelUnavailable failures that happen before the
    first TextDelta, at most `retries` more times; raise every other failure typed."""
    tries = 0
    while True:
        delivered = False
        events = attempt()
        try:
            for event in events:
                delivered = delivered or isinstance(event, TextDelta)
                yield event
            return
        except ModelUnavailable as exc:
            # An adapter's own verdict (an answer with no choices, a stream cut short).
            error, retry_after, cause = exc, None, exc
        except ModelError:
            raise
        except Exception as exc:
            error, retry_after = translate(exc)  # re-raises what it does not know (bugs)
            cause = exc
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()  # release the connection now, not when the generator is collected
        if delivered:
            if isinstance(error, ModelUnavailable):
                error = ModelUnavailable(
                    f"{error} (the stream broke after it started; not retried)"
                )
            _raise(error, cause)
        if not isinstance(error, ModelUnavailable) or tries >= retries:
            if isinstance(error, ModelUnavailable):
                error = ModelUnavailable(f"{error} (gave up after {tries + 1} attempts)")
            _raise(error, cause)
        delay = backoff_delay(tries, base=base, cap=cap, retry_after=retry_after)
        log.warning("%s: %s; retry %d/%d in %.2fs", label, error, tries + 1, retries, delay)
        sleep(delay)
        tries += 1


def _raise(error: ModelError, cause: Exception) -> NoReturn:
    # `raise e from e` would make the error its own cause.
    if error is cause:
        raise error
    raise error from cause
