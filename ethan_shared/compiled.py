"""Reads the ORM builds once: a QuerySet made with markers in place of the values that change
from one call to the next, compiled by the ORM the first time the process runs it, then run on
the calling thread's connection with each call's values put where the markers were.

Why: building and compiling a QuerySet cost a turn's reads several times what running them
did (issue 42's profiles: 200–700 µs of CPU a read, against 20–120 µs for its SQL), and every
door's turn makes these reads. The query is still written once, with the ORM, and the ORM
still converts what the database returns (dates, JSON, decimals).

The swap is checked when compiling: each marker must come out as parameters (prepared as the
ORM prepares them) and nowhere in the SQL's text, or the statement is built by the ORM on every
call, as without this module. A call whose value is not of its marker's type (None above all,
which the ORM compiles as IS NULL) is built by the ORM too.

    rules = Compiled(
        lambda owner_id: Rule.objects.filter(owner_id=owner_id).values_list("pk", "text"),
        owner_id=ID_MARKER,
    )
    rules.rows(owner_id=person.pk)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, QuerySet


@dataclass(frozen=True)
class Marker:
    """A value's stand-in while compiling. `value` must be one no real call passes (an id no row
    has, a word nobody says). `prep`, when the ORM does not pass the value as it is, turns a
    value into the parameter the ORM would send: `Marker.of_field` for a field's own (a datetime
    is text on SQLite), or a function of the value and the connection."""

    value: Any
    prep: Callable[[Any, BaseDatabaseWrapper], Any] | None = None

    @classmethod
    def of_field(cls, value: Any, model_field: Field) -> Marker:
        return cls(value, lambda v, connection: model_field.get_db_prep_value(v, connection))

    def prepared(self, value: Any, connection: BaseDatabaseWrapper) -> Any:
        return value if self.prep is None else self.prep(value, connection)


# The marker of a row's id (an owner's, say): no row has it.
ID_MARKER = Marker(-7_340_017_293)


@dataclass
class _Statement:
    alias: str  # the database its QuerySet reads from (which its model decides)
    sql: str
    params: list[Any]
    at: dict[str, list[int]]  # each marker's places among the parameters
    compiler: Any = None  # a whole read's compiler, which converts its rows
    columns: int = 0
    extra: bool = False  # the compiler selects extra columns the rows leave out


class Compiled:
    """`build(*shape, **values)` returns the QuerySet (a values_list, for `rows`). `shape` is
    what gives the statement another form (a limit, a branch of the query): each shape is
    compiled on its own. The markers name every value passed by keyword."""

    def __init__(self, build: Callable[..., QuerySet], **markers: Marker):
        self.build = build
        self.markers = markers
        # The process's, for every thread: a statement compiled on one thread's connection is
        # run on the calling thread's own (its SQL and parameters are text and values), and
        # keeps the compiling one only for its converters, which read that connection's
        # settings (its time zone), the same in every thread. Kept by thread, a statement was
        # compiled again by every thread a request starts: under 300 streams at once, each
        # stream's, for more than the ORM's own building cost. Two threads compiling one
        # shape at once both store the same statement.
        self._statements: dict[tuple, _Statement | None] = {}

    # --- what callers run ------------------------------------------------------------------

    def rows(self, *shape: Any, **values: Any) -> list[tuple]:
        """The rows of the values_list QuerySet, as the ORM reads them."""
        statement = self._statement("rows", shape, values)
        if statement is None:
            return list(self.build(*shape, **values))
        with connections[statement.alias].cursor() as cursor:
            cursor.execute(statement.sql, self._params(statement, values))
            return self._converted(statement, cursor.fetchall())

    def chunks(self, size: int, *shape: Any, **values: Any) -> Iterator[list[tuple]]:
        """The same rows `size` at a time, the database's cursor read as they are used (on
        PostgreSQL a server-side one, as QuerySet.iterator uses): for a scan of many rows."""
        statement = self._statement("rows", shape, values)
        if statement is None:
            rows = self.build(*shape, **values).iterator(chunk_size=size)
            while batch := list(islice(rows, size)):
                yield batch
            return
        with connections[statement.alias].chunked_cursor() as cursor:
            cursor.execute(statement.sql, self._params(statement, values))
            while fetched := cursor.fetchmany(size):
                yield self._converted(statement, fetched)

    def exists(self, *shape: Any, **values: Any) -> bool:
        """Whether the QuerySet has a row: the first is fetched, and not converted (build it
        sliced to one row, a values_list of the key)."""
        statement = self._statement("rows", shape, values)
        if statement is None:
            return self.build(*shape, **values).exists()
        with connections[statement.alias].cursor() as cursor:
            cursor.execute(statement.sql, self._params(statement, values))
            return cursor.fetchone() is not None

    def where(self, *shape: Any, **values: Any) -> tuple[str, list[Any]]:
        """The QuerySet's WHERE clause alone, and its parameters, for a statement written as
        SQL around it."""
        statement = self._statement("where", shape, values)
        if statement is None:
            queryset = self.build(*shape, **values)
            return _where(queryset, connections[queryset.db])
        return statement.sql, self._params(statement, values)

    # --- compiling ----------------------------------------------------------------------------

    def _statement(self, part: str, shape: tuple, values: dict[str, Any]) -> _Statement | None:
        if values.keys() != self.markers.keys() or any(
            type(value) is not type(self.markers[name].value) for name, value in values.items()
        ):
            return None
        key = (part, shape)
        if key not in self._statements:  # None: no plain parameter in this shape, not compiled
            queryset = self.build(*shape, **{name: m.value for name, m in self.markers.items()})
            self._statements[key] = self._compile(part, queryset)
        return self._statements[key]

    def _compile(self, part: str, queryset: QuerySet) -> _Statement | None:
        connection = connections[queryset.db]
        compiler = queryset.query.get_compiler(connection=connection)
        if part == "where":
            sql, params = _where(queryset, connection)
        else:
            sql, params = compiler.as_sql()
        params = list(params)
        at: dict[str, list[int]] = {}
        for name, marker in self.markers.items():
            expected = marker.prepared(marker.value, connection)
            at[name] = [
                i for i, p in enumerate(params) if type(p) is type(expected) and p == expected
            ]
            if not at[name] or any(text in sql for text in _texts(marker.value, expected)):
                return None  # not a plain parameter: the ORM builds it every time
        statement = _Statement(alias=queryset.db, sql=sql, params=params, at=at)
        if part == "rows":
            statement.compiler = compiler
            statement.columns = compiler.col_count
            statement.extra = compiler.has_extra_select
        return statement

    def _params(self, statement: _Statement, values: dict[str, Any]) -> list[Any]:
        params = list(statement.params)
        for name, places in statement.at.items():
            value = self.markers[name].prepared(values[name], connections[statement.alias])
            for i in places:
                params[i] = value
        return params

    @staticmethod
    def _converted(statement: _Statement, fetched: list) -> list[tuple]:
        if statement.extra:  # as the ORM's execute_sql leaves them out
            fetched = [row[: statement.columns] for row in fetched]
        # The ORM's own conversion of what the database returned.
        return list(statement.compiler.results_iter(results=[fetched], tuple_expected=True))


def _where(queryset: QuerySet, connection: BaseDatabaseWrapper) -> tuple[str, list[Any]]:
    query = queryset.query
    sql, params = query.where.as_sql(query.get_compiler(connection=connection), connection)
    return sql, list(params)


def _texts(value: Any, expected: Any) -> set[str]:
    """A marker's texts that must not be in the SQL (written into it, not passed)."""
    texts = {str(value), str(expected)}
    if isinstance(value, list | tuple):
        texts.update(str(item) for item in value)
    return texts
