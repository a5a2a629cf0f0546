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


def latest(app: str) -> tuple[str, str]:
    """The app's last migration: where a test that went back leaves the database."""
    [leaf] = MigrationExecutor(connection).loader.graph.leaf_nodes(app)
    return leaf


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
    migrate(latest("cluster"))

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


def test_after_the_upgrade_that_records_watch_rounds_pods_are_billed_up_to_the_heartbeat(
    personas, settings, tmp_path
):
    """Nodes and agents recorded before the upgrade say nothing of their watch rounds (null):
    their pods are billed up to the heartbeat, as before, until their agent reports one."""
    from apps.agent.models import PodProcess
    from apps.cluster.models import Node
    from apps.core.models import Heartbeat
    from apps.core.services import heartbeat_record
    from apps.jobs.models import Pod, PodStatus

    replay_writer(settings, tmp_path)([(NOW, G7, "0.30")])
    job = submit(personas, source="public", name="watched-upgrade")
    step(at(0))
    pod = job.pods.get()
    PodProcess.objects.filter(pod=pod).update(state="running", agent="agent@before")
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.RUNNING, started_at=at(0, 10))
    heartbeat_record(name="agent:agent@before", now=at(2, 5))

    migrate(("core", "0002_verbose_names"))  # the last release: no watch rounds
    migrate(("cluster", "0009_original_price"))
    migrate(latest("core"))
    migrate(latest("cluster"))

    assert not Node.objects.filter(pods_watched_at__isnull=False).exists()
    assert Heartbeat.objects.get(name="agent:agent@before").pods_watched_at is None
    billing_accrue(now=at(2, 10))
    base = int(NOW.timestamp()) // 60
    minutes = BillLine.objects.filter(pod=pod).order_by("minute").values_list("minute", flat=True)
    assert [m - base for m in minutes] == [0, 1, 2]
