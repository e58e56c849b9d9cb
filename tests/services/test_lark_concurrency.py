"""Two deliveries of one Lark event racing on PostgreSQL: one row, one turn, one reply."""

from __future__ import annotations

import pytest
from django.test import Client

from agent_app.models import LarkEvent
from sessions_app.models import Message
from tests.lark_helpers import deliver, message_event
from tests.services.conftest import all_at_once


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_are_processed_once(services_ready, lark, settings):
    settings.ETHAN_EMBEDDED = True  # the handling runs in each request's thread, after it
    event = message_event("ev-race", "你好")
    statuses = all_at_once(lambda: deliver(Client(), event).status_code, 4)
    assert statuses == [200, 200, 200, 200]
    assert LarkEvent.objects.count() == 1
    assert len(lark.replies) == 1
    assert Message.objects.filter(role="user").count() == 1
