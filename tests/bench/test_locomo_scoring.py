"""The LoCoMo benchmark's scoring, on a tiny hand-made conversation whose answers are known."""

from __future__ import annotations

import pytest

from bench import locomo_recall as locomo

SAMPLE = {
    "sample_id": "tiny",
    "conversation": {
        "speaker_a": "Ada",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ada", "dia_id": "D1:1", "text": "Hi Bo! I just got back from a trip."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Welcome back! Where did you go?"},
            {
                "speaker": "Ada",
                "dia_id": "D1:3",
                "text": "I visited my sister in Lisbon, she moved there last spring.",
            },
            {
                "speaker": "Bo",
                "dia_id": "D1:4",
                "text": "Lovely. I adopted a grey cat named Miso.",
                "blip_caption": "a photo of a grey cat",
            },
        ],
        "session_2_date_time": "9:00 am on 12 May, 2023",
        "session_2": [
            {"speaker": "Ada", "dia_id": "D2:1", "text": "I started learning the violin today."},
            {"speaker": "Bo", "dia_id": "D2:2", "text": "Great, practice every morning!"},
        ],
        "session_3_date_time": "10:00 am on 13 May, 2023",  # a date without a session
    },
    "observation": {
        "session_1_observation": {
            "Ada": [["Ada's sister moved to Lisbon last spring.", "D1:3"]],
            "Bo": [["Bo adopted a grey cat named Miso.", "D1:4"]],
        }
    },
    "qa": [
        {
            "question": "Where does Ada's sister live?",
            "answer": "Lisbon",
            "evidence": ["D1:3; D1:99"],
            "category": 4,
        },
        {
            "question": "What instrument did Ada start learning?",
            "answer": "violin",
            "evidence": ["D2:1"],
            "category": 1,
        },
        {
            "question": "What is the name of Bo's cat?",
            "adversarial_answer": "Rex",
            "evidence": ["D1:4"],
            "category": 5,
        },
    ],
}


def test_evidence_cleaning_and_dates():
    assert locomo.clean_evidence(["D1:3; D1:99", "D2:1 D1:3"], {"D1:3", "D2:1"}) == ["D1:3", "D2:1"]
    assert locomo.session_keys(SAMPLE["conversation"]) == ["session_1", "session_2"]
    assert locomo.parse_date("1:56 pm on 8 May, 2023").isoformat() == "2023-05-08T13:56:00+00:00"
    assert locomo.recall({"a", "x"}, ["a", "b"]) == 0.5


@pytest.mark.django_db
def test_scores_on_a_known_conversation(llm_config):
    scores = locomo.evaluate([SAMPLE], observations=True)
    sister, violin, cat = scores[4], scores[1], scores[5]
    # The sister's fact came from D1:3: both orders inject it (two facts only), and the
    # search finds the turn itself first.
    assert sister["inject_seed"] == sister["inject_relevance"] == [1.0]
    assert sister["search@5"] == [1.0]
    # No fact mentions the violin: only the search reaches D2:1.
    assert violin["inject_relevance"] == [0.0]
    assert violin["search@5"] == [1.0]
    assert cat["inject_relevance"] == [1.0]
    # The persona alone outweighs a six-turn history: the ratio only means something at scale.
    assert sister["tokens_ratio"][0] > 0
    table = locomo.summarise(scores)
    assert list(table) == ["1 multi-hop", "4 single-hop", "5 adversarial", "overall (1-4)"]
    assert table["overall (1-4)"]["questions"] == 2
    assert table["overall (1-4)"]["search@5"] == 1.0
    assert "| overall (1-4) | 2 |" in locomo.markdown(table)
