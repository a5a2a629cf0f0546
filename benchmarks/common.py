"""Helpers the database benchmarks share (import after django.setup())."""

from __future__ import annotations

import time

from django.db import connection


def analyze() -> None:
    """Fresh statistics, as autovacuum keeps them on a live database (bulk loads leave the
    planner guessing otherwise)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def python_reference() -> float:
    """Seconds for a fixed pure-Python loop: how fast this machine is right now (shared
    machines vary from run to run), to compare figures taken on different days."""
    started = time.perf_counter()
    sum(i * i for i in range(10_000_000))
    return time.perf_counter() - started
