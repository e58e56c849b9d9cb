"""The message vectors a process holds for search by meaning (sessions_app.meaning.
MessageVectors): the same cosines as a scan of the database, kept up to date by the sessions'
vectors_version (new vectors, a deleted session), narrowed as a search asks, and bounded (the
newest sessions up to scan_cap, all owners within ETHAN_VECTOR_CACHE_MB)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import embedder
from agent_app.vectors import vectors_write
from sessions_app import meaning, services
from sessions_app.models import Message

pytestmark = pytest.mark.django_db


def _talk(make_session, owner, *lines):
    session = make_session(owner, *lines)
    vectors_write(owner_id=owner.pk, session_id=session.pk)
    return session


def _scan(owner, text, **narrowed):
    scan = meaning.messages_scan(owner.pk, meaning.query_vector(text), **narrowed)
    return dict(zip(scan.ids.tolist(), scan.cosines.tolist(), strict=True))


def test_the_held_vectors_give_the_database_scans_cosines(embedder_on, make_session, owner):
    _talk(make_session, owner, "I keep bees on my balcony.", "Lovely!", "我养了一只猫。", "好的。")
    held = _scan(owner, "insects at home")
    stored = meaning.nearest(
        Message.objects.filter(session__owner=owner), meaning.query_vector("insects at home")
    )
    assert sorted(held) == sorted(stored.ids.tolist()) and len(held) == 4
    for pk, cosine in zip(stored.ids.tolist(), stored.cosines.tolist(), strict=True):
        assert held[pk] == pytest.approx(cosine, abs=1e-5)


def test_new_vectors_and_a_deleted_session_are_seen_by_the_next_search(
    embedder_on, make_session, owner
):
    first = _talk(make_session, owner, "I keep bees.", "Nice.")
    assert len(_scan(owner, "bees")) == 2
    services.message_append(session=first, role="user", content="And two hens.")
    vectors_write(owner_id=owner.pk, session_id=first.pk)
    assert len(_scan(owner, "bees")) == 3
    second = _talk(make_session, owner, "My sister lives in Porto.", "Noted.")
    assert len(_scan(owner, "bees")) == 5
    services.session_delete(session=first)
    left = _scan(owner, "bees")
    assert set(left) == set(Message.objects.filter(session=second).values_list("pk", flat=True))


def test_a_search_narrowed_to_a_session_or_without_the_current_round(
    embedder_on, make_session, owner
):
    one = _talk(make_session, owner, "I keep bees.", "Nice.", "And hens.", "Great.")
    two = _talk(make_session, owner, "My sister lives in Porto.", "Noted.")
    only_two = _scan(owner, "bees", session_id=two.pk)
    assert set(only_two) == set(Message.objects.filter(session=two).values_list("pk", flat=True))
    without = _scan(owner, "bees", exclude_after=(one.pk, 3))
    dropped = set(Message.objects.filter(session=one, seq__gte=3).values_list("pk", flat=True))
    assert len(without) == 4 and not dropped & set(without)


def test_the_newest_sessions_are_held_up_to_the_cap(embedder_on, make_session, owner, monkeypatch):
    old = _talk(make_session, owner, "I keep bees.", "Nice.")
    new = _talk(make_session, owner, "My sister lives in Porto.", "Noted.")
    monkeypatch.setattr(meaning, "TUNING", replace(meaning.TUNING, scan_cap=2))
    meaning.messages_forget()
    held = _scan(owner, "bees")
    assert set(held) == set(Message.objects.filter(session=new).values_list("pk", flat=True))
    assert old.pk not in meaning._held[(owner.pk, "use-multilingual-v3")].sessions


def test_all_owners_together_stay_within_the_budget(
    embedder_on, make_session, owner, other_owner, settings
):
    _talk(make_session, owner, "I keep bees.", "Nice.")
    _talk(make_session, other_owner, "I play chess.", "Fun.")
    settings.ETHAN_VECTOR_CACHE_MB = 0  # room for the one searching only
    _scan(owner, "bees")
    _scan(other_owner, "chess")
    assert list(meaning._held) == [(other_owner.pk, "use-multilingual-v3")]
    assert len(_scan(owner, "bees")) == 2  # read again when it searches


def test_vectors_of_another_dimension_under_the_same_name_are_skipped(
    embedder_on, make_session, owner
):
    session = _talk(make_session, owner, "I keep bees.", "Nice.")
    odd = Message.objects.get(session=session, seq=1)
    Message.objects.filter(pk=odd.pk).update(embedding=b"\x00" * 20)
    services.message_append(session=session, role="user", content="And hens.")
    vectors_write(owner_id=owner.pk, session_id=session.pk)  # moves the session's version
    held = _scan(owner, "bees")
    assert odd.pk not in held and len(held) == 2
    assert np.isfinite(list(held.values())).all()


def test_a_session_larger_than_the_cap_is_held_from_its_newest_messages(
    embedder_on, make_session, owner, monkeypatch
):
    session = _talk(make_session, owner, "I keep bees.", "Nice.", "And hens.", "Great.")
    monkeypatch.setattr(meaning, "TUNING", replace(meaning.TUNING, scan_cap=3))
    meaning.messages_forget()
    held = _scan(owner, "bees")
    newest = Message.objects.filter(session=session, seq__gte=2).values_list("pk", flat=True)
    assert set(held) == set(newest)


def test_a_grown_session_is_read_again_from_its_newest_held_row(
    embedder_on, make_session, owner, django_assert_max_num_queries
):
    session = _talk(make_session, owner, "I keep bees.", "Nice.")
    _scan(owner, "bees")
    services.message_append(session=session, role="user", content="And two hens.")
    services.message_append(session=session, role="assistant", content="Lovely.")
    vectors_write(owner_id=owner.pk, session_id=session.pk)  # rewrites "Nice." too
    held = _scan(owner, "bees")
    stored = meaning.nearest(Message.objects.filter(session=session), meaning.query_vector("bees"))
    assert len(held) == 4
    for pk, cosine in zip(stored.ids.tolist(), stored.cosines.tolist(), strict=True):
        assert held[pk] == pytest.approx(cosine, abs=1e-5)
    with django_assert_max_num_queries(1):  # nothing moved: the versions only
        _scan(owner, "bees")


def test_writing_vectors_locks_the_session_before_its_messages(embedder_on, make_session, owner):
    """The order a turn takes them (message_append: the session's seq, then the previous
    message's search tokens): the other order deadlocked a turn against the embedding task on
    PostgreSQL."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    session = make_session(owner, "I keep bees.", "Nice.")
    with CaptureQueriesContext(connection) as captured:
        assert services.messages_embed(session_id=session.pk) == 2
    # A statement run for many rows is recorded as "3 times: UPDATE …".
    statements = [q["sql"].partition(" times: ")[2] or q["sql"] for q in captured.captured_queries]
    writes = [sql.split()[1].strip('"') for sql in statements if sql.startswith("UPDATE")]
    assert writes[0] == "sessions_app_chatsession", writes
    assert "sessions_app_message" in writes[1:], writes


def test_vectors_written_by_key_count_the_rows_written_and_skip_a_row_deleted_meanwhile(
    make_session, owner
):
    """meaning.rows_write for messages (no `unchanged`): one UPDATE by key run for each row; a
    message deleted since it was read is no row written, and the others are."""
    session = make_session(owner, "I keep bees.", "Nice.", "And two hens.")
    kept, gone, other = Message.objects.filter(session=session).order_by("seq")
    vectors = {row.pk: np.full(512, 0.5, dtype=np.float32) for row in (kept, gone, other)}
    gone.delete()

    assert meaning.rows_write(Message, vectors, "test-embedder") == 2

    written = Message.objects.filter(session=session).order_by("seq")
    assert [row.embedding_model for row in written] == ["test-embedder", "test-embedder"]
    stored = embedder.from_blob(written[0].embedding, 512)
    np.testing.assert_allclose(stored, np.full(512, 0.5), atol=1e-2)
