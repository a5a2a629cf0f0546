"""A role's bid per hour has one rule, `pricing.bid_limit_per_hour`: the console shows it and
the tick judges by it. The tick also filters bidding roles in SQL first (`_with_blocked`, for
speed: 50,000 bids); the two readings must agree on every bid the database can hold."""

from __future__ import annotations

import random
from decimal import Decimal as D

import pytest
from django.utils import timezone

from apps.cluster.models import InstanceType
from apps.core import pricing
from apps.jobs.models import JobRole
from apps.jobs.selectors import PriceInfo, role_bid_per_hour
from apps.market.models import MarketState
from apps.market.services import _with_blocked
from tests.integration.test_market_step import G7, submit

pytestmark = pytest.mark.django_db

ORIGINALS = ("0.5065", "0.80", "3.3333", "12.3457", "199.9999")


def _bids(personas) -> list[JobRole]:
    """A bidding G7 role per SpotDiscountLimit, and per SpotPriceLimit drawn over
    ¥0.000001–¥0.05 per minute (set after submission, past the form's range)."""
    rng = random.Random(11)
    for n in range(1, 10):
        submit(personas, discount=f"0.{n}", name=f"d{n}")
    for i in range(30):
        job = submit(personas, price_limit="0.011", name=f"p{i}")
        job.roles.update(spot_price_limit=D(rng.randint(1, 50_000)) / 1_000_000)
    return list(JobRole.objects.select_related("instance_type"))


def test_the_sql_bid_filter_agrees_with_the_bid_rule(personas):
    roles = _bids(personas)
    itype = InstanceType.objects.get(name=G7)
    now = timezone.now()
    for original in ORIGINALS:
        InstanceType.objects.filter(pk=itype.pk).update(price_per_hour=D(original))
        for role in roles:
            role.instance_type.price_per_hour = D(original)
        bids = {role.pk: role_bid_per_hour(role) for role in roles}
        # asked prices on the grid right at, just under and just over every bid
        for asked in sorted(
            {
                b + k * pricing.PRICE_QUANTUM
                for b in bids.values()
                for k in (-1, 0, 1)
                if b + k * pricing.PRICE_QUANTUM > 0
            }
        ):
            MarketState.objects.update_or_create(
                instance_type=itype,
                defaults=dict(
                    price_per_hour=asked,
                    asked_per_hour=asked,
                    headroom=10**6,
                    stepped_at=now,
                    recorded_at=now,
                ),
            )
            blocked = dict(_with_blocked(JobRole.objects.all()).values_list("id", "blocked"))
            assert blocked == {pk: bid < asked for pk, bid in bids.items()}, (original, asked)


def test_the_form_and_the_job_page_show_the_bid_the_market_judges():
    itype = InstanceType(name=G7, price_per_hour=D("0.5065"))
    info = PriceInfo(itype, discount=D("0.1"), price_limit=D("0.000844"))
    assert info.discount_per_hour == D("0.0507")  # ¥0.05065 rounded as the market rounds
    assert info.price_limit_per_hour == D("0.0506")  # ¥0.05064
    role = JobRole(instance_type=itype, spot_price_limit=D("0.000844"))
    assert role_bid_per_hour(role) == info.price_limit_per_hour
    assert role_bid_per_hour(JobRole(instance_type=itype, spot_discount_limit=D("0.1"))) == (
        info.discount_per_hour
    )
    assert role_bid_per_hour(JobRole(instance_type=None, spot_price_limit=D("0.011"))) is None
