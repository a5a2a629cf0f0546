"""Database expressions shared by the hot reads of the scheduler and the market."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import FloatField, Func


class Epoch(Func):
    """A datetime as epoch seconds (a float), for reads that only order or compare times:
    tens of thousands of rows are read without building an aware datetime for each.

    SQLite keeps datetimes as UTC text; julianday() reads them (to about 10 µs)."""

    arity = 1
    output_field = FloatField()

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection,
                           template="EXTRACT(EPOCH FROM %(expressions)s)::float8", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection,
                           template="((julianday(%(expressions)s) - 2440587.5) * 86400.0)",
                           **extra)


def db_datetime(value: datetime | None):
    """A datetime as Django's own queries store it, for raw batched statements: SQLite keeps
    naive UTC text, and its driver would otherwise write an offset ("…+00:00") that text
    comparisons then trip over. PostgreSQL takes the aware datetime as it is."""
    return connection.ops.adapt_datetimefield_value(value)
