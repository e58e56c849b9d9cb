import pytest
from django.core.exceptions import ValidationError

from memory_app import selectors, services
from memory_app.models import Fact, FactEvent, Procedure

pytestmark = pytest.mark.django_db


def write(owner, content, confidence=0.8, category="preference", source="consolidator"):
    return services.fact_write(
        owner=owner, content=content, category=category, confidence=confidence, source=source
    )


def test_equal_facts_reinforce_instead_of_duplicating(owner, other_owner):
    first = write(owner, "用户喜欢喝美式咖啡。")
    again = write(owner, "  用户喜欢喝 美式咖啡 ", confidence=0.8)
    theirs = write(other_owner, "用户喜欢喝美式咖啡")
    assert again.pk == first.pk and theirs.pk != first.pk
    first.refresh_from_db()
    assert (first.confidence, first.hit_count) == (0.84, 2)  # 0.8 + (1 - 0.8) * 0.2
    assert list(FactEvent.objects.filter(fact=first).values_list("event", flat=True)) == [
        "add",
        "reinforce",
    ]
    assert selectors.fact_matching(owner=owner, content="用户喜欢喝美式咖啡!") == first


def test_invalid_facts_are_refused(owner):
    with pytest.raises(ValidationError):
        write(owner, "???")
    with pytest.raises(ValidationError):
        write(owner, "x", category="gossip")
    with pytest.raises(ValidationError):
        write(owner, "x", confidence=1.5)
    assert not Fact.objects.exists()


def test_procedures_do_not_stack_and_come_back(owner):
    rule, created = services.procedure_write(owner=owner, rule="Always reply in English")
    assert created
    same, created = services.procedure_write(owner=owner, rule="always reply in english.")
    assert (same.pk, created) == (rule.pk, False)
    Procedure.objects.filter(pk=rule.pk).update(active=False)
    back, created = services.procedure_write(owner=owner, rule="Always reply in English")
    assert (back.pk, back.active, created) == (rule.pk, True, False)
    assert [p.rule for p in selectors.procedures_active(owner=owner)] == ["Always reply in English"]
