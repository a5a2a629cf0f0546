"""Spot in the simulator: jobs of chosen QoS classes bid on a public pool instead of running on
a quota, and the live market's core (`apps.core.pricing.market_step`) moves the prices, starts
the bids it covers and reclaims the ones it no longer does, one step every `step` seconds of
virtual time, as the market's beat does.

The public pool is a node list (the 2026 spot-GPU trace's, say): nodes of one shape make one
instance type, its nodes its capacity. A spot job's pods each take one instance of the
smallest type that holds the pod; its bid, which the trace does not record, is a share of the
type's original price drawn per job (a stable hash of its name) from `bid_range`. A
reclaimed job keeps the work of its last checkpoint and bids again (AIMaster). What it
costs is billed as the product bills spot: every started instance-minute at the price in
force at the minute's start (`pricing.bill_minutes`, `minute_charge`).
"""

from __future__ import annotations

import random
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from apps.core.pricing import (
    MarketParams,
    PricePoint,
    SpotRequest,
    TypeMarket,
    bill_minutes,
    market_step,
    minute_charge,
    price_floor,
    price_for_minute,
    quantize_price,
)
from apps.scheduler.lifecycle import lost_gpu_seconds
from apps.simulator.trace import TraceNode

DEFAULT_GPU_HOUR = Decimal("10")  # CNY per GPU-hour of an instance, when no price is given
DEFAULT_CORE_HOUR = Decimal("0.1")  # CNY per vCPU-hour


@dataclass(frozen=True, slots=True)
class SpotType:
    name: str
    gpu: int
    cpu: int  # millicores
    memory: int  # MiB
    capacity: int  # instances (nodes of this shape)
    price: Decimal  # original price, CNY per instance-hour


@dataclass(frozen=True, slots=True)
class SpotPool:
    types: tuple[SpotType, ...]

    def type_for(self, *, gpu: int, cpu: int, memory: int) -> SpotType | None:
        """The type a pod bids on: of those whose instance holds it, the fewest GPUs, then
        the most instances (where a bidder has the best chance), then the cheapest."""
        fitting = [t for t in self.types if t.gpu >= gpu and t.cpu >= cpu and t.memory >= memory]
        return min(fitting, key=lambda t: (t.gpu, -t.capacity, t.price, t.name), default=None)


def spot_pool(
    nodes: Sequence[TraceNode],
    *,
    gpu_hour: Decimal = DEFAULT_GPU_HOUR,
    core_hour: Decimal = DEFAULT_CORE_HOUR,
) -> SpotPool:
    """One instance type per node shape, named after its GPU model and size."""
    counts: dict[tuple[str, int, int, int], int] = defaultdict(int)
    for n in nodes:
        counts[(n.model or ("gpu" if n.gpu else "cpu"), n.gpu, n.cpu, n.memory)] += 1
    types = []
    short: dict[tuple[str, int, int], int] = defaultdict(int)
    for model, gpu, cpu, _ in counts:
        short[(model, gpu, cpu)] += 1
    for (model, gpu, cpu, memory), count in sorted(counts.items()):
        name = f"{model}.{gpu}g{cpu // 1000}c"
        if short[(model, gpu, cpu)] > 1:  # shapes that differ only in memory
            name += f"{memory // 1024}g"
        price = quantize_price(gpu * gpu_hour + Decimal(cpu) / 1000 * core_hour)
        types.append(SpotType(name, gpu, cpu, memory, count, price))
    return SpotPool(tuple(types))


@dataclass(frozen=True, slots=True)
class SpotSettings:
    pool: SpotPool
    classes: frozenset[str] = frozenset()  # QoS classes that bid instead of using a quota
    step: float = 60.0  # seconds between market steps
    bid_range: tuple[float, float] = (0.3, 1.0)  # bid as a share of the original price
    params: MarketParams = field(default_factory=MarketParams)


@dataclass(slots=True)
class SpotJob:
    """A spot job as the market tracks it: `needs` as the market core takes them."""

    id: int
    gpus: int  # whole GPUs of all its pods (lost work counts them)
    needs: tuple[tuple[str, int, Decimal], ...]
    submitted: float
    started: float | None = None
    billed_until: float | None = None


@dataclass(slots=True)
class SpotFigures:
    reclaims: int = 0
    lost_gpu_seconds: float = 0.0
    cost: Decimal = Decimal(0)
    instance_minutes: int = 0
    unplaceable: int = 0  # jobs no instance type holds
    prices: dict[str, list[PricePoint]] = field(default_factory=dict)


class SpotMarket:
    """The public pool between steps: who bids, who runs, the prices and their history."""

    def __init__(self, settings: SpotSettings, *, seed: int, checkpoint_interval: float) -> None:
        self.pool = pool = settings.pool
        self.settings = settings
        self.interval = checkpoint_interval
        self.types = {t.name: t for t in pool.types}
        self.rng = random.Random(f"{seed}:spot")
        floor = settings.params.floor_ratio
        self.prices = {t.name: price_floor(t.price, floor) for t in pool.types}
        self.bidding: dict[int, SpotJob] = {}
        self.running: dict[int, SpotJob] = {}
        self.figures = SpotFigures(prices={t: [(0.0, p)] for t, p in self.prices.items()})

    def job(
        self, job_id: int, name: str, *, pods: int, gpu: int, cpu: int, memory: int, now: float
    ):
        """A spot job for a trace job, or None when no instance type holds its pods."""
        kind = self.pool.type_for(gpu=gpu, cpu=cpu, memory=memory)
        if kind is None:
            self.figures.unplaceable += 1
            return None
        low, high = self.settings.bid_range
        share = low + (high - low) * (zlib.crc32(name.encode()) / 0xFFFFFFFF)
        floor = price_floor(kind.price, self.settings.params.floor_ratio)
        bid = max(floor, quantize_price(kind.price * Decimal(str(round(share, 6)))))
        return SpotJob(job_id, gpu * pods, ((kind.name, pods, bid),), submitted=now)

    def bid(self, job: SpotJob) -> None:
        job.started = None
        self.bidding[job.id] = job

    def finish(self, job_id: int, now: float) -> None:
        job = self.running.pop(job_id)
        self._bill(job, now)

    @property
    def active(self) -> bool:
        return bool(self.bidding or self.running)

    def step(self, now: float) -> tuple[list[SpotJob], list[tuple[SpotJob, float, float]]]:
        """One market step: the jobs started, and the jobs reclaimed with the GPU-seconds
        they lost and the seconds of work their last checkpoint kept."""
        for job in self.running.values():
            self._bill(job, now)
        used: dict[str, int] = defaultdict(int)
        asked: dict[str, int] = defaultdict(int)
        for job in self.running.values():
            for t, n, _ in job.needs:
                used[t] += n
        for job in self.bidding.values():
            for t, n, _ in job.needs:
                asked[t] += n
        markets = [
            TypeMarket(
                instance_type=t.name,
                resource_type="ECS",
                original_price=t.price,
                capacity=t.capacity,
                payg_used=0,
                spot_used=used[t.name],
                bidding_demand=asked[t.name],
                price=self.prices[t.name],
            )
            for t in self.pool.types
        ]
        requests = [self._request(job, running=True) for job in self.running.values()]
        requests += [self._request(job, running=False) for job in self.bidding.values()]
        plan = market_step(
            markets, requests, [], params=self.settings.params, rng=self.rng, now=now
        )
        for t, price in plan.prices.items():
            if price != self.prices[t]:
                self.figures.prices[t].append((now, price))
            self.prices[t] = price
        reclaimed = []
        for reclaim in plan.reclaims:
            job = self.running.pop(reclaim.job_id)
            assert job.started is not None
            kept = 0.0
            if self.interval:
                kept = (now - job.started) // self.interval * self.interval
            lost = lost_gpu_seconds(
                gpus=job.gpus,
                started_at=job.started,
                last_checkpoint_at=job.started + kept if kept else None,
                now=now,
            )
            self.figures.reclaims += 1
            self.figures.lost_gpu_seconds += lost
            self.bid(job)
            reclaimed.append((job, lost, kept))
        started = []
        for start in plan.starts:
            job = self.bidding.pop(start.job_id)
            job.started = now
            self.running[job.id] = job
            started.append(job)
        return started, reclaimed

    def _request(self, job: SpotJob, *, running: bool) -> SpotRequest:
        return SpotRequest(
            job_id=job.id,
            needs=job.needs,
            running=running,
            submitted_at=job.submitted,
            aimaster=True,
            started_at=job.started if running else None,
        )

    def _bill(self, job: SpotJob, now: float) -> None:
        """Charge the minutes run since the last bill, each at the price at its start."""
        assert job.started is not None
        minutes = bill_minutes(job.started, now, already_billed_until=job.billed_until)
        for t, n, _ in job.needs:
            history = self.figures.prices[t]
            for minute in minutes:
                self.figures.cost += minute_charge(price_for_minute(history, minute)) * n
            self.figures.instance_minutes += len(minutes) * n
        job.billed_until = max(now, job.billed_until or now)
