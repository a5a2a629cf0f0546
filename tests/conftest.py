"""Shared fixtures. Redis: REDIS_URL when set (CI's real server), else an embedded
redis-server on a temporary unix socket for the whole session."""

from __future__ import annotations

import os
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from tests.factories import make_cluster, make_personas

PASSWORD = "pw-" + "x" * 10


class Clock:
    def __init__(self) -> None:
        from django.utils import timezone

        self.now = timezone.now()

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """timezone.now() stands still until the test moves it, so ages a page shows ("3 s ago")
    do not depend on how fast the machine is."""
    from django.utils import timezone

    clock = Clock()
    monkeypatch.setattr(timezone, "now", lambda: clock.now)
    return clock


@pytest.fixture(scope="session", autouse=True)
def _redis_for_tests():
    from django.conf import settings

    from apps.core.redis import redis_client
    from paiweb import embedded_redis
    from paiweb.celery import app as celery_app

    # Test users need no costly password hashing.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    process = None
    if not os.environ.get("REDIS_URL"):
        socket = Path(tempfile.mkdtemp(prefix="paiweb-redis-")) / "redis.sock"
        process = embedded_redis.start(socket)
        settings.REDIS_URL = f"unix://{socket}"
        settings.CELERY_BROKER_URL = f"redis+socket://{socket}"
        celery_app.conf.broker_url = settings.CELERY_BROKER_URL
    redis_client.cache_clear()
    yield settings.REDIS_URL
    redis_client.cache_clear()
    if process is not None:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test databases, and before they are dropped: on PostgreSQL, close
    the sessions that processes the tests started (node agents, workers) may leave behind
    for a moment after they exit, which would stop the test database from being dropped."""
    yield
    from django.db import connection

    with django_db_blocker.unblock():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )


@pytest.fixture(autouse=True)
def _default_language():
    """Each test starts in the default language, whatever the one before asked for: a
    request in Chinese leaves its language active in the thread (LocaleMiddleware never
    deactivates it), which would reach the next test's code run outside a request."""
    from django.utils import translation

    translation.deactivate()
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _eager_celery(settings):
    """Tasks run inline in tests (on commit); the browser and agent tests start real workers."""
    from paiweb.celery import app as celery_app

    celery_app.conf.task_always_eager = True
    celery_app.conf.task_eager_propagates = True
    yield
    celery_app.conf.task_always_eager = False


@pytest.fixture(autouse=True)
def _no_processes_unless_asked(settings):
    """Placed pods count as running unless a test asks for real node agents."""
    settings.EXECUTION_BACKEND = "none"


@pytest.fixture(autouse=True)
def _own_throttle_counts(settings):
    """Failed sign-ins and bad signatures count per test: the tests share one Redis (and
    another run may share it too), and sign in from the same address as the same users."""
    settings.THROTTLE_KEY_PREFIX = f"throttle-test-{uuid.uuid4().hex}:"


@pytest.fixture
def cluster(db):
    return make_cluster()


@pytest.fixture
def personas(cluster):
    return make_personas(cluster)


@pytest.fixture
def alice(personas):
    return personas["alice"]


@pytest.fixture
def bob(personas):
    return personas["bob"]


@pytest.fixture
def charlie(personas):
    return personas["charlie"]


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


@pytest.fixture
def password() -> str:
    return PASSWORD
