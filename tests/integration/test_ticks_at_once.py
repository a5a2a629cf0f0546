"""Two scheduler ticks, or two market steps, at once: the Redis lock they run under expires
(30 s) while a holder is frozen (SIGSTOP, a stalled VM, a long GC) or slow, and another
worker starts the next one. The frozen one must not then write a plan made from what it
read before the other committed: it would place pods on room the other just gave away.

Each test freezes the first run right after it has read its snapshot and planned, runs a
second one in another thread (another database connection) meanwhile, lets the first go on,
and checks the room. On PostgreSQL the second run must see that a tick is in progress and
skip; on SQLite, whose transactions take the write lock as they begin, the second run
waits for the first to commit."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.cluster.models import InstanceType
from apps.jobs.models import Job, JobStatus, Pod, ResourceSource
from apps.jobs.services import job_submit, jobs_admit_creating
from apps.jobs.specs import JobSpec, RoleSpec
from apps.market import services as market_services
from apps.scheduler import services as scheduler_services

pytestmark = pytest.mark.django_db(transaction=True)

OTHER_RUN_WAIT = 5.0  # seconds the frozen run waits for the other one (SQLite: it cannot)


@pytest.fixture(autouse=True)
def _no_automatic_runs(monkeypatch, settings):
    """Submits ask for no admission or tick: the test runs each itself."""
    monkeypatch.setattr("apps.core.tasks.task_soon", lambda name: None)
    monkeypatch.setattr("apps.jobs.services.task_soon", lambda name: None)
    settings.SCHEDULER_MIN_RUN_SECONDS = 0
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 0


def _in_thread(work) -> threading.Thread:
    def run() -> None:
        try:
            work()
        finally:
            connection.close()  # the thread's own connection

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _freeze_after_planning(monkeypatch, module, name: str, meanwhile) -> list[threading.Thread]:
    """Patch `module.name` (the planner) so that the first run, once planned, lets
    `meanwhile` run in another thread before it goes on to write its plan."""
    original = getattr(module, name)
    others: list[threading.Thread] = []

    def planned(*args, **kwargs):
        plan = original(*args, **kwargs)
        if not others:
            others.append(_in_thread(meanwhile))
            others[0].join(timeout=OTHER_RUN_WAIT)
        return plan

    monkeypatch.setattr(module, name, planned)
    return others


def _quota_job(personas, *, name: str, priority: int) -> Job:
    spec = JobSpec(
        display_name=name,
        user_command="sleep 60",
        quota="team-a",
        priority=priority,
        roles=[RoleSpec(pod_count=2, cpu=4000, memory=16384, gpu=4)],  # team-a's 8 GPU
    )
    return job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec)


def test_a_frozen_tick_does_not_place_a_job_on_room_a_later_tick_gave_away(personas, monkeypatch):
    low = _quota_job(personas, name="low", priority=1)
    jobs_admit_creating(now=timezone.now())

    def later_tick() -> None:  # meanwhile, a more urgent job, and the next tick places it
        _quota_job(personas, name="urgent", priority=9)
        jobs_admit_creating(now=timezone.now())
        scheduler_services.scheduler_tick(now=timezone.now())

    others = _freeze_after_planning(monkeypatch, scheduler_services.engine, "plan", later_tick)
    scheduler_services.scheduler_tick(now=timezone.now())  # planned with only `low` queued
    others[0].join(timeout=30)
    assert not others[0].is_alive()

    in_quota = [
        (job, gpu)
        for job, gpu in Pod.objects.filter(
            status__in=("Pending", "Running"), in_quota=True, job__quota__name="team-a"
        ).values_list("job__display_name", "role__gpu")
    ]
    assert sum(gpu for _, gpu in in_quota) <= 8, in_quota  # team-a's min: no more in quota
    running = set(
        Job.objects.filter(status__in=(JobStatus.ENV_PREPARING, JobStatus.RUNNING)).values_list(
            "display_name", flat=True
        )
    )
    assert len(running) == 1, running
    scheduler_services.scheduler_tick(now=timezone.now())  # the next tick: nothing changes
    assert Job.objects.get(pk=low.pk).status in (JobStatus.RUNNING, JobStatus.QUEUING)


def test_a_frozen_market_step_does_not_start_jobs_on_instances_a_later_step_gave_away(
    personas, monkeypatch
):
    InstanceType.objects.filter(name="ecs.g7.xlarge").update(public_capacity=2)
    g7 = InstanceType.objects.get(name="ecs.g7.xlarge")
    now = timezone.now() - timedelta(seconds=30)
    market_services.market_step(now=now, rng=market_services.market_rng(now=now))  # prices

    def payg(name: str) -> Job:
        spec = JobSpec(
            display_name=name,
            user_command="sleep 60",
            resource_source=ResourceSource.PUBLIC,
            roles=[RoleSpec(pod_count=2, instance_type=g7.name)],  # the whole stock
        )
        return job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec)

    payg("first")
    jobs_admit_creating(now=timezone.now())

    def later_step() -> None:  # meanwhile a job submitted earlier comes, and the next step
        second = payg("second")  # starts it first
        Job.objects.filter(pk=second.pk).update(submitted_at=timezone.now() - timedelta(days=1))
        jobs_admit_creating(now=timezone.now())
        now = timezone.now()
        market_services.market_step(now=now, rng=market_services.market_rng(now=now))

    others = _freeze_after_planning(monkeypatch, market_services, "market_plan", later_step)
    now = timezone.now()
    market_services.market_step(now=now, rng=market_services.market_rng(now=now))
    others[0].join(timeout=30)
    assert not others[0].is_alive()

    held = Pod.objects.filter(status__in=("Pending", "Running"), instance_type=g7).count()
    assert held <= 2, f"{held} pods on 2 instances of {g7.name}"
