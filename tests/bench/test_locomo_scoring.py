"""The LoCoMo benchmark's scoring, on a tiny hand-made conversation whose answers are known."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from bench import locomo_recall as locomo
from sessions_app.models import Message

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


def by_question(scored: list[locomo.Scored]) -> dict[str, dict[str, float]]:
    return {s.question.text: s.values for s in scored}


@pytest.mark.django_db
def test_scores_on_a_known_conversation(llm_config):
    scored = locomo.evaluate([SAMPLE], observations=True)
    assert [(s.question.conversation, s.question.category) for s in scored] == [
        (0, 4),
        (0, 1),
        (0, 5),
    ]
    found = by_question(scored)
    sister = found["Where does Ada's sister live?"]
    violin = found["What instrument did Ada start learning?"]
    cat = found["What is the name of Bo's cat?"]
    # The sister's fact came from D1:3: both orders inject it (two facts only), and the
    # search finds the turn itself first.
    assert sister["inject_seed"] == sister["inject_relevance"] == 1.0
    assert sister["search@5"] == 1.0
    # No fact mentions the violin: only the search reaches D2:1.
    assert violin["inject_relevance"] == 0.0
    assert violin["search@5"] == 1.0
    assert cat["inject_relevance"] == 1.0
    # The plain baseline finds the violin turn by its own words too.
    assert violin["plain@5"] == 1.0
    # The persona alone outweighs a six-turn history: the ratio only means something at scale.
    assert sister["tokens_ratio"] > 0
    table = locomo.summarise(scored)
    assert list(table) == ["1 multi-hop", "4 single-hop", "5 adversarial", "overall (1-4)"]
    assert table["overall (1-4)"]["questions"] == 2
    assert table["overall (1-4)"]["search@5"] == 1.0
    assert "| overall (1-4) | 2 |" in locomo.markdown(table)


@pytest.mark.django_db
def test_summary_has_a_row_per_half(llm_config):
    later = copy.deepcopy(SAMPLE) | {"sample_id": "tiny-b"}
    scored = locomo.evaluate([SAMPLE], observations=False) + locomo.evaluate(
        [later], observations=False, first=5
    )
    assert {s.question.conversation for s in scored} == {0, 5}
    table = locomo.summarise(scored)
    assert table["overall (1-4)"]["questions"] == 4
    assert table["overall (1-4), half A"]["questions"] == 2
    assert table["overall (1-4), half B"]["questions"] == 2


def test_halves_are_fixed_and_cover_the_ten_conversations():
    assert {name: list(r) for name, r in locomo.HALVES.items()} == {
        "A": [0, 1, 2, 3, 4],
        "B": [5, 6, 7, 8, 9],
    }
    assert [locomo.half_of(i) for i in range(10)] == ["A"] * 5 + ["B"] * 5
    assert locomo.other_half("A") == "B" and locomo.other_half("B") == "A"


def test_plain_baseline_is_single_turns_own_words_unstemmed():
    # Lower-cased words, stopwords and single characters dropped, nothing stemmed.
    assert locomo.plain_tokens("What did Ada's sister say? She LIKES painting.") == [
        "ada",
        "sister",
        "say",
        "she",
        "likes",
        "painting",
    ]
    turns = [
        ("D1:1", "I like painting landscapes."),
        ("D1:2", "She likes painting too."),
        ("D1:3", "The violin lessons start today."),
    ]
    # "likes" meets only the turn that says "likes" (no stemming); no neighbour's words count.
    assert locomo.plain_ranked("Who likes painting?", turns) == ["D1:2", "D1:1"]
    assert locomo.plain_ranked("violin", turns) == ["D1:3"]
    assert locomo.plain_ranked("when?", turns) == []


def test_choice_is_made_on_the_tuning_half_alone():
    """A fake measure under which every step's best option on A is the worst on B: the
    setting chosen on A is A's best, whatever B says, and the other way round."""
    start = locomo.start_setting()

    def score(setting: locomo.Setting) -> float:
        t = setting.tuning
        return (
            (setting.stemmer == "snowball")
            + t.context_weight
            + t.time_boost
            + t.time_after_days / 100
        )

    def measure(setting: locomo.Setting, half: str) -> float:
        return score(setting) if half == "A" else -score(setting)

    on_a, trail = locomo.choose(measure, "A")
    assert on_a == locomo.Setting(
        "snowball",
        replace(
            start.tuning,
            context_weight=1.0,
            time_boost=max(locomo.TIME_BOOSTS),
            time_after_days=max(locomo.TIME_AFTER_DAYS),
        ),
    )
    # Every option of every step is listed once, with its score on both halves.
    assert [step for step, *_rest in trail].count("context weight") == 5
    assert all(a == -b for _step, _label, a, b, _chosen in trail)
    assert sum(chosen for *_rest, chosen in trail) == len(locomo.STEPS)
    on_b, _trail = locomo.choose(measure, "B")
    # On B the lowest options score best: no neighbours' words, the rest as they started.
    assert on_b == locomo.Setting("suffix", replace(start.tuning, context_weight=0.0))


def test_undoing_a_feature_restores_the_start_or_turns_it_off():
    start = locomo.start_setting()
    tuned = locomo.Setting("snowball", replace(start.tuning, context_weight=0.75, time_boost=0.5))
    assert locomo.without(tuned, "stemmer") == replace(tuned, stemmer="suffix")
    assert locomo.without(tuned, "context weight").tuning.context_weight == 0.0
    assert locomo.without(tuned, "time").tuning.time_boost == 0.0
    # The start is search before this tuning (b aside: the textbook one, never tuned).
    assert (start.stemmer, start.tuning.context_weight, start.tuning.time_boost) == (
        "suffix",
        0.5,
        0.0,
    )
    assert (start.tuning.k1, start.tuning.b) == (1.2, 0.75)


def test_suffix_stemming_is_swapped_in_and_back():
    from ethan_llm.text import tokenize

    assert tokenize("liked painting") == ["like", "paint"]  # Snowball
    with locomo.stemming("suffix"):
        assert tokenize("liked painting") == ["lik", "paint"]
    assert tokenize("liked painting") == ["like", "paint"]


@pytest.mark.django_db
def test_a_single_speakers_log_holds_their_turns_and_the_questions_on_them():
    loaded = locomo.load_conversation(SAMPLE, 0, observations=False, speaker="Bo")
    assert set(loaded.turn_text) == {"D1:2", "D1:4", "D2:2"}
    # Every message is the person's own (a user turn).
    rows = Message.objects.filter(session__owner=loaded.owner).order_by("session_id", "seq")
    assert [(m.role, m.seq) for m in rows] == [("user", 1), ("user", 2), ("user", 1)]
    # The neighbours a message carries are the same person's previous and next messages.
    assert "welcom" in rows[1].search_tokens.split("|")[1]
    asked = list(locomo.questions(SAMPLE, 0, set(loaded.turn_text), speaker="Bo"))
    assert [q.text for q in asked] == ["What is the name of Bo's cat?"]
    ada = locomo.load_conversation(SAMPLE, 0, observations=False, speaker="Ada")
    asked = list(locomo.questions(SAMPLE, 0, set(ada.turn_text), speaker="Ada"))
    # D1:3's question keeps it (D1:99 names no turn); none of Bo's turns is evidence here.
    assert [q.text for q in asked] == [
        "Where does Ada's sister live?",
        "What instrument did Ada start learning?",
    ]


@pytest.mark.django_db
def test_the_replayed_extractor_answers_with_the_observations_of_the_turns_shown(llm_config):
    """End-to-end with the replay: the facts Ethan stores are the observations of the turns its
    consolidation showed the extractor, each tied to its message, and they are injected."""
    from memory_app.models import Fact

    extractor = locomo.ReplayedExtractor()
    llm_config.configure(env=extractor.env, compression_model="gpt-4o-mini")
    try:
        scored = locomo.evaluate([SAMPLE], observations=False, extractor=extractor)
    finally:
        extractor.close()

    facts = {f.content: [m.content for m in f.sources.all()] for f in Fact.objects.all()}
    assert facts == {
        "Ada's sister moved to Lisbon last spring.": [
            "I visited my sister in Lisbon, she moved there last spring."
        ],
        "Bo adopted a grey cat named Miso.": [
            "Lovely. I adopted a grey cat named Miso. [image: a photo of a grey cat]"
        ],
    }
    found = by_question(scored)
    assert found["Where does Ada's sister live?"]["inject_relevance"] == 1.0
    assert found["What instrument did Ada start learning?"]["inject_relevance"] == 0.0


def test_the_replayed_extractor_reads_numbered_turns_from_the_first_it_may_use():
    extractor = locomo.ReplayedExtractor()
    try:
        extractor.by_text = {"a\nsecond line": ["D1:1"], "b": ["D1:2"]}
        extractor.observed = {"D1:1": ["first"], "D1:2": ["second"]}
        transcript = "[1] user: a\n  second line\n[2] assistant: b"
        assert extractor.turns(transcript) == ["a\nsecond line", "b"]
        assert [f["content"] for f in extractor.facts("", transcript)] == ["first", "second"]
        later = "… take facts only from turn [2] onwards"
        assert extractor.facts(later, transcript) == [
            {"content": "second", "category": "knowledge", "importance": 0.8, "turns": [2]}
        ]
        # A summary says what happened, never a turn's own words (they would count as reached).
        assert extractor.summary(transcript) == "first second"
    finally:
        extractor.close()
