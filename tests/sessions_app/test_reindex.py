"""ethan_reindex: stored search tokens rewritten with the current tokenizer, as the services
write them, and a second run changes nothing."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from episodes_app.models import Episode
from memory_app.models import Fact
from memory_app.services import fact_write
from sessions_app import services
from sessions_app.models import Message

pytestmark = pytest.mark.django_db


def reindex(*args: str) -> str:
    out = StringIO()
    call_command("ethan_reindex", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def stored() -> dict[tuple[str, int], str]:
    return {
        **{("message", m.pk): m.search_tokens for m in Message.objects.all()},
        **{("fact", f.pk): f.search_tokens for f in Fact.objects.all()},
        **{("episode", e.pk): e.search_tokens for e in Episode.objects.all()},
    }


@pytest.fixture
def memory(owner, other_owner, make_session):
    """Two owners' sessions (one with a tool call and an empty assistant turn) and a fact learnt
    from a message, written the way production writes them, and an episode with no tokens
    yet."""
    trip = make_session(owner, "I visited my sister in Lisbon", "Lovely! Did you like it?")
    services.message_append(session=trip, role="assistant", content="", tool_calls=[])
    services.message_append(session=trip, role="tool", content='{"ok": true}', tool_call_id="c1")
    services.message_append(session=trip, role="user", content="We liked the painted tiles")
    make_session(other_owner, "我们下个月去里斯本旅行", "好的，先订机票。", "ok!")
    said = Message.objects.get(session=trip, seq=1)
    fact_write(
        owner=owner,
        content="The user's sister lives in Lisbon",
        category="knowledge",
        confidence=0.8,
        source="consolidator",
        session=trip,
        message=said,
    )
    Episode.objects.create(
        owner=owner,
        session=trip,
        session_ref=trip.pk,
        summary="Talked about visiting a sister in Lisbon",
        keywords=["Lisbon", "sister"],
        search_tokens="",
        turn_count=2,
    )
    return trip


def test_reindex_gives_rows_with_old_tokens_the_ones_the_services_write(memory):
    fresh = stored()
    # Tokens as an older tokenizer wrote them (the suffix stripper: "visit", "liked" → "lik").
    Message.objects.update(search_tokens=" visit sister lisbon lik ")
    Fact.objects.update(search_tokens=" user' sister live lisbon ")
    assert stored() != fresh

    out = reindex()

    episode = ("episode", Episode.objects.get().pk)
    assert stored() == fresh | {episode: " talk visit sister lisbon lisbon sister "}
    messages, facts, episodes = Message.objects.count(), Fact.objects.count(), 1
    spoken = Message.objects.filter(role__in=["user", "assistant"]).count()
    assert out == (
        f"messages: {messages} of {messages} rewritten\n"
        f"facts: {facts} of {facts} rewritten\n"
        f"episodes: {episodes} of {episodes} rewritten\n"
    )
    assert spoken < messages  # the tool message's tokens went back to none
    lisbon = Message.objects.get(session=memory, seq=1).search_tokens
    assert lisbon == " visit sister lisbon | love like "  # its own words | the next turn's


def test_reindex_twice_writes_nothing_the_second_time(memory):
    Message.objects.update(search_tokens="")
    reindex("--batch", "1")
    after_first = stored()
    assert reindex() == (
        f"messages: 0 of {Message.objects.count()} rewritten\n"
        "facts: 0 of 1 rewritten\n"
        "episodes: 0 of 1 rewritten\n"
    )
    assert stored() == after_first


def test_reindex_only_one_kind(memory):
    Message.objects.update(search_tokens="")
    Fact.objects.update(search_tokens="")
    assert reindex("--only", "facts") == "facts: 1 of 1 rewritten\n"
    assert set(Message.objects.values_list("search_tokens", flat=True)) == {""}


def test_reindex_refuses_a_batch_below_one(memory):
    before = stored()
    with pytest.raises(CommandError, match=r"^--batch must be at least 1, not 0$"):
        reindex("--batch", "0")
    assert stored() == before
