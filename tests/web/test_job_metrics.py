"""The job page's metrics: a chart per measured metric with a line per pod and a table of
the latest figures (no JavaScript needed), a note naming what is not measured, its own poll
(#pod-metrics) that stops with 286 once the job has finished, and nothing for outsiders."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.agent.models import PodMetricSample
from apps.jobs.models import Job, JobStatus
from apps.jobs.services import job_admit
from apps.scheduler.services import scheduler_tick
from tests.factories import submit_small_job

MIB = 1 << 20
POLL = {"HX-Request": "true", "HX-Target": "pod-metrics"}


@pytest.fixture
def job(personas) -> Job:
    """alice's running 1-pod job with a minute of samples: 1.5 cores, 300 MiB, no GPU,
    network or disk figures."""
    job = submit_small_job(personas, name="measured")
    job_admit(job_pk=job.pk, now=timezone.now())
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(started_at=now - timedelta(minutes=2))
    job.refresh_from_db()
    pod = job.pods.get()
    PodMetricSample.objects.bulk_create(
        PodMetricSample(
            pod=pod, at=now - timedelta(seconds=15 * i), cpu_cores=1.5, memory_bytes=300 * MIB
        )
        for i in range(4)
    )
    return job


def _url(job: Job) -> str:
    return reverse("jobs:detail", args=[job.job_id])


def test_it_charts_each_measured_metric_per_pod(alice_client, job):
    page = alice_client.get(_url(job)).content.decode()
    section = page[page.index('id="pod-metrics"') :]
    section = section[: section.index("</section>")]
    charts = re.findall(r'data-metric="(\w+)"', section)
    assert charts == ["CpuCoreUsage", "MemoryUsage"]
    assert section.count("<path ") == 2  # a line per pod and chart
    pod_id = job.pods.get().pod_id
    assert pod_id in section and "1.50" in section and "300 MiB" in section
    assert "Not measured for this job's pods: GPU utilisation, GPU memory, Network in" in section
    assert 'hx-trigger="every 15s"' in section  # POD_METRICS_SECONDS


def test_its_poll_answers_the_fragment_and_stops_once_the_job_ended(alice_client, job):
    poll = alice_client.get(_url(job), headers=POLL)
    assert poll.status_code == 200
    body = poll.content.decode()
    assert body.lstrip().startswith('<section class="card" id="pod-metrics"')
    assert "job-live" not in body
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    ended = alice_client.get(_url(job), headers=POLL)
    assert ended.status_code == 286 and "hx-trigger" not in ended.content.decode()
    assert 'data-metric="CpuCoreUsage"' in ended.content.decode()  # the end of its run


def test_a_job_without_samples_says_so(alice_client, personas):
    job = submit_small_job(personas, name="fresh")
    page = alice_client.get(_url(job)).content.decode()
    assert "No samples yet: the node agent samples each running pod every 15 s." in page
    assert "data-metric=" not in page


def test_outsiders_get_no_metrics(client, charlie, job):
    client.force_login(charlie)
    assert client.get(_url(job), headers=POLL).status_code == 404
