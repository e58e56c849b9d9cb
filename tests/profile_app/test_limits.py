"""The profile's limits: an entry (PROFILE_ENTRY_MAX_CHARS) and the whole rendered
user_profile.md (PROFILE_MAX_CHARS), so what GET /api/profile gives can always be PUT back."""

from __future__ import annotations

import pytest

from agent_app.tools import run_tool
from ethan_llm.types import ToolCall
from ethan_shared.limits import PROFILE_ENTRY_MAX_CHARS, PROFILE_MAX_CHARS
from profile_app.models import ProfileRevision, ProfileSection
from profile_app.selectors import profile_markdown
from profile_app.services import profile_apply_extraction, profile_update

pytestmark = pytest.mark.django_db


def nearly_full(owner, room: int = 3_000) -> None:
    """Sections written so that the rendered profile has `room` characters left."""
    profile_update(owner=owner, section="goals", entry="g" * 60_000, mode="overwrite")
    profile_update(owner=owner, section="identity", entry="i", mode="overwrite")
    filler = PROFILE_MAX_CHARS - room - len(profile_markdown(owner=owner)) + 1
    profile_update(owner=owner, section="identity", entry="i" * filler, mode="overwrite")
    assert len(profile_markdown(owner=owner)) == PROFILE_MAX_CHARS - room


def section_text(owner, key: str) -> str:
    row = ProfileSection.objects.filter(owner=owner, key=key).first()
    return row.content if row else ""


def tool(owner, session, **arguments) -> str:
    call = ToolCall(id="call_1", name="profile_update", arguments=arguments)
    return run_tool(owner=owner, session=session, message=None, call=call)


def test_tool_entry_past_the_profile_cap_refused_and_profile_still_puttable(
    api_for, owner, make_session
):
    session = make_session(owner, "hi")
    nearly_full(owner)
    before = profile_markdown(owner=owner)
    revisions = ProfileRevision.objects.count()
    result = tool(owner, session, section="language", entry="w" * 5_000)
    assert result == (
        "error: the profile would be 102004 characters long; it is at most 100000 "
        "(this change adds 5002: shorten or overwrite a section first)"
    )
    result = tool(owner, session, section="language", entry="w" * (PROFILE_ENTRY_MAX_CHARS + 1))
    assert result == "error: an entry is at most 10000 characters; this one is 10001"
    assert profile_markdown(owner=owner) == before
    assert ProfileRevision.objects.count() == revisions
    # What fits is taken, and the profile still goes back through PUT as it is.
    assert tool(owner, session, section="language", entry="w" * 2_000).startswith("ok:")
    api = api_for(owner)
    markdown = api.get("/api/profile").json()["markdown"]
    assert len(markdown) <= PROFILE_MAX_CHARS
    saved = api.put("/api/profile", {"markdown": markdown}, format="json")
    assert saved.status_code == 200 and saved.json()["markdown"] == markdown


def test_service_entry_limit_for_append_and_merge(owner):
    for mode in ("append", "merge"):
        with pytest.raises(ValueError, match="a profile entry is at most 10000 characters"):
            profile_update(
                owner=owner, section="goals", entry="x" * (PROFILE_ENTRY_MAX_CHARS + 1), mode=mode
            )
    assert not ProfileSection.objects.filter(content__gt="").exists()


def test_api_patch_past_the_cap_refused(api_for, owner):
    nearly_full(owner, room=10)
    api = api_for(owner)
    refused = api.patch("/api/profile/sections/language", {"entry": "long " * 10}, format="json")
    assert refused.status_code == 400
    assert refused.json()["entry"][0].startswith("the profile would be 100043 characters long")
    assert section_text(owner, "language") == ""


def test_put_that_leaves_long_sections_and_grows_others_refused(api_for, owner):
    nearly_full(owner, room=100)
    api = api_for(owner)
    # Within the document limit itself, but the sections it leaves out keep their text.
    document = "## 个人语言与激励\n\n" + "w" * 1_000 + "\n"
    refused = api.put("/api/profile", {"markdown": document}, format="json")
    assert refused.status_code == 400
    assert "at most 100000 are kept" in refused.json()["markdown"][0]
    assert section_text(owner, "language") == ""


def test_put_that_shrinks_one_section_and_grows_another_is_taken(api_for, owner):
    nearly_full(owner, room=100)
    api = api_for(owner)
    document = "## 目标与方向\n\n- short now\n\n## 个人语言与激励\n\n" + "w" * 30_000 + "\n"
    saved = api.put("/api/profile", {"markdown": document}, format="json")
    assert saved.status_code == 200, saved.json()
    assert ProfileSection.objects.get(owner=owner, key="goals").content == "- short now"


def test_a_profile_over_the_cap_from_before_can_be_shortened(owner):
    ProfileSection.objects.create(owner=owner, key="goals", content="g" * (PROFILE_MAX_CHARS + 5))
    with pytest.raises(ValueError, match="the profile would be"):
        profile_update(owner=owner, section="basic", entry="名字：张三")
    profile_update(owner=owner, section="goals", entry="- 年底前上线", mode="overwrite")
    assert (
        profile_update(owner=owner, section="basic", entry="名字：张三").content == "- 名字：张三"
    )


def test_extraction_into_a_full_profile_is_skipped(owner):
    nearly_full(owner, room=10)
    assert profile_apply_extraction(owner=owner, items=["用户最近压力很大，睡不好"]) == 0
    assert section_text(owner, "psych") == ""


def test_admin_form_refuses_a_section_that_would_pass_the_cap(admin_client, owner):
    nearly_full(owner, room=100)
    form = {
        "owner": owner.pk,
        "key": "language",
        "content": "w" * 200,
        "revisions-TOTAL_FORMS": "0",
        "revisions-INITIAL_FORMS": "0",
        "revisions-MIN_NUM_FORMS": "0",
        "revisions-MAX_NUM_FORMS": "1000",
    }
    page = admin_client.post("/admin/profile_app/profilesection/add/", form)
    assert page.status_code == 200
    assert "the profile would be 100102 characters long" in page.text
    assert section_text(owner, "language") == ""
    page = admin_client.post("/admin/profile_app/profilesection/add/", {**form, "content": "w"})
    assert page.status_code == 302
    assert section_text(owner, "language") == "w"
