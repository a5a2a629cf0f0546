"""The live market tick: read a snapshot from the database, plan with the pure core
(`apps.market.pricing.market_step`), apply the plan in one transaction.

Only public pay-as-you-go and spot jobs pass through here; quota jobs belong to the
scheduler. Every job write is a compare-and-set on the job's status (a job the user stopped
meanwhile is left alone), and a tick at or before the last one is a no-op.

Price history: a PricePoint is written for a type when its price changes, and at least every
PRICE_POINT_MAX_GAP even when it does not. The history is a step function (each price holds
until the next point), so the extra points carry no information; they keep the most recent
part of every chart, average and bill lookup short and show that the market is alive.
"""

from __future__ import annotations

import functools
import os
import random
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import NamedTuple

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import connection, transaction
from django.db.models import Count, Max, Min, Q

from apps.billing.services import pod_meters_open
from apps.cluster.models import InstanceType, ResourceType
from apps.core.errors import ApplicationError, ValidationFailed
from apps.core.perf import gc_paused
from apps.jobs.execution import pods_placed, pods_stopping
from apps.jobs.models import (
    Job,
    JobEvent,
    JobRole,
    JobStatus,
    Pod,
    PodStatus,
    ResourceSource,
    StatusTransition,
)
from apps.jobs.services import ALLOWED, job_event, resumed_events
from apps.market import pricing
from apps.market.models import MarketParameters, MarketState, PricePoint
from apps.market.selectors import LIVE_POD_STATUSES, market_usage, system_averages
from apps.scheduler.services import job_requeue_or_fail

PRICE_POINT_MAX_GAP = timedelta(minutes=10)
REASON_REFRESH_SECONDS = 60.0  # a reason whose quoted numbers moved is rewritten this often
RECLAIMABLE_STATUSES = (JobStatus.ENV_PREPARING, JobStatus.RUNNING, JobStatus.RESTARTING)
CHUNK = 2000  # ids per IN (...) list


# --- parameters ------------------------------------------------------------------------------


@transaction.atomic
def market_params_set(**values) -> MarketParameters:
    """Change the market's tuning (the cluster file's `[market]` table, or a script).

    Keys are MarketParams' fields: floor_ratio, smoothing, volatility, sensitivity,
    average_window_seconds. Raises ValidationFailed naming the bad ones.
    """
    known = {"floor_ratio", "smoothing", "volatility", "sensitivity", "average_window_seconds"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValidationFailed({name: ["is not a market parameter"] for name in unknown})
    row = MarketParameters.objects.select_for_update().filter(pk=1).first() or MarketParameters()
    for name, value in values.items():
        try:
            setattr(row, name, Decimal(str(value)) if name == "floor_ratio" else float(value))
        except (ValueError, ArithmeticError):
            raise ValidationFailed({name: [f"{value!r} is not a number"]}) from None
    try:
        row.full_clean()
    except DjangoValidationError as error:  # re-raised as ours, by field
        raise ValidationFailed({k: list(v) for k, v in error.message_dict.items()}) from None
    row.save()
    return row


def market_rng(*, now: datetime) -> random.Random:
    """The tick's random generator: seeded from MARKET_SEED and the tick's time when the
    seed is set (a run can be repeated exactly), from the OS otherwise."""
    seed = settings.MARKET_SEED
    return random.Random(f"{seed}@{now.timestamp()!r}") if seed else random.Random()


# --- snapshot ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TypeInfo:
    id: int
    name: str
    original: Decimal
    spot_enabled: bool


class RoleNeed(NamedTuple):
    """A role of a job that is waiting for the market: what it needs, and its bid."""

    role_id: int
    role_type: str
    pod_count: int
    instance_type: str
    bid: Decimal | None  # per hour; None for pay-as-you-go


@dataclass
class MarketSnapshot:
    now: datetime
    params: pricing.MarketParams
    markets: list[pricing.TypeMarket]
    spot: list[pricing.SpotRequest]
    payg: list[pricing.PaygRequest]
    averages: dict[str, Decimal]
    replay: dict[str, Decimal] | None
    types: dict[str, TypeInfo]  # every instance type, by name
    states: dict[int, MarketState]
    needs: dict[int, list[RoleNeed]]  # job id → roles, for the jobs that may start
    pending_reasons: dict[int, str]  # job id → stored pending reason, for the waiting jobs
    held: dict[int, str] = field(default_factory=dict)  # waiting outside the engine, and why


@gc_paused()
def market_snapshot(*, now: datetime) -> MarketSnapshot:
    """Read the public pool, the running spot jobs and the jobs waiting for the market."""
    params = MarketParameters.load().to_params()
    all_types = {
        t.name: t for t in InstanceType.objects.only(
            "id", "name", "resource_type", "price_per_hour", "public_capacity", "spot_enabled")
    }
    types = {name: TypeInfo(t.pk, name, t.price_per_hour, t.spot_enabled)
             for name, t in all_types.items()}
    names = {t.pk: t.name for t in all_types.values()}
    public = [t for t in all_types.values() if t.public_capacity > 0]
    states = MarketState.objects.in_bulk([t.pk for t in public])
    usage = market_usage()
    replay = _replay_prices(now)
    lingjun = [t for t in public if t.resource_type == ResourceType.LINGJUN]
    averages = system_averages(types=lingjun, now=now, window_seconds=params.average_window_seconds)
    markets = []
    for t in public:
        state, used = states.get(t.pk), usage.get(t.pk)
        markets.append(pricing.TypeMarket(
            instance_type=t.name, resource_type=t.resource_type, original_price=t.price_per_hour,
            capacity=t.public_capacity,
            payg_used=used.payg_used if used else 0, spot_used=used.spot_used if used else 0,
            bidding_demand=used.bidding_demand if used else 0,
            price=state.price_per_hour if state else _opening_price(t, params, replay),
        ))
    snapshot = MarketSnapshot(
        now=now, params=params, markets=markets, spot=_running_spot(names, types), payg=[],
        averages={names[i]: a for i, a in averages.items()}, replay=replay, types=types,
        states=states, needs={}, pending_reasons={},
    )
    _add_waiting(snapshot, names)
    return snapshot


def _opening_price(t: InstanceType, params: pricing.MarketParams, replay) -> Decimal:
    """A type's first price: the replayed one, else the floor (the market opens cheap and
    demand lifts it)."""
    if replay and t.name in replay:
        return replay[t.name]
    return pricing.price_floor(t.price_per_hour, params.floor_ratio)


def _running_spot(names: dict[int, str], types: dict[str, TypeInfo]) -> list[pricing.SpotRequest]:
    """Spot jobs holding live pods, each with what it holds per role and its bids (one
    grouped query over the live pods)."""
    held = Pod.objects.filter(
        status__in=LIVE_POD_STATUSES, job__resource_source=ResourceSource.SPOT,
        job__status__in=RECLAIMABLE_STATUSES, role__instance_type__isnull=False,
    ).values_list(
        "job_id", "role__instance_type_id", "role__spot_discount_limit",
        "role__spot_price_limit", "job__submitted_at", "job__enable_aimaster", "role_id",
    ).annotate(n=Count("id"), since=Min("started_at")).order_by("job_id", "role_id")
    jobs: dict[int, tuple] = {}
    needs: dict[int, list[tuple[str, int, Decimal]]] = defaultdict(list)
    started: dict[int, float] = {}
    for job_id, type_id, discount, per_minute, submitted_at, aimaster, _, count, since in held:
        name = names[type_id]
        jobs[job_id] = (submitted_at, aimaster)
        bid = _bid(types[name].original, discount, per_minute)
        needs[job_id].append((name, count, bid if bid is not None else Decimal(0)))
        if since is not None:
            started[job_id] = min(started.get(job_id, since.timestamp()), since.timestamp())
    return [
        pricing.SpotRequest(
            job_id=job_id, needs=tuple(needs[job_id]), running=True,
            submitted_at=submitted_at.timestamp(), aimaster=aimaster,
            started_at=started.get(job_id),
        )
        for job_id, (submitted_at, aimaster) in jobs.items()
    ]


def _add_waiting(snapshot: MarketSnapshot, names: dict[int, str]) -> None:
    """Bidding spot jobs and queuing pay-as-you-go jobs, read in one query of their roles;
    those in an AIMaster backoff or with a bid that cannot be read wait outside the engine
    (`held`)."""
    rows = JobRole.objects.filter(
        Q(job__status=JobStatus.BIDDING, job__resource_source=ResourceSource.SPOT)
        | Q(job__status=JobStatus.QUEUING, job__resource_source=ResourceSource.PUBLIC)
    ).order_by("job_id", "id").values_list(
        "job_id", "id", "role_type", "pod_count", "instance_type_id", "spot_discount_limit",
        "spot_price_limit", "job__resource_source", "job__submitted_at", "job__enable_aimaster",
        "job__pending_reason", "job__not_before")
    jobs: dict[int, tuple] = {}
    needs: dict[int, list[RoleNeed]] = defaultdict(list)
    untyped: set[int] = set()
    originals = {t.name: t.original for t in snapshot.types.values()}
    for (job_id, role_id, role_type, pods, type_id, discount, per_minute, source, submitted_at,
         aimaster, reason, not_before) in rows:
        jobs[job_id] = (source, submitted_at, aimaster, reason, not_before)
        name = names.get(type_id, "")
        if not name:
            untyped.add(job_id)
        bid = _bid(originals[name], discount, per_minute) \
            if name and source == ResourceSource.SPOT else None
        needs[job_id].append(RoleNeed(role_id, role_type, pods, name, bid))
    for job_id, (source, submitted_at, aimaster, reason, not_before) in jobs.items():
        snapshot.pending_reasons[job_id] = reason
        roles = needs[job_id]
        if not_before is not None and not_before > snapshot.now:
            again = "bids" if source == ResourceSource.SPOT else "queues"
            snapshot.held[job_id] = (
                f"AIMaster backoff: {again} again from {not_before:%H:%M:%S} UTC")
        elif job_id in untyped:
            snapshot.held[job_id] = "every role of a public or spot job needs an instance type"
        elif source == ResourceSource.PUBLIC:
            snapshot.needs[job_id] = roles
            snapshot.payg.append(pricing.PaygRequest(
                job_id, tuple((r.instance_type, r.pod_count) for r in roles), False,
                submitted_at.timestamp()))
        elif problem := _spot_problem(roles, snapshot.types):
            snapshot.held[job_id] = problem
        else:
            snapshot.needs[job_id] = roles
            snapshot.spot.append(pricing.SpotRequest(
                job_id=job_id, needs=tuple((r.instance_type, r.pod_count, r.bid) for r in roles),
                running=False, submitted_at=submitted_at.timestamp(), aimaster=aimaster,
            ))


@functools.lru_cache(maxsize=65536)
def _bid(original: Decimal, discount: Decimal | None, per_minute: Decimal | None) -> Decimal | None:
    """A role's bid limit per hour (bids are mostly a few discrete values: cached)."""
    try:
        return pricing.bid_limit_per_hour(original, discount=discount,
                                          price_limit_per_minute=per_minute)
    except pricing.MarketError:
        return None


def _spot_problem(roles: list[RoleNeed], types: dict[str, TypeInfo]) -> str:
    for role in roles:
        if role.bid is None:
            return f"{role.role_type}: set exactly one of SpotDiscountLimit and SpotPriceLimit"
        info = types.get(role.instance_type)
        if info is not None and not info.spot_enabled:
            return f"{role.instance_type} is no longer sold as spot"
    return ""


@functools.lru_cache(maxsize=4)
def _replay_series(path: str, mtime: float) -> dict[str, list[pricing.PricePoint]]:
    with open(path, encoding="utf-8", newline="") as lines:
        return pricing.load_replay_csv(lines)


def _replay_prices(now: datetime) -> dict[str, Decimal] | None:
    """Replay mode (MARKET_REPLAY_CSV): each recorded type's price in force at `now`. Types
    the file does not name, or not yet, keep following the model."""
    if not settings.MARKET_REPLAY_CSV:
        return None
    path = Path(settings.MARKET_REPLAY_CSV)
    if not path.is_absolute():
        path = Path(settings.BASE_DIR) / path
    series = _replay_series(str(path), os.stat(path).st_mtime)
    prices = {t: pricing.replay_price_at(points, now.timestamp()) for t, points in series.items()}
    return {t: p for t, p in prices.items() if p is not None}


# --- the tick --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepReport:
    skipped: bool = False
    prices: int = 0  # PricePoints written
    started: int = 0
    reclaimed: int = 0
    waiting: int = 0


@gc_paused()
def market_plan(*, snapshot: MarketSnapshot, rng: random.Random) -> pricing.MarketPlan:
    return pricing.market_step(
        snapshot.markets, snapshot.spot, snapshot.payg, params=snapshot.params, rng=rng,
        now=snapshot.now.timestamp(), averages=snapshot.averages, replay=snapshot.replay,
    )


@transaction.atomic
def market_step(*, now: datetime, rng: random.Random) -> StepReport:
    """One market tick. Call under the "market-step" lock; a tick at or before the last
    one changes nothing."""
    last = MarketState.objects.aggregate(last=Max("stepped_at"))["last"]
    if last is not None and now <= last:
        return StepReport(skipped=True)
    snapshot = market_snapshot(now=now)
    plan = market_plan(snapshot=snapshot, rng=rng)
    return market_apply(snapshot=snapshot, plan=plan)


@gc_paused()
def market_apply(*, snapshot: MarketSnapshot, plan: pricing.MarketPlan) -> StepReport:
    """Write a plan: prices, then reclaims (they free the stock the starts were planned
    with), then starts, then the waiting jobs' reasons. Run inside the tick's transaction."""
    now = snapshot.now
    points = _apply_prices(snapshot, plan.prices)
    reclaimed = sum(_apply_reclaim(r, now=now) for r in plan.reclaims)
    started = _apply_starts(snapshot, plan)
    waiting = {w.job_id: w.reason for w in plan.waiting} | snapshot.held
    _record_waiting(waiting, snapshot.pending_reasons, now=now)
    return StepReport(prices=points, started=started, reclaimed=reclaimed, waiting=len(waiting))


def _apply_prices(snapshot: MarketSnapshot, prices: dict[str, Decimal]) -> int:
    now = snapshot.now
    new, changed, points = [], [], []
    for name, price in prices.items():
        type_id = snapshot.types[name].id
        state = snapshot.states.get(type_id)
        if state is None:
            new.append(MarketState(instance_type_id=type_id, price_per_hour=price,
                                   stepped_at=now, recorded_at=now))
            points.append(PricePoint(instance_type_id=type_id, at=now, price_per_hour=price))
            continue
        if price != state.price_per_hour or now - state.recorded_at >= PRICE_POINT_MAX_GAP:
            points.append(PricePoint(instance_type_id=type_id, at=now, price_per_hour=price))
            state.recorded_at = now
        state.price_per_hour, state.stepped_at = price, now
        changed.append(state)
    MarketState.objects.bulk_create(new)
    if changed:  # one batched statement: bulk_update's CASE per row is slow for hundreds
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {MarketState._meta.db_table} SET price_per_hour = %s, stepped_at = %s, "
                "recorded_at = %s WHERE instance_type_id = %s",
                [(s.price_per_hour, s.stepped_at, s.recorded_at, s.pk) for s in changed],
            )
    PricePoint.objects.bulk_create(points, ignore_conflicts=True)
    return len(points)


def _apply_reclaim(reclaim: pricing.Reclaim, *, now: datetime) -> bool:
    """Preempt the job's live pods; AIMaster sends it back to Bidding, else it fails with
    the plan's ReasonCode (SpotPriceExceeded, SpotAveragePriceExceeded, SpotStockShortage)."""
    job = Job.objects.select_for_update().filter(
        pk=reclaim.job_id, status__in=RECLAIMABLE_STATUSES, resource_source=ResourceSource.SPOT
    ).first()
    if job is None:
        return False
    pods = list(Pod.objects.filter(job=job, status__in=LIVE_POD_STATUSES).select_related("role"))
    lost = sum(_lost_gpu_seconds(pod, job, now) for pod in pods)
    message = f"Spot instances reclaimed: {reclaim.reason}"
    Pod.objects.filter(pk__in=[p.pk for p in pods]).update(
        status=PodStatus.PREEMPTED, reason=reclaim.code, message=message, finished_at=now)
    pods_stopping(job=job, pods=pods, now=now, reason=message)
    job_event(job=job, kind="Reclaimed", message=f"{reclaim.code}: {reclaim.reason}", now=now)
    job_requeue_or_fail(job=job, now=now, cause=reclaim.code, message=message,
                        lost_gpu_seconds=lost, requeue_status=JobStatus.BIDDING)
    return True


def _lost_gpu_seconds(pod: Pod, job: Job, now: datetime) -> float:
    """GPU-seconds the pod computed since the job's last checkpoint (or its own start)."""
    if pod.started_at is None:
        return 0.0
    since = max(pod.started_at, job.last_checkpoint_at or pod.started_at)
    return pod.role.gpu * max((now - since).total_seconds(), 0.0)


def _apply_starts(snapshot: MarketSnapshot, plan: pricing.MarketPlan) -> int:
    """Start the planned jobs in bulk on the public pool (no node, neither In nor Not in
    Quota): their pods are created and metered, the jobs move to EnvPreparing.

    With node agents (EXECUTION_BACKEND "agent") the pods are created Pending and handed to
    `pods_placed`; an agent starts each process, and the job becomes Running when all run
    (billing counts from then). With "none" the pods run at once and the job goes straight
    on to Running: the same writes as `job_transition` twice, done for all jobs at once (a
    busy tick starts thousands of jobs, and per-job writes would take seconds)."""
    now = snapshot.now
    at_once = settings.EXECUTION_BACKEND != "agent"
    expected = {"spot": JobStatus.BIDDING, "payg": JobStatus.QUEUING}
    kinds = {s.job_id: s.kind for s in plan.starts}
    jobs = [
        job for ids in _chunks(list(kinds))
        for job in Job.objects.select_for_update().filter(pk__in=ids).only(
            "id", "job_id", "attempt", "status", "started_at")
        if job.status == expected[kinds[job.pk]]
    ]
    if not jobs:
        return 0
    _check_transitions({j.status for j in jobs}, at_once=at_once)
    pods = [
        Pod(job_id=job.pk, role_id=role.role_id, index=i, attempt=job.attempt,
            pod_id=f"{job.job_id}-{role.role_type.lower()}-{i}-a{job.attempt}",
            status=PodStatus.RUNNING if at_once else PodStatus.PENDING,
            started_at=now if at_once else None)
        for job in jobs for role in snapshot.needs[job.pk] for i in range(role.pod_count)
    ]
    Pod.objects.bulk_create(pods, batch_size=CHUNK)
    pod_meters_open(pod_ids=[p.pk for p in pods])
    history, events = [], []
    statuses: dict[tuple[str, str, str], list[int]] = defaultdict(list)  # → job ids
    for job in jobs:
        spot = kinds[job.pk] == "spot"
        why = _bid_accepted(snapshot, plan, job.pk) if spot else "Started on the public pool"
        code = "JobBidAccepted" if spot else "JobDequeued"
        history.append(StatusTransition(
            job_id=job.pk, status=JobStatus.ENV_PREPARING, reason_code=code,
            reason_message=why, started_at=now, ended_at=now if at_once else None))
        if at_once:
            history.append(StatusTransition(
                job_id=job.pk, status=JobStatus.RUNNING, reason_code="JobRunning",
                reason_message="All pods are running", started_at=now))
            statuses[JobStatus.RUNNING, "JobRunning", "All pods are running"].append(job.pk)
        else:
            statuses[JobStatus.ENV_PREPARING, code, why].append(job.pk)
        events.append(JobEvent(job_id=job.pk, kind="BidAccepted" if spot else "Started",
                               message=why, at=now))
    events += resumed_events(jobs=jobs, now=now)
    ids = [j.pk for j in jobs]
    for chunk in _chunks(ids):
        StatusTransition.objects.filter(job_id__in=chunk, ended_at__isnull=True).update(
            ended_at=now)
        Job.objects.filter(pk__in=chunk, started_at__isnull=True).update(started_at=now)
    for (status, code, message), job_ids in statuses.items():
        for chunk in _chunks(job_ids):
            Job.objects.filter(pk__in=chunk).update(
                status=status, reason_code=code, reason_message=message,
                status_changed_at=now, pending_reason="", queue_position=None,
                queue_size=None, not_before=None)
    StatusTransition.objects.bulk_create(history, batch_size=CHUNK)
    JobEvent.objects.bulk_create(events, batch_size=CHUNK)
    if not at_once:
        for job in jobs:
            job.status = JobStatus.ENV_PREPARING
        pods_placed(jobs=jobs, now=now)
    return len(jobs)


def _check_transitions(statuses: set[str], *, at_once: bool) -> None:
    """Refuse the bulk writes if the transition map no longer allows them."""
    steps = {(s, JobStatus.ENV_PREPARING) for s in statuses}
    if at_once:
        steps.add((JobStatus.ENV_PREPARING, JobStatus.RUNNING))
    for status, target in steps:
        if target not in ALLOWED[status]:
            raise ApplicationError("InvalidJobStatus", f"a {status} job cannot become {target}")


def _bid_accepted(snapshot: MarketSnapshot, plan: pricing.MarketPlan, job_id: int) -> str:
    """"Bid accepted at ¥0.64/h (market ¥0.30/h)"; per role when roles bid differently."""
    roles = snapshot.needs[job_id]
    terms = {(r.bid, r.instance_type) for r in roles}
    if len(terms) == 1:
        role = roles[0]
        market = plan.prices.get(role.instance_type)
        return f"Bid accepted at {_yuan(role.bid)}/h (market {_yuan(market)}/h)"
    parts = [
        f"{r.role_type} {_yuan(r.bid)}/h (market {_yuan(plan.prices.get(r.instance_type))}/h "
        f"for {r.instance_type})"
        for r in roles
    ]
    return "Bid accepted: " + "; ".join(parts)


def _yuan(price: Decimal | None) -> str:
    """¥0.3/h → "¥0.30": at most four decimals, at least two (as the pricing core writes)."""
    if price is None:
        return "—"
    text = f"{price:.4f}".rstrip("0")
    return f"¥{text}" if len(text.partition(".")[2]) >= 2 else f"¥{price:.2f}"


def _record_waiting(waiting: dict[int, str], stored: dict[int, str], *, now: datetime) -> None:
    """Store each waiting job's reason, writing only what changed; a job that left Bidding
    or Queuing meanwhile is not touched.

    Reasons quote live prices, so in a busy market nearly all of them change every tick.
    A reason that names a different condition (price → stock, a first reason) is written at
    once; one whose numbers alone moved is refreshed in the job's turn, about once every
    REASON_REFRESH_SECONDS, which spreads the writes over the ticks. On PostgreSQL they go
    in one UPDATE … FROM unnest()."""
    changes = {}
    for job_id, reason in waiting.items():
        reason, old = reason[:256], stored.get(job_id)
        if old != reason and (_refresh_due(job_id, now) or _shape(old) != _shape(reason)):
            changes[job_id] = reason
    if not changes:
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Job._meta.db_table} AS j SET pending_reason = v.reason "
                "FROM unnest(%s::bigint[], %s::text[]) AS v(id, reason) "
                "WHERE j.id = v.id AND j.status IN (%s, %s)",
                [list(changes), list(changes.values()), JobStatus.BIDDING, JobStatus.QUEUING],
            )
        return
    by_reason: dict[str, list[int]] = defaultdict(list)
    for job_id, reason in changes.items():
        by_reason[reason].append(job_id)
    for reason, ids in by_reason.items():
        for chunk in _chunks(ids):
            Job.objects.filter(
                pk__in=chunk, status__in=(JobStatus.BIDDING, JobStatus.QUEUING)
            ).update(pending_reason=reason)


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@functools.lru_cache(maxsize=65536)
def _shape(reason: str | None) -> str | None:
    """A reason with its numbers masked: what condition it names, not the current figures."""
    return None if reason is None else _NUMBER.sub("#", reason)


def _refresh_due(job_id: int, now: datetime) -> bool:
    """Each job's turn to refresh its figures comes once every REASON_REFRESH_SECONDS."""
    interval = settings.MARKET_STEP_INTERVAL
    turns = max(1, round(REASON_REFRESH_SECONDS / interval))
    return job_id % turns == int(now.timestamp() // interval) % turns


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]
