"""How fast is one market tick, and one minute of billing?

    .venv/bin/python benchmarks/market_step.py

Goals: `market_step` over 200 instance types and 50,000 spot requests in ≤ 1 s; charges for
10,000 running pods for one minute in ≤ 1 s. Seeded: every run builds the same market.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps.core.pricing import (  # noqa: E402
    MarketParams,
    PaygRequest,
    SpotRequest,
    TypeMarket,
    bill_minutes,
    market_step,
    minute_charge,
    price_for_minute,
    system_average,
)

SEED = 2026
TYPES = 200
SPOT_REQUESTS = 50_000
PAYG_REQUESTS = 2_000
PODS = 10_000
NOW = 1_700_000_000.0


def build_market(rng: random.Random):
    # every fourth type is Lingjun
    names = [f"ecs.b{i:03d}.xlarge" if i % 4 else f"ml.b{i:03d}.8xlarge" for i in range(TYPES)]
    originals = {t: Decimal(rng.randint(5_000, 400_000)) / 10_000 for t in names}
    running_share = 0.4  # of spot requests, the rest are bidding
    spot, spot_used, bidding = [], Counter(), Counter()
    for job_id in range(1, SPOT_REQUESTS + 1):
        t = rng.choice(names)
        instances = rng.choice((1, 1, 1, 2, 4, 8))
        bid = (originals[t] * Decimal(rng.randint(10, 100)) / 100).quantize(Decimal("0.0001"))
        running = rng.random() < running_share
        (spot_used if running else bidding)[t] += instances
        spot.append(
            SpotRequest(
                job_id=job_id,
                instance_type=t,
                instances=instances,
                bid=bid,
                running=running,
                submitted_at=NOW - rng.uniform(0, 86_400),
                aimaster=rng.random() < 0.5,
            )
        )
    payg_used = {t: rng.randint(0, 200) for t in names}
    markets = [
        TypeMarket(
            instance_type=t,
            resource_type="Lingjun" if t.startswith("ml.") else "ECS",
            original_price=originals[t],
            capacity=payg_used[t] + spot_used[t] + rng.randint(0, 300),
            payg_used=payg_used[t],
            spot_used=spot_used[t],
            bidding_demand=bidding[t],
            price=(originals[t] * Decimal("0.3")).quantize(Decimal("0.0001")),
        )
        for t in names
    ]
    payg = [
        PaygRequest(
            SPOT_REQUESTS + i,
            ((rng.choice(names), rng.choice((1, 2, 4, 16))),),
            False,
            NOW - rng.uniform(0, 3600),
        )
        for i in range(1, PAYG_REQUESTS + 1)
    ]
    histories = {
        m.instance_type: [(NOW - 86_400 + 60 * k, m.price) for k in range(1440)] for m in markets
    }
    averages = {
        m.instance_type: system_average(histories[m.instance_type], now=NOW, window=3600)
        for m in markets
        if m.resource_type == "Lingjun"
    }
    return markets, spot, payg, histories, averages


def bench_market_step(markets, spot, payg, averages) -> None:
    params = MarketParams()
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        plan = market_step(
            markets, spot, payg, params=params, rng=random.Random(SEED), now=NOW, averages=averages
        )
        timings.append(time.perf_counter() - started)
    reclaims = Counter(r.code for r in plan.reclaims)
    kinds = Counter(s.kind for s in plan.starts)
    print(f"market_step: {TYPES} types, {len(spot):,} spot + {len(payg):,} payg requests")
    print(f"  time: best {min(timings):.3f} s, worst {max(timings):.3f} s (goal ≤ 1 s)")
    print(f"  starts: {kinds['spot']:,} spot, {kinds['payg']:,} payg")
    print(f"  waiting: {len(plan.waiting):,}")
    print("  reclaims: " + ", ".join(f"{code} {n:,}" for code, n in sorted(reclaims.items())))


def bench_billing(histories, rng: random.Random) -> None:
    types = list(histories)
    pods = [(rng.choice(types), NOW - rng.uniform(60, 86_000)) for _ in range(PODS)]
    started = time.perf_counter()
    total, lines = Decimal(0), 0
    for instance_type, pod_start in pods:
        for minute in bill_minutes(pod_start, NOW, already_billed_until=NOW - 60):
            total += minute_charge(price_for_minute(histories[instance_type], minute))
            lines += 1
    elapsed = time.perf_counter() - started
    print(f"billing: {PODS:,} running pods, one minute, 1,440-point price histories")
    print(f"  time: {elapsed:.3f} s (goal ≤ 1 s); {lines:,} minute lines, ¥{total} in all")


def main() -> None:
    rng = random.Random(SEED)
    started = time.perf_counter()
    markets, spot, payg, histories, averages = build_market(rng)
    print(f"setup: {time.perf_counter() - started:.2f} s (not measured below)")
    bench_market_step(markets, spot, payg, averages)
    bench_billing(histories, rng)


if __name__ == "__main__":
    main()
