"""Database expressions shared by the hot reads of the scheduler and the market."""

from __future__ import annotations

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
