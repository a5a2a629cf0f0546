"""Storing and sweeping pod metric samples: one insert per agent round, pods without a
figure left out; housekeeping removes the samples older than POD_METRICS_RETENTION_DAYS."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.agent import housekeeping
from apps.agent.metrics import Figures
from apps.agent.models import PodMetricSample
from apps.agent.services import pod_metrics_record
from apps.jobs.services import job_admit
from apps.scheduler.services import scheduler_tick
from tests.factories import submit_small_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def pods(personas):
    jobs = [submit_small_job(personas, name=f"job-{i}") for i in range(3)]
    for job in jobs:
        job_admit(job_pk=job.pk, now=timezone.now())
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    return [job.pods.get() for job in jobs]


def test_it_stores_a_round_in_one_insert_and_leaves_out_empty_figures(
    pods, django_assert_num_queries
):
    at = timezone.now()
    samples = [
        (pods[0].pk, Figures(cpu_cores=1.0, memory_bytes=10)),
        (pods[1].pk, Figures()),  # nothing measured: no row
        (pods[2].pk, Figures(net_rx_rate=5.0)),
    ]
    with django_assert_num_queries(1):
        assert pod_metrics_record(at=at, samples=samples) == 2
    stored = {s.pod_id: s for s in PodMetricSample.objects.all()}
    assert set(stored) == {pods[0].pk, pods[2].pk}
    assert (stored[pods[0].pk].cpu_cores, stored[pods[0].pk].memory_bytes) == (1.0, 10)
    assert stored[pods[2].pk].cpu_cores is None  # absent, not zero


@pytest.mark.django_db(transaction=True)  # the round closes its connection
def test_housekeeping_removes_samples_past_the_retention(pods, settings, tmp_path):
    settings.POD_METRICS_RETENTION_DAYS = 2
    settings.POD_WORK_ROOT = tmp_path
    now = timezone.now()
    for days in (0, 1, 1.9, 2.1, 30):
        PodMetricSample.objects.create(
            pod=pods[0], at=now - timedelta(days=days), cpu_cores=float(days)
        )
    housekeeping.housekeeping_round()
    kept = sorted(PodMetricSample.objects.values_list("cpu_cores", flat=True))
    assert kept == [0.0, 1.0, 1.9]
