"""The spot market core: prices, acquisition, reclaim, replay and per-minute billing.

Pure Python (no Django, no Celery): frozen dataclasses in, a `MarketPlan` out. The clock
(`now`) and the random generator (`rng`) are arguments, so the live tick, the tests and the
simulator get the same answer for the same inputs. It lives in apps/core, below every app,
because more than the market checks against it: the cluster file (the market's parameters),
the job form and the API (a bid's allowed range) and billing (the minute's charge).

Money is `Decimal`, never float. Market prices and bids are CNY per instance-HOUR on a 0.0001
grid; the API's SpotPriceLimit is CNY per instance-MINUTE (see `per_minute_to_hour`). A
minute of use is charged at the hourly price in force at the minute's start, divided by 60.

The rules (design §5 and the spot seed):
- A type's price moves toward a target set by demand (running + bidding spot instances)
  against supply (what pay-as-you-go leaves to spot), a fraction of the gap per tick, plus
  seeded noise, clamped to [floor, original].
- Running spot jobs are reclaimed without notice: ECS when bid < market price, Lingjun when
  bid < system average price; either when stock runs short (lowest bids first).
- Pay-as-you-go takes stock before spot. A bidding spot job starts when its bid covers the
  price and stock covers the whole job (gang: all instances or none).
- A role may name further instance types to fall back on, each with its own bid
  (ElasticSpotSpecs): a bidding job starts on the earliest acceptable type of each role, in
  the order given, its own type first (`spot_choice`).
"""

from __future__ import annotations

import csv
import functools
import math
import random
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal, InvalidOperation
from operator import itemgetter
from typing import Literal, NamedTuple

from apps.core.words import joined, say, say_n

ResourceType = Literal["ECS", "Lingjun"]
PricePoint = tuple[float, Decimal]  # (epoch seconds, CNY per instance-hour) in force from then

PRICE_QUANTUM = Decimal("0.0001")  # CNY per instance-hour
MINUTE_QUANTUM = Decimal("0.000001")  # CNY per instance-minute
DEFAULT_FLOOR_RATIO = Decimal("0.1")

_at = itemgetter(0)


class MarketError(ValueError):
    """Input the market core cannot use; `code` is a DLC-style code the callers can show."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --- units -------------------------------------------------------------------------------


def quantize_price(price: Decimal) -> Decimal:
    """Round a per-hour price onto the 0.0001 grid (half up)."""
    return price.quantize(PRICE_QUANTUM, rounding=ROUND_HALF_UP)


def per_minute_to_hour(price_per_minute: Decimal) -> Decimal:
    """The API's SpotPriceLimit (CNY per instance-minute) as a per-hour price."""
    return quantize_price(_decimal(price_per_minute) * 60)


def hour_to_per_minute(price_per_hour: Decimal) -> Decimal:
    """A per-hour price in the API's per-minute unit, on a 0.000001 grid (half up)."""
    return (_decimal(price_per_hour) / 60).quantize(MINUTE_QUANTUM, rounding=ROUND_HALF_UP)


def spot_stock(capacity: int, payg_used: int, spot_used: int) -> int:
    """A type's spot stock: the public instances neither pay-as-you-go nor spot holds. Never
    negative, though usage may exceed capacity when a node leaves the public pool."""
    return max(0, capacity - payg_used - spot_used)


def price_floor(original_price: Decimal, floor_ratio: Decimal = DEFAULT_FLOOR_RATIO) -> Decimal:
    """The lowest market price: `floor_ratio` of the original, on the grid (half up). The
    lowest SpotPriceLimit, `price_limit_range`, bids exactly this."""
    return min(quantize_price(original_price * floor_ratio), original_price)


def price_limit_range(
    original_price: Decimal,
    floor_ratio: Decimal = DEFAULT_FLOOR_RATIO,
) -> tuple[Decimal, Decimal]:
    """The SpotPriceLimits a role may bid on an instance type, in the API's unit (CNY per
    instance-minute, on the 0.000001 grid): from the lowest limit that bids the market's
    floor to the original price. Both convert back (`per_minute_to_hour`) to exactly the
    floor and the original; one quantum below the lowest would bid under the floor and
    never start."""
    floor = price_floor(original_price, floor_ratio)
    # A per-hour price rounds (half up) to the floor from half a quantum below it.
    lowest_hour = max(floor - PRICE_QUANTUM / 2, Decimal(0))
    low = (lowest_hour / 60).quantize(MINUTE_QUANTUM, rounding=ROUND_CEILING)
    return low, hour_to_per_minute(original_price)


def bid_limit_per_hour(
    original_price_hour: Decimal,
    *,
    discount: Decimal | None,
    price_limit_per_minute: Decimal | None,
) -> Decimal:
    """A role's bid limit per instance-hour from its SpotSpec: exactly one of
    SpotDiscountLimit (0.4 means 40% of the original price) and SpotPriceLimit (per minute).

    Range checks belong to the job form (`apps.jobs.specs`); this only converts.
    """
    if (discount is None) == (price_limit_per_minute is None):
        raise MarketError(
            "InvalidSpotSpec", "set exactly one of SpotDiscountLimit and SpotPriceLimit"
        )
    if discount is not None:
        return quantize_price(_decimal(original_price_hour) * _decimal(discount))
    assert price_limit_per_minute is not None  # exactly one of the two is set
    return per_minute_to_hour(price_limit_per_minute)


def _decimal(value: Decimal | float | int | str) -> Decimal:
    # The SDK hands over floats (0.011); str() keeps them as the user wrote them.
    return value if isinstance(value, Decimal) else Decimal(str(value))


# --- prices ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MarketParams:
    """Tuning from the cluster file."""

    floor_ratio: Decimal = DEFAULT_FLOOR_RATIO  # floor = 10% of original ("up to 90% saving")
    smoothing: float = 0.2  # fraction of the gap to the target closed per tick
    volatility: float = 0.02  # seeded random part, relative to the price
    sensitivity: float = 1.0  # how strongly demand/supply moves the target
    average_window_seconds: float = 3600.0  # Lingjun system average window


@dataclass(frozen=True)
class TypeMarket:
    """One instance type of the public pool at the start of a tick."""

    instance_type: str
    resource_type: ResourceType
    original_price: Decimal  # pay-as-you-go price per instance-hour
    capacity: int  # public instances of this type
    payg_used: int  # includes the running pay-as-you-go jobs
    spot_used: int  # includes the running spot jobs passed to market_step
    bidding_demand: int  # instances asked for by spot jobs waiting in Bidding
    price: Decimal  # current market price per instance-hour
    spot_enabled: bool = True  # sold as spot; when not, its running spot jobs are reclaimed

    @property
    def floor(self) -> Decimal:
        """The floor at the default ratio; the engine uses `MarketParams.floor_ratio`."""
        return price_floor(self.original_price)

    @property
    def spot_stock(self) -> int:
        return spot_stock(self.capacity, self.payg_used, self.spot_used)

    @property
    def demand(self) -> int:
        return self.spot_used + self.bidding_demand


def target_fraction(market: TypeMarket, *, sensitivity: float) -> float:
    """Where the target price sits between the floor (0.0) and the original price (1.0).

    r = spot demand / supply, supply being what pay-as-you-go leaves to spot; the target is
    1 − exp(−sensitivity·r²): near the floor while little is used, about 2/3 of the way up
    when demand equals supply, close to the original once bidders ask for twice the supply.
    """
    supply = market.capacity - market.payg_used
    if supply <= 0:
        return 1.0  # nothing left for spot: scarcity pricing
    ratio = market.demand / supply
    return 1.0 - math.exp(-sensitivity * ratio * ratio)


def next_price(market: TypeMarket, *, params: MarketParams, rng: random.Random) -> Decimal:
    """The type's price for the next tick: a `smoothing` step toward the demand target, times
    (1 ± volatility) seeded noise, on the grid, clamped to [floor, original].

    Draws exactly one number from `rng`, so a tick's stream does not depend on the prices.
    """
    noise = rng.uniform(-1.0, 1.0)
    floor, ceiling = price_floor(market.original_price, params.floor_ratio), market.original_price
    current = _clamp(market.price, floor, ceiling)
    fraction = target_fraction(market, sensitivity=params.sensitivity)
    target = floor + (ceiling - floor) * _float(fraction)
    smoothed = current + (target - current) * _float(params.smoothing)
    moved = smoothed * (1 + _float(params.volatility * noise))
    return _clamp(quantize_price(moved), floor, ceiling)


def price_following_original(
    price: Decimal,
    *,
    old_original: Decimal,
    new_original: Decimal,
    floor_ratio: Decimal = DEFAULT_FLOOR_RATIO,
) -> Decimal:
    """A type's market price once its original price changes from `old_original` to
    `new_original`: the same share of the original as before, on the grid, within the new
    [floor, original]. A SpotDiscountLimit bid is a share of the original too, so a bid
    that held against the market price still holds, and one that did not still does not;
    the market then moves on from there with demand, as it would have. (Left where it was,
    the price would be clamped to the new original on a cut and reclaim every discount bid
    below 100%.) A type that was free (original 0) opens at its new floor."""
    floor = price_floor(new_original, floor_ratio)
    if old_original <= 0:
        return floor
    return _clamp(quantize_price(price * new_original / old_original), floor, new_original)


def system_average(
    history: Sequence[PricePoint],
    *,
    now: float,
    window: float,
    originals: Sequence[PricePoint] = (),
) -> Decimal:
    """Time-weighted average of a step-function price history over [now − window, now].

    `history` is sorted by time; each price holds until the next point. The price in force
    at the window's start counts from the start; points after `now` are ignored. When the
    history begins inside the window, the average covers the part with a price.

    `originals`, the type's original price history (same shape), when given: each price
    counts as the same share of the original price in force at `now` as it was of the one
    in force then, so a change of the original moves the average with it at once, as it
    moves the market price (`price_following_original`), instead of holding a Lingjun
    discount bid to an hour of prices from before the change.
    """
    start = now - window
    first = max(bisect_right(history, start, key=_at) - 1, 0)
    points = history[first : bisect_right(history, now, key=_at)]
    if not points:
        raise MarketError("NoPriceHistory", f"no market price at or before {now}")
    ends = [t for t, _ in points[1:]] + [now]
    current = replay_price_at(originals, now) if originals else None
    total, covered = Decimal(0), Decimal(0)
    for (t, price), end in zip(points, ends, strict=True):
        begin = max(t, start)
        for piece_start, piece_end, scale in _original_pieces(originals, current, begin, end):
            duration = _float(piece_end - piece_start)
            if duration > 0:
                total += price * scale * duration
                covered += duration
    if covered == 0:
        return quantize_price(points[-1][1])  # a zero window: the price at `now`
    return quantize_price(total / covered)


def _original_pieces(
    originals: Sequence[PricePoint], current: Decimal | None, begin: float, end: float
) -> Iterable[tuple[float, float, Decimal]]:
    """[begin, end) cut where the original price changed, each piece with the factor that
    takes a price of then to the same share of the `current` original (1 without one)."""
    if current is None:
        yield begin, end, Decimal(1)
        return
    cuts = [t for t, _ in originals if begin < t < end]
    for piece_start, piece_end in zip([begin, *cuts], [*cuts, end], strict=True):
        then = replay_price_at(originals, piece_start)
        yield piece_start, piece_end, current / then if then else Decimal(1)


def _clamp(value: Decimal, low: Decimal, high: Decimal) -> Decimal:
    return min(max(value, low), high)


def _float(value: float) -> Decimal:
    # repr() is the shortest exact-roundtrip text: deterministic and free of binary noise.
    return Decimal(repr(value))


def market_prices(
    markets: Sequence[TypeMarket],
    *,
    params: MarketParams,
    rng: random.Random,
    replay: Mapping[str, Decimal] | None = None,
) -> dict[str, Decimal]:
    """Every type's price for the tick: the replayed one where `replay` has it (clamped to
    [floor, original]), else `next_price`. Drawn in type order, so the rng stream does not
    depend on the order of `markets`."""
    replay = replay or {}
    return {
        m.instance_type: _replayed(m, replay[m.instance_type], params)
        if m.instance_type in replay
        else next_price(m, params=params, rng=rng)
        for m in sorted(markets, key=lambda m: m.instance_type)
    }


def asked_price(
    resource_type: ResourceType, price: Decimal, average: Decimal | None
) -> tuple[Decimal, str]:
    """What a bid must cover to start, and its name: the market price, and for Lingjun also
    the system average (a job started below it would be reclaimed on the next tick)."""
    if resource_type == "Lingjun" and average is not None and average > price:
        return average, "system average"
    return price, "market"


# --- requests and the plan ---------------------------------------------------------------


Need = tuple[str, int, Decimal]  # (instance type, instances, bid limit per hour)
Choice = tuple[str, Decimal]  # (instance type, bid limit per hour)


@dataclass(frozen=True, kw_only=True)
class SpotRequest:
    """A spot job, whole (gang). `needs` holds one (instance type, instances, bid limit per
    hour) entry per role — several roles may share a type with different bids.

    Shorthand for a job of one type: `instance_type=…, instances=…, bid=…` fills `needs`.
    `started_at` (when it started running) orders equal bids for reclaim, newest first;
    without it `submitted_at` is used.

    `fallbacks` (ElasticSpotSpecs) holds, per role of `needs` and in its order, the further
    (instance type, bid per hour) choices a bidding job may start on when the role's own
    type will not do, tried in the order given; () when no role has any. A running job's
    `needs` are the types it runs on, and its fallbacks are not read.
    """

    job_id: int
    needs: tuple[Need, ...] = ()
    running: bool
    submitted_at: float
    aimaster: bool = False
    started_at: float | None = None
    instance_type: str | None = None
    instances: int = 0
    bid: Decimal | None = None
    fallbacks: tuple[tuple[Choice, ...], ...] = ()

    def __post_init__(self) -> None:
        if self.instance_type is not None:
            if self.needs or self.bid is None:
                raise MarketError(
                    "InvalidSpotRequest",
                    f"spot job {self.job_id}: give `needs`, or instance_type with a bid",
                )
            object.__setattr__(self, "needs", ((self.instance_type, self.instances, self.bid),))
        if not self.needs:
            raise MarketError("InvalidSpotRequest", f"spot job {self.job_id} needs no instance")
        if self.fallbacks and len(self.fallbacks) != len(self.needs):
            raise MarketError(
                "InvalidSpotRequest", f"spot job {self.job_id}: one fallback list per role"
            )
        for types in self._choice_types():
            if len(set(types)) != len(types):
                raise MarketError(
                    "InvalidSpotRequest", f"spot job {self.job_id}: a role names a type twice"
                )

    def _choice_types(self) -> Iterable[list[str]]:
        for (t, _, _), more in zip(self.needs, self.fallbacks, strict=False):
            yield [t, *(f for f, _ in more)]

    @property
    def counts(self) -> dict[str, int]:
        """Instances per type, all roles summed."""
        return _sum_counts((t, n) for t, n, _ in self.needs)

    @property
    def choices(self) -> tuple[tuple[Choice, ...], ...]:
        """Each role's (instance type, bid) choices in the order tried: its own, then its
        fallbacks."""
        more = self.fallbacks or ((),) * len(self.needs)
        return tuple(
            ((t, bid), *extra) for (t, _, bid), extra in zip(self.needs, more, strict=True)
        )


@dataclass(frozen=True)
class PaygRequest:
    """A public pay-as-you-go job: (instance type, instances) per role. A running one is
    already counted in `TypeMarket.payg_used` and is left alone."""

    job_id: int
    needs: tuple[tuple[str, int], ...]
    running: bool
    submitted_at: float
    name: str = ""  # how the reclaimed spot jobs' reasons name it; the id when empty


@dataclass(frozen=True)
class Start:
    """A job that starts. A spot job's `types` are the instance types its roles start on,
    in role order (each its own type or one of its fallbacks); () for pay-as-you-go."""

    job_id: int
    kind: Literal["spot", "payg"]
    types: tuple[str, ...] = ()


ReclaimCode = Literal["SpotPriceExceeded", "SpotAveragePriceExceeded", "SpotStockShortage"]


@dataclass(frozen=True)
class Reclaim:
    """A running spot job loses all its instances. `rebid` is the job's AIMaster switch, for
    reading only: whether it goes back to Bidding or ends Failed is decided where it is
    applied, with its restart budget (`apps.scheduler.lifecycle.after_interruption`)."""

    job_id: int
    code: ReclaimCode
    reason: str
    rebid: bool = False


@dataclass(frozen=True)
class Waiting:
    """A job that stays Bidding (spot) or Queuing (pay-as-you-go), and why. `code` names the
    first failing condition: BidBelowMarketPrice, BidBelowAveragePrice, StockShortage or
    UnknownInstanceType."""

    job_id: int
    reason: str
    code: str = ""


class Quote(NamedTuple):
    """A type as a bidder sees it after a tick: the price its bid must cover (and that
    price's name, "market" or "system average") and the instances still free for spot."""

    asked: Decimal
    name: str
    free: int


@dataclass(frozen=True)
class MarketPlan:
    prices: dict[str, Decimal]  # the new market price per type
    starts: tuple[Start, ...]
    reclaims: tuple[Reclaim, ...]
    waiting: tuple[Waiting, ...]
    stock: dict[str, int] = field(default_factory=dict)  # free instances per type afterwards


# --- the tick ----------------------------------------------------------------------------


def market_step(
    markets: Sequence[TypeMarket],
    spot: Sequence[SpotRequest],
    payg: Sequence[PaygRequest],
    *,
    params: MarketParams,
    rng: random.Random | None = None,
    now: float,
    averages: Mapping[str, Decimal] | None = None,
    replay: Mapping[str, Decimal] | None = None,
    prices: Mapping[str, Decimal] | None = None,
) -> MarketPlan:
    """One market tick: new prices, then reclaims on price, then pay-as-you-go (taking
    instances back from the lowest spot bids if it must), then bidding spot jobs.

    `averages` are the Lingjun system averages (`system_average` over the history up to
    `now`); a type without one is held to its new market price. `replay` maps types to
    recorded prices that replace the model (still clamped to [floor, original]). `prices`
    are the tick's prices when the caller drew them already with `market_prices` (then
    `rng` and `replay` are not used, and `rng` may be left out). The plan does not depend
    on the order of the inputs; `now` is accepted for the adapter's symmetry and not
    otherwise needed.

    A bidding request with a bid below its type's asked price (`asked_price`) can only
    wait: leaving it out changes no price, start or reclaim (the live tick relies on this
    to read only the bids that may start).
    """
    if prices is None:
        if rng is None:
            raise MarketError("MissingRandom", "give the tick's rng, or its prices")
        prices = market_prices(markets, params=params, rng=rng, replay=replay)
    book = _Book.open(markets, spot, prices=prices, averages=averages)
    reclaims = _reclaim_on_price(book) + _reclaim_over_capacity(book)
    payg_starts, payg_waiting, payg_reclaims = _start_payg(book, payg)
    spot_starts, spot_waiting = _start_spot(book, [r for r in spot if not r.running])
    return MarketPlan(
        prices=dict(book.prices),
        starts=tuple(payg_starts + spot_starts),
        reclaims=tuple(reclaims + payg_reclaims),
        waiting=tuple(payg_waiting + spot_waiting),
        stock={t: book.stock(t) for t in book.markets},
    )


def spot_headroom(
    markets: Sequence[TypeMarket],
    running: Sequence[SpotRequest],
    *,
    prices: Mapping[str, Decimal],
    averages: Mapping[str, Decimal] | None = None,
    payg_waiting: bool,
) -> dict[str, int] | None:
    """The most instances of each type a bidding spot job can get in a tick at `prices`:
    what pay-as-you-go and the running spot jobs that keep their bids leave, plus, where a
    type is over capacity (a node left the pool), all that the running jobs on it hold on
    any type (they may be reclaimed). A job with a role needing more can only wait, so the
    live tick need not read it.

    A waiting pay-as-you-go job may reclaim spot jobs anywhere: then there is no bound
    (None)."""
    if payg_waiting:
        return None
    book = _Book.open(markets, [r for r in running if r.running], prices=prices, averages=averages)
    _reclaim_on_price(book)
    headroom = {t: book.stock(t) for t in book.markets}
    over = {
        t for t, m in book.markets.items() if book.payg_used[t] + book.spot_used[t] > m.capacity
    }
    for request in book.running.values():
        if over & request.counts.keys():
            for t, n in request.counts.items():
                if t in headroom:
                    headroom[t] += n
    return headroom


@dataclass
class _Book:
    """The tick's working state: prices, usage and the spot jobs still running."""

    markets: dict[str, TypeMarket]
    prices: dict[str, Decimal]
    averages: dict[str, Decimal]
    payg_used: Counter[str]
    spot_used: Counter[str]
    running: dict[int, SpotRequest]
    holders: dict[str, list[SpotRequest]]  # type -> running jobs using it, reclaim order
    sorted_types: set[str] = field(default_factory=set)

    @classmethod
    def open(
        cls,
        markets: Sequence[TypeMarket],
        spot: Sequence[SpotRequest],
        *,
        prices: Mapping[str, Decimal],
        averages: Mapping[str, Decimal] | None,
    ) -> _Book:
        by_type = {m.instance_type: m for m in sorted(markets, key=lambda m: m.instance_type)}
        if len(by_type) != len(markets):
            raise MarketError("DuplicateInstanceType", "each instance type may appear once")
        if set(prices) != set(by_type):
            raise MarketError("MissingPrice", "give a price for each instance type, no more")
        averages = averages or {}
        prices = {t: prices[t] for t in by_type}
        running = {r.job_id: r for r in sorted(spot, key=lambda r: r.job_id) if r.running}
        holders: dict[str, list[SpotRequest]] = {t: [] for t in by_type}
        for request in running.values():
            for t in request.counts:
                if t in holders:
                    holders[t].append(request)
        return cls(
            markets=by_type,
            prices=prices,
            averages={t: averages.get(t, p) for t, p in prices.items()},
            payg_used=Counter({t: m.payg_used for t, m in by_type.items()}),
            spot_used=Counter({t: m.spot_used for t, m in by_type.items()}),
            running=running,
            holders=holders,
        )

    def stock(self, instance_type: str) -> int:
        return spot_stock(
            self.markets[instance_type].capacity,
            self.payg_used[instance_type],
            self.spot_used[instance_type],
        )

    def held_to(self, instance_type: str) -> tuple[Decimal, str]:
        """What a running job's bid must cover to keep running, and its name."""
        if self.markets[instance_type].resource_type == "Lingjun":
            return self.averages[instance_type], "system average"
        return self.prices[instance_type], "market"

    def asked(self, instance_type: str) -> tuple[Decimal, str]:
        """What a bidding job's bid must cover to start (`asked_price`)."""
        return asked_price(
            self.markets[instance_type].resource_type,
            self.prices[instance_type],
            self.averages[instance_type],
        )

    def quote(self, instance_type: str) -> Quote | None:
        if instance_type not in self.markets or not self.markets[instance_type].spot_enabled:
            return None
        return Quote(*self.asked(instance_type), self.stock(instance_type))

    def release(self, request: SpotRequest) -> None:
        del self.running[request.job_id]
        for t, n in request.counts.items():
            if t in self.markets:
                self.spot_used[t] = max(0, self.spot_used[t] - n)

    def victims_on(self, instance_type: str) -> Iterable[SpotRequest]:
        """Running jobs on a type, lowest bid first, ties newest first."""
        holders = self.holders[instance_type]
        if instance_type not in self.sorted_types:
            holders.sort(key=lambda r: _reclaim_key(r, instance_type))
            self.sorted_types.add(instance_type)
        while holders and holders[0].job_id not in self.running:
            holders.pop(0)  # gone already; drop so later scans start past them
        return (r for r in holders if r.job_id in self.running)


def _replayed(market: TypeMarket, price: Decimal, params: MarketParams) -> Decimal:
    floor = price_floor(market.original_price, params.floor_ratio)
    return _clamp(quantize_price(_decimal(price)), floor, market.original_price)


def _reclaim_key(request: SpotRequest, instance_type: str) -> tuple[Decimal, float, int]:
    bid = min(b for t, _, b in request.needs if t == instance_type)
    started = request.started_at if request.started_at is not None else request.submitted_at
    return bid, -started, -request.job_id


def _reclaim_on_price(book: _Book) -> list[Reclaim]:
    reclaims = []
    for request in list(book.running.values()):
        for t, _, bid in request.needs:
            if t not in book.markets:
                continue  # no market to judge it by: leave it running
            limit, name = book.held_to(t)
            if bid < limit:
                code: ReclaimCode = (
                    "SpotPriceExceeded" if name == "market" else "SpotAveragePriceExceeded"
                )
                reason = _below(bid, name, limit, t)
                reclaims.append(Reclaim(request.job_id, code, reason, rebid=request.aimaster))
                book.release(request)
                break
    return reclaims


def _reclaim_over_capacity(book: _Book) -> list[Reclaim]:
    """Capacity can shrink under running jobs (a node leaves the pool): spot gives way. A
    type no longer sold as spot has no spot stock at all: every spot job on it gives way."""
    reclaims = []
    for t, market in book.markets.items():
        if not market.spot_enabled:
            for victim in list(book.victims_on(t)):
                book.release(victim)
                reason = say("stock short: {type} is no longer sold as spot", type=t)
                reclaims.append(
                    Reclaim(victim.job_id, "SpotStockShortage", reason, rebid=victim.aimaster)
                )
            continue
        in_use = book.payg_used[t] + book.spot_used[t]
        if in_use <= market.capacity:
            continue
        victims = _pick_victims(book, {t: in_use - market.capacity}, all_or_nothing=False)
        for victim in victims or ():
            reason = say(
                "stock short: capacity {capacity} < {used} instances of {type} in use",
                capacity=market.capacity,
                used=in_use,
                type=t,
            )
            reclaims.append(_shortage(book, victim, reason, t))
    return reclaims


def _start_payg(
    book: _Book, payg: Sequence[PaygRequest]
) -> tuple[list[Start], list[Waiting], list[Reclaim]]:
    """Pay-as-you-go first, FIFO by submission; a request that does not fit waits without
    blocking later ones (each is an independent purchase)."""
    starts, waiting, reclaims = [], [], []
    for request in sorted(payg, key=lambda r: (r.submitted_at, r.job_id)):
        if request.running:
            continue
        counts = _sum_counts(request.needs)
        problems = _payg_problems(book, counts)
        shortfall = {} if problems else _shortfall(book, counts)
        victims = _pick_victims(book, shortfall, all_or_nothing=True)
        if victims is None:  # spot usage the engine was not told about holds the stock
            problems = [
                _stock_text(t, n, book.stock(t)) for t, n in counts.items() if t in shortfall
            ]
        if problems:
            waiting.append(_waiting(request.job_id, problems))
            continue
        assert victims is not None  # no victims for a shortfall is a problem, handled above
        for victim in victims:
            reason = say(
                "stock short: pay-as-you-go job {job} needs instances of {types}",
                job=request.name or request.job_id,
                types=", ".join(shortfall),
            )
            reclaims.append(_shortage(book, victim, reason, *shortfall))
        book.payg_used.update(counts)
        starts.append(Start(request.job_id, "payg"))
    return starts, waiting, reclaims


def _payg_problems(book: _Book, counts: dict[str, int]) -> list[tuple[str, str]]:
    problems = []
    for t, n in counts.items():
        if t not in book.markets:
            problems.append(
                ("UnknownInstanceType", say("no public pool for instance type {type}", type=t))
            )
            continue
        available = book.markets[t].capacity - book.payg_used[t]
        if n > available:
            text = say_n(
                n,
                "stock: needs {count} instance of {type}, {free} not held by pay-as-you-go",
                "stock: needs {count} instances of {type}, {free} not held by pay-as-you-go",
                type=t,
                free=max(available, 0),
            )
            problems.append(("StockShortage", text))
    return problems


def _shortfall(book: _Book, counts: dict[str, int]) -> dict[str, int]:
    return {t: n - book.stock(t) for t, n in counts.items() if n > book.stock(t)}


def _waiting(job_id: int, problems: list[tuple[str, str]]) -> Waiting:
    return Waiting(job_id, joined([text for _, text in problems]), problems[0][0])


def _pick_victims(
    book: _Book, shortfall: Mapping[str, int], *, all_or_nothing: bool
) -> list[SpotRequest] | None:
    """Running spot jobs to reclaim so each type gains its shortfall, lowest bids first.
    None when that is impossible and `all_or_nothing` (nothing is reclaimed then)."""
    chosen: dict[int, SpotRequest] = {}
    freed: Counter[str] = Counter()
    for t, short in shortfall.items():
        for victim in book.victims_on(t):
            if freed[t] >= short:
                break
            if victim.job_id not in chosen:
                chosen[victim.job_id] = victim
                freed.update(victim.counts)
        if freed[t] < short and all_or_nothing:
            return None
    return list(chosen.values())


def _shortage(book: _Book, victim: SpotRequest, reason: str, *types: str) -> Reclaim:
    bids = ", ".join(f"{yuan(b)}/h" for t, _, b in victim.needs if t in types)
    book.release(victim)
    text = say("{reason}; lowest bids go first (this job bid {bids})", reason=reason, bids=bids)
    return Reclaim(victim.job_id, "SpotStockShortage", text, rebid=victim.aimaster)


def _start_spot(book: _Book, bidding: Sequence[SpotRequest]) -> tuple[list[Start], list[Waiting]]:
    """Highest bid first (as a share of the original price, so bids on different types
    compare), ties by submission; each job starts whole or waits, never blocking others."""
    starts, waiting = [], []
    quotes: dict[str, Quote | None] = {}  # per type until a start changes its stock

    def quote(instance_type: str) -> Quote | None:
        if instance_type not in quotes:
            quotes[instance_type] = book.quote(instance_type)
        return quotes[instance_type]

    for request in sorted(bidding, key=lambda r: (-_bid_share(book, r), r.submitted_at, r.job_id)):
        needs, problems = spot_choice(request.needs, quote, fallbacks=request.fallbacks)
        if needs is None:
            waiting.append(_waiting(request.job_id, problems))
            continue
        counts = _sum_counts((t, n) for t, n, _ in needs)
        book.spot_used.update(counts)
        for t in counts:
            quotes.pop(t, None)
        starts.append(Start(request.job_id, "spot", tuple(t for t, _, _ in needs)))
    return starts, waiting


def spot_choice(
    needs: Sequence[Need],
    quote: Callable[[str], Quote | None],
    *,
    fallbacks: Sequence[Sequence[Choice]] = (),
) -> tuple[tuple[Need, ...] | None, list[tuple[str, str]]]:
    """What a bidding spot job starts on given each type's quote: (its needs, []) with each
    role on the earliest of its choices (its own type, then `fallbacks`, in order) whose bid
    covers the asked price, such that the free stock holds every role's instances together
    (the gang). Among the combinations that fit, the first in the roles' orders wins: the
    first role's choice is settled first. (None, problems) when none fits: (code, text) of
    each reason, the role's own type's first, then each fallback's own."""
    if not any(fallbacks):  # the common case, and the words of a job without fallbacks
        problems = _spot_problems(needs, _sum_counts((t, n) for t, n, _ in needs), quote)
        return (None, problems) if problems else (tuple(needs), [])
    options: list[list[Need]] = []
    for (t0, n, bid0), more in zip(needs, fallbacks, strict=True):
        acceptable = []
        for t, bid in ((t0, bid0), *more):
            q = quote(t)
            if q is not None and bid >= q.asked and n <= q.free:
                acceptable.append((t, n, bid))
        options.append(acceptable)
    chosen = _first_fit(options, quote) if all(options) else None
    if chosen is not None:
        return chosen, []
    problems = _spot_problems(needs, _sum_counts((t, n) for t, n, _ in needs), quote)
    for i, more in enumerate(fallbacks):
        for t, bid in more:  # each fallback in its role's place, the other roles as asked
            tried = [*needs[:i], (t, needs[i][1], bid), *needs[i + 1 :]]
            counts = _sum_counts((u, n) for u, n, _ in tried)
            problems += _spot_problems([tried[i]], {t: counts[t]}, quote)
    return None, list(dict.fromkeys(problems))


def _first_fit(
    options: Sequence[Sequence[Need]], quote: Callable[[str], Quote | None]
) -> tuple[Need, ...] | None:
    """The first combination, one need per role in the roles' orders, that the free stock
    holds all together; None if none does. Depth-first, pruned on the running totals."""
    chosen: list[Need] = []
    used: Counter[str] = Counter()

    def fits(i: int) -> bool:
        if i == len(options):
            return True
        for need in options[i]:
            t, n, _ = need
            q = quote(t)
            if q is not None and used[t] + n <= q.free:
                used[t] += n
                chosen.append(need)
                if fits(i + 1):
                    return True
                used[t] -= n
                chosen.pop()
        return False

    return tuple(chosen) if fits(0) else None


def _bid_share(book: _Book, request: SpotRequest) -> Decimal:
    shares = [
        _share(b, book.markets[t].original_price) for t, _, b in request.needs if t in book.markets
    ]
    return min(shares, default=Decimal(0))


@functools.lru_cache(maxsize=65536)
def _share(bid: Decimal, original: Decimal) -> Decimal:
    """A bid as a share of the original price (bids are a few discrete values: cached)."""
    return bid / original if original else bid


def spot_wait_reason(
    needs: Sequence[Need],
    quotes: Mapping[str, Quote],
    *,
    fallbacks: Sequence[Sequence[Choice]] = (),
) -> tuple[str, str]:
    """Why a bidding spot job with these needs (and fallbacks) waits, as (reason, code),
    given each type's quote after a tick: the same words the tick uses. ("", "") when
    nothing stands in its way (it starts on the next tick). The code is the first reason's:
    the role's own type's."""
    started, problems = spot_choice(needs, quotes.get, fallbacks=fallbacks)
    if started is not None:
        return "", ""
    waiting = _waiting(0, problems)
    return waiting.reason, waiting.code


def _spot_problems(
    needs: Sequence[tuple[str, int, Decimal]],
    counts: Mapping[str, int],
    quote: Callable[[str], Quote | None],
) -> list[tuple[str, str]]:
    problems = []
    for t, _, bid in needs:
        q = quote(t)
        if q is None:
            problems.append(
                ("UnknownInstanceType", say("no spot market for instance type {type}", type=t))
            )
        elif bid < q.asked:
            code = "BidBelowAveragePrice" if q.name == "system average" else "BidBelowMarketPrice"
            problems.append((code, _below(bid, q.name, q.asked, t)))
    for t, n in counts.items():
        q = quote(t)
        if q is not None and n > q.free:
            problems.append(_stock_text(t, n, q.free))
    return problems


def _stock_text(instance_type: str, needed: int, free: int) -> tuple[str, str]:
    text = say_n(
        needed,
        "stock: needs {count} instance of {type}, {free} free",
        "stock: needs {count} instances of {type}, {free} free",
        type=instance_type,
        free=free,
    )
    return "StockShortage", text


def _below(bid: Decimal, name: str, asked: Decimal, instance_type: str) -> str:
    """Why a bid cannot run: under the price it is held to (`name`: "market" or "system
    average")."""
    if name == "market":
        return say(
            "bid {bid}/h < market {price}/h for {type}",
            bid=yuan(bid),
            price=yuan(asked),
            type=instance_type,
        )
    return say(
        "bid {bid}/h < system average {price}/h for {type}",
        bid=yuan(bid),
        price=yuan(asked),
        type=instance_type,
    )


def _sum_counts(needs: Iterable[tuple[str, int]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t, n in needs:
        counts[t] = counts.get(t, 0) + n
    return counts


@functools.lru_cache(maxsize=65536)
def yuan(price: Decimal | None) -> str:
    """A price as messages write it: ¥0.3 → "¥0.30", at most four decimals, at least two;
    "—" for none."""
    if price is None:
        return "—"
    text = f"{price:.4f}".rstrip("0")
    return f"¥{text}" if len(text.partition(".")[2]) >= 2 else f"¥{price:.2f}"


# --- replay ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BidExposure:
    """How a bid would have fared over a window of price history (the create form's spot
    guidance): the market price's time-weighted low, median and high; the share of the
    window its bid would not have held (below the price it is held to: the market price, or
    for Lingjun the system average); and how many times it would have been reclaimed (each
    time the held-to price rose above it after it had held)."""

    low: Decimal
    median: Decimal
    high: Decimal
    below_share: float
    reclaims: int


def bid_exposure(
    bid: Decimal,
    prices: Sequence[tuple[float, Decimal]],
    held_to: Sequence[tuple[float, Decimal]],
    *,
    since: float,
    until: float,
) -> BidExposure | None:
    """`BidExposure` of a bid (¥/h) over [since, until]. `prices` and `held_to` are step
    functions [(epoch seconds, ¥/h)], sorted, each starting with the point in force at
    `since`; held_to is `prices` itself for ECS. None when there is no price in the window."""
    spans = _spans(prices, since, until)
    if not spans:
        return None
    total = sum(d for _, d in spans)
    ordered = sorted(spans)
    values = [ordered[0][0], _weighted_median(ordered, total), ordered[-1][0]]
    below = 0.0
    reclaims = 0
    holding: bool | None = None
    for limit, duration in _spans(held_to, since, until):
        held = bid >= limit
        if not held:
            below += duration
        if holding and not held:
            reclaims += 1
        holding = held
    return BidExposure(
        low=values[0],
        median=values[1],
        high=values[2],
        below_share=below / total if total else 0.0,
        reclaims=reclaims,
    )


def _spans(
    series: Sequence[tuple[float, Decimal]], since: float, until: float
) -> list[tuple[Decimal, float]]:
    """(value, seconds in force) of each step of a step function within [since, until], in
    time order."""
    out = []
    for i, (at, value) in enumerate(series):
        start = max(at, since)
        end = min(series[i + 1][0] if i + 1 < len(series) else until, until)
        if end > start:
            out.append((value, end - start))
    return out


def _weighted_median(ordered: Sequence[tuple[Decimal, float]], total: float) -> Decimal:
    """The value in force for half the window or more, counting from the lowest."""
    seen = 0.0
    for value, duration in ordered:
        seen += duration
        if seen >= total / 2:
            return value
    return ordered[-1][0]


def load_replay_csv(lines: Iterable[str]) -> dict[str, list[PricePoint]]:
    """Price series per type from a CSV with header `timestamp,instance_type,price`.

    Timestamps are epoch seconds or ISO-8601 (naive means UTC); prices are per
    instance-hour. Each series is sorted by time (stable: equal times keep file order).
    """
    reader = csv.DictReader(line.lstrip("\ufeff") for line in lines)
    reader.fieldnames = [name.strip() for name in reader.fieldnames or ()]
    missing = {"timestamp", "instance_type", "price"} - set(reader.fieldnames)
    if missing:
        columns = ", ".join(sorted(missing))
        raise MarketError("InvalidReplay", f"replay CSV lacks column(s): {columns}")
    series: dict[str, list[PricePoint]] = {}
    for row in reader:
        try:
            at, price = _parse_timestamp(row["timestamp"]), Decimal(row["price"].strip())
        except (AttributeError, ValueError, InvalidOperation) as error:
            raise MarketError(
                "InvalidReplay", f"replay CSV line {reader.line_num}: {error}"
            ) from None
        if not price.is_finite() or price < 0:
            raise MarketError("InvalidReplay", f"replay CSV line {reader.line_num}: price {price}")
        series.setdefault(row["instance_type"].strip(), []).append((at, quantize_price(price)))
    for points in series.values():
        points.sort(key=_at)
    return series


def replay_price_at(series: Sequence[PricePoint], t: float) -> Decimal | None:
    """The recorded price in force at `t` (step function); None before the first point."""
    index = bisect_right(series, t, key=_at)
    return series[index - 1][1] if index else None


def _parse_timestamp(text: str) -> float:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


# --- billing -----------------------------------------------------------------------------


def bill_minutes(
    start: float,
    end: float,
    *,
    already_billed_until: float | None,
    earlier_end: float | None = None,
) -> list[int]:
    """Epoch minute numbers to bill for a pod that ran on [start, end): every minute it ran
    in, once. Minutes starting before `already_billed_until` were billed by an earlier run
    (which billed the minute it stopped in), so they are skipped.

    A job's slot (a role's pod index) is one instance to its user, whatever pods fill it one
    after the other (a lost or reclaimed pod, then its next attempt): each minute is billed
    once, to the first of them that ran in it. `earlier_end` is when the slot's earlier pods
    (those that ran, ending after they started, before this one started) ended, the latest
    of them: the minute it falls in is theirs, even when this pod replaced them within it."""
    first = int(start // 60)
    for billed in (already_billed_until, earlier_end):
        if billed is not None:
            first = max(first, -int(-billed // 60))
    stop = -int(-end // 60)  # ceil: the minute `end` falls in was started
    return list(range(first, stop)) if end > start else []


def price_for_minute(history: Sequence[PricePoint], minute: int) -> Decimal:
    """The per-hour price in force at the minute's start."""
    price = replay_price_at(history, minute * 60)
    if price is None:
        raise MarketError("NoPriceHistory", f"no price at or before minute {minute}")
    return price


def pod_minute_price(
    history: Sequence[PricePoint], minute: int, *, started: float
) -> Decimal | None:
    """The per-hour price a pod's minute is charged at, spot (the market price history) and
    pay-as-you-go (the original price history) alike: the one in force at the minute's
    start, or for the pod's first, partial minute the one in force when it started (never
    an earlier one, which a spot bid may not have covered). None when the history has no
    price then."""
    return replay_price_at(history, max(minute * 60, started))


def minute_charge(price_per_hour: Decimal) -> Decimal:
    """One instance-minute at a per-hour price, on a 0.000001 grid (half up)."""
    return (price_per_hour / 60).quantize(MINUTE_QUANTUM, rounding=ROUND_HALF_UP)


def minute_charges(
    history: Sequence[PricePoint], minutes: Iterable[int]
) -> list[tuple[int, Decimal]]:
    """(minute, charge) for each minute, at the price in force at its start."""
    return [(m, minute_charge(price_for_minute(history, m))) for m in minutes]
