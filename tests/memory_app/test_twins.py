"""Facts deduplicated by meaning (issue 43): a new fact saying an active one in other words
reinforces it instead of standing beside it; facts that differ in whom they are about, a number,
a name or a negation are never merged, however near their vectors."""

from __future__ import annotations

import pytest

from ethan_llm.memory import ExtractedFact, Extraction
from memory_app import services
from memory_app.consolidator import apply_fact, fact_vectors, facts_embed_new
from memory_app.models import Fact
from memory_app.normalize import TWIN_COSINE, same_in_other_words

NEAR = 0.95  # above TWIN_COSINE: only the guards decide


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("The user lives in Lisbon.", "The user's home is in Lisbon.", True),
        ("Jon finds joy and passion in dancing.", "Jon is passionate about dancing.", True),
        ("用户住在里斯本", "用户的家在里斯本", True),
        # whom it is about
        ("Gina supports Jon.", "Jon is grateful for Gina's support.", False),
        ("Melanie values her friendship with Caroline.", "Caroline values Melanie.", False),
        # the direction of a relation (LoCoMo half B, 0.916)
        (
            "Calvin is determined to make his dreams come true and appreciates Dave's support.",
            "Calvin acknowledges Dave's guts and ambition and supports him in his dreams.",
            False,
        ),
        ("The user thanks Ana for her help.", "The user helped Ana.", False),
        (
            "John appreciates Tim's support and says he will keep pushing.",
            "John appreciates Tim's support and feels motivated by it.",
            True,
        ),
        (
            "Joanna is grateful for Nate's support and encouragement.",
            "Joanna appreciates Nate's support and expresses her gratitude for it.",
            True,
        ),
        # a number, a name, a negation
        ("The user is 22 years old.", "The user is 23 years old.", False),
        ("The user has a dog named Max.", "The user has a dog named Rex.", False),
        ("The user likes tea.", "The user dislikes tea.", False),
        ("The user eats meat.", "The user doesn't eat meat.", False),
        ("用户喜欢咖啡", "用户不喜欢咖啡", False),
    ],
)
def test_the_guards_decide_above_the_threshold(a, b, same):
    assert same_in_other_words(a, b, NEAR) is same
    assert same_in_other_words(b, a, NEAR) is same


def test_below_the_threshold_nothing_is_the_same():
    text = "The user lives in Lisbon."
    assert same_in_other_words(text, text, TWIN_COSINE - 0.01) is False


def _extracted(session, content):
    """One extracted fact stored as the consolidator stores it: its vector computed before
    the transaction, the new facts' vectors written after it."""
    item = ExtractedFact(content=content, category="knowledge", importance=0.7)
    vectors = fact_vectors(Extraction(facts=(item,), psych=()))
    done = apply_fact(
        session=session, item=item, action="ADD", target=None, vector=vectors.get(content)
    )
    facts_embed_new(owner_id=session.owner_id)
    return done


@pytest.mark.django_db
def test_a_fact_in_other_words_reinforces_the_one_held(embedder_on, make_session, owner):
    session = make_session(owner, "My home is in Lisbon now.", "Nice!")
    assert _extracted(session, "The user lives in Lisbon.") == "add"
    held = Fact.objects.get()
    assert held.embedding_model == "use-multilingual-v3"  # written after its transaction
    assert _extracted(session, "The user's home is in Lisbon.") == "reinforce"
    held.refresh_from_db()
    assert Fact.objects.count() == 1 and held.hit_count == 2
    # Near, but about another number: a fact of its own.
    assert _extracted(session, "The user has lived in Lisbon for 3 years.") == "add"
    assert Fact.objects.filter(status=Fact.Status.ACTIVE).count() == 2


@pytest.mark.django_db
def test_with_the_embedder_off_only_equal_words_merge(make_session, owner):
    session = make_session(owner, "My home is in Lisbon now.", "Nice!")
    assert _extracted(session, "The user lives in Lisbon.") == "add"
    assert _extracted(session, "The user's home is in Lisbon.") == "add"
    assert Fact.objects.count() == 2
    services.fact_write(
        owner=owner,
        content="the user lives in lisbon",
        category="knowledge",
        confidence=0.8,
        source="api",
    )
    assert Fact.objects.count() == 2  # the same words: reinforced, as always
