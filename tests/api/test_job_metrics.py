"""GetJobMetrics through the SDK: each pod's series of one metric, averaged per TimeStep;
absent figures left out, bad parameters a 400 naming them, other people's jobs a 404. (A
real pod that burns CPU, holds memory and moves bytes, sampled by a real agent:
tests/api/test_job_metrics_agent.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from alibabacloud_pai_dlc20201203.models import GetJobMetricsRequest

from apps.agent.models import PodMetricSample
from apps.jobs.models import Job
from apps.scheduler.services import scheduler_tick
from tests.api.conftest import quota_job_body, sdk_error

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
MIB = 1 << 20


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def running(create_job, ws_a) -> Job:
    """A 2-pod job, placed (its pods exist), with samples of both pods: worker-0 every 15 s
    from T0 for 2 minutes at 1, 2, 3… cores and 100 MiB; worker-1 at 0.5 cores, no memory
    figure; neither has a GPU figure."""
    job_id = create_job(quota_job_body(ws_a))
    scheduler_tick(now=datetime.now(UTC) + timedelta(seconds=1))
    job = Job.objects.get(job_id=job_id)
    first, second = job.pods.order_by("pod_id")
    rows = []
    for i in range(8):
        at = T0 + timedelta(seconds=15 * i)
        rows.append(PodMetricSample(pod=first, at=at, cpu_cores=i + 1, memory_bytes=100 * MIB))
        rows.append(PodMetricSample(pod=second, at=at, cpu_cores=0.5, net_rx_rate=2048.0))
    PodMetricSample.objects.bulk_create(rows)
    return job


def _metrics(dlc, job_id: str, **query):
    request = GetJobMetricsRequest(**query)
    body = dlc.get_job_metrics(job_id, request).body
    return {p.pod_id: [(m.time, m.value) for m in p.metrics] for p in body.pod_metrics}, body


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def test_it_returns_each_pods_series_averaged_per_step(dlc, running):
    got, body = _metrics(
        dlc,
        running.job_id,
        metric_type="CpuCoreUsage",
        start_time=_iso(T0),
        end_time=_iso(T0 + timedelta(minutes=5)),
        time_step="1m",
    )
    first, second = running.pods.order_by("pod_id").values_list("pod_id", flat=True)
    assert body.job_id == running.job_id and body.request_id
    assert got == {
        # 1, 2, 3, 4 in the first minute, 5, 6, 7, 8 in the second: Time in milliseconds
        first: [(_ms(T0), 2.5), (_ms(T0 + timedelta(minutes=1)), 6.5)],
        second: [(_ms(T0), 0.5), (_ms(T0 + timedelta(minutes=1)), 0.5)],
    }


def test_a_figure_a_pod_does_not_have_is_absent_not_zero(dlc, running):
    window = {"start_time": _iso(T0), "end_time": _iso(T0 + timedelta(minutes=5))}
    memory, _ = _metrics(dlc, running.job_id, metric_type="MemoryUsage", **window)
    first, second = running.pods.order_by("pod_id").values_list("pod_id", flat=True)
    assert list(memory) == [first]  # worker-1 has no memory figure: left out
    assert {v for _, v in memory[first]} == {100.0 * MIB}  # bytes; default step 5m: one
    gpu, _ = _metrics(dlc, running.job_id, metric_type="GpuCoreUsage", **window)
    assert gpu == {}
    network, _ = _metrics(dlc, running.job_id, metric_type="networkinputrate", **window)
    assert network == {second: [(_ms(T0), 2048.0)]}


def test_it_reads_only_the_window(dlc, running):
    got, _ = _metrics(
        dlc,
        running.job_id,
        metric_type="CpuCoreUsage",
        start_time=_iso(T0 + timedelta(seconds=30)),  # the samples of 3 and 4 cores
        end_time=_iso(T0 + timedelta(seconds=45)),
        time_step="30s",
    )
    first = running.pods.order_by("pod_id").first().pod_id
    assert got[first] == [(_ms(T0 + timedelta(seconds=30)), 3.5)]
    # by default the last hour up to now: these samples are older
    assert _metrics(dlc, running.job_id, metric_type="CpuCoreUsage")[0] == {}


@pytest.mark.parametrize(
    ("query", "code", "field"),
    [
        ({"metric_type": None}, "MissingParameter", "MetricType"),
        ({"metric_type": "CpuUsage"}, "InvalidParameter", "MetricType"),
        ({"start_time": "yesterday"}, "InvalidParameter", "StartTime"),
        ({"end_time": "2026-13-01T00:00:00Z"}, "InvalidParameter", "EndTime"),
        (
            {"start_time": "2026-03-02T13:00:00Z", "end_time": "2026-03-02T12:00:00Z"},
            "InvalidParameter",
            "StartTime",
        ),
        ({"time_step": "5 minutes"}, "InvalidParameter", "TimeStep"),
        ({"time_step": "0s"}, "InvalidParameter", "TimeStep"),
        ({"time_step": "1s", "start_time": "2026-01-01T00:00:00Z"}, "InvalidParameter", "TimeStep"),
    ],
)
def test_bad_parameters_are_a_400_naming_them(dlc, running, query, code, field):
    query = {"metric_type": "CpuCoreUsage", **query}
    with pytest.raises(Exception) as caught:
        dlc.get_job_metrics(running.job_id, GetJobMetricsRequest(**query))
    assert sdk_error(caught) == (code, 400)
    assert field in str(caught.value)


def test_only_who_may_see_the_job_gets_its_metrics(dlc_for, running):
    request = GetJobMetricsRequest(
        metric_type="CpuCoreUsage", start_time=_iso(T0), end_time=_iso(T0 + timedelta(hours=1))
    )
    assert dlc_for("bob").get_job_metrics(running.job_id, request).body.pod_metrics
    with pytest.raises(Exception) as caught:
        dlc_for("charlie").get_job_metrics(running.job_id, request)
    assert sdk_error(caught) == ("EntityNotExist.Job", 404)
    with pytest.raises(Exception) as caught:
        dlc_for("alice").get_job_metrics("dlc-no-such-job", request)
    assert sdk_error(caught) == ("EntityNotExist.Job", 404)


def test_the_samples_go_with_the_job(dlc, running):
    running.delete()
    assert not PodMetricSample.objects.exists()
