"""A job's restarts through the official SDK: a preempted borrower's GetJob fills
RestartRecord (cause, time, the preemptor by JobId, lost work, how long until it ran again)
and JobReplicaStatuses (its pods queuing, then active)."""

from __future__ import annotations

from datetime import timedelta

from alibabacloud_pai_dlc20201203.models import GetJobRequest
from django.utils import timezone

from apps.jobs.models import JobStatus
from apps.jobs.services import job_stop
from apps.scheduler.services import scheduler_tick
from tests.web.test_job_story import story  # noqa: F401 (the fixture)


def _get(client, job):
    return client.get_job(job.job_id, GetJobRequest()).body


def test_a_preempted_borrower_shows_its_restart_and_its_pods(dlc_for, story):  # noqa: F811
    charlie = dlc_for("charlie")
    borrower, owner = story["borrower"], story["owner"]
    [restart] = borrower.restarts.all()

    body = _get(charlie, borrower)
    [record] = body.restart_record
    assert record.reason == "JobPreempted"
    assert record.restart_status == "Restarting"  # queued again, not yet running
    assert record.restart_duration_in_sec is None
    assert record.job_restart_count == 1  # AIMaster's first restart
    assert record.occur_time == restart.at.strftime("%Y-%m-%dT%H:%M:%SZ")
    [error] = record.detail_error_info_list
    assert error.error_code == "JobPreempted"
    assert f"preempted by job owner ({owner.job_id}) of quota team-a" in error.error_msg
    assert f"lost {restart.lost_gpu_seconds / 3600:.2f} GPU-hours" in error.detail_error_msg
    assert restart.lost_gpu_seconds > 0
    [worker] = body.job_replica_statuses
    assert (worker.type, worker.active, worker.queuing) == ("Worker", 0, 4)

    job_stop(job=owner, by=None, now=timezone.now())
    borrower.refresh_from_db()
    back = max(borrower.not_before or timezone.now(), timezone.now()) + timedelta(seconds=1)
    scheduler_tick(now=back)
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.RUNNING

    body = _get(charlie, borrower)
    [record] = body.restart_record
    assert record.restart_status == "Succeeded"
    assert 0 <= record.restart_duration_in_sec <= (back - restart.at).total_seconds() + 1
    [worker] = body.job_replica_statuses
    assert (worker.type, worker.active, worker.queuing) == ("Worker", 4, 0)


def test_a_job_never_interrupted_has_no_restart_record(dlc_for, story):  # noqa: F811
    body = _get(dlc_for("alice"), story["owner"])
    assert not body.restart_record
    [worker] = body.job_replica_statuses
    assert (worker.active, worker.estimated_pod_count) == (1, 1)
