"""The live market tick: read a snapshot from the database and publish the tick's prices,
plan with the pure core (`apps.core.pricing.market_step`), apply the plan, all in one
transaction.

A spot job whose bid is below its type's asked price can only wait, so the snapshot does not
read it (the database filters bids against the published prices) and nothing writes its
reason: the job pages show it from the market's published quotes.

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
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import cast

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import connection, transaction
from django.db.models import (
    BooleanField,
    Case,
    Count,
    DecimalField,
    ExpressionWrapper,
    F,
    Max,
    Min,
    Q,
    QuerySet,
    Value,
    When,
)

from apps.cluster.models import InstanceType, MarketParameters, ResourceType
from apps.core import pricing
from apps.core.db import Epoch, db_datetime, id_chunks, rows_insert, transaction_lock
from apps.core.errors import ValidationFailed
from apps.core.perf import gc_paused
from apps.core.words import say
from apps.jobs.execution import PodsStop, jobs_winding_down, pods_placed, pods_stopping_bulk
from apps.jobs.models import (
    LIVE_POD_STATUSES,
    ElasticSpotSpec,
    Job,
    JobEvent,
    JobRole,
    JobStatus,
    Pod,
    PodStatus,
    ResourceSource,
    pod_instance_type,
)
from apps.jobs.services import Via, jobs_transition_bulk
from apps.jobs.signals import paid_pods_created
from apps.market.models import MarketState, PricePoint
from apps.market.selectors import (
    MARKET_SOURCES,
    RoleNeed,
    SpotWait,
    bidding_demand,
    held_reason,
    role_fallbacks,
    spot_fallbacks,
    spot_needs,
    system_averages,
)
from apps.scheduler.services import (
    Interruption,
    jobs_requeue_or_fail,
    pods_lost_gpu_seconds,
    resumed_events,
)

PRICE_POINT_MAX_GAP = timedelta(minutes=10)
RECLAIMABLE_STATUSES = (JobStatus.ENV_PREPARING, JobStatus.RUNNING, JobStatus.RESTARTING)


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


def market_price_follow_original(
    *, instance_type_id: int, old: Decimal | None, new: Decimal, at: datetime
) -> None:
    """An admin changed the type's original price from `old` to `new` at `at` (the Django
    admin, the cluster file): its market price keeps its share of the original from that
    moment (`pricing.price_following_original`), in the history too, so the discount bids
    running on it hold as they did and its spot minutes after `at` are billed at the moved
    price. In the caller's transaction, after any market tick in flight has committed (a
    tick that read the old price would write it back over the moved one)."""
    if old is None:
        return  # a new type: the market opens it at its floor
    transaction_lock("market-step", wait=True)
    state = (
        MarketState.objects.select_for_update()
        .select_related("instance_type")
        .filter(instance_type_id=instance_type_id)
        .first()
    )
    if state is None:
        return  # not priced yet
    floor_ratio = MarketParameters.load().to_params().floor_ratio
    price = pricing.price_following_original(
        state.price_per_hour, old_original=old, new_original=new, floor_ratio=floor_ratio
    )
    average = state.average_per_hour
    if average is not None:
        average = pricing.price_following_original(
            average, old_original=old, new_original=new, floor_ratio=floor_ratio
        )
    resource_type = cast(pricing.ResourceType, state.instance_type.resource_type)
    asked, _ = pricing.asked_price(resource_type, price, average)
    MarketState.objects.filter(pk=state.pk).update(
        price_per_hour=price, average_per_hour=average, asked_per_hour=asked, recorded_at=at
    )
    PricePoint.objects.update_or_create(
        instance_type_id=instance_type_id, at=at, defaults={"price_per_hour": price}
    )


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
    resource_type: str


@dataclass
class MarketSnapshot:
    now: datetime
    params: pricing.MarketParams
    markets: list[pricing.TypeMarket]
    prices: dict[str, Decimal]  # the tick's new prices, published already
    spot: list[pricing.SpotRequest]
    payg: list[pricing.PaygRequest]
    averages: dict[str, Decimal]
    types: dict[str, TypeInfo]  # every instance type, by name
    states: dict[int, MarketState]
    needs: dict[int, list[RoleNeed]] = field(default_factory=dict)  # jobs that may start
    # queuing pay-as-you-go jobs: the (reason, code) they show now
    pending_reasons: dict[int, tuple[str, str]] = field(default_factory=dict)
    held: dict[int, SpotWait] = field(default_factory=dict)  # waiting outside the engine, why
    headroom: dict[str, int] | None = None  # see pricing.spot_headroom
    points: int = 0  # PricePoints written


@gc_paused()
def market_snapshot(*, now: datetime, rng: random.Random) -> MarketSnapshot:
    """Read the public pool and the running spot jobs, draw the tick's prices and publish
    them, then read the jobs that may start at those prices. Run inside the tick's
    transaction.

    Publishing first lets the database leave out every spot job that can only wait: a role
    bids below its type's asked price (`pricing.market_step` says why leaving it out changes
    no start or reclaim), or needs more instances than the tick can free for spot
    (`pricing.spot_headroom`). Its reason is shown from the published quotes
    (`selectors.waiting_reasons`), so a tick neither reads nor writes these jobs."""
    params = MarketParameters.load().to_params()
    all_types = {
        t.name: t
        for t in InstanceType.objects.only(
            "id", "name", "resource_type", "price_per_hour", "public_capacity", "spot_enabled"
        )
    }
    types = {
        name: TypeInfo(t.pk, name, t.price_per_hour, t.spot_enabled, t.resource_type)
        for name, t in all_types.items()
    }
    names = {t.pk: t.name for t in all_types.values()}
    payg_used, spot_used, running = _live_pods(names, types)
    # A type whose public capacity went to 0 under running jobs stays in the market at
    # capacity 0 until they are gone: the spot jobs on it are reclaimed as over capacity.
    public = [
        t for t in all_types.values() if t.public_capacity > 0 or payg_used[t.pk] or spot_used[t.pk]
    ]
    states = MarketState.objects.in_bulk([t.pk for t in public])
    demand = bidding_demand()
    replay = _replay_prices(now)
    lingjun = [t for t in public if t.resource_type == ResourceType.LINGJUN]
    averages = system_averages(types=lingjun, now=now, window_seconds=params.average_window_seconds)
    markets = []
    for t in public:
        state = states.get(t.pk)
        markets.append(
            pricing.TypeMarket(
                instance_type=t.name,
                resource_type=cast(pricing.ResourceType, t.resource_type),  # its choices
                original_price=t.price_per_hour,
                capacity=t.public_capacity,
                payg_used=payg_used[t.pk],
                spot_used=spot_used[t.pk],
                bidding_demand=demand.get(t.pk, 0),
                price=state.price_per_hour if state else _opening_price(t, params, replay),
                spot_enabled=t.spot_enabled,
            )
        )
    snapshot = MarketSnapshot(
        now=now,
        params=params,
        markets=markets,
        prices=pricing.market_prices(markets, params=params, rng=rng, replay=replay),
        spot=running,
        payg=[],
        averages={names[i]: a for i, a in averages.items()},
        types=types,
        states=states,
    )
    queuing = _waiting_rows(
        JobRole.objects.filter(
            job__status=JobStatus.QUEUING, job__resource_source=ResourceSource.PUBLIC
        )
    )
    snapshot.headroom = pricing.spot_headroom(
        markets,
        running,
        prices=snapshot.prices,
        averages=snapshot.averages,
        payg_waiting=bool(queuing),
    )
    snapshot.points = _publish_prices(snapshot)
    _add_waiting(snapshot, names, queuing)
    return snapshot


def _opening_price(t: InstanceType, params: pricing.MarketParams, replay) -> Decimal:
    """A type's first price: the replayed one, else the floor (the market opens cheap and
    demand lifts it)."""
    if replay and t.name in replay:
        return replay[t.name]
    return pricing.price_floor(t.price_per_hour, params.floor_ratio)


def _live_pods(
    names: dict[int, str], types: dict[str, TypeInfo]
) -> tuple[Counter[int], Counter[int], list[pricing.SpotRequest]]:
    """The live pods of market jobs, in one query grouped by job and role: instances held
    by pay-as-you-go and by spot per type id, and the running spot jobs with what each
    holds per role and its bids."""
    query = (
        Pod.objects.filter(
            status__in=LIVE_POD_STATUSES,
            job__resource_source__in=MARKET_SOURCES,
        )
        .annotate(submitted=Epoch("job__submitted_at"), type_id=pod_instance_type())
        .filter(type_id__isnull=False)
        .values_list(
            "job_id",
            "role_id",
            "type_id",
            "role__instance_type_id",
            "job__resource_source",
            "job__status",
            "role__spot_discount_limit",
            "role__spot_price_limit",
            "submitted",
            "job__enable_aimaster",
        )
        .annotate(n=Count("id"), since=Epoch(Min("started_at")))
        .order_by("job_id", "role_id")
    )
    payg_used: Counter[int] = Counter()
    spot_used: Counter[int] = Counter()
    jobs: dict[int, tuple] = {}
    needs: dict[int, list[tuple[str, int, Decimal]]] = defaultdict(list)
    started: dict[int, float] = {}
    rows = list(query)
    # a role running on one of its ElasticSpotSpecs is held to that type's own bid
    fallen = {(role_id, t) for _, role_id, t, own, source, *_ in rows if t != own}
    limits = _fallback_limits({role_id for role_id, _ in fallen})
    for (
        job_id,
        role_id,
        type_id,
        own_type_id,
        source,
        status,
        discount,
        per_minute,
        submitted,
        aimaster,
        count,
        since,
    ) in rows:
        if source == ResourceSource.PUBLIC:
            payg_used[type_id] += count
            continue
        spot_used[type_id] += count
        if status not in RECLAIMABLE_STATUSES:
            continue  # stopping: its pods still hold stock, but nothing is left to reclaim
        name = names[type_id]
        jobs[job_id] = (submitted, aimaster)
        if type_id != own_type_id:
            discount, per_minute = limits.get((role_id, type_id), (None, None))
        bid = _bid(types[name].original, discount, per_minute)
        needs[job_id].append((name, count, bid if bid is not None else Decimal(0)))
        if since is not None:
            started[job_id] = min(started.get(job_id, since), since)
    running = [
        pricing.SpotRequest(
            job_id=job_id,
            needs=tuple(needs[job_id]),
            running=True,
            submitted_at=submitted,
            aimaster=aimaster,
            started_at=started.get(job_id),
        )
        for job_id, (submitted, aimaster) in jobs.items()
    ]
    return payg_used, spot_used, running


def _fallback_limits(role_ids: set[int]) -> dict[tuple[int, int], tuple]:
    """(SpotDiscountLimit, SpotPriceLimit) of each (role id, instance type id) among the
    roles' ElasticSpotSpecs. One query."""
    if not role_ids:
        return {}
    return {
        (role_id, type_id): (discount, per_minute)
        for role_id, type_id, discount, per_minute in ElasticSpotSpec.objects.filter(
            role_id__in=role_ids
        ).values_list("role_id", "instance_type_id", "spot_discount_limit", "spot_price_limit")
    }


# A role's bid (`pricing.bid_limit_per_hour`) is its raw bid (original × SpotDiscountLimit, or
# SpotPriceLimit × 60) rounded half up onto the 0.0001 grid, and asked prices lie on that
# grid, so the rounded bid is below the asked price exactly when the raw bid is below it by
# more than half a quantum. The extra 1e-9 absorbs SQLite's float arithmetic; raw bids have
# at most 8 decimals. tests/integration/test_market_bids.py holds the two readings together.
_BELOW_MARGIN = pricing.PRICE_QUANTUM / 2 + Decimal("0.000000001")


def _with_blocked(roles: QuerySet[JobRole]) -> QuerySet[JobRole]:
    """The roles, each annotated `blocked`: true when it bids below its type's published
    asked price (MarketState.asked_per_hour) or needs more instances than its headroom;
    null when it has no type, no readable bid or no published quote (its job is then read
    and judged in Python)."""
    raw_bid = Case(
        When(
            spot_discount_limit__isnull=False,
            then=F("instance_type__price_per_hour") * F("spot_discount_limit"),
        ),
        default=F("spot_price_limit") * Value(Decimal(60)),
        output_field=DecimalField(max_digits=24, decimal_places=10),
    )
    asked = F("instance_type__market_state__asked_per_hour") - Value(_BELOW_MARGIN)
    return roles.annotate(raw_bid=raw_bid).annotate(
        blocked=ExpressionWrapper(
            Q(raw_bid__lt=ExpressionWrapper(asked, output_field=DecimalField()))
            | Q(pod_count__gt=F("instance_type__market_state__headroom")),
            output_field=BooleanField(),
        )
    )


def _waiting_rows(roles: QuerySet[JobRole]) -> list[tuple]:
    """What the tick needs of waiting jobs' roles, ordered by job and role."""
    return list(
        roles.annotate(submitted=Epoch("job__submitted_at"))
        .order_by("job_id", "id")
        .values_list(
            "job_id",
            "id",
            "role_type",
            "pod_count",
            "instance_type_id",
            "spot_discount_limit",
            "spot_price_limit",
            "job__resource_source",
            "submitted",
            "job__enable_aimaster",
            "job__pending_reason",
            "job__not_before",
            "job__sub_status",
            "job__display_name",
            "job__job_id",
        )
    )


def _add_waiting(snapshot: MarketSnapshot, names: dict[int, str], queuing: list[tuple]) -> None:
    """Bidding spot jobs that may start at the published prices, read by their roles, and
    the queuing pay-as-you-go jobs' roles (`queuing`, read before the prices were
    published); those in an AIMaster backoff or with a bid that cannot be read wait outside
    the engine (`held`). A bidding job is read when one of its roles is not blocked (nearly
    all jobs have one role; a job with another role blocked is read and waits, as the
    engine says). A role with ElasticSpotSpecs is never left out: it may start on any of
    its types."""
    ready = (
        _with_blocked(
            JobRole.objects.filter(
                job__status=JobStatus.BIDDING,
                job__resource_source=ResourceSource.SPOT,
            )
        )
        .filter(Q(blocked=False) | Q(blocked__isnull=True) | Q(elastic_spot_specs__isnull=False))
        .values("job_id")
    )
    rows = _waiting_rows(JobRole.objects.filter(job_id__in=ready)) + queuing
    winding = jobs_winding_down(
        Job.objects.filter(
            status__in=(JobStatus.BIDDING, JobStatus.QUEUING),
            resource_source__in=(ResourceSource.SPOT, ResourceSource.PUBLIC),
        )
    )
    jobs: dict[int, tuple] = {}
    needs: dict[int, list[RoleNeed]] = defaultdict(list)
    originals = {t.name: t.original for t in snapshot.types.values()}
    not_spot = {t.name for t in snapshot.types.values() if not t.spot_enabled}
    fallbacks = role_fallbacks(role_ids=[row[1] for row in rows if row[7] == ResourceSource.SPOT])
    for (
        job_id,
        role_id,
        role_type,
        pods,
        type_id,
        discount,
        per_minute,
        source,
        submitted,
        aimaster,
        reason,
        not_before,
        stored_code,
        display_name,
        public_id,
    ) in rows:
        label = f"{display_name} ({public_id})"  # as the scheduler's preemptions name a job
        jobs[job_id] = (source, submitted, aimaster, (reason, stored_code), not_before, label)
        name = names.get(type_id, "")
        bid = (
            _bid(originals[name], discount, per_minute)
            if name and source == ResourceSource.SPOT
            else None
        )
        more = fallbacks.get(role_id, ())
        needs[job_id].append(RoleNeed(role_id, role_type, pods, name, bid, more))
    for job_id, (source, submitted, aimaster, shown, not_before, job_name) in jobs.items():
        roles = needs[job_id]
        if source == ResourceSource.PUBLIC:
            snapshot.pending_reasons[job_id] = shown
        held = held_reason(
            spot=source == ResourceSource.SPOT,
            not_before=not_before,
            roles=roles,
            not_spot=not_spot,
            now=snapshot.now,
            winding_down=winding.get(job_id, 0),
        )
        if held.reason:
            snapshot.held[job_id] = held
        elif source == ResourceSource.PUBLIC:
            snapshot.needs[job_id] = roles
            snapshot.payg.append(
                pricing.PaygRequest(
                    job_id,
                    tuple((r.instance_type, r.pod_count) for r in roles),
                    False,
                    submitted,
                    job_name,
                )
            )
        else:
            snapshot.needs[job_id] = roles
            snapshot.spot.append(
                pricing.SpotRequest(
                    job_id=job_id,
                    needs=spot_needs(roles),
                    fallbacks=spot_fallbacks(roles),
                    running=False,
                    submitted_at=submitted,
                    aimaster=aimaster,
                )
            )


@functools.lru_cache(maxsize=65536)
def _bid(original: Decimal, discount: Decimal | None, per_minute: Decimal | None) -> Decimal | None:
    """A role's bid limit per hour (bids are mostly a few discrete values: cached)."""
    try:
        return pricing.bid_limit_per_hour(
            original, discount=discount, price_limit_per_minute=per_minute
        )
    except pricing.MarketError:
        return None


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
    waiting: int = 0  # jobs the tick read that still wait (hopeless bids are not read)


@gc_paused()
def market_plan(*, snapshot: MarketSnapshot) -> pricing.MarketPlan:
    return pricing.market_step(
        snapshot.markets,
        snapshot.spot,
        snapshot.payg,
        params=snapshot.params,
        now=snapshot.now.timestamp(),
        averages=snapshot.averages,
        prices=snapshot.prices,  # drawn and published by market_snapshot
    )


@transaction.atomic
def market_step(*, now: datetime, rng: random.Random) -> StepReport:
    """One market tick. Call under the "market-step" lock; a tick at or before the last
    one, or while another is in its transaction (`transaction_lock`: the Redis lock
    expired under a frozen holder), changes nothing."""
    if not transaction_lock("market-step"):
        return StepReport(skipped=True)
    last = MarketState.objects.aggregate(last=Max("stepped_at"))["last"]
    if last is not None and now <= last:
        return StepReport(skipped=True)
    snapshot = market_snapshot(now=now, rng=rng)
    plan = market_plan(snapshot=snapshot)
    return market_apply(snapshot=snapshot, plan=plan)


@gc_paused()
def market_apply(*, snapshot: MarketSnapshot, plan: pricing.MarketPlan) -> StepReport:
    """Write a plan (its prices are published already): reclaims first (they free the
    stock the starts were planned with), then starts, the stock left for spot, and the
    reasons of the queuing pay-as-you-go jobs. Run inside the tick's transaction."""
    now = snapshot.now
    reclaimed = _apply_reclaims(plan.reclaims, now=now)
    started = _apply_starts(snapshot, plan)
    _record_free(snapshot, plan.stock)
    waiting = {w.job_id: (w.reason, w.code) for w in plan.waiting} | {
        job_id: (held.reason, held.code) for job_id, held in snapshot.held.items()
    }
    _record_waiting(
        {
            job_id: reason
            for job_id, reason in waiting.items()
            if job_id in snapshot.pending_reasons
        },
        snapshot.pending_reasons,
    )
    return StepReport(
        prices=snapshot.points, started=started, reclaimed=reclaimed, waiting=len(waiting)
    )


def _publish_prices(snapshot: MarketSnapshot) -> int:
    """Write each type's new price, its system average (Lingjun) and asked price to its
    MarketState, and a PricePoint where the history needs one. Returns the points written."""
    now = snapshot.now
    new, changed, points = [], [], []
    for name, price in snapshot.prices.items():
        info = snapshot.types[name]
        average = (
            snapshot.averages.get(name) if info.resource_type == ResourceType.LINGJUN else None
        )
        asked, _ = pricing.asked_price(
            cast(pricing.ResourceType, info.resource_type), price, average
        )
        state = snapshot.states.get(info.id)
        if state is None:
            state = MarketState(instance_type_id=info.id, recorded_at=now)
            snapshot.states[info.id] = state
            new.append(state)
            points.append(PricePoint(instance_type_id=info.id, at=now, price_per_hour=price))
        else:
            changed.append(state)
            if price != state.price_per_hour or now - state.recorded_at >= PRICE_POINT_MAX_GAP:
                points.append(PricePoint(instance_type_id=info.id, at=now, price_per_hour=price))
                state.recorded_at = now
        state.price_per_hour, state.average_per_hour, state.asked_per_hour = price, average, asked
        state.headroom = None if snapshot.headroom is None else snapshot.headroom.get(name)
        state.stepped_at = now
    MarketState.objects.bulk_create(new)
    if changed:  # one batched statement: bulk_update's CASE per row is slow for hundreds
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {MarketState._meta.db_table} SET price_per_hour = %s, "
                "average_per_hour = %s, asked_per_hour = %s, headroom = %s, stepped_at = %s, "
                "recorded_at = %s WHERE instance_type_id = %s",
                [
                    (
                        s.price_per_hour,
                        s.average_per_hour,
                        s.asked_per_hour,
                        s.headroom,
                        db_datetime(s.stepped_at),
                        db_datetime(s.recorded_at),
                        s.pk,
                    )
                    for s in changed
                ],
            )
    PricePoint.objects.bulk_create(points, ignore_conflicts=True)
    return len(points)


def _record_free(snapshot: MarketSnapshot, stock: dict[str, int]) -> None:
    """Each type's spot stock after the tick, where it changed (bidders' reasons quote it)."""
    changed = []
    for name, free in stock.items():
        state = snapshot.states[snapshot.types[name].id]
        if state.free != free:
            state.free = free
            changed.append((free, state.pk))
    if changed:
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {MarketState._meta.db_table} SET free = %s WHERE instance_type_id = %s",
                changed,
            )


def _apply_reclaims(reclaims: tuple[pricing.Reclaim, ...], *, now: datetime) -> int:
    """Preempt the reclaimed jobs' live pods; AIMaster sends each back to Bidding, else it
    fails with the plan's ReasonCode (SpotPriceExceeded, SpotAveragePriceExceeded,
    SpotStockShortage). A fixed number of queries however many jobs: a price jump reclaims
    many at once. A job that stopped meanwhile is left alone."""
    planned = {r.job_id: r for r in reclaims}
    jobs = [
        job
        for ids in id_chunks(list(planned))
        for job in Job.objects.select_for_update().filter(
            pk__in=ids, status__in=RECLAIMABLE_STATUSES, resource_source=ResourceSource.SPOT
        )
    ]
    if not jobs:
        return 0
    pods: dict[int, list[Pod]] = defaultdict(list)
    for ids in id_chunks([job.pk for job in jobs]):
        for pod in Pod.objects.filter(job_id__in=ids, status__in=LIVE_POD_STATUSES).select_related(
            "role"
        ):
            pods[pod.job_id].append(pod)
    messages = {
        job.pk: say("Spot instances reclaimed: {reason}", reason=planned[job.pk].reason)
        for job in jobs
    }
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {Pod._meta.db_table} SET status = %s, reason = %s, message = %s, "
            "finished_at = %s WHERE job_id = %s AND status IN (%s, %s)",
            [
                (
                    PodStatus.PREEMPTED,
                    planned[job.pk].code,
                    messages[job.pk],
                    db_datetime(now),
                    job.pk,
                    *LIVE_POD_STATUSES,
                )
                for job in jobs
            ],
        )
    pods_stopping_bulk(
        stops=[PodsStop(job=job, pods=pods[job.pk], reason=messages[job.pk]) for job in jobs],
        now=now,
    )
    JobEvent.objects.bulk_create(
        [
            JobEvent(
                job=job,
                kind="Reclaimed",
                at=now,
                message=say(
                    "{code}: {reason}", code=planned[job.pk].code, reason=planned[job.pk].reason
                ),
            )
            for job in jobs
        ]
        + [  # and on each pod, for its own events (GetPodEvents)
            JobEvent(
                job=job,
                pod=pod,
                kind="PodReclaimed",
                at=now,
                message=say(
                    "{code}: {reason}", code=planned[job.pk].code, reason=planned[job.pk].reason
                ),
            )
            for job in jobs
            for pod in pods[job.pk]
        ]
    )
    jobs_requeue_or_fail(
        interruptions=[
            Interruption(
                job,
                planned[job.pk].code,
                messages[job.pk],
                pods_lost_gpu_seconds(job=job, pods=pods[job.pk], now=now),
            )
            for job in jobs
        ],
        now=now,
        requeue_status=JobStatus.BIDDING,
    )
    return len(jobs)


def _apply_starts(snapshot: MarketSnapshot, plan: pricing.MarketPlan) -> int:
    """Start the planned jobs in bulk on the public pool (no node, neither In nor Not in
    Quota): their pods are created and metered, the jobs move to EnvPreparing.

    With node agents (EXECUTION_BACKEND "agent") the pods are created Pending and handed to
    `pods_placed`; an agent starts each process, and the job becomes Running when all run
    (billing counts from then). With "none" the pods run at once and the job goes straight
    on to Running, passing through EnvPreparing (both in its history). A busy tick starts
    thousands of jobs: `jobs_transition_bulk` writes them in a fixed number of queries."""
    now = snapshot.now
    at_once = settings.EXECUTION_BACKEND != "agent"
    expected = {"spot": JobStatus.BIDDING, "payg": JobStatus.QUEUING}
    kinds = {s.job_id: s.kind for s in plan.starts}
    jobs = [
        job
        for ids in id_chunks(list(kinds))
        for job in Job.objects.select_for_update()
        .filter(pk__in=ids)
        .only("id", "job_id", "attempt", "status", "started_at")
        if job.status == expected[kinds[job.pk]]
    ]
    if not jobs:
        return 0
    types = {s.job_id: s.types for s in plan.starts}
    placed = {job.pk: _placed(snapshot.needs[job.pk], types[job.pk]) for job in jobs}
    pod_ids = rows_insert(
        Pod,
        ["job_id", "role_id", "index", "attempt", "pod_id", "status", "started_at"]
        + ["instance_type_id"],
        [
            (
                job.pk,
                role.role_id,
                i,
                job.attempt,
                f"{job.job_id}-{role.role_type.lower()}-{i}-a{job.attempt}",
                PodStatus.RUNNING if at_once else PodStatus.PENDING,
                now if at_once else None,
                snapshot.types[role.instance_type].id,
            )
            for job in jobs
            for role in placed[job.pk]
            for i in range(role.pod_count)
        ],
    )
    paid_pods_created.send(sender=Pod, pod_ids=pod_ids, new=True)
    events, codes, whys = [], {}, {}
    for job in jobs:
        spot = kinds[job.pk] == "spot"
        whys[job.pk] = (
            _bid_accepted(
                placed[job.pk], plan, fallbacks=any(r.fallbacks for r in snapshot.needs[job.pk])
            )
            if spot
            else say("Started on the public pool")
        )
        codes[job.pk] = "JobBidAccepted" if spot else "JobDequeued"
        events.append((job.pk, "BidAccepted" if spot else "Started", whys[job.pk], now))
    events += [(e.job_id, e.kind, e.message, e.at) for e in resumed_events(jobs=jobs, now=now)]
    if at_once:
        jobs_transition_bulk(
            jobs=jobs,
            status=JobStatus.RUNNING,
            now=now,
            reason_code="JobRunning",
            reason_message=say("All pods are running"),
            started=True,
            via=Via(JobStatus.ENV_PREPARING, reason_codes=codes, reason_messages=whys),
        )
    else:
        jobs_transition_bulk(
            jobs=jobs,
            status=JobStatus.ENV_PREPARING,
            now=now,
            reason_codes=codes,
            reason_messages=whys,
            started=True,
        )
    rows_insert(JobEvent, ["job_id", "kind", "message", "at"], events)
    if not at_once:
        pods_placed(jobs=jobs, now=now)
    return len(jobs)


def _placed(roles: list[RoleNeed], types: tuple[str, ...]) -> list[RoleNeed]:
    """The roles as the plan starts them: each on the type the market chose (its own, or
    one of its ElasticSpotSpecs) with that type's bid. A pay-as-you-go start names no
    types: its roles run on their own."""
    if not types:
        return roles
    placed = []
    for role, t in zip(roles, types, strict=True):
        if t != role.instance_type:
            role = role._replace(instance_type=t, bid=dict(role.fallbacks)[t])
        placed.append(role)
    return placed


def _bid_accepted(roles: list[RoleNeed], plan: pricing.MarketPlan, *, fallbacks: bool) -> str:
    """ "Bid accepted at ¥0.64/h (market ¥0.30/h)"; naming the type when the job had
    others to fall back on; per role when roles bid differently."""
    terms = {(r.bid, r.instance_type) for r in roles}
    if len(terms) == 1:
        role = roles[0]
        market = plan.prices.get(role.instance_type)
        if fallbacks:
            return say(
                "Bid accepted at {bid}/h for {type} (market {price}/h)",
                bid=pricing.yuan(role.bid),
                type=role.instance_type,
                price=pricing.yuan(market),
            )
        return say(
            "Bid accepted at {bid}/h (market {price}/h)",
            bid=pricing.yuan(role.bid),
            price=pricing.yuan(market),
        )
    parts = [
        say(
            "{role} {bid}/h (market {price}/h for {type})",
            role=r.role_type,
            bid=pricing.yuan(r.bid),
            price=pricing.yuan(plan.prices.get(r.instance_type)),
            type=r.instance_type,
        )
        for r in roles
    ]
    return say("Bid accepted: {bids}", bids="; ".join(parts))


def _record_waiting(
    waiting: dict[int, tuple[str, str]], stored: dict[int, tuple[str, str]]
) -> None:
    """Store each queuing pay-as-you-go job's reason and its code (its SubStatus) where they
    changed; a job that left Queuing meanwhile is not touched. (A bidding spot job's are not
    stored: they are shown from the market's published quotes, see
    `selectors.waiting_reasons`.)"""
    by_reason: dict[tuple[str, str], list[int]] = defaultdict(list)
    for job_id, (reason, code) in waiting.items():
        if stored.get(job_id) != (reason[:256], code):
            by_reason[(reason[:256], code)].append(job_id)
    for (reason, code), ids in by_reason.items():
        for chunk in id_chunks(ids):
            Job.objects.filter(pk__in=chunk, status=JobStatus.QUEUING).update(
                pending_reason=reason, sub_status=code
            )
