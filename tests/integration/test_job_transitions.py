"""The one writer of a job's status (`jobs_transition_bulk`, and `job_transition` for one job):
every public way in refuses a step the table does not allow and leaves the row as it was; the
steps it allows write the job row, its StatusHistory and status_changed_at the same way."""

from __future__ import annotations

from decimal import Decimal as D

import pytest

from apps.core.errors import ApplicationError
from apps.jobs.models import Job, JobStatus
from apps.jobs.services import Via, job_admit, job_stop, job_transition, jobs_transition_bulk
from apps.jobs.specs import RoleSpec
from tests.integration.test_market_step import G7, NOW, at, replay, step, submit  # noqa: F401

pytestmark = pytest.mark.django_db

ROW = (
    "status",
    "reason_code",
    "reason_message",
    "status_changed_at",
    "started_at",
    "finished_at",
    "not_before",
    "pending_reason",
    "queue_position",
    "queue_size",
)


def stored(job: Job) -> tuple:
    """The job's status fields and its whole StatusHistory, as the database holds them."""
    row = Job.objects.values_list(*ROW).get(pk=job.pk)
    history = list(
        job.status_history.values_list(
            "status", "reason_code", "reason_message", "started_at", "ended_at"
        )
    )
    return row, history


def bidding(personas, name: str = "job") -> Job:
    """A spot job submitted and admitted at NOW: Bidding."""
    return submit(personas, name=name, discount="0.4")


def failed(personas, name: str = "done") -> Job:
    job = bidding(personas, name=name)
    job_transition(
        job=job,
        status=JobStatus.FAILED,
        now=at(1),
        reason_code="JobFailed",
        reason_message="it broke",
    )
    return job


# --- refusals ----------------------------------------------------------------------------


def test_it_refuses_an_illegal_step_for_one_job_and_leaves_the_row(personas):
    job = failed(personas)
    before = stored(job)
    with pytest.raises(ApplicationError) as refused:
        job_transition(job=job, status=JobStatus.RUNNING, now=at(2), reason_code="JobRunning")
    assert (refused.value.code, refused.value.status) == ("InvalidJobStatus", 409)
    assert refused.value.message == "a Failed job cannot become Running"
    assert stored(job) == before
    assert job.status == JobStatus.FAILED  # the instance is left alone too


def test_it_refuses_a_whole_batch_when_one_step_is_illegal(personas):
    waiting, done = bidding(personas, name="waiting"), failed(personas)
    before = [stored(waiting), stored(done)]
    with pytest.raises(ApplicationError, match="a Failed job cannot become EnvPreparing"):
        jobs_transition_bulk(
            jobs=[waiting, done],
            status=JobStatus.ENV_PREPARING,
            now=at(2),
            reason_code="JobBidAccepted",
            started=True,
        )
    assert [stored(waiting), stored(done)] == before
    assert (waiting.status, done.status) == (JobStatus.BIDDING, JobStatus.FAILED)


def test_it_refuses_an_illegal_status_to_pass_through(personas):
    job = bidding(personas)
    before = stored(job)
    with pytest.raises(ApplicationError, match="a Bidding job cannot become Stopping"):
        jobs_transition_bulk(
            jobs=[job], status=JobStatus.STOPPED, now=at(2), via=Via(JobStatus.STOPPING)
        )
    with pytest.raises(ApplicationError, match="a EnvPreparing job cannot become Creating"):
        jobs_transition_bulk(
            jobs=[job], status=JobStatus.CREATING, now=at(2), via=Via(JobStatus.ENV_PREPARING)
        )
    assert stored(job) == before


def test_it_refuses_to_stop_a_finished_job_and_leaves_the_row(personas):
    job = failed(personas)
    before = stored(job)
    with pytest.raises(ApplicationError) as refused:
        job_stop(job=job, by=personas["alice"], now=at(2))
    assert (refused.value.code, refused.value.status) == ("JobAlreadyFinished", 409)
    assert stored(job) == before


def test_it_admits_only_a_creating_job(personas):
    job = failed(personas)
    before = stored(job)
    assert job_admit(job_pk=job.pk, now=at(2)) is False
    assert stored(job) == before


# --- the writes ------------------------------------------------------------------------------


def test_it_writes_one_job_and_a_batch_the_same_way(personas):
    one, batch = bidding(personas, name="one"), bidding(personas, name="batch")
    job_transition(
        job=one,
        status=JobStatus.STOPPED,
        now=at(3),
        reason_code="JobStoppedByUser",
        reason_message="Stopped by alice",
    )
    jobs_transition_bulk(
        jobs=[batch],
        status=JobStatus.STOPPED,
        now=at(3),
        reason_code="JobStoppedByUser",
        reason_message="Stopped by alice",
    )
    assert stored(one) == stored(batch)
    row, history = stored(one)
    assert row == (
        "Stopped",
        "JobStoppedByUser",
        "Stopped by alice",
        at(3),
        None,
        at(3),
        None,
        "",
        None,
        None,
    )
    assert history[-2:] == [
        ("Bidding", "JobBidding", "Waiting for spot instances at the bid limit", NOW, at(3)),
        ("Stopped", "JobStoppedByUser", "Stopped by alice", at(3), None),
    ]


def test_it_gives_each_job_its_own_code_and_message_or_the_defaults(personas, monkeypatch):
    monkeypatch.setattr("apps.jobs.services.CHUNK", 2)  # several IN lists and lone rows
    monkeypatch.setattr("apps.jobs.services.SHARED_REASON_MIN", 2)
    jobs = [bidding(personas, name=f"j{i}") for i in range(5)]
    own = jobs[0].pk
    jobs_transition_bulk(
        jobs=jobs,
        status=JobStatus.FAILED,
        now=at(4),
        reason_code="Shared",
        reason_message="same for all",
        reason_codes={own: "Own"},
        reason_messages={own: "its own"},
    )
    rows = [stored(job)[0][:4] for job in jobs]
    assert rows[0] == ("Failed", "Own", "its own", at(4))
    assert rows[1:] == [("Failed", "Shared", "same for all", at(4))] * 4
    assert [job.reason_code for job in jobs] == ["Own", *["Shared"] * 4]  # instances agree
    for job in jobs:
        assert job.status_history.filter(ended_at__isnull=True).count() == 1


def test_it_writes_a_passing_status_closed_at_once_and_the_start(personas):
    job = bidding(personas)
    Job.objects.filter(pk=job.pk).update(
        not_before=at(1), pending_reason="waiting", queue_position=3, queue_size=9
    )
    job.refresh_from_db()
    jobs_transition_bulk(
        jobs=[job],
        status=JobStatus.RUNNING,
        now=at(5),
        reason_code="JobRunning",
        reason_message="All pods are running",
        started=True,
        via=Via(
            JobStatus.ENV_PREPARING,
            reason_codes={job.pk: "JobBidAccepted"},
            reason_messages={job.pk: "Bid accepted"},
        ),
    )
    row, history = stored(job)
    assert row == (
        "Running",
        "JobRunning",
        "All pods are running",
        at(5),
        at(5),
        None,
        None,
        "",
        None,
        None,
    )
    assert history[-3:] == [
        ("Bidding", "JobBidding", "Waiting for spot instances at the bid limit", NOW, at(5)),
        ("EnvPreparing", "JobBidAccepted", "Bid accepted", at(5), at(5)),
        ("Running", "JobRunning", "All pods are running", at(5), None),
    ]
    assert (job.status, job.started_at, job.not_before, job.queue_size) == (
        "Running",
        at(5),
        None,
        None,
    )


def test_it_keeps_the_first_start_when_a_job_starts_again(personas):
    job = bidding(personas)
    jobs_transition_bulk(jobs=[job], status=JobStatus.ENV_PREPARING, now=at(1), started=True)
    job_transition(job=job, status=JobStatus.BIDDING, now=at(2), reason_code="JobPreempted")
    jobs_transition_bulk(jobs=[job], status=JobStatus.ENV_PREPARING, now=at(3), started=True)
    assert stored(job)[0][:5] == ("EnvPreparing", "", "", at(3), at(1))


def test_it_starts_spot_and_payg_jobs_from_the_market_with_their_history(personas, replay):
    replay([(NOW, G7, "0.30")])
    spot = submit(
        personas,
        name="spot",
        roles=[RoleSpec(pod_count=2, instance_type=G7, spot_discount_limit=D("0.8"))],
    )
    payg = submit(personas, source="public", name="payg")
    assert step(at(0, 10)).started == 2
    when = at(0, 10)
    row, history = stored(spot)
    assert row == (
        "Running",
        "JobRunning",
        "All pods are running",
        when,
        when,
        None,
        None,
        "",
        None,
        None,
    )
    assert history[-2:] == [
        ("EnvPreparing", "JobBidAccepted", "Bid accepted at ¥0.64/h (market ¥0.30/h)", when, when),
        ("Running", "JobRunning", "All pods are running", when, None),
    ]
    row, history = stored(payg)
    assert row[:5] == ("Running", "JobRunning", "All pods are running", when, when)
    assert history[-3:] == [
        ("Queuing", "JobEnqueued", "Waiting in the queue", NOW, when),
        ("EnvPreparing", "JobDequeued", "Started on the public pool", when, when),
        ("Running", "JobRunning", "All pods are running", when, None),
    ]
    assert [t.status for t in spot.status_history.all()] == [
        "Creating",
        "Bidding",
        "EnvPreparing",
        "Running",
    ]
