import pytest
from django.contrib.admin.utils import quote

from memory_app.models import Fact, FactEvent
from memory_app.services import fact_write
from profile_app.models import ProfileRevision, ProfileSection
from profile_app.services import profile_update

pytestmark = pytest.mark.django_db
URL = "/admin/memory_app/fact/"


def make(owner, content, confidence):
    return fact_write(
        owner=owner,
        content=content,
        category="knowledge",
        confidence=confidence,
        source="consolidator",
    )


def change_form(fact: Fact, **fields) -> dict:
    """The admin's change form of `fact` with `fields` changed, its history inline as shown."""
    events = list(fact.events.order_by("-id"))
    form = {
        "owner": fact.owner_id,
        "content": fact.content,
        "category": fact.category,
        "confidence": str(fact.confidence),
        "supersede_with": "",
        "events-TOTAL_FORMS": str(len(events)),
        "events-INITIAL_FORMS": str(len(events)),
        "events-MIN_NUM_FORMS": "0",
        "events-MAX_NUM_FORMS": "1000",
    }
    for index, event in enumerate(events):
        form[f"events-{index}-id"] = event.pk
        form[f"events-{index}-fact"] = fact.pk
    return {**form, **fields}


def test_fact_list_filters_and_search(admin_client, owner):
    make(owner, "likes tea", 0.2)
    make(owner, "lives in Porto", 0.95)
    page = admin_client.get(URL, {"band": "strong"})
    assert "lives in Porto" in page.text and "likes tea" not in page.text
    page = admin_client.get(URL, {"band": "low", "q": "tea"})
    assert "likes tea" in page.text and "lives in Porto" not in page.text
    page = admin_client.get(URL, {"status__exact": "active", "source__exact": "consolidator"})
    assert page.status_code == 200


def test_actions_write_history(admin_client, owner):
    fact = make(owner, "lives in Porto", 0.8)
    for action in ("raise_confidence", "evict", "restore", "lower_confidence"):
        admin_client.post(URL, {"action": action, "_selected_action": [fact.pk]})
    fact.refresh_from_db()
    assert (fact.status, fact.confidence) == ("active", 0.8)
    assert list(fact.events.order_by("id").values_list("event", "new_confidence", "actor")) == [
        ("add", 0.8, "consolidator"),
        ("edit", 0.9, "admin:admin"),
        ("evict", 0.9, "admin:admin"),
        ("edit", 0.9, "admin:admin"),
        ("edit", 0.8, "admin:admin"),
    ]


def test_editing_and_superseding_in_the_form(admin_client, owner, other_owner):
    old = make(owner, "lives in Porto", 0.8)
    new = make(owner, "lives in Lisbon", 0.9)
    theirs = make(other_owner, "lives in Rome", 0.9)
    page = admin_client.get(f"{URL}{old.pk}/change/")
    assert "add" in page.text and "consolidator" in page.text  # the history inline
    response = admin_client.post(
        f"{URL}{old.pk}/change/", change_form(old, content="lives in Porto, Portugal")
    )
    assert response.status_code == 302, response.text[:2000]
    old.refresh_from_db()
    assert old.content == "lives in Porto, Portugal"
    edit = old.events.get(event="edit")
    assert (edit.old_content, edit.new_content, edit.actor) == (
        "lives in Porto",
        "lives in Porto, Portugal",
        "admin:admin",
    )

    admin_client.post(f"{URL}{old.pk}/change/", change_form(old, supersede_with=str(new.pk)))
    old.refresh_from_db()
    assert (old.status, old.superseded_by_id) == ("superseded", new.pk)
    assert theirs.status == "active"


def test_adding_a_fact_in_the_admin_goes_through_the_service(admin_client, owner):
    response = admin_client.post(
        f"{URL}add/",
        {
            "owner": owner.pk,
            "content": "prefers email",
            "category": "preference",
            "confidence": "0.7",
            "events-TOTAL_FORMS": "0",
            "events-INITIAL_FORMS": "0",
            "events-MIN_NUM_FORMS": "0",
            "events-MAX_NUM_FORMS": "1000",
        },
    )
    assert response.status_code == 302, response.text[:2000]
    fact = Fact.objects.get()
    assert (fact.source, fact.confidence) == ("admin", 0.7)
    assert FactEvent.objects.get().event == "add"


def test_a_bad_merge_is_undone_from_the_admin(admin_client, owner):
    profile_update(owner=owner, section="basic", entry="名字：张三", mode="merge")
    profile_update(owner=owner, section="basic", entry="名字：李雷", mode="merge")
    bad = ProfileRevision.objects.latest("id")
    admin_client.post(
        "/admin/profile_app/profilerevision/", {"action": "undo", "_selected_action": [bad.pk]}
    )
    assert ProfileSection.objects.get(owner=owner, key="basic").content == "- 名字：张三"
    assert ProfileRevision.objects.latest("id").actor == f"admin:admin (undo #{bad.pk})"


def test_summaries_and_working_states_are_read_only(admin_client, owner, make_session):
    from memory_app.models import Summary, WorkingState

    session = make_session(owner, "hello", "hi")
    summary = Summary.objects.create(
        session=session, first_round=1, last_round=1, text="s", model="offline"
    )
    WorkingState.objects.create(session=session, compressed_through=1)
    for url in (
        "/admin/memory_app/summary/",
        f"/admin/memory_app/summary/{summary.pk}/change/",
        f"/admin/memory_app/workingstate/{quote(session.pk)}/change/",
    ):
        assert admin_client.get(url).status_code == 200, url
    assert admin_client.get("/admin/memory_app/summary/add/").status_code == 403
    page = admin_client.get(f"/admin/memory_app/summary/{summary.pk}/change/").text
    assert 'name="text"' not in page  # shown, not editable
    # The three cursors: summarised, extracted, folded into the rolling summary.
    listing = admin_client.get("/admin/memory_app/workingstate/").text
    assert all(f"column-{name}" in listing for name in ("compressed_through", "folded_through"))


def test_a_fact_edited_into_another_facts_words_in_the_form_is_merged(admin_client, owner):
    kept = make(owner, "lives in Porto", 0.8)
    edited = make(owner, "lives in Lisbon", 0.9)
    form = change_form(edited, content="Lives in PORTO.")
    response = admin_client.post(f"{URL}{edited.pk}/change/", form)
    assert response.status_code == 302, response.text[:2000]
    edited.refresh_from_db()
    kept.refresh_from_db()
    assert (edited.status, edited.superseded_by_id, edited.content) == (
        "superseded",
        kept.pk,
        "Lives in PORTO.",
    )
    assert (kept.status, kept.hit_count) == ("active", 2)
    assert list(Fact.objects.filter(status="active").values_list("pk", flat=True)) == [kept.pk]
    assert list(edited.events.order_by("id").values_list("event", "old_content", "actor")) == [
        ("add", "", "consolidator"),
        ("supersede", "lives in Lisbon", f"admin:admin (edit merged into #{kept.pk})"),
    ]
    assert list(kept.events.order_by("id").values_list("event", "actor")) == [
        ("add", "consolidator"),
        ("reinforce", f"admin:admin (merged #{edited.pk} into it)"),
    ]
    page = admin_client.get(f"{URL}{edited.pk}/change/").text
    assert f'<a href="{URL}{kept.pk}/change/">#{kept.pk}</a>' in page  # superseded by
