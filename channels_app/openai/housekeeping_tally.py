"""Counting the chat apps' housekeeping requests /v1 recognised (channels_app.openai.housekeeping):
one row a day per app and kind, in the log and the admin. The request itself is never stored."""

from __future__ import annotations

import logging
from datetime import date

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from channels_app.models import HousekeepingTally

log = logging.getLogger(__name__)


def housekeeping_count(*, app: str, kind: str, day: date | None = None) -> None:
    """Count one recognised request of `app` for `kind` on `day` (today, local time), and log it.

    The day's row is incremented in the database (an UPDATE with F(), so concurrent requests
    never lose a count); the first request of a day creates it, and of two that race to create
    it the loser's insert fails on the unique constraint and it increments the winner's row."""
    day = day or timezone.localdate()
    rows = HousekeepingTally.objects.filter(app=app, kind=kind, day=day)
    if not rows.update(count=F("count") + 1):
        try:
            # A savepoint, so a lost race does not spoil a caller's transaction.
            with transaction.atomic():
                HousekeepingTally.objects.create(app=app, kind=kind, day=day, count=1)
        except IntegrityError:
            rows.update(count=F("count") + 1)
    log.info("housekeeping request recognised: app=%s kind=%s (not stored)", app, kind)
