"""Spot and pay-as-you-go pods run as real processes: the market step starts the job, a real
node agent (`manage.py agent` in a subprocess, on the test database and Redis, consuming the
"public" queue) runs its pods, and billing counts the minutes they really ran.

The test process plays the market and billing beats (it calls market_step and
billing_accrue itself); the agent fixtures come from test_agent_pods.py.
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from apps.agent.models import PodProcess
from apps.billing.models import BillLine, PodMeter
from apps.billing.services import billing_accrue
from apps.core import pricing
from apps.jobs.models import Job, JobStatus, Pod, PodStatus
from apps.jobs.services import job_admit, job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.market.services import market_step
from tests.integration.test_agent_pods import (  # noqa: F401 (fixtures)
    agent,
    agent_backend,
    job_in,
    wait_for,
)
from tests.integration.test_market_step import G7, replay_writer

pytestmark = pytest.mark.django_db(transaction=True)

COMMAND = 'echo "hello from $POD_NAME rank $RANK of $WORLD_SIZE" && sleep 1 && echo DONE'


@pytest.fixture
def prices(settings, tmp_path):
    """ecs.g7.xlarge (original ¥0.80/h) at ¥0.30/h on the market, from an hour ago."""
    an_hour_ago = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    replay_writer(settings, tmp_path)([(an_hour_ago, G7, "0.30")])


def submit(
    personas, *, source: str, pods: int = 1, discount: str | None = None, name: str = "job"
) -> Job:
    spec = JobSpec(
        display_name=name,
        user_command=COMMAND,
        resource_source=source,
        resource_type="ECS",
        roles=[
            RoleSpec(
                pod_count=pods,
                instance_type=G7,
                spot_discount_limit=Decimal(discount) if discount else None,
            )
        ],
    )
    job = job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec)
    job_admit(job_pk=job.pk, now=timezone.now())
    job.refresh_from_db()
    return job


def pod_log(pod: Pod) -> str:
    return Path(PodProcess.objects.get(pod=pod).log_path).read_text()


def ran_minutes(pod: Pod) -> list[int]:
    """Every epoch minute the pod's process ran in, from its real start to its end."""
    first = int(pod.started_at.timestamp() // 60)
    last = math.ceil(pod.finished_at.timestamp() / 60) - 1
    return list(range(first, last + 1))


def start_on_the_market() -> datetime:
    """One market tick that starts the job; returns the tick's time."""
    ticked_at = timezone.now()
    assert market_step(now=ticked_at, rng=random.Random(7)).started == 1
    return ticked_at


def test_it_runs_a_spot_job_started_by_the_market_and_bills_the_minutes_it_ran(
    personas, prices, agent_backend
):
    job = submit(personas, source="spot", pods=2, discount="0.9", name="spot")  # ¥0.72/h
    assert job.status == JobStatus.BIDDING
    ticked_at = start_on_the_market()

    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    assert [t.status for t in job.status_history.all()] == [
        "Creating",
        "Bidding",
        "EnvPreparing",
        "Running",
        "Succeeded",
    ]
    assert job.events.get(kind="BidAccepted").message == "Bid accepted at ¥0.72/h (market ¥0.30/h)"
    pods = list(job.pods.order_by("index"))
    assert [(p.status, p.exit_code, p.node_id) for p in pods] == [
        (PodStatus.SUCCEEDED, 0, None)
    ] * 2
    logs = [pod_log(p) for p in pods]
    for rank, (pod, log) in enumerate(zip(pods, logs, strict=True)):
        assert f"hello from {pod.pod_id} rank {rank} of 2" in log and "DONE" in log
    assert all(p.started_at > ticked_at for p in pods)  # when the process ran, not the tick

    billing_accrue(now=timezone.now())
    for pod in pods:
        billed = list(
            BillLine.objects.filter(pod=pod)
            .order_by("minute")
            .values_list("minute", "price_per_hour", "amount", "pay_type")
        )
        assert billed == [
            (m, Decimal("0.3000"), pricing.minute_charge(Decimal("0.30")), "spot")
            for m in ran_minutes(pod)
        ]
    assert not PodMeter.objects.filter(pod__job=job, closed=False).exists()


def test_it_runs_a_pay_as_you_go_job_on_the_public_pool_and_bills_it_at_the_original_price(
    personas, prices, agent_backend
):
    job = submit(personas, source="public", name="payg")
    assert job.status == JobStatus.QUEUING
    ticked_at = start_on_the_market()

    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    assert [t.status for t in job.status_history.all()] == [
        "Creating",
        "Queuing",
        "EnvPreparing",
        "Running",
        "Succeeded",
    ]
    pod = job.pods.get()
    assert (pod.status, pod.exit_code, pod.node_id) == (PodStatus.SUCCEEDED, 0, None)
    assert PodProcess.objects.get(pod=pod).queue == "public"
    log = pod_log(pod)
    assert f"hello from {pod.pod_id} rank 0 of 1" in log and "DONE" in log
    assert pod.started_at > ticked_at

    billing_accrue(now=timezone.now())
    billed = list(
        BillLine.objects.filter(pod=pod)
        .order_by("minute")
        .values_list("minute", "price_per_hour", "pay_type")
    )
    assert billed == [(m, Decimal("0.8000"), "postpaid") for m in ran_minutes(pod)]
