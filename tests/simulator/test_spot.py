"""Spot in the simulator: jobs of a QoS class bid on a public pool, and the live market's core
prices, starts, reclaims and bills them, step by step in virtual time."""

from __future__ import annotations

import math
import zlib
from decimal import Decimal

import pytest

from apps.core.pricing import minute_charge, price_for_minute
from apps.simulator import Policy, Settings, policy_summary, run_summary
from apps.simulator.report import render
from apps.simulator.sim import simulate
from apps.simulator.spot import SpotSettings, spot_pool
from tests.simulator.helpers import job, nodes, one_quota, outcome

PUBLIC = spot_pool(nodes(1, 1), gpu_hour=Decimal("10"), core_hour=Decimal("0"))  # 2 × ¥10/h


def spot_run(trace, *, bids=(0.5, 0.5), checkpoint_interval=0.0, seed=0, public=PUBLIC):
    spot = SpotSettings(public, frozenset({"BE"}), step=60.0, bid_range=bids)
    settings = Settings(seed=seed, checkpoint_interval=checkpoint_interval, spot=spot)
    return simulate(trace, one_quota(1), Policy("ours"), settings)


def test_spot_jobs_bid_and_run_beside_the_quota_jobs():
    trace = [
        job("ls", 0, duration=100),
        job("spot-a", 30, duration=150, qos="BE"),
        job("spot-b", 30, duration=90, qos="BE"),
    ]
    result = spot_run(trace)
    ls, a, b = (outcome(result, n) for n in ("ls", "spot-a", "spot-b"))
    assert (ls.first_start, ls.finish, ls.spot) == (0, 100, False)
    # both bid half the original price, the market opens at the floor: they start at the
    # first market step after they arrive, on the two public instances
    assert (a.first_start, a.finish, a.spot, a.quota) == (60, 210, True, "spot")
    assert (b.first_start, b.finish) == (60, 150)
    spot = policy_summary(result)["spot"]
    assert spot["jobs"] == 2 and spot["started"] == 2 and spot["finished"] == 2
    assert spot["reclaims"] == 0 and spot["delay_seconds"]["p50"] == 30
    # every started instance-minute billed once: 150 s is 3 minutes, 90 s is 2
    assert spot["instance_hours"] == pytest.approx(5 / 60, abs=0.01)
    history = result.spot.prices[PUBLIC.types[0].name]
    expected = sum(minute_charge(price_for_minute(history, m)) for m in (1, 2, 3, 1, 2))
    assert Decimal(spot["cost_cny"]) == expected
    # quota figures leave the spot jobs out
    assert policy_summary(result)["jobs"]["submitted"] == 1


def _names_with_bids():
    """Two job names whose drawn bids (a stable hash of the name) are far apart."""
    share = {f"j{i}": zlib.crc32(f"j{i}".encode()) / 0xFFFFFFFF for i in range(200)}
    low = min(share, key=share.get)
    high = max(share, key=share.get)
    return low, high


FOUR = spot_pool(nodes(1, 1, 1, 1), gpu_hour=Decimal("10"), core_hour=Decimal("0"))


def test_a_low_bid_is_reclaimed_when_demand_lifts_the_price_and_loses_its_work():
    """Alone on four instances, a bid of about a fifth of the original price covers the
    price its own demand sets; a second job starting lifts the price past it."""
    low, high = _names_with_bids()
    trace = [job(low, 0, duration=3600, qos="BE"), job(high, 600, duration=300, qos="BE")]
    result = spot_run(trace, bids=(0.2, 1.0), public=FOUR)
    cheap, rich = outcome(result, low), outcome(result, high)
    assert cheap.first_start == 0 and rich.first_start == 600 and rich.finish == 900
    assert cheap.preemptions == 1 == result.spot.reclaims
    # reclaimed after the second job started, with all its work so far (1 GPU, no checkpoint)
    assert 600 < cheap.lost_gpu_seconds < 3600
    assert result.spot.lost_gpu_seconds == pytest.approx(cheap.lost_gpu_seconds)
    # requeued (AIMaster), it bids again and does all its work once the price falls back
    assert cheap.finish is not None and cheap.finish >= 900 + 3600
    prices = [p for _, p in result.spot.prices[FOUR.types[0].name]]
    assert max(prices) > Decimal("2.04")  # above its bid, at least for a while


def test_a_reclaimed_job_keeps_the_work_of_its_last_checkpoint():
    low, high = _names_with_bids()
    trace = [job(low, 0, duration=3600, qos="BE"), job(high, 600, duration=300, qos="BE")]
    plain = spot_run(trace, bids=(0.2, 1.0), public=FOUR)
    saved = spot_run(trace, bids=(0.2, 1.0), public=FOUR, checkpoint_interval=300)
    reclaimed_at = outcome(plain, low).lost_gpu_seconds  # started at 0 on one GPU
    kept = reclaimed_at // 300 * 300
    assert kept > 0
    assert outcome(saved, low).lost_gpu_seconds == pytest.approx(reclaimed_at - kept)
    assert outcome(saved, low).finish < outcome(plain, low).finish


def test_a_job_no_instance_holds_never_bids_and_the_run_still_ends():
    trace = [job("huge", 0, gpu=8, qos="BE"), job("waits", 0, pods=3, qos="BE")]
    result = spot_run(trace)
    spot = policy_summary(result)["spot"]
    assert spot["no_instance_type"] == 1  # 8 GPUs: no public instance has them
    assert spot["started"] == 0  # 3 instances at once (gang) from a pool of 2: never
    assert math.isfinite(result.series.x[-1])


def test_a_spot_run_repeats_exactly_for_a_seed():
    trace = [job(f"s{i}", 20 * i, duration=200 + 37 * i, qos="BE") for i in range(12)]

    def figures(seed):
        s = policy_summary(spot_run(trace, bids=(0.2, 0.9), seed=seed))["spot"]
        return s

    assert figures(3) == figures(3)


def test_the_report_shows_the_spot_jobs_and_the_prices():
    low, high = _names_with_bids()
    trace = [job(low, 0, duration=3600, qos="BE"), job(high, 600, duration=300, qos="BE")]
    result = spot_run(trace, bids=(0.2, 1.0), public=FOUR)
    summary = run_summary(
        results=[result],
        traces=trace,
        settings=Settings(),
        sources={"trace": "t"},
        nodes=1,
        gpus=1,
    )
    html = render(summary, [result])
    assert "<h2>Spot</h2>" in html and "Spot price" in html and "Queueing delay, spot jobs" in html
    assert summary["policies"][0]["spot"]["cost_cny"] in html
