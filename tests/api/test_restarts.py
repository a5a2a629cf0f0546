"""A job's restarts through the API: a preempted borrower's GetJob fills RestartRecord (cause,
time, the preemptor by JobId, lost work, how long until it ran again) and JobReplicaStatuses
(its pods queuing, then active). Read with signed requests built by hand (`RawClient`):
SDK 1.4.17, the seed's pin, models neither field; the current SDK's models are checked too
when it is the one installed."""

from __future__ import annotations

from datetime import timedelta

from alibabacloud_pai_dlc20201203.models import GetJobRequest
from django.utils import timezone

from apps.agent.services import checkpoint_report
from apps.jobs.models import JobStatus
from apps.jobs.services import job_stop
from apps.scheduler.services import scheduler_tick
from tests.api.conftest import RawClient
from tests.web.test_job_story import story  # noqa: F401 (the fixture)


def _get(live_server, keys, who: str, job) -> dict:
    return RawClient(live_server.url, keys[who]).send("GET", f"/api/v1/jobs/{job.job_id}").json()


def test_a_preempted_borrower_shows_its_restart_and_its_pods(
    live_server,
    keys,
    dlc_for,
    story,  # noqa: F811
):
    borrower, owner = story["borrower"], story["owner"]
    [restart] = borrower.restarts.all()

    body = _get(live_server, keys, "charlie", borrower)
    [record] = body["RestartRecord"]
    assert record["Reason"] == "JobPreempted"
    assert record["RestartStatus"] == "Restarting"  # queued again, not yet running
    assert "RestartDurationInSec" not in record
    assert "JobRestartCount" not in record  # a preemption spends none of AIMaster's budget
    assert record["OccurTime"] == restart.at.strftime("%Y-%m-%dT%H:%M:%SZ")
    [error] = record["DetailErrorInfoList"]
    assert error["ErrorCode"] == "JobPreempted"
    assert f"preempted by job owner ({owner.job_id}) of quota team-a" in error["ErrorMsg"]
    assert f"lost {restart.lost_gpu_seconds / 3600:.2f} GPU-hours" in error["DetailErrorMsg"]
    assert error["DetailErrorMsg"].startswith("its resources were taken back: no AIMaster")
    assert restart.lost_gpu_seconds > 0 and record["LostGpuSeconds"] > 0
    [worker] = body["JobReplicaStatuses"]
    assert (worker["Type"], worker["Active"], worker["Queuing"]) == ("Worker", 0, 4)
    sdk = dlc_for("charlie").get_job(borrower.job_id, GetJobRequest()).body
    if hasattr(sdk, "restart_record"):  # the current SDK models it
        assert [r.reason for r in sdk.restart_record] == ["JobPreempted"]

    job_stop(job=owner, by=None, now=timezone.now())
    borrower.refresh_from_db()
    back = max(borrower.not_before or timezone.now(), timezone.now()) + timedelta(seconds=1)
    scheduler_tick(now=back)
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.RUNNING

    body = _get(live_server, keys, "charlie", borrower)
    [record] = body["RestartRecord"]
    assert record["RestartStatus"] == "Succeeded"
    assert 0 <= record["RestartDurationInSec"] <= (back - restart.at).total_seconds() + 1
    [worker] = body["JobReplicaStatuses"]
    assert (worker["Type"], worker["Active"], worker["Queuing"]) == ("Worker", 4, 0)


def test_a_restart_revised_by_a_checkpoint_says_one_figure(live_server, keys, story):  # noqa: F811
    """A save on SIGTERM revised the work the preemption lost to none: the record's messages
    said the 19,200 GPU-seconds first counted beside LostGpuSeconds 0."""
    borrower = story["borrower"]
    restart = borrower.restarts.get()
    checkpoint_report(job_pk=borrower.pk, step=1300, path="/ckpt/1300", size_bytes=1, at=restart.at)
    body = _get(live_server, keys, "charlie", borrower)
    [record] = body["RestartRecord"]
    [error] = record["DetailErrorInfoList"]
    assert record["LostGpuSeconds"] == 0
    assert "lost 0.00 GPU-hours" in error["DetailErrorMsg"]
    assert error["ErrorMsg"].endswith("of quota team-a, which reclaims its guaranteed resources")
    assert "GPU-seconds" not in body["ReasonMessage"]


def test_a_job_never_interrupted_has_no_restart_record(live_server, keys, story):  # noqa: F811
    body = _get(live_server, keys, "alice", story["owner"])
    assert body["RestartRecord"] == []
    [worker] = body["JobReplicaStatuses"]
    assert (worker["Active"], worker["EstimatedPodCount"]) == (1, 1)


def test_a_preempted_pods_own_events_say_it_was_preempted_and_by_whom(
    dlc_for,
    story,  # noqa: F811
):
    from alibabacloud_pai_dlc20201203.models import GetPodEventsRequest

    borrower, owner = story["borrower"], story["owner"]
    pod = borrower.pods.filter(attempt=0).first()
    events = (
        dlc_for("charlie")
        .get_pod_events(borrower.job_id, pod.pod_id, GetPodEventsRequest())
        .body.events
    )
    preempted = [e for e in events if "PodPreempted" in e]
    assert len(preempted) == 1, events
    assert f"preempted by job owner ({owner.job_id})" in preempted[0]
