"""Bounded retries with exponential backoff, the same for every provider, around one stream.

A failure before the first text delta is retried: the consumer has seen nothing yet, so a second
attempt is invisible. After the first delta nothing is retried silently: the consumer may already
have shown the text, and a second attempt would write a different answer after it. The failure
is raised, typed, to the consumer instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import NoReturn

from ethan_llm.errors import ModelError, ModelUnavailable
from ethan_llm.types import StreamEvent, TextDelta

log = logging.getLogger(__name__)


def backoff_delay(attempt: int, *, base: float, cap: float, retry_after: float | None) -> float:
    """Wait before retry number `attempt` (0-based): base·2^attempt, or the server's
    Retry-After when it gave one, never more than `cap`."""
    wanted = retry_after if retry_after is not None else base * (2**attempt)
    return max(0.0, min(cap, wanted))


class Retrying:
    """The retry rule of one stream, for the sync and the async loop alike: after a failed
    attempt, how long to wait before the next one, or the typed error to raise."""

    def __init__(
        self,
        *,
        translate: Callable[[Exception], tuple[ModelError, float | None]],
        retries: int,
        base: float,
        cap: float,
        label: str,
    ):
        self.translate = translate
        self.retries = retries
        self.base = base
        self.cap = cap
        self.label = label
        self.tries = 0

    def delay_after(self, exc: Exception, *, delivered: bool) -> float:
        """The wait before the next attempt after `exc` (`delivered`: a TextDelta had been
        passed on); raises the typed error instead when it is not retried."""
        if isinstance(exc, ModelUnavailable):
            # An adapter's own verdict (an answer with no choices, a stream cut short).
            error, retry_after, cause = exc, None, exc
        elif isinstance(exc, ModelError):
            raise exc
        else:
            error, retry_after = self.translate(exc)  # re-raises what it does not know (bugs)
            cause = exc
        if delivered:
            if isinstance(error, ModelUnavailable):
                error = ModelUnavailable(
                    f"{error} (the stream broke after it started; not retried)"
                )
            _raise(error, cause)
        if not isinstance(error, ModelUnavailable) or self.tries >= self.retries:
            if isinstance(error, ModelUnavailable):
                error = ModelUnavailable(f"{error} (gave up after {self.tries + 1} attempts)")
            _raise(error, cause)
        delay = backoff_delay(self.tries, base=self.base, cap=self.cap, retry_after=retry_after)
        log.warning(
            "%s: %s; retry %d/%d in %.2fs", self.label, error, self.tries + 1, self.retries, delay
        )
        self.tries += 1
        return delay


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
    retrying = Retrying(translate=translate, retries=retries, base=base, cap=cap, label=label)
    while True:
        delivered = False
        events = attempt()
        try:
            for event in events:
                delivered = delivered or isinstance(event, TextDelta)
                yield event
            return
        except Exception as exc:
            delay = retrying.delay_after(exc, delivered=delivered)
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()  # release the connection now, not when the generator is collected
        sleep(delay)


async def astream_with_retries(
    attempt: Callable[[], AsyncIterator[StreamEvent]],
    *,
    translate: Callable[[Exception], tuple[ModelError, float | None]],
    retries: int,
    base: float,
    cap: float,
    label: str,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncIterator[StreamEvent]:
    """stream_with_retries for an async attempt (the SDKs' async clients): the same rule, and
    the waits do not block the event loop."""
    retrying = Retrying(translate=translate, retries=retries, base=base, cap=cap, label=label)
    while True:
        delivered = False
        events = attempt()
        try:
            async for event in events:
                delivered = delivered or isinstance(event, TextDelta)
                yield event
            return
        except Exception as exc:
            delay = retrying.delay_after(exc, delivered=delivered)
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()
        await sleep(delay)


def _raise(error: ModelError, cause: Exception) -> NoReturn:
    # `raise e from e` would make the error its own cause.
    if error is cause:
        raise error
    raise error from cause
