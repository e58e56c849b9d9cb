"""ethan_shared.compiled: a read the ORM builds once, run with each call's values, reads what
the ORM's own statement reads; where the values are not plain parameters, the ORM builds it
every time."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from ethan_shared.compiled import Compiled, Marker

pytestmark = pytest.mark.django_db

User = get_user_model()
JOINED = User._meta.get_field("date_joined")
MARKER_TIME = datetime(1901, 2, 3, 4, 5, 6, 789012, tzinfo=UTC)


@pytest.fixture
def people(db):
    now = timezone.now()
    made = []
    for n, name in enumerate(["ada", "grace", "alan", "edsger"]):
        person = User.objects.create_user(username=name, first_name=name.title())
        User.objects.filter(pk=person.pk).update(date_joined=now - timedelta(days=n))
        made.append(User.objects.get(pk=person.pk))
    return made


def counted(build):
    return mock.Mock(side_effect=build)


def test_rows_are_the_orms_and_the_query_is_built_once(people):
    build = counted(
        lambda limit, name: (
            User.objects.filter(username=name)
            .order_by("pk")
            .values_list("pk", "username", "date_joined")[:limit]
        )
    )
    names = Compiled(build, name=Marker("zqx-no-such-name"))
    for person in people:
        rows = names.rows(5, name=person.username)
        assert rows == [(person.pk, person.username, person.date_joined)]
        assert isinstance(rows[0][2], datetime)  # converted as the ORM converts it
    assert names.rows(5, name="nobody") == []
    assert build.call_count == 1  # the marker's build, compiled on this thread's connection
    names.rows(1, name="ada")  # another shape: compiled on its own
    assert build.call_count == 2


def test_a_datetime_is_prepared_as_the_field_prepares_it(people):
    joined = Compiled(
        lambda before: (
            User.objects.filter(date_joined__lt=before)
            .order_by("pk")
            .values_list("username", flat=False)
        ),
        before=Marker.of_field(MARKER_TIME, JOINED),
    )
    for person in people:
        expected = list(
            User.objects.filter(date_joined__lt=person.date_joined)
            .order_by("pk")
            .values_list("username")
        )
        assert joined.rows(before=person.date_joined) == expected
    assert len(joined.rows(before=timezone.now() + timedelta(days=1))) == len(people)


def test_a_value_the_orm_rewrites_is_built_every_time(people):
    """icontains wraps its value in %…%: not the marker, so the ORM builds the read each
    call, and it still reads the right rows."""
    build = counted(
        lambda part: User.objects.filter(username__icontains=part).order_by("pk").values_list("pk")
    )
    parts = Compiled(build, part=Marker("zqx"))
    assert parts.rows(part="a") == [(p.pk,) for p in people if "a" in p.username]
    assert parts.rows(part="GR") == [(people[1].pk,)]
    assert build.call_count == 3  # the marker's, then each call's


def test_none_is_built_by_the_orm(people):
    """`= None` is IS NULL to the ORM: a None never takes the compiled statement's place."""
    User.objects.filter(pk=people[0].pk).update(last_login=timezone.now())
    logged = Compiled(
        lambda at: User.objects.filter(last_login=at).order_by("pk").values_list("pk"),
        at=Marker.of_field(MARKER_TIME, User._meta.get_field("last_login")),
    )
    assert logged.rows(at=None) == [(p.pk,) for p in people[1:]]


def test_chunks_read_the_rows_a_chunk_at_a_time(people):
    every = Compiled(
        lambda floor: User.objects.filter(pk__gt=floor).order_by("-pk").values_list("pk"),
        floor=Marker(-7_340_017_293),
    )
    chunks = list(every.chunks(3, floor=0))
    assert [len(chunk) for chunk in chunks] == [3, 1]
    assert [row for chunk in chunks for row in chunk] == [(p.pk,) for p in reversed(people)]
    assert every.exists(floor=people[-1].pk) is False
    assert every.exists(floor=people[0].pk) is True


def test_chunks_and_exists_of_a_read_the_orm_builds_every_time(people):
    """The ORM's fallback gives the same chunks and the same answer as the compiled statement."""
    build = counted(
        lambda part: User.objects.filter(username__icontains=part).order_by("pk").values_list("pk")
    )
    parts = Compiled(build, part=Marker("zqx"))
    with_a = [(p.pk,) for p in people if "a" in p.username]
    assert len(with_a) == 3
    assert list(parts.chunks(2, part="a")) == [with_a[:2], with_a[2:]]
    assert parts.exists(part="GR") is True
    assert parts.exists(part="zzz") is False
    assert build.call_count == 4  # the marker's, then each call's


def test_where_is_the_clause_for_a_statement_written_around_it(people):
    named = Compiled(
        lambda name, before: User.objects.filter(username=name, date_joined__lt=before),
        name=Marker("zqx-no-such-name"),
        before=Marker.of_field(MARKER_TIME, JOINED),
    )
    table = connection.ops.quote_name(User._meta.db_table)
    later = timezone.now() + timedelta(days=1)
    for name, before, found in (("ada", later, True), ("ada", MARKER_TIME, False)):
        sql, params = named.where(name=name, before=before)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE {sql}", params)
            assert cursor.fetchone()[0] == int(found)
    assert named.where(name="ada", before=later)[0] == named.where(name="x", before=later)[0]


@pytest.mark.django_db(transaction=True)
def test_a_statement_compiled_on_one_thread_runs_on_anothers_connection():
    """Compiled once for the process: a request's thread, new with its own connection, runs the
    statement another thread compiled, on that connection."""
    person = User.objects.create_user(username="ada")
    build = counted(
        lambda name: User.objects.filter(username=name).values_list("pk", "date_joined")
    )
    names = Compiled(build, name=Marker("zqx-no-such-name"))
    assert names.rows(name="ada") == [(person.pk, person.date_joined)]
    found, used = [], []

    def on_a_thread() -> None:
        found.extend(names.rows(name="ada"))
        used.append(connection.connection)  # this thread's own connection, opened for it
        connection.close()

    thread = threading.Thread(target=on_a_thread)
    thread.start()
    thread.join()
    assert found == [(person.pk, person.date_joined)]
    assert used[0] is not connection.connection
    assert build.call_count == 1
