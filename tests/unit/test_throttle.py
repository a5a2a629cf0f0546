"""The throttle's rule (apps/core/throttle.py: locked_until), against its definition: locked
exactly while at least `limit` failures lie within the last `window` seconds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from apps.core.throttle import Lock, Rule, Scope, locked_until

NOW = 1_800_000_000.0

rules = st.builds(Rule, limit=st.integers(1, 8), window=st.floats(1.0, 3600.0))
# Failure times up to two windows' worth before NOW (any order, repeats allowed).
offsets = st.lists(st.floats(0.0, 7200.0), max_size=20)


def _in_window(failures: list[float], rule: Rule, now: float) -> int:
    return sum(1 for t in failures if t <= now < t + rule.window)


@given(rules, offsets)
def test_it_never_locks_below_the_limit(rule, ages):
    failures = [NOW - age for age in ages]
    if _in_window(failures, rule, NOW) < rule.limit:
        assert locked_until(failures, rule=rule, now=NOW) is None


@given(rules, offsets)
def test_it_always_locks_at_or_over_the_limit_within_the_window(rule, ages):
    failures = [NOW - age for age in ages]
    if _in_window(failures, rule, NOW) >= rule.limit:
        until = locked_until(failures, rule=rule, now=NOW)
        assert until is not None and NOW < until <= NOW + rule.window


@given(rules, offsets, st.floats(0.0, 1.0))
def test_it_unlocks_when_the_lock_ends_and_not_before(rule, ages, fraction):
    failures = [NOW - age for age in ages]
    until = locked_until(failures, rule=rule, now=NOW)
    if until is None:
        return
    # With no new failures: still locked at any moment before `until`, free from it on.
    before = NOW + (until - NOW) * fraction
    if before < until:
        assert locked_until(failures, rule=rule, now=before) == until
    assert locked_until(failures, rule=rule, now=until) is None
    assert _in_window(failures, rule, until) < rule.limit


@given(rules, st.lists(st.floats(0.0, 7200.0), min_size=1, max_size=20))
def test_it_unlocks_a_window_after_the_last_failure(rule, ages):
    failures = [NOW - age for age in ages]
    assert locked_until(failures, rule=rule, now=max(failures) + rule.window) is None


def test_it_says_minutes_left_rounded_up():
    lock = Lock(Scope("login-user", "alice", Rule(5, 900)), until=NOW + 13 * 60 + 1)
    assert lock.minutes_left(NOW) == 14
    assert lock.minutes_left(NOW + 13 * 60 + 0.5) == 1
    assert lock.seconds_left(NOW) == 781


def test_it_hashes_the_ident_into_the_key():
    key = Scope("login-user", "alice\ud800" * 1000, Rule(5, 900)).key
    assert key.startswith("throttle:login-user:") and "alice" not in key and len(key) < 64
