"""Example tests for the spot market core, one rule each. No database, fixed clock and seed."""

from __future__ import annotations

import random
from dataclasses import replace
from decimal import Decimal as D

import pytest

from apps.core.pricing import (
    MarketError,
    MarketParams,
    PaygRequest,
    Quote,
    Reclaim,
    SpotRequest,
    Start,
    TypeMarket,
    Waiting,
    bid_exposure,
    bid_limit_per_hour,
    bill_minutes,
    hour_to_per_minute,
    load_replay_csv,
    market_step,
    minute_charge,
    minute_charges,
    next_price,
    per_minute_to_hour,
    pod_minute_price,
    price_floor,
    price_following_original,
    price_for_minute,
    price_limit_range,
    replay_price_at,
    spot_stock,
    spot_wait_reason,
    system_average,
    yuan,
)

NOW = 1_700_000_000.0
G7 = "ecs.g7.xlarge"
GN7 = "ecs.gn7i-c8g1.2xlarge"
LJ = "ml.gu7xf.c96m1600.8-gu108"
QUIET = MarketParams(volatility=0.0)  # no noise: prices follow the target only


def market(
    instance_type: str = G7,
    *,
    resource_type: str = "ECS",
    original: str = "0.80",
    capacity: int = 10,
    payg_used: int = 0,
    spot_used: int = 0,
    bidding: int = 0,
    price: str = "0.30",
) -> TypeMarket:
    return TypeMarket(
        instance_type=instance_type,
        resource_type=resource_type,
        original_price=D(original),
        capacity=capacity,
        payg_used=payg_used,
        spot_used=spot_used,
        bidding_demand=bidding,
        price=D(price),
    )


def spot(
    job_id: int,
    bid: str,
    instances: int = 1,
    *,
    instance_type: str = G7,
    running: bool = False,
    submitted_at: float = 0.0,
    **extra,
) -> SpotRequest:
    return SpotRequest(
        job_id=job_id,
        instance_type=instance_type,
        instances=instances,
        bid=D(bid),
        running=running,
        submitted_at=NOW - 1000 + submitted_at,
        **extra,
    )


def payg(job_id: int, instances: int, *, instance_type: str = G7, at: float = 0.0) -> PaygRequest:
    return PaygRequest(job_id, ((instance_type, instances),), False, NOW - 500 + at)


def step(markets, spot_requests=(), payg_requests=(), *, params=QUIET, seed=7, **kwargs):
    return market_step(
        markets,
        spot_requests,
        payg_requests,
        params=params,
        rng=random.Random(seed),
        now=NOW,
        **kwargs,
    )


def frozen_at(price: str) -> dict[str, D]:
    """Replay the given price for G7 so a test controls the market price exactly."""
    return {G7: D(price)}


# --- units and bids ---------------------------------------------------------------------


def test_it_converts_the_api_per_minute_limit_to_per_hour():
    assert per_minute_to_hour(D("0.011")) == D("0.6600")
    assert hour_to_per_minute(D("0.80")) == D("0.013333")


def test_it_reads_a_discount_as_a_share_of_the_original_price():
    assert bid_limit_per_hour(D("0.80"), discount=D("0.4"), price_limit_per_minute=None) == D(
        "0.3200"
    )


def test_it_reads_a_per_minute_price_limit_as_per_hour():
    bid = bid_limit_per_hour(D("0.80"), discount=None, price_limit_per_minute=D("0.011"))
    assert bid == D("0.6600")


def test_it_accepts_the_sdk_floats():
    bid = bid_limit_per_hour(D("0.80"), discount=None, price_limit_per_minute=0.011)
    assert bid == D("0.6600")


@pytest.mark.parametrize("discount, limit", [(D("0.4"), D("0.011")), (None, None)])
def test_it_rejects_both_or_neither_spot_limit(discount, limit):
    with pytest.raises(MarketError) as caught:
        bid_limit_per_hour(D("0.80"), discount=discount, price_limit_per_minute=limit)
    assert caught.value.code == "InvalidSpotSpec"


def test_it_offers_the_price_limits_from_the_floor_to_the_original_per_minute():
    assert price_limit_range(D("0.80")) == (D("0.001333"), D("0.013333"))
    assert price_limit_range(D("0.80"), D("0.2")) == (D("0.002666"), D("0.013333"))


def test_it_never_offers_a_lowest_price_limit_below_the_floor():
    # 10% of ¥0.5065/h per minute is ¥0.000844166…: rounded half up, ¥0.000844/min is
    # ¥0.0506/h, under the ¥0.0507/h floor, a bid that could never start.
    low, _ = price_limit_range(D("0.5065"))
    assert price_floor(D("0.5065")) == D("0.0507")
    assert low == D("0.000845") and per_minute_to_hour(low) == D("0.0507")


def test_it_offers_the_lowest_price_limit_that_bids_the_floor():
    # ¥0.000835/min is ¥0.0501/h, the floor of ¥0.5013/h: it can start, so it is offered.
    assert price_limit_range(D("0.5013"))[0] == D("0.000835")


def test_it_offers_only_zero_when_the_floor_is_zero():
    assert price_limit_range(D("0"), D("0.1")) == (D("0"), D("0"))
    assert price_limit_range(D("0.80"), D("0"))[0] == D("0")


# --- the type market --------------------------------------------------------------------


def test_it_puts_the_floor_at_ten_percent_of_the_original():
    assert market(original="0.80").floor == D("0.0800")


def test_it_never_reports_negative_stock():
    shrunk = market(capacity=3, payg_used=2, spot_used=4)
    assert shrunk.spot_stock == 0
    assert market(capacity=10, payg_used=2, spot_used=3).spot_stock == 5


def test_it_counts_as_spot_stock_what_neither_payg_nor_spot_holds():
    assert spot_stock(10, 2, 3) == 5
    assert spot_stock(3, 2, 4) == 0  # a node left the public pool


def test_it_counts_running_and_bidding_spot_as_demand():
    assert market(spot_used=3, bidding=4).demand == 7


# --- prices -----------------------------------------------------------------------------


def test_it_raises_the_price_when_demand_exceeds_supply():
    busy = market(capacity=10, spot_used=10, bidding=20, price="0.30")
    assert next_price(busy, params=QUIET, rng=random.Random(1)) > D("0.30")


def test_it_lowers_the_price_when_spot_sits_idle():
    idle = market(capacity=10, price="0.60")
    assert next_price(idle, params=QUIET, rng=random.Random(1)) < D("0.60")


def test_it_closes_only_a_fraction_of_the_gap_per_tick():
    idle = market(capacity=10, price="0.80")  # target is the floor, 0.08
    # a fifth of the way down from 0.80 toward 0.08
    assert next_price(idle, params=QUIET, rng=random.Random(1)) == D("0.6560")


def test_it_goes_to_the_original_price_when_payg_holds_everything():
    full = market(capacity=4, payg_used=4, price="0.79")
    params = MarketParams(volatility=0.0, smoothing=1.0)
    assert next_price(full, params=params, rng=random.Random(1)) == D("0.80")


def test_it_keeps_the_price_within_floor_and_original():
    wild = MarketParams(volatility=5.0, smoothing=1.0)
    rng = random.Random(3)
    prices = {next_price(market(bidding=i, price="0.40"), params=wild, rng=rng) for i in range(50)}
    assert min(prices) >= D("0.08") and max(prices) <= D("0.80")
    assert len(prices) > 2  # the noise does move it


def test_it_quantizes_prices_to_a_ten_thousandth():
    price = next_price(market(bidding=3), params=MarketParams(), rng=random.Random(5))
    assert price == price.quantize(D("0.0001"))


def test_it_repeats_the_same_prices_for_the_same_seed():
    m = market(spot_used=5, bidding=3)
    first = [next_price(m, params=MarketParams(), rng=random.Random(42)) for _ in range(3)]
    assert len(set(first)) == 1


# --- system average ---------------------------------------------------------------------


def test_it_averages_a_step_history_by_time():
    history = [(NOW - 3600, D("1.00")), (NOW - 900, D("2.00"))]
    assert system_average(history, now=NOW, window=3600) == D("1.2500")


def test_it_counts_the_price_before_the_window_from_the_window_start():
    history = [(NOW - 10_000, D("1.00")), (NOW - 1800, D("3.00"))]
    assert system_average(history, now=NOW, window=3600) == D("2.0000")


def test_it_ignores_prices_after_now():
    history = [(NOW - 7200, D("1.00")), (NOW + 60, D("9.00"))]
    assert system_average(history, now=NOW, window=3600) == D("1.0000")


def test_it_averages_only_the_part_of_the_window_with_prices():
    history = [(NOW - 600, D("1.00")), (NOW - 300, D("2.00"))]
    assert system_average(history, now=NOW, window=3600) == D("1.5000")


def test_it_averages_past_prices_at_their_share_of_the_original_then():
    """The original halved 15 minutes ago: the ¥1.00 of before counts as ¥0.50, its share
    of the original now, as the market's own point at the change says."""
    originals = [(float("-inf"), D("2.00")), (NOW - 900, D("1.00"))]
    history = [(NOW - 3600, D("1.00")), (NOW - 900, D("0.50"))]
    assert system_average(history, now=NOW, window=3600, originals=originals) == D("0.5000")
    assert system_average(history, now=NOW, window=3600) == D("0.8750")
    # without a market point at the change, each part at its own original's share
    lone = [(NOW - 3600, D("1.00"))]
    assert system_average(lone, now=NOW, window=3600, originals=originals) == D("0.6250")


def test_a_market_price_keeps_its_share_of_a_changed_original():
    assert price_following_original(D("0.40"), old_original=D("0.80"), new_original=D("0.40")) == D(
        "0.2000"
    )
    assert price_following_original(D("0.72"), old_original=D("0.80"), new_original=D("1.60")) == D(
        "1.4400"
    )
    # on the new grid and within its [floor, original]
    assert price_following_original(
        D("0.0800"), old_original=D("0.80"), new_original=D("0.0333")
    ) == D("0.0033")
    assert price_following_original(D("5"), old_original=D("0"), new_original=D("1")) == D("0.1")


def test_a_pods_minute_is_priced_at_its_start_or_at_the_pods_start():
    minute = int(NOW // 60)
    start = minute * 60
    history = [(start - 60, D("1.00")), (start + 10, D("2.00")), (start + 70, D("3.00"))]
    assert pod_minute_price(history, minute, started=start - 600) == D("1.00")
    assert pod_minute_price(history, minute, started=start + 20) == D("2.00")  # first, partial
    assert pod_minute_price(history, minute + 1, started=start + 20) == D("2.00")
    assert pod_minute_price(history, minute + 2, started=start + 20) == D("3.00")
    assert pod_minute_price(history, minute - 5, started=start - 600) is None


def test_it_refuses_an_average_without_any_price():
    with pytest.raises(MarketError):
        system_average([(NOW + 1, D("1"))], now=NOW, window=3600)


# --- reclaim on price -------------------------------------------------------------------


def test_it_reclaims_an_ecs_job_whose_bid_falls_below_the_market():
    plan = step(
        [market(spot_used=1)],
        [spot(1, "0.29", running=True, aimaster=True)],
        replay=frozen_at("0.35"),
    )
    assert plan.reclaims == (
        Reclaim(1, "SpotPriceExceeded", "bid ¥0.29/h < market ¥0.35/h for ecs.g7.xlarge", True),
    )


def test_it_keeps_an_ecs_job_whose_bid_equals_the_market():
    plan = step([market(spot_used=1)], [spot(1, "0.35", running=True)], replay=frozen_at("0.35"))
    assert plan.reclaims == ()


def test_it_keeps_a_lingjun_job_above_the_system_average_even_below_the_market():
    lingjun = market(LJ, resource_type="Lingjun", original="40.00", spot_used=1)
    plan = step(
        [lingjun],
        [spot(1, "20.00", instance_type=LJ, running=True)],
        averages={LJ: D("18.00")},
        replay={LJ: D("25.00")},
    )
    assert plan.reclaims == ()


def test_it_reclaims_a_lingjun_job_below_the_system_average():
    lingjun = market(LJ, resource_type="Lingjun", original="40.00", spot_used=1)
    plan = step(
        [lingjun],
        [spot(1, "16.00", instance_type=LJ, running=True)],
        averages={LJ: D("18.00")},
        replay={LJ: D("12.00")},
    )
    assert [(r.code, r.reason) for r in plan.reclaims] == [
        ("SpotAveragePriceExceeded", f"bid ¥16.00/h < system average ¥18.00/h for {LJ}")
    ]


def test_it_holds_lingjun_to_the_market_price_without_an_average():
    lingjun = market(LJ, resource_type="Lingjun", original="40.00", spot_used=1)
    plan = step(
        [lingjun], [spot(1, "16.00", instance_type=LJ, running=True)], replay={LJ: D("17.00")}
    )
    assert [r.code for r in plan.reclaims] == ["SpotAveragePriceExceeded"]


def test_it_frees_the_whole_gang_on_reclaim():
    plan = step(
        [market(capacity=4, spot_used=4)],
        [spot(1, "0.20", 4, running=True), spot(2, "0.50", 4, submitted_at=5)],
        replay=frozen_at("0.40"),
    )
    assert [r.job_id for r in plan.reclaims] == [1]
    assert plan.starts == (Start(2, "spot", (G7,)),)
    assert plan.stock == {G7: 0}


# --- acquisition ------------------------------------------------------------------------


def test_it_starts_a_spot_job_when_bid_and_stock_suffice():
    plan = step([market(capacity=4)], [spot(1, "0.40", 4)], replay=frozen_at("0.40"))
    assert plan.starts == (Start(1, "spot", (G7,)),)
    assert plan.stock == {G7: 0}


def test_it_keeps_a_low_bid_waiting_and_says_why():
    plan = step([market()], [spot(1, "0.29")], replay=frozen_at("0.35"))
    assert plan.waiting == (
        Waiting(1, "bid ¥0.29/h < market ¥0.35/h for ecs.g7.xlarge", "BidBelowMarketPrice"),
    )


def test_it_starts_a_gang_whole_or_not_at_all():
    plan = step([market(capacity=4, spot_used=3)], [spot(1, "0.50", 4)], replay=frozen_at("0.30"))
    assert plan.starts == ()
    assert plan.waiting == (
        Waiting(1, "stock: needs 4 instances of ecs.g7.xlarge, 1 free", "StockShortage"),
    )


def test_it_names_every_failing_condition():
    plan = step([market(capacity=1)], [spot(1, "0.10", 2)], replay=frozen_at("0.30"))
    assert plan.waiting[0].reason == (
        "bid ¥0.10/h < market ¥0.30/h for ecs.g7.xlarge; "
        "stock: needs 2 instances of ecs.g7.xlarge, 1 free"
    )


def test_it_serves_the_highest_bid_first():
    plan = step(
        [market(capacity=2)],
        [spot(1, "0.40", 2, submitted_at=0), spot(2, "0.60", 2, submitted_at=9)],
        replay=frozen_at("0.30"),
    )
    assert plan.starts == (Start(2, "spot", (G7,)),)
    assert [w.job_id for w in plan.waiting] == [1]


def test_it_breaks_equal_bids_by_submission_time():
    plan = step(
        [market(capacity=2)],
        [spot(2, "0.50", 2, submitted_at=9), spot(1, "0.50", 2, submitted_at=3)],
        replay=frozen_at("0.30"),
    )
    assert plan.starts == (Start(1, "spot", (G7,)),)


def test_it_lets_a_smaller_job_pass_one_that_does_not_fit():
    plan = step(
        [market(capacity=3)],
        [spot(1, "0.70", 4), spot(2, "0.50", 3)],
        replay=frozen_at("0.30"),
    )
    assert plan.starts == (Start(2, "spot", (G7,)),)


def test_it_requires_a_lingjun_bid_to_cover_the_system_average_to_start():
    lingjun = market(LJ, resource_type="Lingjun", original="40.00")
    plan = step(
        [lingjun],
        [spot(1, "20.00", instance_type=LJ)],
        averages={LJ: D("22.00")},
        replay={LJ: D("18.00")},
    )
    assert plan.waiting == (
        Waiting(1, f"bid ¥20.00/h < system average ¥22.00/h for {LJ}", "BidBelowAveragePrice"),
    )


def test_it_starts_a_multi_type_job_only_when_every_type_fits():
    markets = [market(G7, capacity=4), market(GN7, original="9.00", capacity=1)]
    needs = ((G7, 2, D("0.50")), (GN7, 2, D("5.00")))
    job = SpotRequest(job_id=1, needs=needs, running=False, submitted_at=NOW)
    plan = step(markets, [job], replay={G7: D("0.30"), GN7: D("3.00")})
    assert plan.starts == ()
    assert plan.waiting[0].reason == f"stock: needs 2 instances of {GN7}, 1 free"
    assert plan.stock == {G7: 4, GN7: 1}


def test_it_judges_each_role_by_its_own_bid():
    needs = ((G7, 1, D("0.50")), (G7, 1, D("0.20")))
    job = SpotRequest(job_id=1, needs=needs, running=True, submitted_at=NOW)
    plan = step([market(spot_used=2)], [job], replay=frozen_at("0.30"))
    assert [r.job_id for r in plan.reclaims] == [1]
    assert plan.stock == {G7: 10}


# --- fallback instance types (ElasticSpotSpecs) -------------------------------------------

G6 = "ecs.g6.xlarge"


def fallback_job(job_id: int, *, bid: str = "0.50", instances: int = 2, **extra) -> SpotRequest:
    """A one-role job bidding on G7 first, then on G6 (¥0.40/h), then on GN7 (¥5/h)."""
    return SpotRequest(
        job_id=job_id,
        needs=((G7, instances, D(bid)),),
        fallbacks=(((G6, D("0.40")), (GN7, D("5.00"))),),
        running=False,
        submitted_at=NOW,
        **extra,
    )


def fallback_markets(*, g7: int = 4, g6: int = 4, gn7: int = 4) -> list[TypeMarket]:
    return [
        market(G7, capacity=g7),
        market(G6, original="0.70", capacity=g6),
        market(GN7, original="9.00", capacity=gn7),
    ]


PRICES = {G7: D("0.30"), G6: D("0.30"), GN7: D("3.00")}


def test_it_starts_on_the_first_choice_when_it_will_do():
    plan = step(fallback_markets(), [fallback_job(1)], replay=PRICES)
    assert plan.starts == (Start(1, "spot", (G7,)),)
    assert plan.stock == {G7: 2, G6: 4, GN7: 4}


def test_it_falls_back_to_the_next_type_when_the_first_has_no_stock():
    plan = step(fallback_markets(g7=1), [fallback_job(1)], replay=PRICES)
    assert plan.starts == (Start(1, "spot", (G6,)),)
    assert plan.stock == {G7: 1, G6: 2, GN7: 4}


def test_it_falls_back_when_the_first_types_price_is_above_its_bid():
    plan = step(fallback_markets(), [fallback_job(1, bid="0.20")], replay=PRICES)
    assert plan.starts == (Start(1, "spot", (G6,)),)


def test_it_holds_each_fallback_to_its_own_bid():
    """G6's price is above G6's own limit (¥0.40/h), though below the first type's bid."""
    prices = {**PRICES, G6: D("0.45")}
    plan = step(fallback_markets(g7=1), [fallback_job(1, bid="0.60")], replay=prices)
    assert plan.starts == (Start(1, "spot", (GN7,)),)


def test_it_names_every_types_reason_when_none_will_do():
    prices = {**PRICES, G6: D("0.45")}
    plan = step(fallback_markets(g7=1, gn7=1), [fallback_job(1)], replay=prices)
    assert plan.starts == ()
    assert plan.waiting == (
        Waiting(
            1,
            f"stock: needs 2 instances of {G7}, 1 free; bid ¥0.40/h < market ¥0.45/h for {G6}; "
            f"stock: needs 2 instances of {GN7}, 1 free",
            "StockShortage",
        ),
    )


def test_it_gives_the_same_reason_between_ticks():
    prices = {**PRICES, G6: D("0.45")}
    markets = fallback_markets(g7=1, gn7=1)
    job = fallback_job(1)
    plan = step(markets, [job], replay=prices)
    quotes = {
        m.instance_type: Quote(prices[m.instance_type], "market", plan.stock[m.instance_type])
        for m in markets
    }
    assert spot_wait_reason(job.needs, quotes, fallbacks=job.fallbacks) == (
        plan.waiting[0].reason,
        plan.waiting[0].code,
    )
    quotes[G6] = Quote(D("0.40"), "market", 2)
    assert spot_wait_reason(job.needs, quotes, fallbacks=job.fallbacks) == ("", "")


def test_it_places_a_gang_of_roles_on_the_first_combination_that_fits():
    """Worker ×2 on G7 or G6, Master ×1 on G7 only: with 2 of G7 free the Worker falls back
    so that the Master gets its only type."""
    job = SpotRequest(
        job_id=1,
        needs=((G7, 2, D("0.50")), (G7, 1, D("0.50"))),
        fallbacks=(((G6, D("0.50")),), ()),
        running=False,
        submitted_at=NOW,
    )
    plan = step(fallback_markets(g7=2), [job], replay=PRICES)
    assert plan.starts == (Start(1, "spot", (G6, G7)),)
    assert plan.stock == {G7: 1, G6: 2, GN7: 4}


def test_a_fallback_start_leaves_the_stock_to_the_next_bidder():
    """The higher bidder takes G7's last instances; the next falls back to G6."""
    plan = step(
        fallback_markets(g7=2),
        [fallback_job(1, bid="0.70"), fallback_job(2, bid="0.60")],
        replay=PRICES,
    )
    assert plan.starts == (Start(1, "spot", (G7,)), Start(2, "spot", (G6,)))
    assert plan.stock == {G7: 0, G6: 2, GN7: 4}


def test_it_refuses_a_role_that_names_a_type_twice():
    with pytest.raises(MarketError):
        SpotRequest(
            job_id=1,
            needs=((G7, 1, D("0.50")),),
            fallbacks=(((G7, D("0.40")),),),
            running=False,
            submitted_at=NOW,
        )


def test_it_waits_for_an_unknown_instance_type():
    plan = step([market()], [spot(1, "0.50", instance_type="ecs.nope")], replay=frozen_at("0.3"))
    assert plan.waiting == (
        Waiting(1, "no spot market for instance type ecs.nope", "UnknownInstanceType"),
    )


def test_it_rejects_a_request_with_both_shapes():
    with pytest.raises(MarketError):
        SpotRequest(
            job_id=1,
            needs=((G7, 1, D("0.5")),),
            instance_type=G7,
            bid=D("0.5"),
            running=False,
            submitted_at=NOW,
        )


# --- pay-as-you-go first ----------------------------------------------------------------


def test_it_gives_pay_as_you_go_the_stock_before_spot():
    plan = step([market(capacity=4)], [spot(1, "0.80", 4)], [payg(2, 3)], replay=frozen_at("0.30"))
    assert plan.starts == (Start(2, "payg"),)
    assert plan.waiting == (
        Waiting(1, "stock: needs 4 instances of ecs.g7.xlarge, 1 free", "StockShortage"),
    )


def test_it_reclaims_the_lowest_bids_for_pay_as_you_go():
    running = [
        spot(1, "0.50", 2, running=True),
        spot(2, "0.40", 2, running=True),
        spot(3, "0.60", 2, running=True),
    ]
    plan = step([market(capacity=6, spot_used=6)], running, [payg(9, 3)], replay=frozen_at("0.3"))
    assert [(r.job_id, r.code) for r in plan.reclaims] == [
        (2, "SpotStockShortage"),
        (1, "SpotStockShortage"),
    ]
    assert plan.reclaims[0].reason == (
        "stock short: pay-as-you-go job 9 needs instances of ecs.g7.xlarge; "
        "lowest bids go first (this job bid ¥0.40/h)"
    )
    assert plan.starts == (Start(9, "payg"),)
    assert plan.stock == {G7: 1}


def test_it_reclaims_the_newest_of_equal_bids_first():
    running = [
        spot(1, "0.50", 2, running=True, started_at=NOW - 900),
        spot(2, "0.50", 2, running=True, started_at=NOW - 60),
    ]
    plan = step([market(capacity=4, spot_used=4)], running, [payg(9, 2)], replay=frozen_at("0.3"))
    assert [r.job_id for r in plan.reclaims] == [2]


def test_it_counts_instances_freed_by_price_reclaims_before_taking_more():
    running = [spot(1, "0.20", 2, running=True), spot(2, "0.50", 2, running=True)]
    plan = step([market(capacity=4, spot_used=4)], running, [payg(9, 2)], replay=frozen_at("0.3"))
    assert [(r.job_id, r.code) for r in plan.reclaims] == [(1, "SpotPriceExceeded")]
    assert plan.starts == (Start(9, "payg"),)


def test_it_serves_pay_as_you_go_in_submission_order():
    plan = step([market(capacity=3)], [], [payg(2, 2, at=5), payg(1, 2, at=1)])
    assert plan.starts == (Start(1, "payg"),)
    assert plan.waiting == (
        Waiting(
            2,
            "stock: needs 2 instances of ecs.g7.xlarge, 1 not held by pay-as-you-go",
            "StockShortage",
        ),
    )


def test_it_never_reclaims_spot_for_a_payg_job_that_cannot_fit():
    plan = step(
        [market(capacity=4, payg_used=2, spot_used=2)],
        [spot(1, "0.50", 2, running=True)],
        [payg(9, 3)],
        replay=frozen_at("0.3"),
    )
    assert plan.reclaims == ()
    assert [w.job_id for w in plan.waiting] == [9]


def test_it_leaves_running_payg_alone():
    running = PaygRequest(5, ((G7, 4),), True, NOW - 100)
    plan = step([market(capacity=4, payg_used=4)], [], [running])
    assert plan.starts == () and plan.waiting == ()


def test_it_reclaims_spot_when_capacity_shrinks():
    running = [spot(1, "0.50", 2, running=True), spot(2, "0.40", 2, running=True)]
    plan = step([market(capacity=3, spot_used=4)], running, replay=frozen_at("0.3"))
    assert [(r.job_id, r.code) for r in plan.reclaims] == [(2, "SpotStockShortage")]
    assert plan.reclaims[0].reason.startswith(
        "stock short: capacity 3 < 4 instances of ecs.g7.xlarge in use"
    )


def test_it_reclaims_every_spot_job_on_a_type_no_longer_sold_as_spot():
    running = [spot(1, "0.70", 2, running=True), spot(2, "0.40", 1, running=True)]
    markets = [replace(market(spot_used=3), spot_enabled=False)]
    plan = step(markets, running + [spot(3, "0.80")], replay=frozen_at("0.3"))
    assert sorted((r.job_id, r.code) for r in plan.reclaims) == [
        (1, "SpotStockShortage"),
        (2, "SpotStockShortage"),
    ]
    assert plan.reclaims[0].reason == "stock short: ecs.g7.xlarge is no longer sold as spot"
    assert plan.starts == ()  # nor does a bid start on it, whatever the stock


# --- replay -----------------------------------------------------------------------------


def test_it_takes_prices_from_replay():
    plan = step([market()], replay=frozen_at("0.4321"))
    assert plan.prices == {G7: D("0.4321")}


def test_it_clamps_replayed_prices_to_the_range():
    plan = step([market(G7), market(GN7, original="9.00")], replay={G7: D("5"), GN7: D("0.01")})
    assert plan.prices == {G7: D("0.80"), GN7: D("0.9000")}


def test_it_loads_a_replay_csv_with_iso_and_epoch_timestamps():
    series = load_replay_csv(
        [
            "timestamp,instance_type,price\n",
            f"2023-11-14T22:20:00Z,{G7},0.35\n",
            f"1699999000,{G7},0.30\n",
            f"2023-11-14T22:13:20,{GN7},3.1\n",
        ]
    )
    assert series == {
        G7: [(1_699_999_000.0, D("0.3000")), (1_700_000_400.0, D("0.3500"))],
        GN7: [(NOW, D("3.1000"))],
    }


def test_it_reports_the_line_of_a_bad_replay_row():
    with pytest.raises(MarketError, match="line 3"):
        load_replay_csv(["timestamp,instance_type,price", f"1,{G7},0.3", f"yesterday,{G7},0.3"])


def test_it_requires_the_replay_header():
    with pytest.raises(MarketError, match="price"):
        load_replay_csv(["timestamp,instance_type", f"1,{G7}"])


def test_it_replays_a_step_function():
    series = [(100.0, D("0.30")), (200.0, D("0.40"))]
    assert replay_price_at(series, 99) is None
    assert replay_price_at(series, 100) == D("0.30")
    assert replay_price_at(series, 199.9) == D("0.30")
    assert replay_price_at(series, 500) == D("0.40")


# --- billing ----------------------------------------------------------------------------


def test_it_bills_every_started_minute():
    assert bill_minutes(59.5, 121.0, already_billed_until=None) == [0, 1, 2]
    assert bill_minutes(60.0, 120.0, already_billed_until=None) == [1]


def test_it_bills_nothing_for_an_empty_run():
    assert bill_minutes(120.0, 120.0, already_billed_until=None) == []


def test_it_never_bills_a_minute_twice():
    first = bill_minutes(59.5, 121.0, already_billed_until=None)
    second = bill_minutes(59.5, 200.0, already_billed_until=121.0)
    assert second == [3]
    assert first + second == bill_minutes(59.5, 200.0, already_billed_until=None)
    assert bill_minutes(59.5, 121.0, already_billed_until=121.0) == []


def test_it_charges_the_price_in_force_at_the_minute_start():
    history = [(0.0, D("0.60")), (90.0, D("1.20"))]
    assert price_for_minute(history, 1) == D("0.60")  # 60 s: the 90 s change comes later
    assert price_for_minute(history, 2) == D("1.20")
    assert minute_charges(history, [0, 1, 2]) == [(0, D("0.01")), (1, D("0.01")), (2, D("0.02"))]


def test_it_refuses_a_minute_before_any_price():
    with pytest.raises(MarketError):
        price_for_minute([(600.0, D("1"))], 9)


def test_it_rounds_a_minute_charge_half_up_to_a_millionth():
    assert minute_charge(D("0.8000")) == D("0.013333")
    assert minute_charge(D("0.0001")) == D("0.000002")  # 0.0000016…
    assert minute_charge(D("0.00003")) == D("0.000001")  # 0.0000005 rounds up


def test_it_counts_one_instance_in_the_singular():
    plan = step([market(capacity=1, payg_used=1)], [spot(1, "0.79", 1)])
    assert plan.waiting[0].reason == "stock: needs 1 instance of ecs.g7.xlarge, 0 free"


def test_it_writes_prices_with_two_to_four_decimals():
    assert [yuan(D(p)) for p in ("0.3", "0.2950", "0.1234", "12")] == [
        "¥0.30",
        "¥0.295",
        "¥0.1234",
        "¥12.00",
    ]
    assert yuan(None) == "—"


# --- a bid's exposure over the price history (the create form's spot guidance) -------------


def test_a_bid_is_reclaimed_each_time_the_price_rises_above_it_after_it_held():
    prices = [(0.0, D("1.0")), (100.0, D("3.0")), (200.0, D("1.0")), (300.0, D("4.0"))]
    exposure = bid_exposure(D("2.0"), prices, prices, since=0.0, until=400.0)
    assert exposure is not None
    assert (exposure.low, exposure.median, exposure.high) == (D("1.0"), D("1.0"), D("4.0"))
    assert exposure.below_share == 0.5 and exposure.reclaims == 2


def test_a_bid_below_every_price_never_runs_so_is_never_reclaimed():
    prices = [(0.0, D("5.0")), (50.0, D("6.0"))]
    exposure = bid_exposure(D("1.0"), prices, prices, since=0.0, until=100.0)
    assert exposure is not None and exposure.below_share == 1.0 and exposure.reclaims == 0


def test_lingjun_bids_are_held_to_the_system_average():
    prices = [(0.0, D("1.0")), (10.0, D("9.0")), (20.0, D("1.0"))]  # a spike
    average = [(0.0, D("1.0")), (10.0, D("2.0"))]  # the average barely moves
    exposure = bid_exposure(D("2.5"), prices, average, since=0.0, until=30.0)
    assert exposure is not None and exposure.reclaims == 0 and exposure.below_share == 0.0


def test_no_price_in_the_window_is_no_exposure():
    assert bid_exposure(D("1"), [], [], since=0.0, until=10.0) is None
