"""The market page, one instance type's page with its chart, and the create form's price panel."""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.market.models import MarketState
from apps.market.services import market_params_set, market_step
from tests.integration.test_market_step import submit

G7, LJ = "ecs.g7.xlarge", "ml.gu8xf.8xlarge-gu108"


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def market(personas):
    """A few ticks over the last ten minutes, with a running spot job on ecs.g7.xlarge."""
    now = timezone.now()
    submit(personas, discount="0.9", pods=3, now=now - timedelta(minutes=10))
    submit(personas, discount="0.1", pods=2, now=now - timedelta(minutes=10), name="cheap")
    for minutes in (10, 6, 2):
        market_step(now=now - timedelta(minutes=minutes), rng=random.Random(minutes))
    return now


def test_it_lists_every_type_of_the_public_pool_with_price_range_and_stock(alice_client, market):
    response = alice_client.get(reverse("market:index"))
    assert response.status_code == 200
    html = response.content.decode()
    assert G7 in html and LJ in html
    # g7's range, per hour and per minute (the API's SpotPriceLimit unit)
    assert '¥0.0800/h<div class="sub">¥0.001333/min</div>' in html
    assert '¥0.8000/h<div class="sub">¥0.013333/min</div>' in html
    row = next(r for r in response.context["rows"] if r.instance_type.name == G7)
    usage = (row.capacity, row.usage.spot_used, row.stock, row.usage.bidding_demand)
    assert usage == (20, 3, 17, 2)
    assert row.price is not None and row.floor <= row.price <= row.original


def test_it_returns_only_the_table_to_its_own_poll(alice_client, market):
    response = alice_client.get(
        reverse("market:index"), headers={"HX-Request": "true", "HX-Target": "market-table"}
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="market-table"')
    assert "<html" not in html


def test_it_draws_the_price_chart_with_floor_and_original_lines(alice_client, market):
    response = alice_client.get(reverse("market:detail", args=[G7]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "<svg" in html and 'data-kind="price"' in html
    # the axis follows the price: the floor and the original price are drawn where they fall
    # inside it, and named in the legend as above or below it otherwise
    assert 'data-kind="floor"' in html or "(below the chart)" in html
    assert 'data-kind="original"' in html or "(above the chart)" in html
    assert "Floor" in html and "Original (pay-as-you-go)" in html
    assert 'data-kind="average"' not in html
    assert 'id="price-chart-data"' in html  # the same data, for uPlot
    assert "js/market-chart.js" in html


def test_it_adds_the_system_average_to_a_lingjun_chart(alice_client, market):
    response = alice_client.get(reverse("market:detail", args=[LJ]) + "?window=1h")
    html = response.content.decode()
    assert 'data-kind="average"' in html and "System average" in html


def test_it_answers_404_for_a_type_the_public_pool_does_not_sell(alice_client, market):
    assert alice_client.get(reverse("market:detail", args=["ecs.nope"])).status_code == 404


def test_its_price_panel_shows_the_live_price_and_range(alice_client, market):
    response = alice_client.get(
        reverse("market:price-panel"), {"r0-instance_type": G7}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert 'class="price-panel"' in html and f'data-instance-type="{G7}"' in html
    assert "¥0.001333–¥0.013333 per minute" in html and "stock 17 of 20" in html
    assert "<html" not in html


def test_its_price_panel_speaks_json_too(alice_client, market):
    market_params_set(floor_ratio="0.2")
    data = alice_client.get(
        reverse("market:price-panel"), {"instance_type": G7, "format": "json"}
    ).json()
    assert data["available"] and data["instance_type"] == G7
    assert data["original_per_hour"] == "0.8000" and data["floor_per_hour"] == "0.1600"
    assert data["stock"] == 17 and data["price_per_hour"] is not None
    missing = alice_client.get(
        reverse("market:price-panel"), {"instance_type": "x", "format": "json"}
    )
    assert missing.status_code == 404
    assert missing.json() == {"instance_type": "x", "available": False}


def test_its_price_panel_asks_for_a_type_when_none_is_chosen(alice_client, market):
    html = alice_client.get(reverse("market:price-panel")).content.decode()
    assert "Choose an instance type" in html


@pytest.mark.parametrize("name", ["market:index", "market:price-panel"])
def test_it_asks_anonymous_visitors_to_log_in(client, db, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_its_bid_history_partial_draws_bids_against_the_market_for_the_job_page(personas, market):
    from django.template.loader import render_to_string

    from apps.jobs.models import Job
    from apps.market.selectors import job_bid_history

    job = Job.objects.get(display_name="job")
    history = job_bid_history(job=job, now=market)
    assert [(b.role_type, str(b.bid_per_hour)) for b in history.bids] == [("Worker", "0.7200")]
    html = render_to_string("market/_bid_history.html", {"bid_history": history})
    assert 'id="bid-history"' in html and 'data-kind="bid"' in html and "¥0.7200/h" in html
    assert "Floor" in html and "Original (pay-as-you-go)" in html  # reference lines
    assert 'data-kind="average"' not in html  # an ECS job is reclaimed against the price
    quota_job = Job(resource_source="quota")
    assert job_bid_history(job=quota_job).empty


def test_a_lingjun_jobs_bid_history_shows_the_system_average_it_is_reclaimed_against(
    personas, market
):
    from django.template.loader import render_to_string

    from apps.market.selectors import job_bid_history

    job = submit(personas, itype=LJ, discount="0.9", now=market - timedelta(minutes=9), name="lj")
    market_step(now=market - timedelta(minutes=1), rng=random.Random(1))
    history = job_bid_history(job=job, now=market)
    html = render_to_string("market/_bid_history.html", {"bid_history": history})
    assert 'data-kind="average"' in html and "System average" in html
    assert 'data-kind="bid"' in html


def _history(now, steps):
    """Price points of G7: (hours ago, ¥/h)."""
    from decimal import Decimal

    from apps.cluster.models import InstanceType
    from apps.market.models import PricePoint

    g7 = InstanceType.objects.get(name=G7)
    PricePoint.objects.filter(instance_type=g7).delete()
    for hours, price in steps:
        PricePoint.objects.create(
            instance_type=g7, at=now - timedelta(hours=hours), price_per_hour=Decimal(price)
        )


@pytest.mark.parametrize(
    ("bid", "says"),
    [
        (
            {"r0-spot_limit_type": "discount", "r0-spot_discount_limit": "0.3"},
            "Your bid ¥0.2400/h was below the market price 25% of that time: a job running "
            "on it would have been reclaimed 1 time.",
        ),
        (
            {"r0-spot_limit_type": "price", "r0-spot_price_limit": "0.0100"},  # ¥0.60/h
            "Your bid ¥0.6000/h held all of that time: it would not have been reclaimed.",
        ),
    ],
)
def test_its_price_panel_says_how_a_bid_would_have_fared_over_a_day(
    alice_client, personas, bid, says
):
    now = timezone.now()
    _history(now, [(30, "0.10"), (12, "0.40"), (6, "0.10")])
    response = alice_client.get(
        reverse("market:price-panel"),
        {"r0-instance_type": G7, **bid},
        headers={"HX-Request": "true"},
    )
    html = response.content.decode()
    assert "Last 24 h: low ¥0.1000, median ¥0.1000, high ¥0.4000/h." in html
    assert says in html


@pytest.mark.parametrize(
    ("steps", "says"),
    [
        # a one-minute spike in a day: 0.07% of the time, it read "0% of that time"
        (
            [(30, "0.10"), (0.05, "0.40"), (1 / 60, "0.10")],
            "below the market price &lt;1% of that time: a job running on it would have been "
            "reclaimed 1 time.",
        ),
        # below all but a minute of it: it read "100% of that time"
        (
            [(30, "0.40"), (1 / 60, "0.10")],
            "below the market price &gt;99% of that time: a job would have waited",
        ),
    ],
)
def test_its_price_panel_never_rounds_a_share_of_the_day_to_none_or_all(
    alice_client, personas, steps, says
):
    _history(timezone.now(), steps)
    html = alice_client.get(
        reverse("market:price-panel"),
        {"r0-instance_type": G7, "r0-spot_limit_type": "discount", "r0-spot_discount_limit": "0.3"},
        headers={"HX-Request": "true"},
    ).content.decode()
    assert says in html


def test_its_price_panel_judges_a_lingjun_bid_from_the_first_price_of_a_young_market(
    alice_client, personas
):
    """A type first priced 5 minutes ago (a new cluster): before the first of the day's
    120 samples of the system average after it, the bid was still judged, not left out."""
    from apps.cluster.models import InstanceType
    from apps.market.models import PricePoint

    now = timezone.now()
    lj = InstanceType.objects.get(name=LJ)
    PricePoint.objects.create(
        instance_type=lj, at=now - timedelta(minutes=5), price_per_hour=Decimal("100")
    )
    html = alice_client.get(
        reverse("market:price-panel"),
        {"r0-instance_type": LJ, "r0-spot_limit_type": "discount", "r0-spot_discount_limit": "0.3"},
        headers={"HX-Request": "true"},
    ).content.decode()
    assert "held all of that time" not in html
    assert "Your bid ¥60.0000/h was below the system average 100% of that time" in html


def test_its_price_panel_gives_no_guidance_without_a_bid(alice_client, personas):
    _history(timezone.now(), [(30, "0.10")])
    html = alice_client.get(reverse("market:price-panel"), {"r0-instance_type": G7}).content
    assert b"bid-guidance" not in html


@pytest.mark.parametrize(
    ("price", "says"),
    [
        ("0.0811", "· 89% off"),  # 89.86% below the original: it read "90% off"
        ("0.0800", "· 90% off"),  # the floor: exactly 90%
        ("0.7990", "· 0% off"),
    ],
)
def test_it_never_overstates_a_saving(alice_client, market, price, says):
    MarketState.objects.filter(instance_type__name=G7).update(price_per_hour=Decimal(price))
    html = alice_client.get(reverse("market:index")).content.decode()
    row = html[html.index('id="market-ecsg7xlarge"') :]
    row = row[: row.index("</tr>")]
    assert says in row
