"""The reads every turn makes, written as SQL (Model.objects.raw or a cursor, not the ORM's
query building): each gives what the ORM query it replaced gives, on data where order, owner
and state all matter, in one statement."""

from datetime import timedelta

from django.utils import timezone

from agent_app.models import OwnerSettings
from agent_app.turn import owner_model
from memory_app import selectors as memory_selectors
from memory_app.models import Procedure, WorkingState
from memory_app.working import context_parts, latest_rounds_messages
from profile_app import selectors as profile_selectors
from profile_app.models import ProfileSection


def test_the_active_rules_oldest_first_bounded_and_only_the_owners(
    owner, other_owner, settings, django_assert_num_queries
):
    settings.ETHAN_PROCEDURE_CAPACITY = 3
    now = timezone.now()
    # Made in an order that differs from their creation times, ties broken by id.
    for rule, minutes, active in [
        ("late", 5, True),
        ("early", 1, True),
        ("off", 0, False),
        ("tie b", 3, True),
        ("tie a", 3, True),
    ]:
        Procedure.objects.create(
            owner=owner,
            rule=rule,
            rule_key=rule,
            active=active,
            created_at=now + timedelta(minutes=minutes),
        )
    Procedure.objects.create(owner=other_owner, rule="theirs", rule_key="theirs")
    orm = Procedure.objects.filter(owner=owner, active=True).order_by("created_at", "id")[:3]
    with django_assert_num_queries(1):
        rules = memory_selectors.procedures_active(owner=owner)
    assert [(p.pk, p.rule, p.created_at) for p in rules] == [
        (p.pk, p.rule, p.created_at) for p in orm
    ]
    assert [p.rule for p in rules] == ["early", "tie b", "tie a"]


def test_the_profile_sections_are_the_owners(owner, other_owner, django_assert_num_queries):
    ProfileSection.objects.create(owner=owner, key="basic", content="Ada, in London")
    ProfileSection.objects.create(owner=other_owner, key="basic", content="Grace")
    ProfileSection.objects.create(owner=owner, key="goals", content="- chess")
    with django_assert_num_queries(1):
        sections = profile_selectors.profile_sections(owner=owner)
    assert sections["basic"] == "Ada, in London" and sections["goals"] == "- chess"
    assert len(sections) == 7 and sum(1 for text in sections.values() if text) == 2


def test_the_persons_own_model(owner, other_owner, django_assert_num_queries):
    OwnerSettings.objects.create(owner=other_owner, values={"model": "claude-sonnet-4-6"})
    with django_assert_num_queries(1):
        assert owner_model(owner) is None
    OwnerSettings.objects.create(owner=owner, values={"model": "gpt-4o", "theme": ["dark"]})
    assert owner_model(owner) == "gpt-4o"
    OwnerSettings.objects.filter(owner=owner).update(values={"model": ""})
    assert owner_model(owner) is None
    assert owner_model(other_owner) == "claude-sonnet-4-6"


def test_the_working_state_is_the_sessions(owner, make_session):
    session = make_session(owner, "hello", "hi")
    other = make_session(owner, "another", "yes")
    assert context_parts(session=session).state is None
    WorkingState.objects.create(session=other, rolling_summary="the other one")
    WorkingState.objects.create(
        session=session, compressed_through=1, rolling_summary="we said hello"
    )
    state = context_parts(session=session).state
    stored = WorkingState.objects.get(session=session)
    assert (state.pk, state.rolling_summary, state.compressed_through, state.updated_at) == (
        stored.pk,
        "we said hello",
        1,
        stored.updated_at,
    )


def test_the_latest_rounds_are_those_rounds_messages_reads(owner, django_assert_num_queries):
    """latest_rounds_messages (SQL, counted back from the newest question) gives rounds
    first..last as rounds_messages (the ORM, counted from the oldest) does, over a session
    with what came before its first question, tool steps and a question answered again."""
    from sessions_app import services
    from sessions_app.rounds import rounds_messages

    session = services.session_start(owner=owner)
    append = lambda role, content, **more: services.message_append(  # noqa: E731
        session=session, role=role, content=content, **more
    )
    append("assistant", "Welcome back!")
    append("user", "What did I say about Oslo?")
    call = [{"id": "c1", "type": "function", "function": {"name": "memory_search"}}]
    append("assistant", "Let me look.", tool_calls=call)
    append("tool", "found: the fjords", tool_call_id="c1")
    append("assistant", "You loved the fjords.")
    append("user", "And Bergen?")
    append("assistant", "You did not mention Bergen.")
    append("assistant", "Nothing about Bergen yet.")  # answered again
    append("user", "Thanks")
    append("assistant", "Any time.")
    session.refresh_from_db()
    assert session.round_count == 3
    for first in (1, 2, 3):
        with django_assert_num_queries(1):
            latest = latest_rounds_messages(session=session, first=first)
        expected = rounds_messages(session=session, first=first, last=session.round_count)
        assert latest == expected
    assert latest_rounds_messages(session=session, first=4) == []
    assert [m.content for m in latest_rounds_messages(session=session, first=2)] == [
        "And Bergen?",
        "Nothing about Bergen yet.",
        "Thanks",
        "Any time.",
    ]
