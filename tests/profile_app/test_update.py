import pytest

from profile_app.models import ProfileRevision, ProfileSection
from profile_app.sections import section_for
from profile_app.selectors import profile_markdown
from profile_app.services import profile_update, same_subject

pytestmark = pytest.mark.django_db


def content(owner, key):
    return ProfileSection.objects.get(owner=owner, key=key).content


def test_sections_by_key_and_title():
    assert section_for("goals").title == "目标与方向"
    assert section_for("目标与方向").key == "goals"
    assert section_for("与Agent的约定").key == "agreements"
    assert section_for(" PSYCH ").key == "psych"
    with pytest.raises(ValueError, match="unknown profile section 'hobbies': use one of basic"):
        section_for("hobbies")


def test_append_overwrite_merge_in_chinese(owner):
    profile_update(owner=owner, section="目标与方向", entry="2026 年底前完成独立产品上线")
    profile_update(owner=owner, section="goals", entry="- 每周跑步三次")
    assert content(owner, "goals") == "- 2026 年底前完成独立产品上线\n- 每周跑步三次"

    profile_update(owner=owner, section="basic", entry="名字：张三", mode="merge")
    profile_update(owner=owner, section="basic", entry="年龄：30", mode="merge")
    profile_update(owner=owner, section="basic", entry="名字：李雷", mode="merge")
    assert content(owner, "basic") == "- 名字：李雷\n- 年龄：30"

    profile_update(owner=owner, section="goals", entry="- 专注一件事", mode="overwrite")
    assert content(owner, "goals") == "- 专注一件事"
    revisions = list(
        ProfileRevision.objects.filter(section__key="goals")
        .order_by("created_at")
        .values_list("mode", "old_content", "new_content")
    )
    assert revisions[-1] == (
        "overwrite",
        "- 2026 年底前完成独立产品上线\n- 每周跑步三次",
        "- 专注一件事",
    )
    assert len(revisions) == 3


def test_merge_in_english_replaces_a_similar_bullet(owner):
    profile_update(owner=owner, section="work_style", entry="Prefers short, direct answers")
    profile_update(owner=owner, section="work_style", entry="Works best in the morning")
    profile_update(
        owner=owner, section="work_style", entry="prefers short and direct answers!", mode="merge"
    )
    profile_update(owner=owner, section="work_style", entry="Name: Ada", mode="merge")
    assert content(owner, "work_style") == (
        "- prefers short and direct answers!\n- Works best in the morning\n- Name: Ada"
    )


def test_merge_rule():
    assert same_subject("- 名字：张三", "名字：李雷")
    assert same_subject("- Name: Ada", "name: Grace")
    assert same_subject("- likes strong black coffee", "likes black coffee, strong")
    assert not same_subject("- likes coffee", "works in Lisbon")
    assert not same_subject("- 喜欢喝咖啡", "住在上海")


def test_bad_input_changes_nothing(owner):
    profile_update(owner=owner, section="goals", entry="ship it")
    with pytest.raises(ValueError, match="unknown mode 'replace'"):
        profile_update(owner=owner, section="goals", entry="x", mode="replace")
    with pytest.raises(ValueError, match="the entry is empty"):
        profile_update(owner=owner, section="goals", entry="  ")
    with pytest.raises(ValueError, match="unknown profile section"):
        profile_update(owner=owner, section="nope", entry="x")
    assert content(owner, "goals") == "- ship it"
    assert ProfileRevision.objects.count() == 1


def test_profiles_are_per_owner(owner, other_owner):
    profile_update(owner=owner, section="basic", entry="名字：Ada")
    assert "名字：Ada" in profile_markdown(owner=owner)
    assert "名字：Ada" not in profile_markdown(owner=other_owner)
