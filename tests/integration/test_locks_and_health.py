"""The singleton lock, beat's heartbeat and the health snapshot, against the test Redis.

The last test starts a real `celery worker` against the same Redis and waits for it to
answer a ping. That worker imports the dev settings (not the test database), so only the
DB-free part is checked: the control ping that health_snapshot lists workers by.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from apps.core.models import Heartbeat
from apps.core.redis import singleton_lock
from apps.core.selectors import health_snapshot
from apps.core.tasks import heartbeat_task

pytestmark = pytest.mark.redis  # the suite's Redis, not through the database fixtures

WORKER_START_TIMEOUT = 60.0


def _lock_name() -> str:
    return f"test-{uuid.uuid4().hex}"  # unique: CI shares one Redis database across runs


def test_it_gives_a_second_holder_false():
    name = _lock_name()
    with singleton_lock(name, timeout=30) as first:
        with singleton_lock(name, timeout=30) as second:
            assert first is True
            assert second is False


def test_it_frees_the_lock_on_release():
    name = _lock_name()
    with singleton_lock(name, timeout=30) as first:
        assert first
    with singleton_lock(name, timeout=30) as again:
        assert again is True


def test_it_frees_the_lock_when_the_timeout_expires():
    name = _lock_name()
    with singleton_lock(name, timeout=0.3) as first:
        assert first
        time.sleep(0.5)  # the holder is stuck past its timeout
        with singleton_lock(name, timeout=30) as second:
            assert second is True


def test_it_does_not_free_someone_elses_lock():
    name = _lock_name()
    with singleton_lock(name, timeout=30) as first:
        assert first
        with singleton_lock(name, timeout=30) as second:
            assert second is False
        # The loser's exit must not have released the holder's lock.
        with singleton_lock(name, timeout=30) as third:
            assert third is False


@pytest.mark.django_db
def test_it_writes_the_beat_heartbeat_and_reports_beat_ok():
    heartbeat_task.delay()

    beat = Heartbeat.objects.get(name="beat")
    health = health_snapshot(now=timezone.now(), ping_timeout=0.2)
    assert health.beat_ok is True
    assert health.beat_last_seen == beat.last_seen
    assert health.broker_ok is True


@pytest.mark.django_db
def test_it_reports_a_stale_beat():
    Heartbeat.objects.create(name="beat", last_seen=timezone.now() - timedelta(hours=1))

    health = health_snapshot(now=timezone.now(), ping_timeout=0.2)

    assert health.beat_ok is False


@pytest.mark.django_db
def test_it_reports_no_beat_before_the_first_heartbeat():
    health = health_snapshot(now=timezone.now(), ping_timeout=0.2)

    assert health.beat_ok is False
    assert health.beat_last_seen is None


@pytest.mark.django_db
def test_it_lists_a_real_worker_that_answers_the_ping(tmp_path):
    name = f"paiweb-test-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker.log"
    var_dir = Path(tempfile.mkdtemp(prefix="pw-var-"))  # short: it may hold a socket
    env = {
        **os.environ,
        "REDIS_URL": settings.REDIS_URL,  # the test Redis (embedded or CI's)
        "PAIWEB_VAR_DIR": str(var_dir),  # keep the dev var/ untouched
        "DJANGO_SETTINGS_MODULE": "paiweb.settings",
        "PYTHONUNBUFFERED": "1",
    }
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "paiweb",
        "worker",
        "-n",
        f"{name}@%h",
        "-Q",
        name,  # a queue of its own: it must not take real tasks
        "-P",
        "solo",
        "-l",
        "info",
        "--without-gossip",
        "--without-mingle",
    ]
    with log.open("wb") as out:
        worker = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=settings.BASE_DIR,
            start_new_session=True,
        )
    try:
        workers: list[str] = []
        deadline = time.monotonic() + WORKER_START_TIMEOUT
        while time.monotonic() < deadline and worker.poll() is None:
            workers = health_snapshot(now=timezone.now(), ping_timeout=1.0).workers
            if any(w.startswith(f"{name}@") for w in workers):
                break
        assert any(w.startswith(f"{name}@") for w in workers), (
            f"worker {name} did not answer (exit code {worker.poll()}), "
            f"workers seen: {workers}\n{log.read_text()[-3000:]}"
        )
    finally:
        _stop(worker)
        shutil.rmtree(var_dir, ignore_errors=True)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # and anything it left in its group
    except ProcessLookupError:
        pass
    process.wait(timeout=5)


@pytest.mark.django_db
def test_a_session_idle_in_a_transaction_cannot_hold_locks_for_ever():
    """On PostgreSQL the server ends a session left idle inside a transaction after a
    minute (a frozen agent's row locks would otherwise block the watchdog)."""
    from django.db import connection

    from paiweb.env import database_from_url

    options = database_from_url("postgres://u@h:5432/db")["OPTIONS"]["options"]
    assert options == "-c idle_in_transaction_session_timeout=60000"
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW idle_in_transaction_session_timeout")
            assert cursor.fetchone()[0] == "1min"


@pytest.mark.django_db
def test_a_read_made_again_on_a_connection_is_prepared_on_the_server():
    """On PostgreSQL, parameters are bound on the server and a statement run twice on a
    connection is prepared there: the API's reads are planned once per connection."""
    from django.db import connection

    from apps.jobs.models import Job
    from paiweb.env import database_from_url

    options = database_from_url("postgres://u@h:5432/db")["OPTIONS"]
    assert options["server_side_binding"] is True and options["prepare_threshold"] == 2
    if connection.vendor != "postgresql":
        return
    marker = "prepared-check-job"
    for _ in range(3):
        list(Job.objects.filter(display_name=marker))
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        statements = [row[0] for row in cursor.fetchall()]
    assert any('"jobs_job"."display_name" = $1' in s for s in statements), statements
