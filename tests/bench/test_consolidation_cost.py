"""The consolidation-cost benchmark's replayed schedules and conversations (no results kept)."""

from __future__ import annotations

import random

import pytest

from bench import consolidation_cost as cost


@pytest.mark.parametrize("shape", [(2, 4), (8, 15), None])
def test_conversations_have_the_rounds_and_shape_asked_for(shape):
    sessions = cost.conversation(shape, random.Random(1))
    assert sum(len(s) for s in sessions) == cost.ROUNDS
    if shape is None:
        assert len(sessions) == 1
    else:
        assert all(len(s) <= shape[1] for s in sessions)
        assert all(len(s) >= shape[0] for s in sessions[:-1])  # the last takes what is left


@pytest.fixture
def counting(llm_config):
    from tests.fakes.openai_fake import FakeOpenAI

    fake = FakeOpenAI()
    model = cost.CountingModel()
    fake.responder = model
    llm_config.configure(env={"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": f"{fake.url}/v1"})
    yield model
    fake.close()


def test_the_design_schedule_summarises_by_five_and_extracts_at_twenty(counting):
    # 30 rounds: rounds 1-20 leave the 10-round hot zone in four batches of 5, the warm zone
    # reaches 20 rounds once (one extraction, one fold), and the session's episode.
    cost.design([["I live in Lisbon"] * 30, ["hi"]])

    assert dict(counting.tally.calls) == {"summarize": 5, "extract": 1, "fold": 1}
    assert counting.tally.tokens_in > 0


def test_the_per_pair_extractor_calls_once_a_round(counting):
    cost.per_message_pair([["I live in Lisbon", "I work at Acme"], ["My dog is Max"]])

    assert dict(counting.tally.calls) == {"extract": 3}
