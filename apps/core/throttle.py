"""Throttling of failed attempts (sign-ins, AccessKey signatures): a pure rule over Redis.

The rule: a scope (a username, a client address, an AccessKeyId…) with `limit` failures
within the last `window` seconds is locked until the oldest of those failures leaves the
window. So no scope ever has more than `limit` failures checked per window, and an attempt
refused while locked is not a failure: hammering a locked scope does not lengthen the lock.

The store is a Redis sorted set per scope (failure times as scores, trimmed to the newest
`limit`, expiring after the window), shared by every web process and kept across restarts.
Checking and counting are two steps, so a burst of concurrent attempts can pass the check
together: at most one extra failure per request handler (gunicorn workers × threads).

No Django here: the callers (apps/core/auth.py, apps/api/auth.py) build the scopes from
settings, pass a Redis client and the clock.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import redis


@dataclass(frozen=True, slots=True)
class Rule:
    """At most `limit` failures within `window` seconds."""

    limit: int
    window: float


@dataclass(frozen=True, slots=True)
class Scope:
    """What failures count against: `kind` (e.g. "login-user") and `ident` (the username)."""

    kind: str
    ident: str
    rule: Rule
    namespace: str = "throttle:"

    @property
    def key(self) -> str:
        """The Redis key; the ident is hashed (any length, any characters, never stored)."""
        digest = hashlib.sha256(self.ident.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{self.namespace}{self.kind}:{digest[:32]}"


@dataclass(frozen=True, slots=True)
class Lock:
    scope: Scope
    until: float

    def seconds_left(self, now: float) -> int:
        return max(1, math.ceil(self.until - now))

    def minutes_left(self, now: float) -> int:
        return max(1, math.ceil((self.until - now) / 60))


def locked_until(failures: Iterable[float], *, rule: Rule, now: float) -> float | None:
    """When a scope with these failure times is free again, or None if it is free now."""
    recent = sorted(t for t in failures if t + rule.window > now)
    if len(recent) < rule.limit:
        return None
    return recent[-rule.limit] + rule.window


@dataclass(frozen=True, slots=True)
class Check:
    lock: Lock | None  # the longest lock among the scopes checked; None: go ahead
    failed: frozenset[Scope]  # the scopes with a failure within their window

    def to_reset(self, scopes: Iterable[Scope]) -> list[Scope]:
        """Of `scopes`, those a success must reset: the others had nothing to forget."""
        return [scope for scope in scopes if scope in self.failed]


def throttle_check(*, store: redis.Redis, scopes: Sequence[Scope], now: float) -> Check:
    """Whether an attempt may go ahead (`lock` None), and which scopes hold failures."""
    pipe = store.pipeline(transaction=False)
    for scope in scopes:
        pipe.zrange(scope.key, 0, -1, withscores=True)
    locks, failed = [], set()
    for scope, entries in zip(scopes, pipe.execute(), strict=True):
        scores = [score for _, score in entries]
        until = locked_until(scores, rule=scope.rule, now=now)
        if until is not None:
            locks.append(Lock(scope, until))
        if any(t + scope.rule.window > now for t in scores):
            failed.add(scope)
    return Check(max(locks, key=lambda lock: lock.until, default=None), frozenset(failed))


def throttle_fail(*, store: redis.Redis, scopes: Sequence[Scope], now: float) -> None:
    """Count one failure against every scope."""
    pipe = store.pipeline(transaction=True)
    for scope in scopes:
        pipe.zadd(scope.key, {uuid.uuid4().hex: now})
        pipe.zremrangebyscore(scope.key, "-inf", now - scope.rule.window)
        pipe.zremrangebyrank(scope.key, 0, -(scope.rule.limit + 1))  # the rule reads no more
        pipe.expire(scope.key, math.ceil(scope.rule.window) + 1)
    pipe.execute()


def throttle_reset(*, store: redis.Redis, scopes: Sequence[Scope]) -> None:
    """Forget the failures of `scopes` (after a success of the one they count against;
    `Check.to_reset` names those that have any, so a success with none costs no call)."""
    if scopes:
        store.delete(*(scope.key for scope in scopes))
