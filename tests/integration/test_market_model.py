"""The market's own price model on the database (no replay), its tuning, and its task."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from decimal import Decimal as D

import pytest

from apps.cluster.models import MarketParameters
from apps.core import pricing
from apps.core.errors import ValidationFailed
from apps.core.redis import singleton_lock
from apps.jobs.models import JobStatus
from apps.market.models import MarketState, PricePoint
from apps.market.selectors import market_overview
from apps.market.services import market_params_set, market_rng, market_step
from apps.market.tasks import market_step_task
from tests.integration.test_market_step import G7, at, replay_writer, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def prices(itype: str = G7) -> list[D]:
    return list(
        PricePoint.objects.filter(instance_type__name=itype)
        .order_by("at")
        .values_list("price_per_hour", flat=True)
    )


def test_it_opens_at_the_floor_and_demand_lifts_the_price(personas):
    for i in range(3):
        submit(personas, discount="0.1", pods=10, name=f"bidder-{i}")  # 30 asked, 20 supplied
    for minute in range(12):
        market_step(now=at(minute), rng=random.Random(minute))
    series = prices()
    assert series[0] > D("0.08")  # one smoothing step up from the floor
    assert series[-1] > D("0.40")
    assert all(D("0.08") <= p <= D("0.80") for p in series)


def test_it_keeps_an_idle_market_near_the_floor(personas):
    for minute in range(5):
        market_step(now=at(minute), rng=random.Random(minute))
    state = MarketState.objects.get(instance_type__name=G7)
    assert D("0.08") <= state.price_per_hour <= D("0.09")


def test_it_repeats_a_run_exactly_with_a_market_seed(settings):
    settings.MARKET_SEED = "2026"
    draws = [market_rng(now=at(1)).random() for _ in range(2)]
    assert draws[0] == draws[1]
    assert market_rng(now=at(2)).random() != draws[0]


def test_it_defaults_its_tuning_to_the_pricing_core(db):
    assert MarketParameters.load().to_params() == pricing.MarketParams()


def test_it_changes_the_floor_through_market_params_set(personas):
    market_params_set(floor_ratio="0.2", smoothing=0.5)
    params = MarketParameters.load().to_params()
    assert params.floor_ratio == D("0.2") and params.smoothing == 0.5
    row = next(r for r in market_overview(now=at(0)) if r.instance_type.name == G7)
    assert row.floor == D("0.16")
    market_step(now=at(0), rng=random.Random(1))
    assert prices()[0] >= D("0.16")


def test_it_refuses_unknown_or_out_of_range_parameters(db):
    with pytest.raises(ValidationFailed) as unknown:
        market_params_set(floor=0.2)
    assert "floor" in unknown.value.errors
    with pytest.raises(ValidationFailed) as bad:
        market_params_set(smoothing=1.5)
    assert "smoothing" in bad.value.errors
    assert MarketParameters.load().smoothing == pricing.MarketParams().smoothing


def test_its_task_steps_the_market_under_the_lock(personas):
    with singleton_lock("market-step", timeout=10) as held:
        assert held
        market_step_task()
    assert not MarketState.objects.exists()  # another worker held the tick
    market_step_task()
    assert MarketState.objects.filter(instance_type__name=G7).exists()


def test_it_starts_a_bidder_at_the_floor_price_of_a_quiet_market(personas):
    job = submit(personas, discount="0.2")  # ¥0.16/h against an opening ¥0.08/h
    market_step(now=at(0), rng=random.Random(3))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING


# --- replay mode -------------------------------------------------------------------------------


@pytest.fixture
def replay(settings, tmp_path):
    return replay_writer(settings, tmp_path)


def test_it_takes_prices_from_the_replay_file_clamped_to_floor_and_original(personas, replay):
    replay([(at(0), G7, "0.01"), (at(1), G7, "5.00"), (at(2), G7, "0.3333")])
    for minute in range(3):
        market_step(now=at(minute), rng=random.Random(minute))
    assert prices() == [D("0.08"), D("0.80"), D("0.3333")]


def test_it_lets_the_model_price_types_and_times_the_replay_file_does_not_cover(personas, replay):
    replay([(at(1), G7, "0.50")])  # nothing for gn7i, nothing for g7 before 12:01
    market_step(now=at(0), rng=random.Random(0))
    market_step(now=at(1), rng=random.Random(1))
    first, second = prices()
    assert D("0.08") <= first <= D("0.09")  # the model, one tick up from its opening floor
    assert second == D("0.50")  # then the file
    gn7 = prices("ecs.gn7i-c8g1.2xlarge")
    assert gn7 and all(D("0.96") <= p <= D("9.60") for p in gn7)


def test_it_replays_the_example_trace(personas, settings):
    settings.MARKET_REPLAY_CSV = "examples/spot-prices.csv"  # relative to the project
    market_step(now=datetime(2026, 3, 2, 9, 31, tzinfo=UTC), rng=random.Random(0))
    assert prices() == [D("0.70")]
