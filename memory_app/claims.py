"""Claiming a session's memory work before the model is called: compute at most once.

The cursors of WorkingState decide what is stored (a conditional UPDATE in the transaction that
stores it: exactly once). Without more, two workers racing on one session (a turn's task and
the catch-up sweep, a redelivered task) would both call the model and one would throw its
answer away. So memory work first claims the session's WorkingState row, with a conditional
UPDATE too, for ETHAN_MEMORY_CLAIM_SECONDS: longer than one model call with its retries
(ethan_llm.config: 4 attempts of 60 s and their waits), renewed before every call. A worker killed
mid-call leaves a claim that runs out, and the next one takes it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from memory_app.models import WorkingState

# How often a worker that must wait for a claim (a session's end) looks again.
WAIT_POLL_SECONDS = 0.2


class Claim:
    """The sessions of `session_ids` whose memory work this worker holds (`held`)."""

    def __init__(self, session_ids: Iterable[str]):
        self.token = uuid.uuid4().hex
        self.wanted = list(dict.fromkeys(session_ids))
        self.held: set[str] = set()
        self._rows_made = False

    def _until(self):
        return timezone.now() + timedelta(seconds=settings.ETHAN_MEMORY_CLAIM_SECONDS)

    def take(self) -> set[str]:
        """Claim every wanted session that is free (or whose claim ran out); the sessions held."""
        if not self._rows_made:  # once, not at every poll of a claim that waits
            WorkingState.objects.bulk_create(
                [WorkingState(session_id=session_id) for session_id in self.wanted],
                ignore_conflicts=True,
            )
            self._rows_made = True
        free = Q(claimed_by="") | Q(claimed_until__lt=timezone.now())
        WorkingState.objects.filter(Q(session_id__in=self.wanted) & free).update(
            claimed_by=self.token, claimed_until=self._until()
        )
        self.held = set(
            WorkingState.objects.filter(
                session_id__in=self.wanted, claimed_by=self.token
            ).values_list("session_id", flat=True)
        )
        return self.held

    def renew(self) -> bool:
        """Extend the claim before another model call; False if it ran out and was taken."""
        if not self.held:
            return False
        renewed = WorkingState.objects.filter(
            session_id__in=self.held, claimed_by=self.token
        ).update(claimed_until=self._until())
        return renewed == len(self.held)

    def release(self) -> None:
        if self.held:
            WorkingState.objects.filter(session_id__in=self.held, claimed_by=self.token).update(
                claimed_by="", claimed_until=None
            )
            self.held = set()


@contextmanager
def memory_work_claimed(session_ids: Iterable[str], *, wait: bool = False) -> Iterator[Claim]:
    """Hold the memory work of the sessions that are free, released on every path. With
    `wait`, first wait (up to one claim's length) until all of them are free: a session's end
    waits for its consolidation to finish rather than leaving the end to the sweep."""
    claim = Claim(session_ids)
    deadline = time.monotonic() + settings.ETHAN_MEMORY_CLAIM_SECONDS
    try:
        while len(claim.take()) < len(claim.wanted) and wait and time.monotonic() < deadline:
            claim.release()
            time.sleep(WAIT_POLL_SECONDS)
        yield claim
    finally:
        claim.release()
