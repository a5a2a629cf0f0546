"""The shared database expressions, on whichever database the suite runs against."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db.models import Max

from apps.cluster.models import InstanceType
from apps.core.db import Epoch
from apps.market.models import PricePoint

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("moment", [
    datetime(2026, 3, 2, 0, 0, tzinfo=UTC),  # a minute boundary must not move
    datetime(2026, 3, 2, 12, 34, 56, 789012, tzinfo=UTC),
    datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
])
def test_it_reads_a_datetime_as_exact_epoch_seconds(cluster, moment):
    point = PricePoint.objects.create(
        instance_type=InstanceType.objects.get(name="ecs.g7.xlarge"), at=moment,
        price_per_hour="0.3")
    seconds = PricePoint.objects.filter(pk=point.pk).annotate(s=Epoch("at")).values_list(
        "s", flat=True).get()
    assert seconds == moment.timestamp()


def test_it_reads_no_datetime_as_none(cluster):
    assert PricePoint.objects.aggregate(s=Epoch(Max("at")))["s"] is None
