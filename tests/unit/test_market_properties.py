"""Invariants of the spot market core, checked on generated markets (hypothesis)."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass, replace
from decimal import Decimal as D

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from apps.core.pricing import (
    MarketParams,
    PaygRequest,
    SpotRequest,
    Start,
    TypeMarket,
    asked_price,
    bid_exposure,
    bill_minutes,
    market_step,
    minute_charge,
    next_price,
    per_minute_to_hour,
    price_floor,
    price_for_minute,
    price_limit_range,
    spot_headroom,
    system_average,
    target_fraction,
)

NOW = 1_700_000_000.0
TYPES = ("ecs.c7.large", "ecs.g7.xlarge", "ecs.gn7i.2xlarge", "ml.gu7xf.8xlarge")
ORIGINALS = (D("0.05"), D("0.80"), D("2.5000"), D("12.3456"), D("40"))
FAST = settings(max_examples=150, deadline=None)
MINUTE = D("0.000001")  # the API's SpotPriceLimit grid, CNY per instance-minute


@dataclass(frozen=True)
class Scenario:
    markets: tuple[TypeMarket, ...]
    spot: tuple[SpotRequest, ...]
    payg: tuple[PaygRequest, ...]
    params: MarketParams
    seed: int
    averages: dict[str, D] | None
    replay: dict[str, D] | None
    shrunk: frozenset[str]  # types whose capacity dropped under running jobs

    def step(self, *, spot=None, markets=None):
        return market_step(
            self.markets if markets is None else markets,
            self.spot if spot is None else spot,
            self.payg,
            params=self.params,
            rng=random.Random(self.seed),
            now=NOW,
            averages=self.averages,
            replay=self.replay,
        )


def price_in(draw, original: D, ratio: D = D("0.1")) -> D:
    low = price_floor(original, ratio)
    ticks = draw(st.integers(int(low * 10_000), int(original * 10_000)))
    return D(ticks) / 10_000


@st.composite
def scenarios(draw, *, bidders: bool = False) -> Scenario:
    """A market with running and bidding spot jobs and pay-as-you-go; `bidders`: only
    bidding jobs, more of them, each role with fallback types."""
    params = MarketParams(
        floor_ratio=draw(st.sampled_from([D("0.1"), D("0.25")])),
        smoothing=draw(st.floats(0.0, 1.0)),
        volatility=draw(st.floats(0.0, 0.5)),
        sensitivity=draw(st.floats(0.0, 5.0)),
    )
    types = draw(
        st.lists(st.sampled_from(TYPES), min_size=2 if bidders else 1, max_size=3, unique=True)
    )
    kinds = {t: draw(st.sampled_from(["ECS", "Lingjun"])) for t in types}
    originals = {t: draw(st.sampled_from(ORIGINALS)) for t in types}
    capacity = {t: draw(st.integers(0, 12)) for t in types}
    payg_used = {t: draw(st.integers(0, capacity[t])) for t in types}

    def needs(max_count: int):
        chosen = draw(st.lists(st.sampled_from(types), min_size=1, max_size=2))
        return tuple(
            (
                t,
                draw(st.integers(1, max_count)),
                price_in(draw, originals[t], D("0.05")) + draw(st.sampled_from([0, 0, 1])),
            )
            for t in chosen
        )

    spot, spot_used, job_id = [], Counter(), 0
    for _ in range(0 if bidders else draw(st.integers(0, 6))):  # running jobs that fit
        job_id += 1
        wanted = needs(3)
        counts = Counter()
        for t, n, _ in wanted:
            counts[t] += n
        if all(payg_used[t] + spot_used[t] + counts[t] <= capacity[t] for t in counts):
            spot_used.update(counts)
            spot.append(_spot(draw, job_id, wanted, running=True))
    bidding_demand = Counter()
    for _ in range(draw(st.integers(2, 12) if bidders else st.integers(0, 8))):
        job_id += 1
        wanted = needs(5)
        for t, n, _ in wanted:
            bidding_demand[t] += n
        more = (bidders or draw(st.booleans())) and _fallbacks(draw, wanted, types, originals)
        spot.append(_spot(draw, job_id, wanted, running=False, fallbacks=more or ()))
    payg = []
    for _ in range(0 if bidders else draw(st.integers(0, 4))):
        job_id += 1
        chosen = draw(st.lists(st.sampled_from(types), min_size=1, max_size=2, unique=True))
        wanted = tuple((t, draw(st.integers(1, 8))) for t in chosen)
        payg.append(PaygRequest(job_id, wanted, False, NOW - draw(st.integers(0, 1000))))

    shrunk = set()
    for t in types:  # a node may have left the pool under running jobs
        cut = draw(st.integers(0, 3))
        if cut and capacity[t] - cut >= payg_used[t] and spot_used[t]:
            capacity[t] -= cut
            shrunk.add(t)
    markets = tuple(
        TypeMarket(
            instance_type=t,
            resource_type=kinds[t],
            original_price=originals[t],
            capacity=capacity[t],
            payg_used=payg_used[t],
            spot_used=spot_used[t],
            bidding_demand=bidding_demand[t],
            price=price_in(draw, originals[t], params.floor_ratio),
        )
        for t in types
    )
    averages = draw(st.none() | st.just({t: price_in(draw, originals[t]) for t in types}))
    replay = draw(
        st.none() | st.just({t: D(draw(st.integers(0, 500_000))) / 10_000 for t in types[:1]})
    )
    return Scenario(
        markets, tuple(spot), tuple(payg), params, draw(st.integers(0, 2**32)),
        averages, replay, frozenset(shrunk),
    )  # fmt: skip


def _fallbacks(draw, needs, types, originals) -> tuple:
    """Per role, some of the other types in a drawn order, each with a bid of its own."""
    return tuple(
        tuple(
            (f, price_in(draw, originals[f], D("0.05")) + draw(st.sampled_from([0, 0, 1])))
            for f in draw(st.permutations([u for u in types if u != t]))[
                : draw(st.integers(0, len(types) - 1))
            ]
        )
        for t, _, _ in needs
    )


def _spot(draw, job_id: int, needs, *, running: bool, fallbacks=()) -> SpotRequest:
    return SpotRequest(
        job_id=job_id,
        needs=needs,
        fallbacks=fallbacks,
        running=running,
        submitted_at=NOW - draw(st.integers(0, 5000)),
        started_at=NOW - draw(st.integers(0, 100)) if running else None,
        aimaster=draw(st.booleans()),
    )


def started_needs(request: SpotRequest, start: Start) -> tuple:
    """A started job's (type, instances, bid) per role: the choice it started on."""
    return tuple(
        (t, n, dict(choices)[t])
        for t, (_, n, _), choices in zip(start.types, request.needs, request.choices, strict=True)
    )


def running_needs(scenario: Scenario, plan) -> dict[int, tuple]:
    """Each spot job running once the plan is applied, with what it holds per role."""
    starts = {s.job_id: s for s in plan.starts if s.kind == "spot"}
    reclaimed = {r.job_id for r in plan.reclaims}
    held = {}
    for request in scenario.spot:
        if request.job_id in starts:
            held[request.job_id] = started_needs(request, starts[request.job_id])
        elif request.running and request.job_id not in reclaimed:
            held[request.job_id] = request.needs
    return held


def usage_after(scenario: Scenario, plan) -> tuple[Counter, Counter, set[int]]:
    """(payg usage, spot usage, running spot job ids) once the plan is applied."""
    started = {s.job_id for s in plan.starts}
    payg = Counter({m.instance_type: m.payg_used for m in scenario.markets})
    for request in scenario.payg:
        if request.job_id in started:
            payg.update(dict(request.needs))
    held = running_needs(scenario, plan)
    spot = Counter()
    for needs in held.values():
        for t, n, _ in needs:
            spot[t] += n
    return payg, spot, set(held)


def rule_price(scenario: Scenario, plan, instance_type: str) -> D:
    """What a running job's bid is compared against after the step."""
    market = next(m for m in scenario.markets if m.instance_type == instance_type)
    price = plan.prices[instance_type]
    if market.resource_type == "Lingjun" and scenario.averages:
        return scenario.averages[instance_type]
    return price


@FAST
@given(scenarios())
def test_it_keeps_every_price_between_floor_and_original(scenario):
    plan = scenario.step()
    for m in scenario.markets:
        price = plan.prices[m.instance_type]
        assert price_floor(m.original_price, scenario.params.floor_ratio) <= price
        assert price <= m.original_price
        assert price == price.quantize(D("0.0001"))


@FAST
@given(scenarios())
def test_it_leaves_no_spot_job_running_below_its_rule(scenario):
    plan = scenario.step()
    for job_id, needs in running_needs(scenario, plan).items():
        for t, _, bid in needs:
            assert bid >= rule_price(scenario, plan, t), (job_id, needs, plan)


@FAST
@given(scenarios())
def test_it_never_uses_more_than_the_capacity(scenario):
    plan = scenario.step()
    payg, spot, _ = usage_after(scenario, plan)
    for m in scenario.markets:
        t = m.instance_type
        assert payg[t] + spot[t] <= m.capacity
        assert plan.stock[t] == m.capacity - payg[t] - spot[t] >= 0


@FAST
@given(scenarios())
def test_it_decides_each_job_once_and_whole(scenario):
    plan = scenario.step()
    starts = Counter(s.job_id for s in plan.starts)
    waits = Counter(w.job_id for w in plan.waiting)
    reclaims = Counter(r.job_id for r in plan.reclaims)
    assert max([*starts.values(), *waits.values(), *reclaims.values()], default=1) == 1
    pending = [r.job_id for r in scenario.spot if not r.running]
    pending += [r.job_id for r in scenario.payg if not r.running]
    assert sorted(pending) == sorted([*starts, *waits])
    assert set(reclaims) <= {r.job_id for r in scenario.spot if r.running}
    assert all(w.reason and w.code for w in plan.waiting)


@FAST
@given(scenarios() | scenarios(bidders=True))
def test_it_never_starts_a_role_on_a_type_priced_above_its_limit_there(scenario):
    plan = scenario.step()
    averages = scenario.averages or {}
    kinds = {m.instance_type: m.resource_type for m in scenario.markets}
    requests = {r.job_id: r for r in scenario.spot}
    for start in plan.starts:
        if start.kind == "spot":
            for t, _, bid in started_needs(requests[start.job_id], start):
                assert bid >= asked_price(kinds[t], plan.prices[t], averages.get(t))[0]


@FAST
@given(scenarios() | scenarios(bidders=True))
def test_it_starts_each_bidder_on_its_earliest_acceptable_choices(scenario):
    """Against an independent oracle, with nothing running and no pay-as-you-go: bidders
    are served highest share of the original price first, and each starts on the first
    combination of its roles' choices, in order (itertools.product), whose bids cover the
    asked prices and whose instances the stock left holds together; else it waits."""
    markets = tuple(replace(m, spot_used=0) for m in scenario.markets)
    bidding = [r for r in scenario.spot if not r.running]
    plan = market_step(
        markets,
        bidding,
        [],
        params=scenario.params,
        rng=random.Random(scenario.seed),
        now=NOW,
        averages=scenario.averages,
        replay=scenario.replay,
    )
    averages = scenario.averages or {}
    asked = {
        m.instance_type: asked_price(
            m.resource_type, plan.prices[m.instance_type], averages.get(m.instance_type)
        )[0]
        for m in markets
    }
    free = {m.instance_type: m.capacity - m.payg_used for m in markets}
    originals = {m.instance_type: m.original_price for m in markets}

    def share(request: SpotRequest) -> D:
        shares = [b / originals[t] for t, _, b in request.needs if t in originals]
        return min(shares, default=D(0))

    expected = []
    for request in sorted(bidding, key=lambda r: (-share(r), r.submitted_at, r.job_id)):
        for combination in itertools.product(*request.choices):
            counts = Counter()
            for (t, _), (_, n, _) in zip(combination, request.needs, strict=True):
                counts[t] += n
            if all(t in asked and bid >= asked[t] for t, bid in combination) and all(
                n <= free[t] for t, n in counts.items()
            ):
                for t, n in counts.items():
                    free[t] -= n
                expected.append(Start(request.job_id, "spot", tuple(t for t, _ in combination)))
                break
    assert plan.starts == tuple(expected)
    assert all(plan.stock[t] == free[t] >= 0 for t in free)
    waiting = {r.job_id for r in bidding} - {s.job_id for s in expected}
    assert {w.job_id for w in plan.waiting} == waiting


@FAST
@given(scenarios())
def test_it_never_makes_a_fitting_payg_job_wait_for_spot(scenario):
    plan = scenario.step()
    payg, _, _ = usage_after(scenario, plan)
    capacity = {m.instance_type: m.capacity for m in scenario.markets}
    waiting = {w.job_id for w in plan.waiting}
    for request in scenario.payg:
        if request.job_id in waiting:
            assert any(n > capacity[t] - payg[t] for t, n in request.needs), request


@FAST
@given(scenarios())
def test_it_reclaims_for_stock_only_when_payg_or_a_shrink_needs_it(scenario):
    plan = scenario.step()
    if any(r.code == "SpotStockShortage" for r in plan.reclaims):
        assert any(s.kind == "payg" for s in plan.starts) or scenario.shrunk


@FAST
@given(scenarios(), st.randoms(use_true_random=False))
def test_it_plans_the_same_for_the_same_seed_whatever_the_input_order(scenario, shuffler):
    spot, markets = list(scenario.spot), list(scenario.markets)
    shuffler.shuffle(spot)
    shuffler.shuffle(markets)
    assert scenario.step() == scenario.step(spot=spot, markets=markets)


@FAST
@given(scenarios() | scenarios(bidders=True))
def test_it_plans_the_same_without_the_bids_below_the_asked_price(scenario):
    """The live tick reads only the bids that cover their type's asked price: leaving the
    others out changes no price, start, reclaim or stock (they can only wait). Bidders one
    quantum below, at and above each asked price sit on the edge."""
    prices = scenario.step().prices  # prices follow the markets and the seed, not the bids
    markets = {m.instance_type: m for m in scenario.markets}
    averages = scenario.averages or {}
    asked = {
        t: asked_price(m.resource_type, prices[t], averages.get(t))[0] for t, m in markets.items()
    }
    edge = [
        SpotRequest(
            job_id=1000 + 3 * i + k,
            needs=((t, 1, asked[t] + (k - 1) * D("0.0001")),),
            running=False,
            submitted_at=NOW - i,
        )
        for i, t in enumerate(markets)
        for k in range(3)
    ]
    spot = [*scenario.spot, *edge]

    def below(request: SpotRequest) -> bool:  # some role bids below on every choice
        return not request.running and any(
            all(t in asked and bid < asked[t] for t, bid in choices) for choices in request.choices
        )

    kept = [r for r in spot if not below(r)]
    plan, lean = scenario.step(spot=spot), scenario.step(spot=kept)
    assert (lean.prices, lean.starts, lean.reclaims, lean.stock) == (
        plan.prices,
        plan.starts,
        plan.reclaims,
        plan.stock,
    )
    left_out = {r.job_id for r in spot} - {r.job_id for r in kept}
    assert left_out <= {w.job_id for w in plan.waiting}
    assert set(lean.waiting) == {w for w in plan.waiting if w.job_id not in left_out}


@FAST
@given(scenarios() | scenarios(bidders=True), st.booleans())
def test_it_plans_the_same_without_the_jobs_that_need_more_than_the_headroom(scenario, payg):
    """Nor does the live tick read a bidding job with a role that needs more instances than
    the tick can free for spot (`spot_headroom`, which counts what a capacity shrink may
    reclaim); with pay-as-you-go waiting there is no bound. Bidders needing the headroom,
    one more and one less, on every type, sit on the edge."""
    payg_requests = scenario.payg if payg else ()
    prices = scenario.step().prices
    running = [r for r in scenario.spot if r.running]
    headroom = spot_headroom(
        scenario.markets,
        running,
        prices=prices,
        averages=scenario.averages,
        payg_waiting=bool(payg_requests),
    )
    if payg_requests:
        assert headroom is None
        return
    markets = {m.instance_type: m for m in scenario.markets}
    edge = [
        SpotRequest(
            job_id=2000 + 3 * i + k,
            needs=((t, max(1, headroom[t] + k - 1), m.original_price),),
            running=False,
            submitted_at=NOW - i,
        )
        for i, (t, m) in enumerate(markets.items())
        for k in range(3)
    ]
    spot = [*scenario.spot, *edge]

    def step(requests):
        return market_step(
            scenario.markets,
            requests,
            payg_requests,
            params=scenario.params,
            rng=random.Random(scenario.seed),
            now=NOW,
            averages=scenario.averages,
            replay=scenario.replay,
        )

    plan = step(spot)
    kept = [  # some role needs more than the headroom on every choice: left out
        r
        for r in spot
        if r.running
        or all(
            any(t not in headroom or n <= headroom[t] for t, _ in choices)
            for (_, n, _), choices in zip(r.needs, r.choices, strict=True)
        )
    ]
    lean = step(kept)
    assert (lean.prices, lean.starts, lean.reclaims, lean.stock) == (
        plan.prices,
        plan.starts,
        plan.reclaims,
        plan.stock,
    )
    assert all(
        n <= headroom[t]
        for s in plan.starts
        if s.kind == "spot"
        for r in spot
        if r.job_id == s.job_id
        for t, n, _ in started_needs(r, s)
        if t in headroom
    )


@FAST
@given(scenarios())
def test_it_moves_toward_the_target_without_noise(scenario):
    params = MarketParams(
        floor_ratio=scenario.params.floor_ratio,
        smoothing=scenario.params.smoothing,
        volatility=0.0,
        sensitivity=scenario.params.sensitivity,
    )
    for m in scenario.markets:
        floor = price_floor(m.original_price, params.floor_ratio)
        fraction = D(repr(target_fraction(m, sensitivity=params.sensitivity)))
        target = floor + (m.original_price - floor) * fraction
        new = next_price(m, params=params, rng=random.Random(0))
        low, high = sorted([m.price, target])
        assert low - D("0.0001") <= new <= high + D("0.0001")


@st.composite
def histories(draw):
    times = sorted(draw(st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True)))
    return [(float(t), D(draw(st.integers(1, 100_000))) / 10_000) for t in times]


@FAST
@given(histories(), st.integers(0, 12_000), st.integers(0, 8_000))
def test_it_keeps_the_average_within_the_prices_in_the_window(history, now, window):
    if history[0][0] > now:
        return
    in_force = [p for t, p in history if now - window < t <= now]
    before = [p for t, p in history if t <= now - window]
    prices = in_force + before[-1:]
    average = system_average(history, now=float(now), window=float(window))
    assert min(prices) <= average <= max(prices)


@FAST
@given(
    st.floats(0, 10_000, allow_nan=False),
    st.floats(0, 5_000, allow_nan=False),
    st.floats(0, 5_000, allow_nan=False),
)
def test_it_bills_each_started_minute_once_across_runs(start, first_run, second_run):
    middle, end = start + first_run, start + first_run + second_run
    once = bill_minutes(start, end, already_billed_until=None)
    earlier = bill_minutes(start, middle, already_billed_until=None)
    later = bill_minutes(start, end, already_billed_until=middle if earlier else None)
    assert not set(earlier) & set(later)
    assert sorted(set(earlier) | set(later)) == once or (not earlier and later == once)
    # every billed minute overlaps [start, end), and every second run lies in a billed minute
    assert all(m * 60 < end and (m + 1) * 60 > start for m in once)
    assert all(int(s // 60) in once for s in (start, end - 1e-6) if start <= s < end)


@FAST
@given(
    st.lists(
        st.tuples(st.floats(0, 150, allow_nan=False), st.floats(0, 150, allow_nan=False)),
        min_size=1,
        max_size=6,
    ),
    st.floats(0, 1, allow_nan=False),
)
def test_it_bills_each_minute_of_a_slot_once_whoever_ran_in_it(spans, cut):
    """Pods that fill one slot of a job one after the other (a pod lost or reclaimed, then
    its next attempt, often within the same minute), each after a random gap and for a
    random time, each billed in two runs: every minute one of them ran in is billed once,
    to the first that ran in it."""
    runs, moment = [], 6_000.0
    for gap, length in spans:
        runs.append((moment + gap, moment + gap + length))
        moment += gap + length
    billed: list[list[int]] = []
    for i, (start, end) in enumerate(runs):
        earlier_end = max((e for s, e in runs[:i] if s < e), default=None)  # those that ran
        middle = start + (end - start) * cut  # a billing run while it ran
        first = bill_minutes(start, middle, already_billed_until=None, earlier_end=earlier_end)
        already = (first[-1] + 1) * 60 if first else None  # the meter's billed_until
        rest = bill_minutes(start, end, already_billed_until=already, earlier_end=earlier_end)
        billed.append(first + rest)
    ran = [
        {
            m
            for m in range(int(s // 60), int(e // 60) + 1)
            if s < e and s < (m + 1) * 60 and m * 60 < e
        }
        for s, e in runs
    ]
    every = [m for minutes in billed for m in minutes]
    assert len(every) == len(set(every))  # no minute twice
    assert set(every) == set().union(*ran)  # and none left out
    for i, minutes in enumerate(billed):  # each to the first pod that ran in it
        assert set(minutes) == ran[i] - set().union(*ran[:i])


@FAST
@given(histories(), st.integers(10_000, 20_000), st.integers(0, 600))
def test_it_bills_the_sum_of_per_minute_prices(history, start, seconds):
    # The market prices a type before it starts any pod on it: a price is in force from the
    # start of the pod's first minute.
    assume(history[0][0] <= (start // 60) * 60)
    end = start + seconds
    minutes = bill_minutes(float(start), float(end), already_billed_until=None)
    billed = sum((minute_charge(price_for_minute(history, m)) for m in minutes), D(0))
    # independently: walk the run second by second, charging each new minute once
    seen, expected = set(), D(0)
    for second in range(start, end):
        minute = second // 60
        if minute not in seen:
            seen.add(minute)
            in_force = [p for t, p in history if t <= minute * 60][-1]
            expected += (in_force / 60).quantize(D("0.000001"))
    assert billed == expected


@given(st.integers(5_000, 2_000_000), st.integers(0, 999))
def test_it_offers_price_limits_that_bid_exactly_the_market_range(ticks, permille):
    """Over originals ¥0.5–¥200/h and any floor ratio the cluster file takes: the lowest
    SpotPriceLimit offered bids the floor (one quantum less bids under it and could never
    start), the highest bids the original."""
    original, ratio = D(ticks) / 10_000, D(permille) / 1000
    low, high = price_limit_range(original, ratio)
    floor = price_floor(original, ratio)
    assert low <= high and low == low.quantize(MINUTE) and high == high.quantize(MINUTE)
    assert per_minute_to_hour(low) == floor
    assert per_minute_to_hour(low - MINUTE) < floor
    assert per_minute_to_hour(high) == original


# --- a bid's exposure over the price history ---------------------------------------------

_STEPS = st.lists(
    st.tuples(st.integers(1, 50), st.integers(1, 900)), min_size=1, max_size=30
)  # (seconds the step lasts, fen per hour)


def _series(steps) -> list[tuple[float, D]]:
    t, out = 0.0, []
    for seconds, fen in steps:
        out.append((t, D(fen) / 100))
        t += seconds
    return out


@FAST
@given(_STEPS, st.integers(0, 1000))
def test_bid_exposure_is_bounded_and_monotone_in_the_bid(steps, bid_fen):
    prices = _series(steps)
    until = sum(s for s, _ in steps)
    bid = D(bid_fen) / 100
    exposure = bid_exposure(bid, prices, prices, since=0.0, until=until)
    higher = bid_exposure(bid + 1, prices, prices, since=0.0, until=until)
    assert exposure is not None and higher is not None
    assert exposure.low <= exposure.median <= exposure.high
    assert 0.0 <= exposure.below_share <= 1.0 and 0 <= exposure.reclaims < len(steps)
    assert higher.below_share <= exposure.below_share  # a higher bid holds at least as long
    if bid >= exposure.high:
        assert exposure.below_share == 0.0 and exposure.reclaims == 0
    if bid < exposure.low:
        assert exposure.below_share == 1.0 and exposure.reclaims == 0
