"""Text no one can store on PostgreSQL: a NUL through /v1 (the openai SDK, over a real socket)
was a 503 "retry later", which invites retries; it is a 400 with nothing stored, as on SQLite."""

from __future__ import annotations

import openai
import pytest

from channels_app.models import ClientConversation
from memory_app.models import Fact
from sessions_app.models import ChatSession, Message
from tests.channels import conftest as doors

# The /v1 tests' fixtures: an openai SDK client on the live server, with a person's token.
activity = doors.activity
client_for = doors.client_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("where", ["question", "history", "system"])
def test_a_nul_through_v1_on_postgresql_is_a_400_and_stores_nothing(
    services_ready, client_for, owner, llm_config, where
):
    nul = "milk\x00please"
    messages = [
        *([{"role": "system", "content": nul}] if where == "system" else []),
        {"role": "user", "content": nul if where == "history" else "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": nul if where == "question" else "coffee?"},
    ]
    client = client_for(owner, max_retries=2)  # a 5xx would be retried; a 400 never is
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="ethan", messages=messages)
    assert refused.value.param == "messages"
    assert "a NUL character (U+0000), which text cannot hold" in refused.value.message
    assert not ChatSession.objects.exists() and not Message.objects.exists()
    assert not ClientConversation.objects.exists() and not Fact.objects.exists()
    # The same conversation without it is answered and stored.
    clean = [{**m, "content": m["content"].replace("\x00", " ")} for m in messages]
    client.chat.completions.create(model="ethan", messages=clean)
    assert Message.objects.filter(role="assistant").count() == 2  # "hello", and the reply
