"""selectors.session_questions: a session's latest question, and the ones before it."""

import pytest

from sessions_app import services
from sessions_app.models import Message
from sessions_app.selectors import session_questions

pytestmark = pytest.mark.django_db


def test_the_latest_question_is_the_persons_newest_message(owner, other_owner, make_session):
    session = make_session(owner, "first question", "first answer", "second question")
    services.message_append(
        session=session,
        role=Message.Role.ASSISTANT,
        content="",
        tool_calls=[{"id": "c1", "name": "memory_search", "arguments": "{}"}],
    )
    services.message_append(
        session=session, role=Message.Role.TOOL, content="ok", tool_call_id="c1"
    )
    services.message_append(session=session, role=Message.Role.ASSISTANT, content="second answer")
    make_session(owner, "another session's question")
    make_session(other_owner, "someone else's question")
    questions = session_questions(session=session)
    assert questions.first().content == "second question"
    assert list(questions.values_list("content", flat=True)) == [
        "second question",
        "first question",
    ]
    assert list(questions.values_list("content", flat=True)[1:2]) == ["first question"]


def test_a_session_with_no_question_has_none(owner, make_session):
    session = make_session(owner)
    assert session_questions(session=session).first() is None


def test_the_latest_question_costs_one_statement_of_one_column(
    owner, make_session, django_assert_num_queries
):
    session = make_session(owner, *[f"line {index}" for index in range(20)])
    with django_assert_num_queries(1) as captured:
        latest = session_questions(session=session).values_list("seq", flat=True).first()
    assert latest == Message.objects.get(session=session, content="line 18").seq
    select = captured.captured_queries[0]["sql"].split(" FROM ")[0]
    assert '"seq"' in select and '"content"' not in select
