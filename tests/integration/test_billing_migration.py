"""Upgrading keeps every bill: the migration that adds bill days sums the lines billed
before it, so the Bills page, a job's cost and the export read what they read before."""

from __future__ import annotations

from decimal import Decimal as D

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.billing.models import BillDay, BillLine
from apps.billing.selectors import job_usage, workspace_daily_bills
from apps.billing.services import billing_accrue
from tests.integration.test_market_step import G7, NOW, at, replay_writer, step, submit

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE, AFTER = ("billing", "0001_initial"), ("billing", "0002_bill_days")


def migrate(target) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])


def test_bill_days_are_summed_from_the_lines_billed_before_the_upgrade(
    personas, settings, tmp_path
):
    replay_writer(settings, tmp_path)([(NOW, G7, "0.30"), (at(2), G7, "0.45")])
    spot = submit(personas, discount="0.9", name="spot-before-upgrade")
    job = submit(personas, source="public", name="before-upgrade")
    step(at(0))
    step(at(2))  # the price moves to 0.45
    billing_accrue(now=at(4, 30))
    lines = list(BillLine.objects.filter(job=job).order_by("minute"))
    assert len(lines) == 5
    usage = job_usage(job=job, now=at(5))
    days = workspace_daily_bills(user=personas["alice"], workspace=personas["ws_a"])

    migrate(BEFORE)  # as a database of the last release: lines, no days
    try:
        with connection.cursor() as cursor:
            assert BillDay._meta.db_table not in connection.introspection.table_names(cursor)
    finally:
        migrate(AFTER)

    day = BillDay.objects.get(job=job)
    assert (day.minutes, day.first_minute, day.last_minute) == (
        5,
        lines[0].minute,
        lines[-1].minute,
    )
    assert day.amount == sum((line.amount for line in lines), D(0))
    assert job_usage(job=job, now=at(5)) == usage
    assert workspace_daily_bills(user=personas["alice"], workspace=personas["ws_a"]) == days
    spot_day = BillDay.objects.get(job=spot)
    assert (spot_day.low, spot_day.high, spot_day.minutes) == (D("0.3000"), D("0.4500"), 5)


def test_the_original_price_history_starts_with_each_types_price_at_the_upgrade(
    personas, settings, tmp_path
):
    """A pay-as-you-go job runs through the upgrade that adds the original price history:
    its minutes, billed or not, keep the price they had, and a change after the upgrade
    reaches only the minutes after it."""
    from apps.cluster.models import InstanceType, OriginalPrice

    replay_writer(settings, tmp_path)([(NOW, G7, "0.30")])
    job = submit(personas, source="public", name="through-the-upgrade")
    step(at(0))
    billing_accrue(now=at(1, 30))

    migrate(("cluster", "0008_node_draining_names"))  # the last release: no history
    migrate(("cluster", "0009_original_price"))

    assert sorted(OriginalPrice.objects.values_list("instance_type__name", "price_per_hour")) == (
        sorted(InstanceType.objects.values_list("name", "price_per_hour"))
    )
    billing_accrue(now=at(3, 30))
    assert (
        list(
            BillLine.objects.filter(job=job)
            .order_by("minute")
            .values_list("price_per_hour", flat=True)
        )
        == [D("0.8000")] * 4
    )
