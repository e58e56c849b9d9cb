"""Session search's newest-first candidate windows (search.newest_matching) and the title
step, on a small history with the windows shrunk to fit it: the same candidates as one plain
newest-first query, whichever step finds them, and only the owner's."""

from __future__ import annotations

import pytest

from sessions_app import search, selectors
from sessions_app.models import ChatSession, Message
from sessions_app.search import search_tokens

pytestmark = pytest.mark.django_db


def _history(owner, other_owner) -> None:
    """120 messages in sessions of two owners, interleaved: `common` in every second one,
    `middle` in every fifteenth, `rare` in two old messages of the owner and in many of the
    other owner's, newer and older."""
    sessions = [
        ChatSession.objects.create(id=f"s_20260101_0000_{n:04d}", owner=(owner, other_owner)[n % 2])
        for n in range(12)
    ]
    messages = []
    for n in range(120):
        session = sessions[n % 12]
        words = ["hello"]
        if n % 2 == 0:
            words.append("common")
        if n % 15 == 0:
            words.append("middle")
        if (session.owner_id == owner.pk and n in (12, 36)) or (
            session.owner_id == other_owner.pk and n % 7 == 1
        ):
            words.append("rare")
        text = " ".join(words)
        messages.append(
            Message(
                session=session,
                seq=n // 12 + 1,
                role="user",
                content=text,
                search_tokens=search_tokens(text),
            )
        )
    Message.objects.bulk_create(messages)
    for session in sessions:
        session.last_seq = 10
        session.save(update_fields=["last_seq"])


@pytest.mark.parametrize("word", ["common", "middle", "rare", "absent", "hello"])
def test_candidates_are_the_owners_newest_whichever_window(owner, other_owner, monkeypatch, word):
    _history(owner, other_owner)
    # A cap of 3 and windows of 12 and 36 ids: on PostgreSQL every step runs on 120 rows.
    monkeypatch.setattr(search, "CANDIDATE_CAP", 3)
    monkeypatch.setattr(search, "WINDOWS", (4, 12))
    term = search_tokens(word).strip() or word  # as stored: "middle" is stemmed to "middl"
    expected = list(
        Message.objects.filter(session__owner=owner, search_tokens__contains=f" {term} ")
        .order_by("-id")
        .values_list("id", flat=True)[:3]
    )
    found = selectors._messages_ranked(owner=owner, terms=[term])
    assert sorted(r.item[0] for r in found) == sorted(expected)
    assert len(expected) == {"common": 3, "middle": 3, "rare": 2, "absent": 0, "hello": 3}[word]


def test_session_search_puts_message_matches_before_title_only_ones(owner, make_session):
    by_message = make_session(owner, "what about the piano", "practise daily")
    by_title = make_session(owner, "scales and arpeggios", "ok")
    ChatSession.objects.filter(pk=by_title.pk).update(title="Piano lessons 学钢琴")
    chinese = make_session(owner, "周末的安排", "好的")
    ChatSession.objects.filter(pk=chinese.pk).update(title="学钢琴计划")

    found = selectors.session_search(owner=owner, query="PIANO")
    assert [(s.id, s.match) for s in found] == [
        (by_message.id, "what about the piano"),
        (by_title.id, None),
    ]
    # No letter with a case, two characters: the plain LIKE on titles.
    found = selectors.session_search(owner=owner, query="钢琴")
    assert {s.id for s in found} == {by_title.id, chinese.id}
    # The message matches fill the places: no title is searched for.
    assert [s.id for s in selectors.session_search(owner=owner, query="piano", limit=1)] == [
        by_message.id
    ]
