"""Database expressions shared by the hot reads of the scheduler and the market."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.models import FloatField, Func, Model
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
