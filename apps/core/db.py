"""Database expressions shared by the hot reads of the scheduler, the market and the API."""

from __future__ import annotations

import copy
import hashlib
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import FloatField, Func, Model, QuerySet
from django.utils import timezone


class Epoch(Func):
    """A datetime as epoch seconds (a float), for reads that only order or compare times:
    tens of thousands of rows are read without building an aware datetime for each.

    Exact, as `datetime.timestamp()` is: PostgreSQL extracts it; on SQLite, which keeps
    datetimes as text, a function registered on each connection (`sqlite_functions`) parses
    it (julianday() would be off by tens of microseconds and miss minute boundaries)."""

    arity = 1
    output_field = FloatField()

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(
            compiler, connection, template="EXTRACT(EPOCH FROM %(expressions)s)::float8", **extra
        )

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="paiweb_epoch(%(expressions)s)", **extra)


def _sqlite_epoch(text: str | None) -> float | None:
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def sqlite_functions(sender, connection, **kwargs) -> None:
    """`connection_created` receiver: the SQL functions paiweb's SQLite queries use."""
    if connection.vendor == "sqlite":
        connection.connection.create_function("paiweb_epoch", 1, _sqlite_epoch, deterministic=True)


def transaction_lock(name: str, *, wait: bool = False) -> bool:
    """Take the database lock `name` for the rest of the current transaction, without
    waiting: False when another transaction holds it (and is doing the same work).

    The fence behind a singleton tick's Redis lock (`singleton_lock`), which expires: a tick
    frozen past its timeout (SIGSTOP, a stalled VM) while another worker runs the next one
    would otherwise write a plan made from what it read before the other committed, onto
    room the other just gave away. On PostgreSQL an advisory transaction lock, released at
    commit or rollback; call it first in the transaction, before anything is read. On
    SQLite always True: paiweb's SQLite transactions are IMMEDIATE (settings), so each holds
    the database's write lock from its first statement and two never overlap.

    `wait`: wait for the lock instead (always True then): a write that the tick must not
    overwrite with what it read before (an admin's change of a price) waits for a tick in
    flight to commit, and a tick that starts meanwhile finds the lock taken and skips."""
    assert connection.in_atomic_block, "a transaction lock lives as long as its transaction"
    if connection.vendor != "postgresql":
        return True
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
            return True
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [key])
        return bool(cursor.fetchone()[0])


ID_CHUNK = 2000  # ids per IN (...) list


def id_chunks(ids: Sequence[int], size: int = ID_CHUNK) -> Iterator[list[int]]:
    """`ids` in lists of at most `size`, for IN (...) filters over thousands of rows: SQLite
    and PostgreSQL cap the parameters of one statement."""
    for start in range(0, len(ids), size):
        yield list(ids[start : start + size])


def db_datetime(value: datetime | None):
    """A datetime as Django's own queries store it, for raw batched statements: SQLite keeps
    naive UTC text, and its driver would otherwise write an offset ("…+00:00") that text
    comparisons then trip over. PostgreSQL takes the aware datetime as it is."""
    return connection.ops.adapt_datetimefield_value(value)


def rows_insert(
    model: type[Model], fields: Sequence[str], rows: Sequence[Sequence[Any]], *, chunk: int = 5000
) -> list[int]:
    """Insert plain rows, each a tuple of values in `fields` order, and return the new
    primary keys in row order. Every other column takes its field's default (auto_now and
    auto_now_add: the time of the call).

    The market starts thousands of jobs in a tick; building a model instance per pod,
    event and status entry costs more than the database's work. On PostgreSQL each chunk is
    one INSERT … SELECT FROM unnest(…) RETURNING; elsewhere this is bulk_create. Values go to
    the driver as they are: give what the column takes (aware datetimes, ids for foreign
    keys via their attname, e.g. "job_id")."""
    if not rows:
        return []
    rest = [f for f in model._meta.concrete_fields if f.attname not in fields and not f.primary_key]
    for f in rest:  # refused everywhere, so that code which runs on SQLite runs on PostgreSQL
        if f.has_default() and callable(f.default):
            raise ValueError(f"rows_insert: give {f.attname}, its default differs per row")
    if connection.vendor != "postgresql":
        objs = [model(**dict(zip(fields, row, strict=True))) for row in rows]
        model._default_manager.bulk_create(objs, batch_size=chunk)
        return [obj.pk for obj in objs]
    by_attname = {f.attname: f for f in model._meta.concrete_fields}
    given = [by_attname[name] for name in fields]
    now = timezone.now()
    constants = [
        now
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
        else f.get_db_prep_save(f.get_default(), connection)
        for f in rest
    ]

    def db_type(f) -> str:
        return f.db_type(connection).split("(")[0]

    columns = ", ".join(connection.ops.quote_name(f.column) for f in given + rest)
    arrays = ", ".join(f"%s::{db_type(f)}[]" for f in given)
    names = ", ".join(f"c{i}" for i in range(len(given)))
    select = ", ".join(
        [*(f"u.c{i}" for i in range(len(given))), *(f"%s::{db_type(f)}" for f in rest)]
    )
    sql = (
        f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({columns}) "
        f"SELECT {select} FROM unnest({arrays}) WITH ORDINALITY AS u({names}, n) ORDER BY u.n "
        f"RETURNING {connection.ops.quote_name(model._meta.pk.column)}"
    )
    ids: list[int] = []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            cursor.execute(sql, [*constants, *(list(column) for column in zip(*part, strict=True))])
            ids += [row[0] for row in cursor.fetchall()]
    return ids


def rows_update(
    model: type[Model],
    fields: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    where: Mapping[str, Any] | None = None,
    chunk: int = 5000,
) -> None:
    """UPDATE rows by primary key, each row a tuple (pk, *its values in `fields` order);
    `where` adds equalities each row must meet too (a compare-and-set on its status), or it
    is left alone.

    A tick writes thousands of rows, each its own values. On PostgreSQL each chunk is one
    UPDATE … FROM unnest(…) (a statement per row costs a round trip each, even pipelined);
    elsewhere one executemany (Django's bulk_update builds a CASE per row and takes
    seconds for thousands). Values as `rows_insert` takes them: plain fields by attname."""
    if not rows:
        return
    meta = model._meta
    qn = connection.ops.quote_name
    by_attname = {f.attname: f for f in meta.concrete_fields}
    given = [by_attname[name] for name in fields]
    conditions = [
        (by_attname[name], by_attname[name].get_db_prep_save(value, connection))
        for name, value in (where or {}).items()
    ]
    pk = meta.pk
    assert pk is not None  # every concrete model has one
    table = qn(meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            sets = ", ".join(f"{qn(f.column)} = %s" for f in given)
            tests = " AND ".join(f"{qn(f.column)} = %s" for f, _ in [(pk, None), *conditions])
            cursor.executemany(
                f"UPDATE {table} SET {sets} WHERE {tests}",
                [
                    [
                        *(
                            f.get_db_prep_save(v, connection)
                            for f, v in zip(given, row[1:], strict=True)
                        ),
                        row[0],
                        *(value for _, value in conditions),
                    ]
                    for row in rows
                ],
            )
            return

        def db_type(f) -> str:
            return f.db_type(connection).split("(")[0]

        columns = [pk, *given]
        arrays = ", ".join(f"%s::{db_type(f)}[]" for f in columns)
        names = ", ".join(f"c{i}" for i in range(len(columns)))
        sets = ", ".join(f"{qn(f.column)} = u.c{i}" for i, f in enumerate(given, start=1))
        tests = " AND ".join(
            [
                f"{table}.{qn(pk.column)} = u.c0",
                *(f"{table}.{qn(f.column)} = %s" for f, _ in conditions),
            ]
        )
        sql = f"UPDATE {table} SET {sets} FROM unnest({arrays}) AS u({names}) WHERE {tests}"
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            cursor.execute(
                sql,
                [
                    *(list(column) for column in zip(*part, strict=True)),
                    *(value for _, value in conditions),
                ],
            )


def pks_update(model: type[Model], pks: Sequence[int], **values: Any) -> None:
    """UPDATE the rows with these primary keys, setting `values` (plain fields). On
    PostgreSQL one statement with the keys as an array (an IN list of thousands of
    placeholders costs more to build than to run); elsewhere chunked IN lists."""
    if not pks:
        return
    if connection.vendor != "postgresql":
        for start in range(0, len(pks), 2000):
            model._default_manager.filter(pk__in=pks[start : start + 2000]).update(**values)
        return
    qn = connection.ops.quote_name
    fields = [model._meta.get_field(name) for name in values]
    sets = ", ".join(f"{qn(f.column)} = %s" for f in fields)
    params = [
        f.get_db_prep_save(v, connection) for f, v in zip(fields, values.values(), strict=True)
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {qn(model._meta.db_table)} SET {sets} "
            f"WHERE {qn(model._meta.pk.column)} = ANY(%s)",
            [*params, list(pks)],
        )


class ReusedSql:
    """A read whose SQL Django builds once per thread and shape, then runs with fresh values.

    Building a query's SQL (joins, select list, ordering: `SQLCompiler.as_sql`) costs more
    CPU than PostgreSQL's work for a read of one job by its id, and a GetJob makes seven such
    reads. `build(shape, **markers)` returns the queryset, written with the ORM as anywhere
    else (the rules stay in their selectors); it is compiled once per `shape` (what changes
    the SQL's text, e.g. whether the caller is a superuser) with a marker in place of each
    value named in `kinds` (int or str). Each call then runs that SQL with the values given
    and hands the rows to Django's own iterable, so the objects are built exactly as the
    queryset would build them (select_related included; prefetch_related is not supported).

    A marker must reach the SQL's parameters unchanged (an exact match on a text or an
    integer column, ids; a shape may leave one out): building refuses a queryset where one
    reached them changed, and values may not be None (that would compile to IS NULL)."""

    def __init__(self, build: Callable[..., QuerySet], **kinds: type) -> None:
        if not kinds or any(kind not in (int, str) for kind in kinds.values()):
            raise ValueError("ReusedSql: name each value and its kind, int or str")
        self._build = build
        self._kinds = kinds
        self._local = threading.local()  # a compiler holds its thread's connection

    def __call__(self, shape: Hashable = None, **values: Any) -> list[Any]:
        if values.keys() != self._kinds.keys() or any(v is None for v in values.values()):
            raise ValueError(f"ReusedSql: give exactly {sorted(self._kinds)}, none of them None")
        compiled = getattr(self._local, "compiled", None)
        if compiled is None:
            compiled = self._local.compiled = {}
        entry = compiled.get(shape)
        if entry is None:
            entry = compiled[shape] = self._compile(shape)
        queryset, compiler, sql, slots, converters = entry
        params = [values[name] if name is not None else value for name, value in slots]
        run = queryset._chain()

        def get_compiler(using=None, connection=None, elide_empty=True):
            replay = copy.copy(compiler)  # this thread's, with its connection
            replay.as_sql = lambda *args, **kwargs: (sql, params)
            replay.get_converters = lambda expressions: converters
            return replay

        run.query.get_compiler = get_compiler
        return list(run)

    def _compile(self, shape: Hashable):
        markers: dict[str, Any] = {}
        for number, (name, kind) in enumerate(self._kinds.items()):
            if kind is int:
                markers[name] = _INT_MARKER + number
            else:
                markers[name] = f"\x00reused-sql:{name}\x00"
        queryset = self._build(shape, **markers)
        if queryset._prefetch_related_lookups:
            raise ValueError("ReusedSql: prefetch_related is not supported")
        compiler = queryset.query.get_compiler(using=queryset.db)
        try:
            sql, params = compiler.as_sql()  # fills compiler.select, klass_info, …
        except EmptyResultSet:
            raise ValueError("ReusedSql: the query matches nothing for every value") from None
        by_marker = {(type(v), v): name for name, v in markers.items()}
        slots: list[tuple[str | None, Any]] = []  # (the value's name, or None and the constant)
        for value in params:
            name = by_marker.get((type(value), value)) if isinstance(value, int | str) else None
            slots.append((name, None) if name is not None else (None, value))
        # A value that some shape does not need is left out of its SQL (a superuser's job read
        # filters by no user); one that reached the SQL changed (in a LIKE pattern, a LIMIT)
        # would be run with the marker's text: refused.
        texts = [str(v) for v in markers.values()]
        changed = any(text in sql for text in texts) or any(
            name is None and _near_marker(value, texts) for name, value in slots
        )
        if changed:
            raise ValueError("ReusedSql: a value did not reach the SQL as given")
        fields = [column[0] for column in compiler.select[: compiler.col_count]]
        return queryset, compiler, sql, slots, compiler.get_converters(fields)


# Inside PostgreSQL's integer (a larger one would be refused by an integer column's lookup),
# and far from the numbers paiweb's queries hold as constants.
_INT_MARKER = 2_147_414_011


def _near_marker(value: Any, texts: list[str]) -> bool:
    if isinstance(value, int):
        return abs(value - _INT_MARKER) < 1000
    return isinstance(value, str) and any(text in value for text in texts)
