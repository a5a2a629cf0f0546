"""One Redis client for the process, and the lock that singleton periodic tasks run under."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import redis
from django.conf import settings


@functools.cache
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2)


@contextlib.contextmanager
def singleton_lock(name: str, *, timeout: float) -> Iterator[bool]:
    """Hold `lock:<name>` for at most `timeout` seconds; yields whether it was acquired.

    A tick that finds the lock held yields False and does nothing: the holder is doing the
    same work. The timeout frees the lock if a holder dies mid-tick.
    """
    lock = redis_client().lock(f"lock:{name}", timeout=timeout, blocking=False)
    acquired = lock.acquire(blocking=False)
    try:
        yield acquired
    finally:
        if acquired:
            with contextlib.suppress(redis.exceptions.LockError):
                lock.release()
