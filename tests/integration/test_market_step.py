"""The live market tick on the database: bidding, gang starts, reclaims, AIMaster re-bids.

Prices come from a replay CSV (exact and readable); the model's own moves are checked in
test_market_model.py. ecs.g7.xlarge: original ¥0.80/h, floor ¥0.08/h, 20 public instances.
The helpers at the top are shared by the other market and billing tests.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.agent.models import PodProcess
from apps.agent.services import checkpoint_report, checkpoint_resumed, pod_report_running
from apps.billing.models import BillLine, PodMeter
from apps.billing.services import billing_accrue
from apps.cluster.models import InstanceType
from apps.jobs.models import Job, JobEvent, JobStatus, PodStatus
from apps.jobs.services import job_admit, job_stop, job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.market.models import PricePoint
from apps.market.selectors import waiting_reasons
from apps.market.services import market_params_set, market_step

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
G7, LJ = "ecs.g7.xlarge", "ml.gu8xf.8xlarge-gu108"


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def at(minutes: float = 0, seconds: float = 0) -> datetime:
    return NOW + timedelta(minutes=minutes, seconds=seconds)


def submit(
    personas,
    *,
    source: str = "spot",
    itype: str = G7,
    pods: int = 1,
    discount: str | None = None,
    price_limit: str | None = None,
    aimaster: bool = False,
    roles: list[RoleSpec] | None = None,
    now: datetime = NOW,
    ws: str = "ws_a",
    user: str = "alice",
    name: str = "job",
    max_restarts: int = 3,
    job_type: str = "PyTorchJob",
) -> Job:
    """Submit and admit a job (Creating → Bidding or Queuing) at `now`."""
    lingjun = itype.startswith("ml.")
    spec = JobSpec(
        display_name=name,
        job_type=job_type,
        user_command="python train.py",
        resource_source=source,
        resource_type="Lingjun" if lingjun else "ECS",
        enable_aimaster=aimaster,
        max_restarts=max_restarts,
        vpc_id="vpc-1" if lingjun else "",
        vswitch_id="vsw-1" if lingjun else "",
        security_group_id="sg-1" if lingjun else "",
        roles=roles
        or [
            RoleSpec(
                pod_count=pods,
                instance_type=itype,
                spot_discount_limit=D(discount) if discount else None,
                spot_price_limit=D(price_limit) if price_limit else None,
            )
        ],
    )
    job = job_submit(workspace=personas[ws], user=personas[user], spec=spec, now=now)
    job_admit(job_pk=job.pk, now=now)
    job.refresh_from_db()
    return job


def step(now: datetime):
    return market_step(now=now, rng=random.Random(7))


def reload(*jobs: Job) -> None:
    for job in jobs:
        job.refresh_from_db()


def reason(job: Job, now: datetime = NOW) -> str:
    """Why a bidding spot job waits, as its pages show it at `now`."""
    job.refresh_from_db()
    return waiting_reasons(jobs=[job], now=now)[job.pk]


def replay_writer(settings, tmp_path):
    """A function that writes a replay CSV of (datetime, type, price) rows and switches the
    market to it (the `replay` fixture of the market and billing tests)."""

    def write(rows: list[tuple[datetime, str, str]]):
        path = tmp_path / "prices.csv"
        lines = ["timestamp,instance_type,price"]
        lines += [f"{when.isoformat()},{itype},{price}" for when, itype, price in rows]
        path.write_text("\n".join(lines) + "\n")
        settings.MARKET_REPLAY_CSV = str(path)
        return path

    return write


@pytest.fixture
def replay(settings, tmp_path):
    return replay_writer(settings, tmp_path)


# --- bidding ---------------------------------------------------------------------------------


def test_it_keeps_a_bid_below_the_market_price_bidding_and_says_why(personas, replay):
    replay([(NOW, G7, "0.50")])
    job = submit(personas, discount="0.4")  # ¥0.32/h
    step(at(0))
    reload(job)
    assert job.status == JobStatus.BIDDING
    assert reason(job) == "bid ¥0.32/h < market ¥0.50/h for ecs.g7.xlarge"
    assert not job.pods.exists()


def test_it_keeps_a_job_bidding_while_stock_cannot_cover_all_its_pods(personas, replay):
    replay([(NOW, G7, "0.30")])
    submit(personas, source="public", pods=5, name="payg")
    step(at(0))
    job = submit(personas, discount="0.9", pods=16)
    step(at(1))
    reload(job)
    assert job.status == JobStatus.BIDDING
    assert reason(job) == "stock: needs 16 instances of ecs.g7.xlarge, 15 free"


def test_it_starts_a_job_when_its_bid_covers_the_price_and_stock_covers_every_pod(personas, replay):
    replay([(NOW, G7, "0.30")])
    job = submit(
        personas,
        job_type="TFJob",
        roles=[
            RoleSpec(
                role_type="Worker", pod_count=3, instance_type=G7, spot_discount_limit=D("0.8")
            ),
            RoleSpec(role_type="PS", pod_count=1, instance_type=G7, spot_discount_limit=D("0.8")),
        ],
    )
    report = step(at(0, 10))
    reload(job)
    assert report.started == 1
    assert job.status == JobStatus.RUNNING and job.started_at == at(0, 10)
    assert job.pending_reason == ""
    assert [t.status for t in job.status_history.all()] == [
        "Creating",
        "Bidding",
        "EnvPreparing",
        "Running",
    ]
    pods = list(job.pods.all())
    assert len(pods) == 4
    assert all(
        p.status == PodStatus.RUNNING
        and p.node is None
        and p.in_quota is None
        and p.started_at == at(0, 10)
        for p in pods
    )
    assert {p.pod_id for p in pods} >= {f"{job.job_id}-worker-0-a0", f"{job.job_id}-ps-0-a0"}
    assert PodMeter.objects.filter(pod__job=job).count() == 4
    event = JobEvent.objects.get(job=job, kind="BidAccepted")
    assert event.message == "Bid accepted at ¥0.64/h (market ¥0.30/h)"


def test_it_starts_a_bid_equal_to_the_market_price(personas, replay):
    replay([(NOW, G7, "0.64")])
    job = submit(personas, discount="0.8")  # ¥0.64/h
    step(at(0))
    reload(job)
    assert job.status == JobStatus.RUNNING


def test_it_accepts_a_price_limit_per_minute(personas, replay):
    replay([(NOW, G7, "0.60")])
    job = submit(personas, price_limit="0.011")  # the seed's SpotPriceLimit: ¥0.66/h
    step(at(0))
    reload(job)
    assert job.status == JobStatus.RUNNING
    assert job.events.get(kind="BidAccepted").message == "Bid accepted at ¥0.66/h (market ¥0.60/h)"


def test_it_starts_a_gang_only_when_stock_covers_the_whole_job(personas, replay):
    replay([(NOW, G7, "0.30")])
    payg = submit(personas, source="public", pods=18, name="payg")
    step(at(0))
    reload(payg)
    assert payg.status == JobStatus.RUNNING
    three = submit(personas, discount="0.9", pods=3, name="three", now=at(1))
    two = submit(personas, discount="0.5", pods=2, name="two", now=at(1))
    step(at(1))
    reload(three, two)
    assert three.status == JobStatus.BIDDING and not three.pods.exists()
    assert two.status == JobStatus.RUNNING and two.pods.count() == 2
    # Judged first (the higher bid), it did not fit in the 2 free; `two` then took them.
    assert reason(three) == "stock: needs 3 instances of ecs.g7.xlarge, 0 free"


# --- pay-as-you-go -----------------------------------------------------------------------------


def test_it_starts_a_public_job_on_the_public_pool_before_spot_takes_the_stock(personas, replay):
    replay([(NOW, G7, "0.30")])
    spot = submit(personas, discount="0.9", pods=20, name="spot", now=at(-5))
    payg = submit(personas, source="public", pods=5, name="payg")
    step(at(0))
    reload(spot, payg)
    assert payg.status == JobStatus.RUNNING
    assert payg.events.get(kind="Started").message == "Started on the public pool"
    assert all(p.node is None and p.in_quota is None for p in payg.pods.all())
    assert spot.status == JobStatus.BIDDING
    assert reason(spot) == "stock: needs 20 instances of ecs.g7.xlarge, 15 free"


def test_it_keeps_a_public_job_queuing_when_pay_as_you_go_holds_the_pool(personas, replay):
    replay([(NOW, G7, "0.30")])
    submit(personas, source="public", pods=15, name="first")
    step(at(0))
    second = submit(personas, source="public", pods=6, name="second", now=at(1))
    step(at(1))
    reload(second)
    assert second.status == JobStatus.QUEUING
    assert (
        "needs 6 instances of ecs.g7.xlarge, 5 not held by pay-as-you-go" in second.pending_reason
    )
    with CaptureQueriesContext(connection) as queries:  # unchanged: not written again
        step(at(2))
    assert not [q for q in queries if "pending_reason" in q["sql"] and "UPDATE" in q["sql"]]


# --- reclaims ----------------------------------------------------------------------------------


def test_it_reclaims_an_ecs_spot_job_when_its_bid_falls_below_the_market(personas, replay):
    replay([(NOW, G7, "0.30"), (at(1), G7, "0.70")])
    job = submit(personas, discount="0.8")  # ¥0.64/h
    step(at(0))
    report = step(at(1))
    reload(job)
    assert report.reclaimed == 1
    assert job.status == JobStatus.FAILED
    assert job.reason_code == "SpotPriceExceeded"
    assert "bid ¥0.64/h < market ¥0.70/h" in job.reason_message
    pod = job.pods.get()
    assert pod.status == PodStatus.PREEMPTED and pod.reason == "SpotPriceExceeded"
    assert "bid ¥0.64/h < market ¥0.70/h for ecs.g7.xlarge" in pod.message
    assert pod.finished_at == at(1)


def test_it_holds_lingjun_to_the_system_average_not_the_market_price(personas, replay):
    market_params_set(average_window_seconds=600)
    replay([(NOW, LJ, "60"), (at(5), LJ, "150")])
    job = submit(personas, itype=LJ, discount="0.5")  # ¥100/h
    step(at(0))
    reload(job)
    assert job.status == JobStatus.RUNNING
    step(at(5))  # market ¥150 > bid, but the average of the last 10 minutes is ¥60
    step(at(8))  # (5 min × 60 + 3 min × 150) / 8 min = ¥93.75
    reload(job)
    assert job.status == JobStatus.RUNNING
    step(at(10))  # (5 × 60 + 5 × 150) / 10 = ¥105 > ¥100
    reload(job)
    assert job.status == JobStatus.FAILED
    assert job.reason_code == "SpotAveragePriceExceeded"
    assert "bid ¥100.00/h < system average ¥105.00/h" in job.reason_message


def test_it_reclaims_the_lowest_bids_first_when_pay_as_you_go_takes_the_stock(personas, replay):
    replay([(NOW, G7, "0.30")])
    low = submit(personas, discount="0.5", pods=10, name="low")
    high = submit(personas, discount="0.9", pods=10, name="high")
    step(at(0))
    reload(low, high)
    assert low.status == high.status == JobStatus.RUNNING
    payg = submit(personas, source="public", pods=5, name="payg", now=at(1))
    step(at(1))
    reload(low, high, payg)
    assert payg.status == JobStatus.RUNNING
    assert high.status == JobStatus.RUNNING
    assert low.status == JobStatus.FAILED and low.reason_code == "SpotStockShortage"
    assert "lowest bids go first" in low.reason_message
    # the job that took the stock, by the name and id its owner knows it by (not a row number)
    assert f"pay-as-you-go job payg ({payg.job_id}) needs" in low.reason_message
    assert set(low.pods.values_list("status", flat=True)) == {PodStatus.PREEMPTED}


def test_it_reclaims_spot_jobs_on_a_type_whose_public_capacity_went_to_zero(personas, replay):
    replay([(NOW, G7, "0.30")])
    job = submit(personas, discount="0.5", pods=2)
    step(at(0))
    reload(job)
    assert job.status == JobStatus.RUNNING
    InstanceType.objects.filter(name=G7).update(public_capacity=0)  # the admin stops selling it
    step(at(1))
    reload(job)
    assert job.status == JobStatus.FAILED and job.reason_code == "SpotStockShortage"
    assert "capacity 0 < 2 instances of ecs.g7.xlarge in use" in job.reason_message
    assert set(job.pods.values_list("status", flat=True)) == {PodStatus.PREEMPTED}


def test_it_reclaims_spot_jobs_on_a_type_no_longer_sold_as_spot(personas, replay):
    replay([(NOW, G7, "0.30")])
    job = submit(personas, discount="0.9", pods=2, aimaster=True)
    payg = submit(personas, source="public", name="payg")
    step(at(0))
    reload(job, payg)
    assert job.status == payg.status == JobStatus.RUNNING
    InstanceType.objects.filter(name=G7).update(spot_enabled=False)  # pay-as-you-go only now
    step(at(1))
    reload(job, payg)
    assert job.status == JobStatus.BIDDING and job.reason_code == "SpotStockShortage"
    assert "ecs.g7.xlarge is no longer sold as spot" in job.reason_message
    assert payg.status == JobStatus.RUNNING


def test_it_sends_a_reclaimed_job_with_aimaster_back_to_bidding_and_runs_it_again(personas, replay):
    replay([(NOW, G7, "0.30"), (at(1), G7, "0.70"), (at(3), G7, "0.40")])
    job = submit(personas, discount="0.8", aimaster=True)
    step(at(0))
    step(at(1))
    reload(job)
    assert job.status == JobStatus.BIDDING
    assert job.reason_code == "SpotPriceExceeded"
    assert (job.restart_times, job.attempt) == (0, 1)  # a reclaim spends no restart
    restart = job.restarts.get()
    assert restart.cause == "SpotPriceExceeded" and not restart.counted
    step(at(2))
    reload(job)
    assert job.status == JobStatus.BIDDING
    assert reason(job, at(2)) == "bid ¥0.64/h < market ¥0.70/h for ecs.g7.xlarge"
    step(at(3))
    reload(job)
    assert job.status == JobStatus.RUNNING
    pods = {p.attempt: p for p in job.pods.all()}
    assert pods[0].status == PodStatus.PREEMPTED and pods[1].status == PodStatus.RUNNING
    assert pods[1].pod_id == f"{job.job_id}-worker-0-a1"
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds == [
        "Submitted",
        "Bidding",
        "BidAccepted",
        "Reclaimed",
        "PodReclaimed",  # on the pod too: its own events say so
        "Requeued",
        "BidAccepted",
        "Resumed",
    ]
    assert [t.status for t in job.status_history.all()] == [
        "Creating",
        "Bidding",
        "EnvPreparing",
        "Running",
        "Bidding",
        "EnvPreparing",
        "Running",
    ]


def test_it_loses_only_the_resumed_attempts_work_on_a_second_reclaim(personas, replay):
    """Reclaimed 30 s after a checkpoint, the job resumes from it; reclaimed again 2 minutes
    into the new attempt, it loses those 2 minutes, not all the time since the checkpoint."""
    gn7 = "ecs.gn7i-c8g1.2xlarge"  # 1 GPU
    replay([(NOW, gn7, "3.00"), (at(1), gn7, "5.00"), (at(3), gn7, "3.00"), (at(5), gn7, "9.00")])
    job = submit(personas, itype=gn7, pods=2, discount="0.5", aimaster=True)  # ¥4.80/h
    step(at(0))
    checkpoint_report(job_pk=job.pk, step=1, path="/ckpt/1", size_bytes=1, at=at(0.5))
    for minute in (1, 3, 5):
        step(at(minute))
    lost = list(job.restarts.order_by("number").values_list("lost_gpu_seconds", flat=True))
    assert lost == [pytest.approx(2 * 30), pytest.approx(2 * 120)]  # not 2 × 270


def test_a_reclaimed_job_with_aimaster_bids_again_whatever_its_restarts(personas, replay):
    # a reclaim is never terminal for a job with fault tolerance, even with no restart left
    replay([(NOW, G7, "0.30"), (at(1), G7, "0.70"), (at(2), G7, "0.30"), (at(3), G7, "0.70")])
    job = submit(personas, discount="0.8", aimaster=True, max_restarts=0)
    for minute in range(4):
        step(at(minute))
    reload(job)
    assert job.status == JobStatus.BIDDING and job.reason_code == "SpotPriceExceeded"
    assert (job.restart_times, job.attempt) == (0, 2)
    assert "AIMaster's budget 0/0 is not used" in job.reason_message


def test_it_lets_a_re_bid_wait_out_the_aimaster_backoff(personas, replay, settings):
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 120
    replay([(NOW, G7, "0.30"), (at(1), G7, "0.70"), (at(2), G7, "0.30")])
    job = submit(personas, discount="0.8", aimaster=True)
    step(at(0))
    step(at(1))
    step(at(2))
    reload(job)
    assert job.status == JobStatus.BIDDING
    assert reason(job, at(2)) == "AIMaster backoff: bids again from 12:03:00 UTC"
    step(at(3))
    reload(job)
    assert job.status == JobStatus.RUNNING


def test_a_re_bid_waits_for_the_reclaimed_pods_to_exit(personas, replay):
    replay([(NOW, G7, "0.30"), (at(1), G7, "0.70"), (at(2), G7, "0.30")])
    job = submit(personas, discount="0.8", aimaster=True)
    step(at(0))
    PodProcess.objects.create(pod=job.pods.get(), state="running", queue="node.n", queued_at=at(0))
    step(at(1))  # reclaimed: SIGTERM, and its process saves on the way out
    step(at(2))  # the price is back under its bid
    reload(job)
    assert job.status == JobStatus.BIDDING
    assert reason(job, at(2)) == (
        "waiting for 1 pod of its previous attempt to exit (grace period)"
    )
    PodProcess.objects.update(state="exited", exit_code=143)
    step(at(3))
    reload(job)
    assert job.status == JobStatus.RUNNING


def test_it_frees_the_stock_of_a_stopped_spot_job(personas, replay):
    replay([(NOW, G7, "0.30")])
    first = submit(personas, discount="0.9", pods=20, name="first")
    step(at(0))
    second = submit(personas, discount="0.9", pods=5, name="second", now=at(1))
    step(at(1))
    reload(second)
    assert second.status == JobStatus.BIDDING
    job_stop(job=first, by=personas["alice"], now=at(2))
    step(at(2))
    reload(second)
    assert second.status == JobStatus.RUNNING


# --- with node agents (no worker here: test_market_agent.py runs a real one) -------------------


@pytest.fixture
def agents(settings):
    settings.EXECUTION_BACKEND = "agent"


def test_it_hands_started_jobs_to_the_agents_with_pending_pods(
    personas, replay, agents, django_capture_on_commit_callbacks
):
    replay([(NOW, G7, "0.30")])
    spot = submit(
        personas,
        job_type="TFJob",
        name="spot",
        roles=[
            RoleSpec(
                role_type="Worker", pod_count=3, instance_type=G7, spot_discount_limit=D("0.8")
            ),
            RoleSpec(role_type="PS", pod_count=1, instance_type=G7, spot_discount_limit=D("0.8")),
        ],
    )
    payg = submit(personas, source="public", name="payg")
    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        report = step(at(0, 10))
    reload(spot, payg)
    assert report.started == 2
    assert len(enqueued) == 2  # one batch of pod_start_task per job, sent once committed
    assert (spot.status, spot.reason_code) == (JobStatus.ENV_PREPARING, "JobBidAccepted")
    assert spot.reason_message == "Bid accepted at ¥0.64/h (market ¥0.30/h)"
    assert spot.started_at == at(0, 10) and spot.pending_reason == ""
    history = list(spot.status_history.all())
    assert [t.status for t in history] == ["Creating", "Bidding", "EnvPreparing"]
    assert (history[-1].reason_code, history[-1].ended_at) == ("JobBidAccepted", None)
    pods = list(spot.pods.all())
    assert all(
        p.status == PodStatus.PENDING and p.started_at is None and p.node is None for p in pods
    )
    processes = PodProcess.objects.filter(pod__job=spot)
    assert {(p.queue, p.state, p.world_size) for p in processes} == {
        ("public", PodProcess.State.QUEUED, 4)
    }
    assert sorted(p.rank for p in processes) == [0, 1, 2, 3]
    assert PodMeter.objects.filter(pod__job=spot).count() == 4
    assert (payg.status, payg.reason_code, payg.reason_message) == (
        JobStatus.ENV_PREPARING,
        "JobDequeued",
        "Started on the public pool",
    )
    assert payg.pods.get().status == PodStatus.PENDING


def test_it_bills_a_market_pod_from_when_its_process_started(personas, replay, agents):
    replay([(NOW, G7, "0.30")])
    job = submit(personas, discount="0.9")
    step(at(0))
    billing_accrue(now=at(2, 10))
    assert not BillLine.objects.exists()  # Pending: the process has not started
    pod = job.pods.get()
    assert pod_report_running(
        pod_id=pod.pod_id, pid=4242, sandbox="none", work_dir="/w", log_path="/w/log", now=at(2, 30)
    )
    reload(job)
    assert job.status == JobStatus.RUNNING
    assert [t.status for t in job.status_history.all()] == [
        "Creating",
        "Bidding",
        "EnvPreparing",
        "Running",
    ]
    billing_accrue(now=at(4, 10))
    base = int(NOW.timestamp()) // 60
    billed = BillLine.objects.filter(pod=pod).order_by("minute")
    assert [(b.minute - base, b.price_per_hour) for b in billed] == [
        (2, D("0.3000")),
        (3, D("0.3000")),
        (4, D("0.3000")),
    ]


def test_it_cancels_the_starts_of_a_job_reclaimed_before_its_pods_ran(personas, replay, agents):
    replay([(NOW, G7, "0.30"), (at(1), G7, "0.70")])
    job = submit(personas, discount="0.8", pods=2, aimaster=True)  # ¥0.64/h
    step(at(0))
    report = step(at(1))
    reload(job)
    assert report.reclaimed == 1
    assert (job.status, job.reason_code) == (JobStatus.BIDDING, "SpotPriceExceeded")
    assert set(job.pods.values_list("status", flat=True)) == {PodStatus.PREEMPTED}
    assert set(PodProcess.objects.filter(pod__job=job).values_list("state", flat=True)) == {
        PodProcess.State.CANCELLED
    }
    billing_accrue(now=at(3))
    assert not BillLine.objects.exists()
    assert not PodMeter.objects.filter(pod__job=job, closed=False).exists()


def test_it_starts_many_jobs_in_as_many_queries_as_one_without_agents(personas, replay):
    replay([(NOW, G7, "0.30")])

    def queries_to_start(count: int, minute: int) -> int:
        jobs = [
            submit(personas, discount="0.9", name=f"j{minute}-{i}", now=at(minute))
            for i in range(count)
        ]
        with CaptureQueriesContext(connection) as queries:
            assert step(at(minute)).started == count
        reload(*jobs)
        assert {j.status for j in jobs} == {JobStatus.RUNNING}
        return len(queries)

    step(at(0))  # the first tick also opens each type's market state
    assert queries_to_start(1, 1) == queries_to_start(15, 2)


def test_it_reclaims_many_jobs_in_as_many_queries_as_one(personas, replay):
    replay([(NOW, G7, "0.30"), (at(1), G7, "0.70"), (at(2), G7, "0.30"), (at(3), G7, "0.70")])

    def queries_to_reclaim(count: int, minute: int) -> int:
        jobs = [
            submit(personas, discount="0.8", name=f"j{minute}-{i}", now=at(minute))
            for i in range(count)
        ]
        assert step(at(minute)).started == count
        with CaptureQueriesContext(connection) as queries:
            assert step(at(minute + 1)).reclaimed == count
        reload(*jobs)
        assert {(j.status, j.reason_code) for j in jobs} == {
            (JobStatus.FAILED, "SpotPriceExceeded")
        }
        return len(queries)

    assert queries_to_reclaim(1, 0) == queries_to_reclaim(12, 2)


def test_it_requeues_and_fails_jobs_reclaimed_in_the_same_tick(personas, replay):
    replay([(NOW, G7, "0.30"), (at(1), G7, "0.70")])
    kept = submit(personas, discount="0.8", aimaster=True, name="kept")
    lost = submit(personas, discount="0.7", name="lost")
    step(at(0))
    assert step(at(1)).reclaimed == 2
    reload(kept, lost)
    assert (kept.status, kept.restart_times, kept.attempt) == (JobStatus.BIDDING, 0, 1)
    assert kept.reason_message.startswith("Requeued: Spot instances reclaimed")
    assert kept.reason_message.endswith(
        "(its resources were taken back: AIMaster's budget 0/3 is not used)"
    )
    assert (lost.status, lost.reason_code, lost.finished_at) == (
        JobStatus.FAILED,
        "SpotPriceExceeded",
        at(1),
    )
    assert lost.reason_message.endswith("(no automatic fault tolerance)")
    assert list(kept.events.values_list("kind", flat=True)) == [
        "Submitted",
        "Bidding",
        "BidAccepted",
        "Reclaimed",
        "PodReclaimed",
        "Requeued",
    ]
    assert list(lost.events.values_list("kind", flat=True)) == [
        "Submitted",
        "Bidding",
        "BidAccepted",
        "Reclaimed",
        "PodReclaimed",
        "Failed",
    ]
    assert [t.status for t in lost.status_history.all()] == [
        "Creating",
        "Bidding",
        "EnvPreparing",
        "Running",
        "Failed",
    ]
    assert lost.status_history.filter(ended_at__isnull=True).get().status == "Failed"


# --- bookkeeping -------------------------------------------------------------------------------


def test_it_neither_reads_nor_writes_a_bid_below_the_asked_price(personas, replay):
    replay([(NOW, G7, "0.50")])
    hopeless = submit(personas, discount="0.4", name="hopeless")  # ¥0.32/h
    assert step(at(0)).waiting == 0  # the tick publishes its prices, then reads the bids
    with CaptureQueriesContext(connection) as queries:
        report = step(at(1))
    assert report.waiting == 0
    assert not [q for q in queries if "pending_reason" in q["sql"] and "UPDATE" in q["sql"]]
    assert reason(hopeless) == "bid ¥0.32/h < market ¥0.50/h for ecs.g7.xlarge"


def test_it_keeps_a_job_waiting_when_one_of_its_roles_bids_too_low(personas, replay):
    replay([(NOW, G7, "0.50")])
    job = submit(
        personas,
        job_type="TFJob",
        roles=[
            RoleSpec(
                role_type="Worker", pod_count=2, instance_type=G7, spot_discount_limit=D("0.9")
            ),
            RoleSpec(role_type="PS", pod_count=1, instance_type=G7, spot_discount_limit=D("0.1")),
        ],
    )
    assert step(at(0)).waiting == 1  # read for its Worker, held back by its PS
    reload(job)
    assert job.status == JobStatus.BIDDING and not job.pods.exists()
    assert reason(job) == "bid ¥0.08/h < market ¥0.50/h for ecs.g7.xlarge"


def test_it_does_not_read_a_gang_larger_than_the_tick_can_free(personas, replay):
    replay([(NOW, G7, "0.30")])
    submit(personas, discount="0.9", pods=12, name="holder")  # keeps its bid: 8 stay free
    step(at(0))
    short = submit(personas, discount="0.9", pods=9, name="short", now=at(1))
    fits = submit(personas, discount="0.9", pods=8, name="fits", now=at(1))
    report = step(at(1))
    assert (report.waiting, report.started) == (0, 1)  # `short` was not read
    reload(fits)
    assert fits.status == JobStatus.RUNNING
    assert reason(short) == "stock: needs 9 instances of ecs.g7.xlarge, 0 free"


def test_it_reads_every_gang_while_pay_as_you_go_waits(personas, replay):
    """A queuing pay-as-you-go job may reclaim spot instances, and so free more than the
    headroom: no job is left out for its size then."""
    replay([(NOW, G7, "0.30")])
    submit(personas, source="public", pods=15, name="payg")
    step(at(0))
    submit(personas, source="public", pods=6, name="waiting", now=at(1))
    short = submit(personas, discount="0.9", pods=9, name="short", now=at(1))
    assert step(at(1)).waiting == 2  # the queuing job and `short`, read and judged
    assert reason(short) == "stock: needs 9 instances of ecs.g7.xlarge, 5 free"


def test_it_quotes_the_price_of_the_last_tick_in_a_waiting_reason(personas, replay):
    replay([(NOW, G7, "0.50"), (at(1), G7, "0.55")])
    job = submit(personas, discount="0.4")
    step(at(0))
    assert reason(job) == "bid ¥0.32/h < market ¥0.50/h for ecs.g7.xlarge"
    step(at(1))
    assert reason(job) == "bid ¥0.32/h < market ¥0.55/h for ecs.g7.xlarge"


def test_it_holds_a_lingjun_bid_to_a_system_average_above_the_price(personas, replay):
    market_params_set(average_window_seconds=600)
    replay([(NOW, LJ, "150"), (at(5), LJ, "60")])
    step(at(0))
    step(at(5))
    job = submit(personas, itype=LJ, discount="0.5", now=at(8))  # ¥100/h ≥ the price, ¥60/h
    report = step(at(8))  # the average: (5 min × 150 + 3 min × 60) / 8 min = ¥116.25/h
    assert report.waiting == 0  # below what it is asked: not read
    assert reason(job, at(8)) == f"bid ¥100.00/h < system average ¥116.25/h for {LJ}"


def test_it_reads_a_bid_that_rounds_up_to_the_price_and_starts_it(personas, replay, cluster):
    """Original ¥0.8005/h × 0.5 = ¥0.40025/h, rounded half up: a bid of ¥0.4003/h, which
    covers a price of ¥0.4003/h (the database compares the raw bid)."""
    InstanceType.objects.filter(name=G7).update(price_per_hour=D("0.8005"))
    replay([(NOW, G7, "0.4003")])
    step(at(0))
    job = submit(personas, discount="0.5", now=at(1))
    step(at(1))
    reload(job)
    assert job.status == JobStatus.RUNNING
    assert (
        job.events.get(kind="BidAccepted").message == "Bid accepted at ¥0.4003/h (market ¥0.4003/h)"
    )


def test_it_records_a_price_point_on_change_and_at_least_every_ten_minutes(personas, replay):
    replay([(NOW, G7, "0.30"), (at(12), G7, "0.35")])
    for minute in range(14):
        step(at(minute))
    points = list(
        PricePoint.objects.filter(instance_type__name=G7)
        .order_by("at")
        .values_list("at", "price_per_hour")
    )
    assert points == [(at(0), D("0.3000")), (at(10), D("0.3000")), (at(12), D("0.3500"))]


def test_it_ignores_a_tick_at_or_before_the_last_one(personas, replay):
    replay([(NOW, G7, "0.30")])
    assert not step(at(1)).skipped
    assert step(at(1)).skipped
    assert step(at(0)).skipped


def test_a_checkpoint_saved_on_the_way_out_of_a_reclaim_revises_the_work_lost(personas, replay):
    """Reclaimed 30 s after a checkpoint, the job's pods save once more on SIGTERM (as
    examples/train.py does), and the next attempt resumes from that save: the restart said
    60 GPU-seconds lost, though nothing was; it says 0, and an event says why."""
    gn7 = "ecs.gn7i-c8g1.2xlarge"  # 1 GPU
    replay([(NOW, gn7, "3.00"), (at(1), gn7, "5.00"), (at(3), gn7, "3.00")])
    job = submit(personas, itype=gn7, pods=2, discount="0.5", aimaster=True)  # ¥4.80/h
    step(at(0))
    checkpoint_report(job_pk=job.pk, step=1, path="/ckpt/1", size_bytes=1, at=at(0.5))
    step(at(1))  # reclaimed: 2 GPUs × 30 s since the checkpoint
    restart = job.restarts.get()
    assert restart.lost_gpu_seconds == pytest.approx(2 * 30)
    # a checkpoint read a moment late (saved 10 s before the reclaim) counts from it
    checkpoint_report(
        job_pk=job.pk, step=2, path="/ckpt/2", size_bytes=1, at=at(1) - timedelta(seconds=10)
    )
    restart.refresh_from_db()
    assert restart.lost_gpu_seconds == pytest.approx(2 * 10)
    # the save on SIGTERM, in the grace period: nothing was lost
    checkpoint_report(
        job_pk=job.pk, step=3, path="/ckpt/3", size_bytes=1, at=at(1) + timedelta(seconds=1)
    )
    restart.refresh_from_db()
    assert restart.lost_gpu_seconds == 0
    assert list(job.events.filter(kind="LostWorkRevised").values_list("message", flat=True)) == [
        "Checkpoint at step 2 saved by the interrupted attempt: the work lost at interruption 1 "
        "is 20 GPU-seconds, not 60",
        "Checkpoint at step 3 saved by the interrupted attempt: the work lost at interruption 1 "
        "is 0 GPU-seconds, not 20",
    ]
    step(at(3))  # bids again and resumes; its own checkpoints change nothing
    reload(job)
    assert job.status == JobStatus.RUNNING
    checkpoint_report(job_pk=job.pk, step=4, path="/ckpt/4", size_bytes=1, at=at(3.5))
    restart.refresh_from_db()
    assert restart.lost_gpu_seconds == 0


def test_a_checkpoint_saved_on_the_way_out_of_a_reclaim_that_ended_the_job_revises_its_work_lost(
    personas, replay
):
    """Without AIMaster a reclaim ends the job, and the work it lost is the job's own
    (`ended_lost_gpu_seconds`): its pods' save on SIGTERM revises it as a requeued job's
    would, and the page and GetJob read 0, not 60."""
    gn7 = "ecs.gn7i-c8g1.2xlarge"  # 1 GPU
    replay([(NOW, gn7, "3.00"), (at(1), gn7, "5.00")])
    job = submit(personas, itype=gn7, pods=2, discount="0.5")
    step(at(0))
    checkpoint_report(job_pk=job.pk, step=1, path="/ckpt/1", size_bytes=1, at=at(0.5))
    step(at(1))  # reclaimed: 2 GPUs × 30 s since the checkpoint, and the job ends
    reload(job)
    assert job.status == JobStatus.FAILED and not job.restarts.exists()
    assert job.ended_lost_gpu_seconds == pytest.approx(2 * 30)
    # an older checkpoint read late is not what the job goes on from: nothing changes
    checkpoint_report(job_pk=job.pk, step=0, path="/ckpt/0", size_bytes=1, at=at(0.2))
    checkpoint_report(
        job_pk=job.pk, step=2, path="/ckpt/2", size_bytes=1, at=at(1) + timedelta(seconds=1)
    )
    reload(job)
    assert job.ended_lost_gpu_seconds == 0
    assert list(job.events.filter(kind="LostWorkRevised").values_list("message", flat=True)) == [
        "Checkpoint at step 2 saved by the interrupted attempt: the work lost at interruption 1 "
        "is 0 GPU-seconds, not 60"
    ]


def test_a_resume_past_a_damaged_checkpoint_revises_the_resumed_event_and_the_work_lost(
    personas, replay
):
    """Reclaimed 30 s after its checkpoint at step 2, whose file the next attempt's EasyCkpt
    load finds damaged: it resumes from step 1, saved 50 s before the reclaim, and says so
    through the manifest. The "Resumed" event written at placement said the step the load
    would try, step 2, as an intent, and the restart counted 60 GPU-seconds lost; an event
    names step 1, the one resumed from, and the file passed over, the work lost is 100, and
    the next interruption's resume never names step 2 again."""
    gn7 = "ecs.gn7i-c8g1.2xlarge"  # 1 GPU
    replay(
        [
            (NOW, gn7, "3.00"),
            (at(1), gn7, "5.00"),
            (at(3), gn7, "3.00"),
            (at(5), gn7, "5.00"),
            (at(7), gn7, "3.00"),
        ]
    )
    job = submit(personas, itype=gn7, pods=2, discount="0.5", aimaster=True)
    step(at(0))
    one, two = "/ckpt/ckpt-000000000001.pkl", "/ckpt/ckpt-000000000002.pkl"
    checkpoint_report(job_pk=job.pk, step=1, path=one, size_bytes=1, at=at(0, 10))
    checkpoint_report(job_pk=job.pk, step=2, path=two, size_bytes=1, at=at(0.5))
    step(at(1))  # reclaimed: 2 GPUs × 30 s since step 2
    step(at(3))  # running again
    reload(job)
    assert job.status == JobStatus.RUNNING and job.attempt == 1
    restart = job.restarts.get()
    assert restart.lost_gpu_seconds == pytest.approx(2 * 30)
    rank0 = job.pods.get(attempt=1, index=0)
    for _ in range(2):  # a repeated word changes nothing
        checkpoint_resumed(pod_pk=rank0.pk, step=1, path=one, damaged=[two], at=at(3, 5))
    restart.refresh_from_db()
    assert restart.lost_gpu_seconds == pytest.approx(2 * 50)
    resumed = job.events.filter(kind="Resumed").order_by("at", "id")
    assert list(resumed.values_list("message", flat=True)) == [
        "Resuming from checkpoint at step 2",
        "Damaged checkpoints passed over: ckpt-000000000002.pkl; resumed from checkpoint at step 1",
    ]
    assert list(job.events.filter(kind="LostWorkRevised").values_list("message", flat=True)) == [
        "Attempt 1 resumed from checkpoint at step 1: the work lost at interruption 1 is 100 "
        "GPU-seconds, not 60"
    ]
    assert job.checkpoints.get(step=2).damaged_at == at(3, 5)
    step(at(5))  # reclaimed again: 2 GPUs × 120 s since this attempt started from step 1
    step(at(7))
    reload(job)
    assert job.status == JobStatus.RUNNING and job.attempt == 2
    assert job.restarts.get(number=2).lost_gpu_seconds == pytest.approx(2 * 120)
    assert resumed.last().message == "Resuming from checkpoint at step 1"


def test_the_next_attempts_checkpoint_does_not_revise_the_work_lost(personas, replay):
    gn7 = "ecs.gn7i-c8g1.2xlarge"
    replay([(NOW, gn7, "3.00"), (at(1), gn7, "5.00"), (at(3), gn7, "3.00")])
    job = submit(personas, itype=gn7, pods=2, discount="0.5", aimaster=True)
    step(at(0))
    checkpoint_report(job_pk=job.pk, step=1, path="/ckpt/1", size_bytes=1, at=at(0.5))
    step(at(1))
    step(at(3))  # running again
    reload(job)
    assert job.status == JobStatus.RUNNING
    checkpoint_report(job_pk=job.pk, step=2, path="/ckpt/2", size_bytes=1, at=at(3.2))
    assert job.restarts.get().lost_gpu_seconds == pytest.approx(2 * 30)
    assert not job.events.filter(kind="LostWorkRevised").exists()
