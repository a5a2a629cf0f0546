"""The live tick on the real database: admissions, waiting reasons, reclaim and AIMaster."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs.models import Job, JobEvent, JobStatus, Pod, PodStatus
from apps.jobs.services import job_stop, job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.scheduler.services import scheduler_tick

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast_scheduler(settings):
    settings.SCHEDULER_MIN_RUN_SECONDS = 0
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 0


def submit(
    personas,
    *,
    ws="ws_a",
    user="alice",
    quota="team-a",
    pods=1,
    gpu=1,
    idle="off",
    aimaster=False,
    name="job",
    priority=1,
) -> Job:
    spec = JobSpec(
        display_name=name,
        user_command="python train.py",
        quota=quota,
        idle_mode=idle,
        enable_aimaster=aimaster,
        priority=priority,
        roles=[RoleSpec(pod_count=pods, cpu=4000, memory=16384, gpu=gpu)],
    )
    job = job_submit(workspace=personas[ws], user=personas[user], spec=spec)
    job.refresh_from_db()
    return job


def test_it_runs_a_regular_job_in_quota(personas):
    job = submit(personas, pods=2, gpu=2)
    assert job.status == JobStatus.RUNNING
    assert [t.status for t in job.status_history.all()] == [
        "Creating",
        "Queuing",
        "EnvPreparing",
        "Running",
    ]
    pods = list(job.pods.all())
    assert len(pods) == 2 and all(p.in_quota and p.status == PodStatus.RUNNING for p in pods)
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds[:4] == ["Submitted", "Enqueued", "Dequeued", "Scheduled"]


def test_it_keeps_a_job_over_its_quota_waiting_with_a_reason(personas):
    submit(personas, pods=1, gpu=4, name="first")  # half of team-a's 8 GPU
    job = submit(personas, pods=2, gpu=4)  # 8 GPU: 4 free
    assert job.status == JobStatus.QUEUING
    assert "team-a" in job.pending_reason and "GPU" in job.pending_reason
    assert (job.queue_position, job.queue_size) == (1, 1)


def test_it_lets_an_acceptable_job_borrow_idle_room(personas):
    job = submit(personas, pods=3, gpu=4, idle="acceptable")
    assert job.status == JobStatus.RUNNING
    flags = sorted(job.pods.values_list("in_quota", flat=True))
    assert flags == [False, True, True]


def test_it_reclaims_from_a_borrower_and_requeues_it_with_aimaster(personas):
    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        pods=4,
        gpu=4,
        idle="only_idle",
        aimaster=True,
        name="borrower",
    )
    assert borrower.status == JobStatus.RUNNING
    assert not any(borrower.pods.values_list("in_quota", flat=True))

    owner = submit(personas, pods=1, gpu=4, name="owner")  # team-a's own guarantee
    borrower.refresh_from_db()
    owner.refresh_from_db()
    # The submit's tick preempted the borrower; the next tick places the owner.
    assert borrower.status == JobStatus.QUEUING
    assert borrower.restart_times == 1 and borrower.attempt == 1
    preempted = list(borrower.pods.filter(status=PodStatus.PREEMPTED))
    assert len(preempted) == 4
    assert "owner" in preempted[0].message and "team-a" in preempted[0].message
    assert borrower.restarts.get().cause == "JobPreempted"
    assert borrower.reason_code == "JobPreempted"

    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    owner.refresh_from_db()
    assert owner.status == JobStatus.RUNNING
    assert all(owner.pods.values_list("in_quota", flat=True))
    kinds = set(JobEvent.objects.filter(job=borrower).values_list("kind", flat=True))
    assert {"Preempted", "Requeued"} <= kinds


def test_it_fails_a_preempted_job_without_aimaster(personas):
    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        pods=4,
        gpu=4,
        idle="only_idle",
        name="fragile",
    )
    submit(personas, pods=1, gpu=4, name="owner")
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.FAILED
    assert borrower.reason_code == "JobPreempted"


def test_it_changes_nothing_on_a_repeated_tick(personas):
    submit(personas, pods=2, gpu=2)
    submit(personas, pods=2, gpu=4, name="waits")
    before = (
        Pod.objects.count(),
        JobEvent.objects.count(),
        list(Job.objects.values_list("status", "pending_reason", "queue_position")),
    )
    scheduler_tick(now=timezone.now())
    scheduler_tick(now=timezone.now())
    after = (
        Pod.objects.count(),
        JobEvent.objects.count(),
        list(Job.objects.values_list("status", "pending_reason", "queue_position")),
    )
    assert before == after


def test_it_admits_the_next_job_when_a_running_job_stops(personas):
    first = submit(personas, pods=2, gpu=4, name="first")
    second = submit(personas, pods=1, gpu=4, name="second")
    assert second.status == JobStatus.QUEUING
    job_stop(job=first, by=personas["alice"])
    second.refresh_from_db()
    assert second.status == JobStatus.RUNNING


def test_it_waits_for_preempted_processes_to_exit_before_placing_the_owner(personas):
    from apps.agent.models import PodProcess

    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        pods=4,
        gpu=4,
        idle="only_idle",
        aimaster=True,
        name="borrower",
    )
    now = timezone.now()
    PodProcess.objects.bulk_create(
        PodProcess(pod=pod, state="running", queue=f"node.{pod.node.name}", queued_at=now)
        for pod in borrower.pods.all()
    )
    owner = submit(personas, pods=1, gpu=4, name="owner")
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    owner.refresh_from_db()
    assert owner.status == JobStatus.QUEUING  # the borrower's processes still hold the GPUs
    assert "freed" in owner.pending_reason

    PodProcess.objects.update(state="exited", exit_code=143)
    scheduler_tick(now=timezone.now() + timedelta(seconds=2))
    owner.refresh_from_db()
    assert owner.status == JobStatus.RUNNING
