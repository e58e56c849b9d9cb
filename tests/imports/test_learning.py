"""Learning from an import: each imported session consolidated as a live one (sessions_learn:
a long one alone, short ones' ends together), oldest first so later facts supersede earlier
ones, resumable, and estimated first."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agent_app import history_import
from agent_app.history_import import (
    imports_learn,
    imports_learn_next,
    learning_estimate,
    session_calls,
    sessions_to_learn,
)
from episodes_app.models import Episode
from memory_app.models import Fact
from memory_app.working import MemoryConfig
from sessions_app.imports.services import export_import
from sessions_app.models import ChatSession
from tests.imports.exports import START, ChatGPT, claude, write_json


@pytest.fixture
def lisbon_then_porto(tmp_path):
    """Two conversations, the later one (listed first in the file) correcting the earlier."""
    earlier = ChatGPT("c-early", "Moving").exchange(
        ("I live in Lisbon", "Lovely city."), ("I work as a nurse", "Noted.")
    )
    later = ChatGPT("c-late", "Moved", start=START + timedelta(days=30)).exchange(
        ("I moved to Porto", "Congratulations!"), ("What should I see there?", "Ribeira.")
    )
    return write_json(tmp_path / "conversations.json", [later.export(), earlier.export()])


def test_facts_with_their_sources_are_learnt_oldest_first(owner, lisbon_then_porto, llm_config):
    export_import(owner=owner, path=lisbon_then_porto, source="chatgpt")
    assert learning_estimate(owner=owner).conversations == 2
    steps = []
    original = history_import.sessions_learn

    def noted(*, session_ids):
        steps.append([ChatSession.objects.get(pk=pk).external_id for pk in session_ids])
        return original(session_ids=session_ids)

    history_import.sessions_learn = noted
    try:
        assert imports_learn(owner=owner) == 2
    finally:
        history_import.sessions_learn = original
    # Two short conversations: one step, one call, the earlier first.
    assert steps == [["chatgpt:c-early", "chatgpt:c-late"]]

    porto = Fact.objects.get(owner=owner, status=Fact.Status.ACTIVE, content__icontains="Porto")
    assert porto.session.external_id == "chatgpt:c-late"
    assert list(porto.sources.values_list("content", flat=True)) == ["I moved to Porto"]
    lisbon = Fact.objects.get(owner=owner, content__icontains="Lisbon")
    assert lisbon.status == Fact.Status.SUPERSEDED
    assert list(lisbon.sources.values_list("content", flat=True)) == ["I live in Lisbon"]
    assert Fact.objects.filter(owner=owner, content__icontains="nurse").exists()
    # No question became a memory; each session got its episode and its end.
    assert not Fact.objects.filter(owner=owner, content__icontains="see there").exists()
    assert Episode.objects.filter(owner=owner).count() == 2
    assert not sessions_to_learn(owner=owner).exists()
    ended = ChatSession.objects.get(owner=owner, external_id="chatgpt:c-late")
    assert ended.ended_at == ended.updated_at


def test_learning_resumes_after_a_stop_and_repeats_nothing(owner, tmp_path, llm_config):
    """Five conversations of five rounds: a step takes four (20 rounds, one call), then the
    process stops; the next run learns the fifth only."""
    conversations = [
        claude(
            f"u-{n}",
            f"c{n}",
            [
                item
                for r in range(5)
                for item in (("human", f"I like colour {n}{r}"), ("assistant", "ok"))
            ],
            start=START + timedelta(days=n),
        )
        for n in range(5)
    ]
    export_import(owner=owner, path=write_json(tmp_path / "c.json", conversations), source="claude")
    first = imports_learn_next(owner_id=owner.pk)  # one step, then the process stops
    assert [ChatSession.objects.get(pk=pk).external_id for pk in first] == [
        f"claude:u-{n}" for n in range(4)
    ]
    assert sessions_to_learn(owner=owner).count() == 1
    assert Fact.objects.filter(owner=owner).exists()
    assert Episode.objects.filter(owner=owner).count() == 4
    assert imports_learn(owner=owner) == 1
    assert imports_learn(owner=owner) == 0
    total = Fact.objects.filter(owner=owner).count()
    # The stopped step's facts were not learnt twice.
    assert total == Fact.objects.filter(owner=owner).values("content").distinct().count()
    assert Episode.objects.filter(owner=owner).count() == 5
    assert imports_learn_next(owner_id=owner.pk) == []


def test_the_estimate_counts_calls_from_the_memory_schedule(owner, tmp_path):
    config = MemoryConfig(hot_size=10, compress_batch=5, warm_capacity=20)
    assert [session_calls(rounds, config) for rounds in (0, 1, 10, 14, 15, 30, 40)] == [
        0,
        1,
        1,
        1,
        2,
        6,
        8,
    ]
    long = ChatGPT("c-long", "Long").exchange(*[(f"question {n}", "answer") for n in range(16)])
    shorts = [
        ChatGPT(f"c-short{n}", "Short", start=START + timedelta(days=1 + n)).exchange(
            ("hello there", "hi")
        )
        for n in range(3)
    ]
    path = write_json(tmp_path / "c.json", [long.export(), *(s.export() for s in shorts)])
    export_import(owner=owner, path=path, source="chatgpt")
    estimate = learning_estimate(owner=owner)
    # The long one's batch and end, then one call for the three short ones together.
    assert (estimate.conversations, estimate.rounds, estimate.calls) == (4, 19, 3)
    assert estimate.tokens > 19 * 2
    assert "4 conversations, 19 rounds: about 3 compression-model calls" in estimate.line()
