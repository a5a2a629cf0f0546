"""Admission: Creating → Queuing (quota, pay-as-you-go) or Bidding (spot). Any admission run
admits every job in Creating (`jobs_admit_creating`), so a new job never waits behind a
backlog of admission messages, and beat's sweep admits what a lost message left behind.

Outside transaction=True a test's transaction never commits, so a submit's admission (asked
for on commit) never runs: its job stays Creating, as when the message is lost."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.core.redis import redis_client
from apps.core.tasks import task_soon_started
from apps.jobs.models import Job, JobStatus
from apps.jobs.services import ADMIT_TASK, job_admit, job_submit, jobs_admit_creating
from apps.jobs.specs import RoleSpec
from apps.jobs.tasks import job_admit_task, jobs_admit_creating_task
from paiweb.celery import app as celery_app
from tests.integration.test_job_submit import quota_spec, spot_spec

STALE = 300  # admission messages queued ahead of a new job


def public_spec():
    return spot_spec(
        display_name="pay-as-you-go",
        resource_source="public",
        roles=[RoleSpec(instance_type="ecs.g7.xlarge")],
    )


def submit(personas, spec=None) -> Job:
    return job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec or quota_spec())


def statuses(jobs) -> list[str]:
    return [Job.objects.get(pk=job.pk).status for job in jobs]


def test_it_admits_every_creating_job_in_one_run(personas):
    jobs = [submit(personas), submit(personas, spot_spec()), submit(personas, public_spec())]
    assert statuses(jobs) == ["Creating"] * 3
    jobs_admit_creating_task()
    assert statuses(jobs) == ["Queuing", "Bidding", "Queuing"]
    events = [
        [(e.kind, e.message) for e in Job.objects.get(pk=job.pk).events.order_by("pk")][1:]
        for job in jobs
    ]
    assert events == [
        [("Enqueued", "Queued on quota team-a")],
        [("Bidding", "Entered the spot market")],
        [("Enqueued", "Queued on the public pool")],
    ]
    for job in jobs:
        creating, admitted = job.status_history.all()
        assert creating.ended_at == admitted.started_at and admitted.ended_at is None

    # As many queries for 2 jobs as for 30: a burst of submits costs one run.
    def queries(n: int) -> int:
        for _ in range(n):
            submit(personas)
            submit(personas, spot_spec())
        with CaptureQueriesContext(connection) as counted:
            assert jobs_admit_creating(now=timezone.now()) == 2 * n
        return len(counted)

    assert queries(1) == queries(15)


def test_it_admits_a_job_whose_message_was_lost_at_beats_sweep(personas):
    job = submit(personas, spot_spec())  # its message lost, or its worker killed mid-run
    assert statuses([job]) == ["Creating"]
    jobs_admit_creating_task()  # beat's "admit-creating"
    assert statuses([job]) == ["Bidding"]
    assert job_admit(job_pk=job.pk, now=job.submitted_at) is False  # admitted once


@pytest.fixture
def broker_queue():
    """A queue of its own on the real broker (the tests' Redis), removed afterwards; tasks
    sent to it are not run inline."""
    name = f"test-admission-{uuid.uuid4().hex}"
    celery_app.conf.task_always_eager = False
    with celery_app.connection_for_write() as conn:
        queue = conn.SimpleQueue(name)
        try:
            yield queue
        finally:
            queue.clear()
            queue.queue.delete()
            queue.close()


def run_next(queue) -> None:
    """Take the next message off the broker and run its task, as a worker does."""
    message = queue.get(timeout=10)
    args, kwargs, _ = message.decode()
    celery_app.tasks[message.headers["task"]](*args, **kwargs)
    message.ack()


def test_it_admits_a_new_job_with_the_first_message_of_a_stale_backlog(
    personas, broker_queue, django_assert_num_queries
):
    old = submit(personas)
    assert job_admit(job_pk=old.pk, now=old.submitted_at)
    for _ in range(STALE):  # messages for a job admitted long ago
        job_admit_task.apply_async((old.pk,), queue=broker_queue.queue.name)
    new = submit(personas, spot_spec())
    assert statuses([new]) == ["Creating"] and broker_queue.qsize() == STALE

    run_next(broker_queue)  # the first message in the queue, a stale one
    assert statuses([new]) == ["Bidding"]
    assert broker_queue.qsize() == STALE - 1

    with django_assert_num_queries(1):  # each stale message left: one query, no writes
        run_next(broker_queue)
    assert statuses([old, new]) == ["Queuing", "Bidding"]


@pytest.mark.django_db(transaction=True)
def test_it_queues_one_admission_run_for_many_submits(personas, monkeypatch):
    sent = []
    monkeypatch.setattr(jobs_admit_creating_task, "delay", lambda: sent.append(1))
    celery_app.conf.task_always_eager = False
    flag = f"task-soon:{ADMIT_TASK}"
    redis_client().delete(flag)
    try:
        for _ in range(3):
            submit(personas)
        assert len(sent) == 1  # one run queued: the next submits need no message of their own
        task_soon_started(ADMIT_TASK)  # that run starts, and will read every Creating job
        submit(personas)
        assert len(sent) == 2  # a submit after it asks for the next
    finally:
        redis_client().delete(flag)


@pytest.mark.django_db(transaction=True)
def test_it_admits_each_job_once_when_runs_overlap(personas, monkeypatch):
    monkeypatch.setattr("apps.jobs.services.task_soon", lambda name: None)
    jobs = [submit(personas, spot_spec() if n % 2 else None) for n in range(40)]
    assert set(statuses(jobs)) == {"Creating"}
    done: list[int] = []

    def run() -> None:
        try:
            done.append(jobs_admit_creating(now=jobs[-1].submitted_at))
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(done) == 40 and len(done) == 3
    assert statuses(jobs) == [JobStatus.BIDDING if n % 2 else JobStatus.QUEUING for n in range(40)]
    for job in jobs:
        assert job.status_history.count() == 2 and job.events.count() == 2
