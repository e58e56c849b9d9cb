from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from sessions_app import ids, selectors, services
from sessions_app.errors import SessionAmbiguous, SessionNotFound
from sessions_app.models import ChatSession, Message

pytestmark = pytest.mark.django_db


def test_session_id_has_the_design_format_in_local_time(settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    moment = datetime(2026, 6, 11, 9, 53, tzinfo=UTC)
    session_id = ids.new_session_id(moment)
    assert re.fullmatch(r"s_20260611_1753_[a-z0-9]{4}", session_id)
    assert ids.SESSION_ID_RE.fullmatch(session_id)


def test_session_id_suffixes_vary():
    suffixes = {ids.random_suffix() for _ in range(200)}
    assert len(suffixes) > 190
    assert all(re.fullmatch(r"[a-z0-9]{4}", suffix) for suffix in suffixes)


def test_session_start_writes_nothing(owner, django_assert_num_queries):
    with django_assert_num_queries(0):
        session = services.session_start(owner=owner, model="offline")
    assert not session.is_persisted
    assert ChatSession.objects.count() == 0
    assert ids.SESSION_ID_RE.fullmatch(session.id)


def test_first_user_message_writes_the_session_and_title(owner):
    session = services.session_start(owner=owner, model="offline", mode="companion")
    message = services.message_append(
        session=session,
        role=Message.Role.USER,
        content="  Plan   the\nlaunch  of the memory server next week please  ",
    )
    stored = ChatSession.objects.get(pk=session.pk)
    assert stored.owner == owner
    assert stored.title == "Plan the launch of the memory server nex"
    assert len(stored.title) == 40
    assert (stored.model, stored.mode, stored.channel, stored.last_seq) == (
        "offline",
        "companion",
        "console",
        1,
    )
    assert (message.seq, message.role, message.session_id) == (1, "user", session.pk)


def test_title_counts_chinese_characters(owner):
    text = "我想整理一下这个季度的工作计划，" * 5
    session = services.session_start(owner=owner)
    services.message_append(session=session, role=Message.Role.USER, content=text)
    assert ChatSession.objects.get(pk=session.pk).title == text[:40]


def test_title_comes_from_the_first_user_message_even_after_a_system_message(owner):
    session = services.session_start(owner=owner)
    services.message_append(session=session, role=Message.Role.SYSTEM, content="setup")
    assert ChatSession.objects.get(pk=session.pk).title == ""
    services.message_append(session=session, role=Message.Role.USER, content="hello there")
    services.message_append(session=session, role=Message.Role.USER, content="second")
    assert ChatSession.objects.get(pk=session.pk).title == "hello there"


def test_seq_is_gap_free_and_tool_fields_are_kept(owner):
    session = services.session_start(owner=owner)
    calls = [{"id": "call_1", "name": "memory_write", "arguments": {"content": "x"}}]
    services.message_append(session=session, role="user", content="remember x")
    services.message_append(session=session, role="assistant", content="", tool_calls=calls)
    services.message_append(session=session, role="tool", content="ok", tool_call_id="call_1")
    services.message_append(session=session, role="assistant", content="done")
    rows = list(
        selectors.session_messages(session=session).values_list(
            "seq", "role", "tool_calls", "tool_call_id"
        )
    )
    assert rows == [
        (1, "user", None, ""),
        (2, "assistant", calls, ""),
        (3, "tool", None, "call_1"),
        (4, "assistant", None, ""),
    ]
    assert ChatSession.objects.get(pk=session.pk).last_seq == 4


def test_bad_role_is_refused_and_writes_nothing(owner):
    session = services.session_start(owner=owner)
    with pytest.raises(ValidationError) as error:
        services.message_append(session=session, role="narrator", content="hi")
    assert "role" in error.value.message_dict
    assert ChatSession.objects.count() == 0
    assert Message.objects.count() == 0


def test_id_collision_draws_a_new_id(owner, other_owner, monkeypatch):
    suffixes = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(ids, "random_suffix", lambda: next(suffixes))
    session = services.session_start(owner=owner)
    taken = session.id
    assert taken.endswith("_aaaa")
    # Someone else's session already holds that id.
    ChatSession.objects.create(id=taken, owner=other_owner, title="theirs")

    services.message_append(session=session, role="user", content="mine")

    assert session.id == taken.replace("_aaaa", "_bbbb")
    assert ChatSession.objects.get(pk=taken).owner == other_owner
    assert ChatSession.objects.get(pk=session.id).owner == owner
    assert list(Message.objects.values_list("session_id", "content")) == [(session.id, "mine")]


def _with_id(owner, session_id: str, minutes_ago: int) -> ChatSession:
    moment = timezone.now() - timedelta(minutes=minutes_ago)
    return ChatSession.objects.create(
        id=session_id, owner=owner, title=session_id, created_at=moment, updated_at=moment
    )


def test_resolve_by_full_id_tail_and_last(owner):
    old = _with_id(owner, "s_20260611_1753_d139", minutes_ago=30)
    new = _with_id(owner, "s_20260612_0151_b18c", minutes_ago=5)
    assert selectors.session_resolve(owner=owner, ref="s_20260611_1753_d139") == old
    assert selectors.session_resolve(owner=owner, ref="d139") == old
    assert selectors.session_resolve(owner=owner, ref="0151_b18c") == new
    assert selectors.session_resolve(owner=owner, ref="last") == new


def test_resolve_ambiguous_tail_lists_the_candidates(owner):
    _with_id(owner, "s_20260611_1753_a139", minutes_ago=3)
    _with_id(owner, "s_20260611_1800_b139", minutes_ago=2)
    _with_id(owner, "s_20260611_1801_c000", minutes_ago=1)
    with pytest.raises(SessionAmbiguous) as error:
        selectors.session_resolve(owner=owner, ref="139")
    assert error.value.candidates == ["s_20260611_1800_b139", "s_20260611_1753_a139"]
    assert str(error.value) == (
        "session '139' is ambiguous: it matches s_20260611_1800_b139, s_20260611_1753_a139; "
        "give more of the id"
    )


def test_resolve_unknown_and_empty_are_clear_errors(owner):
    with pytest.raises(SessionNotFound, match="there are no sessions yet"):
        selectors.session_resolve(owner=owner, ref="last")
    _with_id(owner, "s_20260611_1753_d139", minutes_ago=1)
    with pytest.raises(SessionNotFound, match="no session matches 'zzzz'"):
        selectors.session_resolve(owner=owner, ref="zzzz")
    with pytest.raises(SessionNotFound, match="no session id given"):
        selectors.session_resolve(owner=owner, ref="  ")


def test_resolve_never_finds_another_owners_session(owner, other_owner):
    _with_id(other_owner, "s_20260611_1753_d139", minutes_ago=1)
    for ref in ("s_20260611_1753_d139", "d139", "last"):
        with pytest.raises(SessionNotFound):
            selectors.session_resolve(owner=owner, ref=ref)
    with pytest.raises(SessionNotFound):
        selectors.session_get_for_owner(owner=owner, session_id="s_20260611_1753_d139")


def test_list_is_newest_first_limited_and_owner_scoped(owner, other_owner, settings):
    settings.ETHAN_SESSION_LIST_LIMIT = 20
    for minute in range(25):
        _with_id(owner, f"s_20260611_{minute:04d}_aaaa", minutes_ago=100 - minute)
    _with_id(other_owner, "s_20260611_1200_zzzz", minutes_ago=0)
    listed = selectors.session_list(owner=owner)
    assert [s.id for s in listed] == [f"s_20260611_{m:04d}_aaaa" for m in range(24, 4, -1)]
    assert len(selectors.session_list(owner=owner, limit=3)) == 3


def test_search_matches_title_and_content_in_both_languages(owner, other_owner, make_session):
    english = make_session(
        owner, "Plan the Q3 launch", "Sure. What is the deadline?", "The DEADLINE is Friday"
    )
    chinese = make_session(owner, "帮我写一封邮件", "好的，写给谁？", "写给张三，关于季度计划")
    make_session(other_owner, "my deadline is secret", "ok")

    found = selectors.session_search(owner=owner, query="deadline")
    # The best-ranked message (BM25: the shorter of the two that say "deadline").
    assert [(s.id, s.match) for s in found] == [(english.id, "The DEADLINE is Friday")]
    assert [s.id for s in selectors.session_search(owner=owner, query="q3 LAUNCH")] == [english.id]
    found = selectors.session_search(owner=owner, query="季度计划")
    assert [(s.id, s.match) for s in found] == [(chinese.id, "写给张三，关于季度计划")]
    assert [s.id for s in selectors.session_search(owner=owner, query="邮件")] == [chinese.id]
    assert selectors.session_search(owner=owner, query="secret") == []
    with pytest.raises(ValueError):
        selectors.session_search(owner=owner, query="   ")


def test_search_treats_like_wildcards_literally(owner, make_session):
    make_session(owner, "100% sure", "ok")
    other = make_session(owner, "100 percent", "ok")
    assert [s.title for s in selectors.session_search(owner=owner, query="100%")] == ["100% sure"]
    assert other.id not in [s.id for s in selectors.session_search(owner=owner, query="0_")]


def test_delete_cascades_to_messages(owner, make_session):
    keep = make_session(owner, "keep me", "ok")
    gone = make_session(owner, "delete me", "ok", "bye")
    assert services.session_delete(session=gone) == 3
    assert list(ChatSession.objects.values_list("pk", flat=True)) == [keep.pk]
    assert Message.objects.filter(session_id=gone.pk).count() == 0
    assert Message.objects.filter(session_id=keep.pk).count() == 2


def test_cleanup_empty_removes_only_sessions_without_messages(owner, other_owner, make_session):
    full = make_session(owner, "hello", "hi")
    _with_id(owner, "s_20260611_1753_emp1", minutes_ago=1)
    _with_id(other_owner, "s_20260611_1753_emp2", minutes_ago=1)

    assert services.sessions_cleanup_empty(owner=owner) == 1
    assert set(ChatSession.objects.values_list("pk", flat=True)) == {
        full.pk,
        "s_20260611_1753_emp2",
    }
    assert services.sessions_cleanup_empty() == 1
    assert list(ChatSession.objects.values_list("pk", flat=True)) == [full.pk]
    assert services.sessions_cleanup_empty() == 0


def test_session_end_stamps_once_and_ignores_unsaved(owner, make_session):
    unsaved = services.session_start(owner=owner)
    services.session_end(session=unsaved)
    assert ChatSession.objects.count() == 0

    session = make_session(owner, "hello")
    services.session_end(session=session)
    first = ChatSession.objects.get(pk=session.pk).ended_at
    assert first is not None
    services.session_end(session=session)
    assert ChatSession.objects.get(pk=session.pk).ended_at == first


def test_local_user_is_created_once_without_a_password(db, settings):
    settings.ETHAN_CONSOLE_USER = ""
    first = services.local_user_get_or_create(username="ada")
    again = services.local_user_get_or_create(username="ada")
    assert first.pk == again.pk
    assert not first.has_usable_password()
    settings.ETHAN_CONSOLE_USER = "configured"
    assert services.local_user_get_or_create().username == "configured"


def test_append_queries_are_constant(owner, make_session, django_assert_num_queries):
    session = make_session(owner, "first", "second")
    # UPDATE the counter RETURNING it and the previous turn, UPDATE that turn's search tokens,
    # INSERT the message (no savepoint inside the caller's transaction, here the test's).
    # The same however long the session is.
    with django_assert_num_queries(3):
        services.message_append(session=session, role="user", content="third")


@pytest.mark.parametrize(("sessions", "search_queries"), [(5, 5), (40, 4)])
def test_list_and_search_queries_are_constant(
    owner, make_session, sessions, search_queries, django_assert_num_queries
):
    for n in range(sessions):
        make_session(owner, f"topic {n}", "answer")
    with django_assert_num_queries(1):
        assert len(selectors.session_list(owner=owner)) == min(sessions, 20)
    # the message count (BM25's N) and newest id, the matching messages, the matched sessions'
    # activity, the titles only while places are left (5 sessions: yes; 40: no), the results
    with django_assert_num_queries(search_queries):
        assert len(selectors.session_search(owner=owner, query="answer")) == min(sessions, 20)


def test_an_appended_message_is_stored_as_the_orm_would_store_it(owner, make_session):
    """message_append's INSERT is SQL over the model's own fields: every column as the ORM
    writes and reads it (JSON, booleans, dates), and the message left as a save leaves it (a
    later save updates its row). The session's own first INSERT too."""
    session = make_session(owner, "hi", "hello")
    stored = ChatSession.objects.get(pk=session.pk)
    for field in ChatSession._meta.concrete_fields:
        if field.name not in ("last_seq", "round_count", "updated_at"):  # the appends' UPDATEs
            assert getattr(stored, field.attname) == getattr(session, field.attname), field.name
    assert session.is_persisted and (stored.title, stored.owner_id) == ("hi", owner.pk)
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "memory_search", "arguments": "{}"}}
    ]
    step = services.message_append(
        session=session, role="assistant", content="Let me look. 你好", tool_calls=calls
    )
    tool = services.message_append(
        session=session, role="tool", content="found", tool_call_id="c1", interrupted=True
    )
    for appended in (step, tool):
        stored = Message.objects.get(pk=appended.pk)
        for field in Message._meta.concrete_fields:
            assert getattr(stored, field.attname) == getattr(appended, field.attname), field.name
        assert not appended._state.adding and appended._state.db == "default"
    assert (Message.objects.get(pk=step.pk).tool_calls, tool.interrupted) == (calls, True)
    tool.content = "found it"
    tool.save()
    assert Message.objects.filter(session=session).count() == 4
    assert Message.objects.get(pk=tool.pk).content == "found it"
