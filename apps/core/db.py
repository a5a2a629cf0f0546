"""Database expressions shared by the hot reads of the scheduler and the market."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection
from django.db.models import FloatField, Func


class Epoch(Func):
    """A datetime as epoch seconds (a float), for reads that only order or compare times:
    tens of thousands of rows are read without building an aware datetime for each.

    Exact, as `datetime.timestamp()` is: PostgreSQL extracts it; on SQLite, which keeps
    datetimes as text, a function registered on each connection (`sqlite_functions`) parses
    it (julianday() would be off by tens of microseconds and miss minute boundaries)."""

    arity = 1
    output_field = FloatField()

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection,
                           template="EXTRACT(EPOCH FROM %(expressions)s)::float8", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="paiweb_epoch(%(expressions)s)",
                           **extra)


def _sqlite_epoch(text: str | None) -> float | None:
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def sqlite_functions(sender, connection, **kwargs) -> None:
    """`connection_created` receiver: the SQL functions paiweb's SQLite queries use."""
    if connection.vendor == "sqlite":
        connection.connection.create_function("paiweb_epoch", 1, _sqlite_epoch,
                                              deterministic=True)


def db_datetime(value: datetime | None):
    """A datetime as Django's own queries store it, for raw batched statements: SQLite keeps
    naive UTC text, and its driver would otherwise write an offset ("…+00:00") that text
    comparisons then trip over. PostgreSQL takes the aware datetime as it is."""
    return connection.ops.adapt_datetimefield_value(value)
