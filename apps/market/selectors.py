"""Reads of the spot market: usage of the public pool, price history, the market page, the
create form's live price panel, and a job's bids against the market.

Prices are CNY per instance-hour; per-minute figures are derived for the form (the API's
SpotPriceLimit unit).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

from django.db.models import Count, Q, Sum
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext

from apps.cluster.models import InstanceType, ResourceType
from apps.cluster.selectors import (
    market_params,
    original_price_histories,
    type_price_histories,
)
from apps.core import pricing
from apps.core.charts import Chart, chart_build
from apps.core.words import say
from apps.jobs.execution import jobs_winding_down
from apps.jobs.models import (
    LIVE_POD_STATUSES,
    ElasticSpotSpec,
    Job,
    JobRole,
    JobStatus,
    Pod,
    ResourceSource,
    pod_instance_type,
)
from apps.jobs.selectors import role_bid_per_hour, role_list
from apps.market.models import MarketState, PricePoint
from apps.scheduler.lifecycle import winding_down_reason

MARKET_SOURCES = (ResourceSource.PUBLIC, ResourceSource.SPOT)
CHART_WINDOWS = {
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
}
AVERAGE_SAMPLES = 120

History = list[pricing.PricePoint]  # [(epoch seconds, ¥/h)], sorted, a step function


# --- the public pool's usage -----------------------------------------------------------


@dataclass(frozen=True)
class TypeUsage:
    payg_used: int = 0
    spot_used: int = 0
    bidding_demand: int = 0


def market_usage() -> dict[int, TypeUsage]:
    """Per instance type id: instances held by live pods of pay-as-you-go and spot jobs, and
    instances asked for by spot jobs in Bidding."""
    held: dict[int, dict[str, int]] = defaultdict(dict)
    live = (
        Pod.objects.filter(status__in=LIVE_POD_STATUSES, job__resource_source__in=MARKET_SOURCES)
        .annotate(type_id=pod_instance_type())
        .filter(type_id__isnull=False)
    )
    for type_id, source, count in (
        live.values_list("type_id", "job__resource_source").annotate(n=Count("id")).order_by()
    ):
        held[type_id][source] = count
    bidding = bidding_demand()
    return {
        type_id: TypeUsage(
            payg_used=held[type_id].get(ResourceSource.PUBLIC, 0),
            spot_used=held[type_id].get(ResourceSource.SPOT, 0),
            bidding_demand=bidding.get(type_id, 0),
        )
        for type_id in set(held) | set(bidding)
    }


def bidding_demand() -> dict[int, int]:
    """Per instance type id: instances asked for by spot jobs in Bidding, on each role's own
    type only (a role with ElasticSpotSpecs asks for one type at a time: counting it on
    each would raise every price as if it wanted them all)."""
    return dict(
        JobRole.objects.filter(
            job__status=JobStatus.BIDDING,
            job__resource_source=ResourceSource.SPOT,
            instance_type__isnull=False,
        )
        .values_list("instance_type_id")
        .annotate(n=Sum("pod_count"))
        .order_by()
    )


# --- price history -----------------------------------------------------------------------


def price_histories(
    *, type_ids: Iterable[int], since: datetime, until: datetime
) -> dict[int, History]:
    """Each type's market price history over [since, until], starting with the point in
    force at `since` (which may lie before it). Types without any point by `until` are left
    out."""
    return type_price_histories(PricePoint, type_ids=type_ids, since=since, until=until)


def system_averages(
    *, types: Sequence[InstanceType | int], now: datetime, window_seconds: float
) -> dict[int, Decimal]:
    """Lingjun's system average price per type id over the window ending at `now`, each
    price at its share of the original price then (`pricing.system_average`)."""
    ids = [t if isinstance(t, int) else t.pk for t in types]
    since = now - timedelta(seconds=window_seconds)
    histories = price_histories(type_ids=ids, since=since, until=now)
    originals = original_price_histories(type_ids=list(histories), since=since, until=now)
    return {
        type_id: pricing.system_average(
            history,
            now=now.timestamp(),
            window=window_seconds,
            originals=originals.get(type_id, ()),
        )
        for type_id, history in histories.items()
    }


# --- the market page -----------------------------------------------------------------------


@dataclass(frozen=True)
class MarketRow:
    """One instance type of the public pool as the market page shows it."""

    instance_type: InstanceType
    price: Decimal | None  # None until the market has priced it
    floor: Decimal
    price_limits: tuple[Decimal, Decimal]  # `pricing.price_limit_range`, CNY per minute
    usage: TypeUsage
    stepped_at: datetime | None = None
    system_average: Decimal | None = None  # Lingjun only

    @property
    def original(self) -> Decimal:
        return self.instance_type.price_per_hour

    @property
    def capacity(self) -> int:
        return self.instance_type.public_capacity

    @property
    def stock(self) -> int:
        return pricing.spot_stock(self.capacity, self.usage.payg_used, self.usage.spot_used)

    @property
    def price_per_minute(self) -> Decimal | None:
        return None if self.price is None else pricing.hour_to_per_minute(self.price)

    @property
    def floor_per_minute(self) -> Decimal:
        """The lowest SpotPriceLimit, the one that bids the floor."""
        return self.price_limits[0]

    @property
    def original_per_minute(self) -> Decimal:
        return self.price_limits[1]

    @property
    def saving(self) -> Decimal | None:
        """How much below the original price the market sits (0.7 = 70% cheaper)."""
        if self.price is None or not self.original:
            return None
        return 1 - self.price / self.original

    @property
    def is_lingjun(self) -> bool:
        return self.instance_type.resource_type == ResourceType.LINGJUN


def market_overview(*, now: datetime | None = None) -> list[MarketRow]:
    """Every instance type with public capacity, ECS first, cheapest first."""
    types = InstanceType.objects.filter(public_capacity__gt=0).order_by(
        "resource_type", "price_per_hour", "name"
    )
    return _rows(list(types), now=now or timezone.now())


def market_type(*, name: str, now: datetime | None = None) -> MarketRow:
    """One instance type's row; Http404 when the public pool does not sell it."""
    instance_type = InstanceType.objects.filter(name=name, public_capacity__gt=0).first()
    if instance_type is None:
        raise Http404("No such instance type in the public pool")
    return _rows([instance_type], now=now or timezone.now())[0]


def market_states(*, types: Iterable[InstanceType]) -> dict[int, MarketState]:
    """Per type id: the market's state now (its price, when it last stepped); types the
    market has not priced yet are left out. One query."""
    return MarketState.objects.in_bulk([t.pk for t in types])


def _rows(types: list[InstanceType], *, now: datetime) -> list[MarketRow]:
    params = market_params()
    states = market_states(types=types)
    usage = market_usage()
    lingjun = [t for t in types if t.resource_type == ResourceType.LINGJUN]
    averages = system_averages(types=lingjun, now=now, window_seconds=params.average_window_seconds)
    rows = []
    for t in types:
        state = states.get(t.pk)
        rows.append(
            MarketRow(
                instance_type=t,
                price=state.price_per_hour if state else None,
                floor=pricing.price_floor(t.price_per_hour, params.floor_ratio),
                price_limits=pricing.price_limit_range(t.price_per_hour, params.floor_ratio),
                usage=usage.get(t.pk, TypeUsage()),
                stepped_at=state.stepped_at if state else None,
                system_average=averages.get(t.pk),
            )
        )
    return rows


def price_panel(*, name: str) -> MarketRow | None:
    """The create form's live price for one instance type (None when not sold as spot)."""
    try:
        row = market_type(name=name)
    except Http404:
        return None
    return row if row.instance_type.spot_enabled else None


GUIDANCE_WINDOW = timedelta(hours=24)


def bid_guidance(
    *, row: MarketRow, bid_per_hour: Decimal, now: datetime | None = None
) -> pricing.BidExposure | None:
    """How a bid on this type would have fared over the last 24 hours (`pricing.
    bid_exposure`): held to the market price, or for Lingjun to the system average."""
    until = now or timezone.now()
    since = until - GUIDANCE_WINDOW
    t = row.instance_type
    prices = price_histories(type_ids=[t.pk], since=since, until=until).get(t.pk, [])
    held = _rolling_average(t, since, until) if row.is_lingjun and prices else prices
    return pricing.bid_exposure(
        bid_per_hour, prices, held, since=since.timestamp(), until=until.timestamp()
    )


# --- charts (geometry in apps/core/charts.py) ----------------------------------------------


def price_chart(*, row: MarketRow, window: str = "6h", now: datetime | None = None) -> Chart:
    """The market price of one type over a window, with its floor and original price, and
    for Lingjun the system average price as it moved."""
    until = now or timezone.now()
    since = until - CHART_WINDOWS.get(window, CHART_WINDOWS["6h"])
    t = row.instance_type
    history = price_histories(type_ids=[t.pk], since=since, until=until).get(t.pk, [])
    series: list[tuple[str, str, History]] = [(gettext("Market price"), "price", history)]
    series.append((gettext("Floor"), "floor", [(since.timestamp(), row.floor)]))
    series.append(
        (gettext("Original (pay-as-you-go)"), "original", [(since.timestamp(), row.original)])
    )
    if row.is_lingjun and history:
        series.append((gettext("System average"), "average", _rolling_average(t, since, until)))
    return chart_build(series, since=since, until=until, zone=timezone.get_current_timezone())


def _rolling_average(t: InstanceType, since: datetime, until: datetime) -> History:
    window = market_params().average_window_seconds
    history = price_histories(
        type_ids=[t.pk], since=since - timedelta(seconds=window), until=until
    ).get(t.pk, [])
    if not history:
        return []
    start, end = since.timestamp(), until.timestamp()
    samples = [start + (end - start) * i / AVERAGE_SAMPLES for i in range(AVERAGE_SAMPLES + 1)]
    # A history that begins inside the window is averaged from its first price on, not from
    # the first sample after it (up to 1/AVERAGE_SAMPLES of the window unaccounted for).
    first = history[0][0]
    if start < first < end:
        samples = [first, *(at for at in samples if at > first)]
    return [
        (at, pricing.system_average(history, now=at, window=window))
        for at in samples
        if first <= at
    ]


# --- a job's bids against the market ----------------------------------------------------------


@dataclass(frozen=True)
class RoleBidLine:
    role_type: str
    instance_type: str
    bid_per_hour: Decimal
    pod_count: int
    choice: int = 0  # 0: the role's own type; n: its n-th ElasticSpotSpecs entry
    current: bool = False  # the role's current pods run on this type


@dataclass(frozen=True)
class BidHistory:
    """A spot job's bid limits per role and the market prices of their instance types over
    the job's lifetime (submission until it finished, or now)."""

    job: Job
    bids: list[RoleBidLine]
    prices: dict[str, History]  # instance type name → price points
    charts: dict[str, Chart]  # instance type name → bid(s) against the market price

    @property
    def empty(self) -> bool:
        return not self.bids


def job_bid_history(*, job: Job, now: datetime | None = None) -> BidHistory:
    """Bid per hour against the market price points, for the job page (empty for jobs that
    are not spot jobs)."""
    if not job.is_spot:
        return BidHistory(job=job, bids=[], prices={}, charts={})
    until = job.finished_at or now or timezone.now()
    since = min(job.submitted_at, until - timedelta(minutes=1))
    bids = []
    types: dict[str, InstanceType] = {}
    running = set(
        Pod.objects.filter(job=job, attempt=job.attempt, status__in=LIVE_POD_STATUSES)
        .annotate(type_id=pod_instance_type())
        .values_list("role_id", "type_id")
    )
    for role in role_list(job=job):
        for choice, item in enumerate([role, *role.elastic_spot_specs.all()]):
            bid = role_bid_per_hour(item)
            if bid is None:
                continue
            itype = item.instance_type
            current = (role.pk, itype.pk) in running
            bids.append(
                RoleBidLine(role.role_type, itype.name, bid, role.pod_count, choice, current)
            )
            types[itype.name] = itype
    histories = price_histories(type_ids=[t.pk for t in types.values()], since=since, until=until)
    prices = {name: histories.get(t.pk, []) for name, t in types.items()}
    floor_ratio = market_params().floor_ratio if prices else pricing.DEFAULT_FLOOR_RATIO
    charts = {}
    for name, history in prices.items():
        t = types[name]
        series: list[tuple[str, str, History]] = [(gettext("Market price"), "price", history)]
        if t.resource_type == ResourceType.LINGJUN and history:
            # a running Lingjun spot job is reclaimed against the system average, not the price
            series.append((gettext("System average"), "average", _rolling_average(t, since, until)))
        for b in bids:
            if b.instance_type == name:
                series.append(
                    (
                        gettext("%(role)s bid") % {"role": b.role_type},
                        "bid",
                        [(since.timestamp(), b.bid_per_hour)],
                    )
                )
        floor = pricing.price_floor(t.price_per_hour, floor_ratio)
        series.append((gettext("Floor"), "floor", [(since.timestamp(), floor)]))
        series.append(
            (
                gettext("Original (pay-as-you-go)"),
                "original",
                [(since.timestamp(), t.price_per_hour)],
            )
        )
        charts[name] = chart_build(
            series, since=since, until=until, zone=timezone.get_current_timezone()
        )
    return BidHistory(job=job, bids=bids, prices=prices, charts=charts)


# --- why a spot job waits ---------------------------------------------------------------------


class SpotWait(NamedTuple):
    reason: str  # "" when nothing stands in the job's way
    code: str  # BidBelowMarketPrice, BidBelowAveragePrice, SpotStockShortage, AIMasterBackoff…


BACKOFF, HELD = "AIMasterBackoff", "JobHeld"


class RoleNeed(NamedTuple):
    """A role of a job that is waiting for the market: what it needs, and its bid."""

    role_id: int
    role_type: str
    pod_count: int
    instance_type: str  # "" for a role without one
    bid: Decimal | None  # per hour; None for pay-as-you-go or a bid that cannot be read
    # ElasticSpotSpecs: (instance type, bid per hour) to fall back on, in order
    fallbacks: tuple[pricing.Choice, ...] = ()


def role_fallbacks(*, role_ids: Iterable[int]) -> dict[int, tuple[pricing.Choice, ...]]:
    """Each role's ElasticSpotSpecs as (instance type, bid per hour), in order; a type no
    longer sold as spot, or a bid that cannot be read, is skipped. One query."""
    fallbacks: dict[int, list[pricing.Choice]] = defaultdict(list)
    rows = (
        ElasticSpotSpec.objects.filter(role_id__in=list(role_ids), instance_type__spot_enabled=True)
        .order_by("role_id", "position")
        .values_list(
            "role_id",
            "instance_type__name",
            "instance_type__price_per_hour",
            "spot_discount_limit",
            "spot_price_limit",
        )
    )
    for role_id, name, original, discount, per_minute in rows:
        try:
            bid = pricing.bid_limit_per_hour(
                original, discount=discount, price_limit_per_minute=per_minute
            )
        except pricing.MarketError:
            continue
        fallbacks[role_id].append((name, bid))
    return {role_id: tuple(choices) for role_id, choices in fallbacks.items()}


def held_reason(
    *,
    spot: bool,
    not_before: datetime | None,
    roles: Sequence[RoleNeed],
    not_spot: Container[str],
    now: datetime,
    winding_down: int = 0,
) -> SpotWait:
    """Why a waiting market job sits out the ticks, and its code (("", "") when it does
    not): an AIMaster backoff (AIMasterBackoff), pods of its previous attempt not yet
    exited (`winding_down`: PreviousPodsExiting), a role without an instance type, a spot
    role without a readable bid, or a type no longer sold as spot (`not_spot`) (JobHeld).
    The tick and the job pages both ask this."""
    if not_before is not None and not_before > now:
        at = f"{not_before:%H:%M:%S}"
        if spot:
            return SpotWait(say("AIMaster backoff: bids again from {at} UTC", at=at), BACKOFF)
        return SpotWait(say("AIMaster backoff: queues again from {at} UTC", at=at), BACKOFF)
    if winding_down:
        return SpotWait(winding_down_reason(winding_down), "PreviousPodsExiting")
    if any(not role.instance_type for role in roles):
        return SpotWait(say("every role of a public or spot job needs an instance type"), HELD)
    if not spot:
        return SpotWait("", "")
    for role in roles:
        if role.bid is None:
            text = say(
                "{role}: set exactly one of SpotDiscountLimit and SpotPriceLimit",
                role=role.role_type,
            )
            return SpotWait(text, HELD)
        if role.instance_type in not_spot:
            return SpotWait(say("{type} is no longer sold as spot", type=role.instance_type), HELD)
    return SpotWait("", "")


def waiting_reasons(*, jobs: Iterable[Job], now: datetime | None = None) -> dict[int, str]:
    """Why each spot job in Bidding among `jobs` waits (`spot_waits`' words, without codes)."""
    return {pk: wait.reason for pk, wait in spot_waits(jobs=jobs, now=now).items()}


def waiting_show(*, jobs: Iterable[Job], now: datetime | None = None) -> None:
    """Put each bidding spot job's live reason and its code on the job (in memory: the market
    does not rewrite thousands of them each tick), as the job pages and the API show it
    (`apps.jobs.waiting.waiting_text`, and the code as its SubStatus,
    `apps.jobs.waiting.sub_status`)."""
    jobs = list(jobs)
    waits = spot_waits(jobs=jobs, now=now)
    for job in jobs:
        if wait := waits.get(job.pk):
            job.sub_status = wait.code
            if wait.reason:
                job.pending_reason, job.reason_code = wait.reason, wait.code


def spot_waits(*, jobs: Iterable[Job], now: datetime | None = None) -> dict[int, SpotWait]:
    """Why each spot job in Bidding among `jobs` waits, in the market tick's words: a reason
    it sits out the ticks (`held_reason`), else its bids and gang against the quotes the
    last tick published (`pricing.spot_wait_reason`: asked price, spot stock). An empty
    reason when nothing stands in its way, or its type has not been priced yet: it is judged
    on the next tick. Two queries, however many jobs."""
    now = now or timezone.now()
    bidding = {
        job.pk: job
        for job in jobs
        if job.status == JobStatus.BIDDING and job.resource_source == ResourceSource.SPOT
    }
    if not bidding:
        return {}
    rows = (
        JobRole.objects.filter(job_id__in=bidding)
        .order_by("job_id", "id")
        .values_list(
            "job_id",
            "id",
            "role_type",
            "pod_count",
            "instance_type_id",
            "instance_type__name",
            "instance_type__price_per_hour",
            "instance_type__spot_enabled",
            "spot_discount_limit",
            "spot_price_limit",
        )
    )
    needs: dict[int, list[RoleNeed]] = defaultdict(list)
    not_spot: set[str] = set()
    type_ids: set[int] = set()
    for (
        job_id,
        role_id,
        role_type,
        pods,
        type_id,
        name,
        original,
        spot_enabled,
        discount,
        per_minute,
    ) in rows:
        bid = None
        if type_id is not None:
            type_ids.add(type_id)
            if not spot_enabled:
                not_spot.add(name)
            try:
                bid = pricing.bid_limit_per_hour(
                    original, discount=discount, price_limit_per_minute=per_minute
                )
            except pricing.MarketError:
                pass
        needs[job_id].append(RoleNeed(role_id, role_type, pods, name or "", bid))
    fallbacks = role_fallbacks(role_ids=[r.role_id for roles in needs.values() for r in roles])
    for roles in needs.values():
        roles[:] = [r._replace(fallbacks=fallbacks.get(r.role_id, ())) for r in roles]
    names = {t for choices in fallbacks.values() for t, _ in choices}
    quotes, unpriced = {}, set()
    for t in InstanceType.objects.filter(
        Q(pk__in=type_ids) | Q(name__in=names), public_capacity__gt=0
    ).select_related("market_state"):
        state = getattr(t, "market_state", None)
        if state is None:
            unpriced.add(t.name)
        else:
            quotes[t.name] = state.quote()
    waits = {}
    winding = jobs_winding_down(Job.objects.filter(pk__in=list(bidding)))
    for job_id, job in bidding.items():
        roles = needs.get(job_id, [])
        reason, code = held_reason(
            spot=True,
            not_before=job.not_before,
            roles=roles,
            not_spot=not_spot,
            now=now,
            winding_down=winding.get(job_id, 0),
        )
        if not reason and roles and not any(r.instance_type in unpriced for r in roles):
            reason, code = pricing.spot_wait_reason(
                spot_needs(roles), quotes, fallbacks=spot_fallbacks(roles)
            )
            if code == "StockShortage":
                code = "SpotStockShortage"  # the spot market's stock, as its reclaims name it
        waits[job_id] = SpotWait(reason, code)
    return waits


def spot_fallbacks(roles: Sequence[RoleNeed]) -> tuple[tuple[pricing.Choice, ...], ...]:
    """Each role's fallbacks, as the pricing core takes them; () when no role has any."""
    if not any(r.fallbacks for r in roles):
        return ()
    return tuple(r.fallbacks for r in roles)


def spot_needs(roles: Sequence[RoleNeed]) -> tuple[tuple[str, int, Decimal], ...]:
    """A spot job's (instance type, pods, bid per hour) per role, as the pricing core takes
    them; every role has a bid here (one without is held: `held_reason`)."""
    needs = []
    for r in roles:
        assert r.bid is not None
        needs.append((r.instance_type, r.pod_count, r.bid))
    return tuple(needs)
