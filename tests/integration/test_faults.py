"""Fault injection, bounded: a real paiweb on PostgreSQL with over a hundred jobs of every
kind, its worker, beat, agent and web SIGKILLed a dozen times at random moments (the demo
starts each again), and every invariant of apps.ops.faults holding afterwards. The longer
soak is `benchmarks/faults.py`."""

from __future__ import annotations

import pytest

from apps.ops.faults import VICTIMS, run

pytestmark = pytest.mark.own_database


def test_nothing_is_lost_when_processes_are_killed_at_random():
    report = run(jobs=120, kills=12, window=75, settle=240, seed=7)
    print(report.figures())
    assert sum(report.kills.values()) >= 10 and set(report.kills) == set(VICTIMS), report.kills
    assert report.samples >= 10, "the invariants were hardly sampled while processes died"
    assert report.metered_pods > 0, "no billed pod was checked"
    assert not report.platform_failed, "\n".join(report.platform_failed)
    assert not report.problems, "\n".join(report.problems[:30])
