"""Housekeeping counts racing on PostgreSQL: requests of one app, kind and day counted at once,
from the day's first (its row created by one of them) on, lose no count."""

from __future__ import annotations

from datetime import date

import pytest

from channels_app.models import HousekeepingTally
from channels_app.openai.housekeeping_tally import housekeeping_count
from tests.services.conftest import all_at_once

COUNTS_EACH = 25


@pytest.mark.django_db(transaction=True)
def test_housekeeping_count_concurrent_requests_lose_no_count(services_ready):
    day = date(2026, 12, 6)

    def count_many() -> int:
        for _ in range(COUNTS_EACH):
            housekeeping_count(app="open-webui", kind="follow_ups", day=day)
        return COUNTS_EACH

    assert all_at_once(count_many, 4) == [COUNTS_EACH] * 4
    rows = HousekeepingTally.objects.values_list("app", "kind", "day", "count")
    assert list(rows) == [("open-webui", "follow_ups", day, 4 * COUNTS_EACH)]
