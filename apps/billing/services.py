"""Billing: charge every started minute of every pod of a public or spot job, exactly once;
and a minute in which a pod replaced another in its slot of the job (a lost or reclaimed
pod, then its next attempt) once for the slot, to the pod that ran in it first.

A running pod is billed no further than its agent vouches for it (`pods_reported_until`,
one rule: `apps.jobs.execution.pods_vouched_until`): its last heartbeat, and no later than
the start of its last complete watch round. A heartbeat says the agent is alive; a watch
round that looked at every pod it runs says each pod that had ended by its start has had
its end reported, so no minute past a pod's end is billed even when the end is reported
after a later heartbeat (an agent that restarted, which vouches for nothing new until its
first round; an exit late in a minute; a watch loop held up). A silent node's pods end
there when it is declared Lost, so no minute after it is billed meanwhile, and an agent
that was only late has the minutes it vouches for billed on its next heartbeat. An agent
from before watch rounds were reported is bounded by its heartbeat alone: a pod's end
reported after a run billed past it has those minutes taken back by the next run
(`_bills_past_ends_withdraw`, `BillCorrected`), the safety net for whatever slips by.

Each pod of a pay-as-you-go or spot job has a PodMeter (opened with the pod by the market;
any running such pod without one is adopted). `billing_accrue` bills each open meter's
minutes from `billed_until` up to the pod's end (or `now`), inserts one BillLine per
(pod, minute) — a unique key, inserted with ignore_conflicts — and moves the meter on, all
in one transaction: a crash leaves nothing half-done, and a replayed run bills nothing twice.

Prices: one rule for both kinds (`pricing.pod_minute_price`): a minute at the price in
force at its start, a pod's first, partial minute at the price in force when its process
started (with node agents; else when the market started it), never an earlier one above a
spot bid. Spot minutes read the market price history (PricePoint), pay-as-you-go minutes
the instance type's original price history (OriginalPrice): an admin's change of the
original price reaches only the minutes that start after it. Quota jobs are prepaid: they
get no meter and no bill lines.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import NamedTuple

from django.db import connection, transaction
from django.db.models import Count, Max, Min, QuerySet, Sum

from apps.billing.models import BillDay, BillLine, PayType, PodMeter
from apps.cluster.selectors import original_price_histories
from apps.core import pricing
from apps.core.db import Epoch, pks_update, rows_insert
from apps.core.words import say_n
from apps.jobs.execution import pods_reported_until
from apps.jobs.models import (
    LIVE_POD_STATUSES,
    Job,
    Pod,
    PodStatus,
    ResourceSource,
    pod_instance_type,
)
from apps.jobs.services import job_event
from apps.market.selectors import price_histories

log = logging.getLogger(__name__)

CHUNK = 2000
MAX_MINUTES_PER_RUN = 1440  # per pod: a long outage is billed over several runs
PAY_TYPES: dict[str, PayType] = {
    ResourceSource.SPOT: PayType.SPOT,
    ResourceSource.PUBLIC: PayType.POSTPAID,
}


def pod_meters_open(*, pod_ids: Iterable[int], new: bool = False) -> None:
    """Start metering pods of public or spot jobs (the market calls this as it starts them).
    A pod metered already is left alone, unless `new` says the pods were just created (then
    the meters are inserted straight away, thousands at once)."""
    if new:
        rows_insert(PodMeter, ["pod_id"], [(pod_id,) for pod_id in pod_ids])
        return
    PodMeter.objects.bulk_create(
        [PodMeter(pod_id=pod_id) for pod_id in pod_ids], batch_size=CHUNK, ignore_conflicts=True
    )


@dataclass(frozen=True)
class AccrueReport:
    pods: int  # meters looked at
    lines: int  # minute lines written
    amount: Decimal
    closed: int  # meters of ended pods, now fully billed


@dataclass(frozen=True)
class _Meter:
    pod_id: int
    billed_until: int | None
    status: str
    started_at: float | None  # epoch seconds
    finished_at: float | None
    job_id: int
    workspace_id: int
    source: str
    type_id: int | None
    role_id: int
    index: int
    attempt: int


class Line(NamedTuple):
    """A bill line to insert, in BillLine's column order."""

    workspace_id: int
    job_id: int
    pod_id: int
    minute: int
    day: date
    instance_type_id: int
    price_per_hour: Decimal
    amount: Decimal
    pay_type: str


def bill_lines_record(lines: list[Line]) -> tuple[int, Decimal]:
    """Insert the lines not billed yet, skipping any (pod, minute) billed already, and add
    them to their pods' days (BillDay: a day's figures grow, its first and last minute and
    its prices widen), in the caller's transaction. Returns how many lines were inserted
    and their amount. On PostgreSQL one statement (10,000 lines a minute is a normal load):
    INSERT … SELECT FROM unnest() ON CONFLICT DO NOTHING, whose rows the days' upsert sums;
    elsewhere the lines billed already are read first (SQLite runs one writer at a time)."""
    if not lines:
        return 0, Decimal(0)
    if connection.vendor == "postgresql":
        return _record_postgresql(lines)
    minutes = [line.minute for line in lines]
    billed = set(
        BillLine.objects.filter(
            pod_id__in={line.pod_id for line in lines},
            minute__gte=min(minutes),
            minute__lte=max(minutes),
        ).values_list("pod_id", "minute")
    )
    new = [line for line in lines if (line.pod_id, line.minute) not in billed]
    BillLine.objects.bulk_create([BillLine(**line._asdict()) for line in new], batch_size=CHUNK)
    days: dict[tuple, list[Line]] = defaultdict(list)
    for line in new:
        days[line.pod_id, line.day, line.instance_type_id, line.pay_type].append(line)
    rows = [
        (
            ls[0].workspace_id,
            ls[0].job_id,
            pod_id,
            day,
            type_id,
            pay_type,
            len(ls),
            sum((line.amount for line in ls), Decimal(0)),
            min(line.minute for line in ls),
            max(line.minute for line in ls),
            min(line.price_per_hour for line in ls),
            max(line.price_per_hour for line in ls),
        )
        for (pod_id, day, type_id, pay_type), ls in days.items()
    ]
    values = ", ".join(["%s"] * len(_DAY_COLUMNS))
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {BillDay._meta.db_table} ({', '.join(_DAY_COLUMNS)}) "
            f"VALUES ({values}) {_days_upsert('MIN', 'MAX')}",
            rows,
        )
    return len(new), sum((line.amount for line in new), Decimal(0))


# BillLine's columns in Line's order, as PostgreSQL types
_LINE_TYPES: tuple[str, ...] = ("bigint", "bigint", "bigint", "integer", "date", "bigint")
_LINE_TYPES += ("numeric", "numeric", "text")
_DAY_KEY: tuple[str, ...] = ("workspace_id", "job_id", "pod_id", "day", "instance_type_id")
_DAY_KEY += ("pay_type",)
_DAY_COLUMNS = _DAY_KEY + ("minutes", "amount", "first_minute", "last_minute", "low", "high")


def _days_upsert(least: str, greatest: str) -> str:
    table = BillDay._meta.db_table
    return (
        "ON CONFLICT (pod_id, day, instance_type_id, pay_type) DO UPDATE SET "
        f"minutes = {table}.minutes + excluded.minutes, "
        f"amount = {table}.amount + excluded.amount, "
        f"first_minute = {least}({table}.first_minute, excluded.first_minute), "
        f"last_minute = {greatest}({table}.last_minute, excluded.last_minute), "
        f"low = {least}({table}.low, excluded.low), "
        f"high = {greatest}({table}.high, excluded.high)"
    )


def _record_postgresql(lines: list[Line]) -> tuple[int, Decimal]:
    key = ", ".join(_DAY_KEY)
    arrays = ", ".join(f"%s::{t}[]" for t in _LINE_TYPES)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH new AS (INSERT INTO {BillLine._meta.db_table} ({', '.join(Line._fields)}) "
            f"SELECT * FROM unnest({arrays}) ON CONFLICT (pod_id, minute) DO NOTHING "
            "RETURNING *), "
            f"days AS (INSERT INTO {BillDay._meta.db_table} ({', '.join(_DAY_COLUMNS)}) "
            f"SELECT {key}, count(*), sum(amount), min(minute), max(minute), "
            f"min(price_per_hour), max(price_per_hour) FROM new GROUP BY {key} "
            f"{_days_upsert('LEAST', 'GREATEST')}) "
            "SELECT count(*), coalesce(sum(amount), 0) FROM new",
            [list(column) for column in zip(*lines, strict=True)],
        )
        count, amount = cursor.fetchone()
    return count, Decimal(amount)


@transaction.atomic
def billing_accrue(*, now: datetime) -> AccrueReport:
    """Bill every started, unbilled minute of every metered pod up to `now`. Call under the
    "billing-accrue" lock; running it twice bills nothing twice."""
    _adopt_running_pods()
    meters = [
        _Meter(*row)
        for row in PodMeter.objects.filter(closed=False)
        .annotate(
            started=Epoch("pod__started_at"),
            finished=Epoch("pod__finished_at"),
            type_id=pod_instance_type("pod__"),
        )
        .values_list(
            "pod_id",
            "billed_until",
            "pod__status",
            "started",
            "finished",
            "pod__job_id",
            "pod__job__workspace_id",
            "pod__job__resource_source",
            "type_id",  # the type the pod ran on: its role's, or an ElasticSpotSpecs type
            "pod__role_id",
            "pod__index",
            "pod__attempt",
        )
    ]
    meters = _bills_past_ends_withdraw(meters, now)
    earlier = _earlier_ends(meters, now)
    running = [m.pod_id for m in meters if m.finished_at is None and m.started_at is not None]
    reported = pods_reported_until(pod_ids=running)
    # An end reported after the meters were read, and before the report that vouches past
    # it: this run leaves the pod alone, the next bills it up to its end.
    ended = set(
        Pod.objects.filter(pk__in=running, finished_at__isnull=False).values_list("pk", flat=True)
    )
    plans = {
        m.pod_id: ([], False)
        if m.pod_id in ended
        else _minutes(m, min(now, reported.get(m.pod_id, now)), earlier_end=earlier.get(m.pod_id))
        for m in meters
    }
    prices = _price_book(meters, plans, now)
    lines, moved, closed = [], defaultdict(list), []
    for meter in meters:
        minutes, done = plans[meter.pod_id]
        if minutes and meter.type_id is not None:
            priced = prices.charges(meter, minutes)
            if priced is None:
                continue  # no market price yet: leave the meter where it is
            lines += priced
            moved[minutes[-1] + 1].append(meter.pod_id)
        if done:
            closed.append(meter.pod_id)
    count, amount = bill_lines_record(lines)
    for billed_until, pod_ids in moved.items():
        pks_update(PodMeter, pod_ids, billed_until=billed_until)
    pks_update(PodMeter, closed, closed=True)
    return AccrueReport(pods=len(meters), lines=count, amount=amount, closed=len(closed))


def _bills_past_ends_withdraw(meters: list[_Meter], now: datetime) -> list[_Meter]:
    """Take back the minutes billed after the end of a pod whose end was reported late.

    The safety net: a running pod is billed no further than its agent's last complete
    watch round, so an end is not reported after a run billed past it, except with an
    agent that does not report its rounds (one from before), bounded by its heartbeat
    alone, or a pod whose shim started before shims said at once that a pod had ended.
    When such an end arrives, the lines of the minutes that
    start at or after it are removed, their days reduced to the lines left, the meter moved
    back to the end, and the job told (BillCorrected), in the caller's transaction. Returns
    the meters as they now stand."""
    past = {}
    for m in meters:
        if m.finished_at is not None and m.started_at is not None and m.billed_until is not None:
            stop = -int(-m.finished_at // 60)  # the first minute that starts at its end or later
            if m.billed_until > stop:
                past[m.pod_id] = stop
    if not past:
        return meters
    extra = BillLine.objects.none()
    for pod_id, stop in past.items():
        extra |= BillLine.objects.filter(pod_id=pod_id, minute__gte=stop)
    found = list(extra.values_list("pod_id", "day", "amount"))
    BillLine.objects.filter(pk__in=list(extra.values_list("pk", flat=True))).delete()
    days = {(pod_id, day) for pod_id, day, _ in found}
    for day in BillDay.objects.filter(
        pod_id__in={pod_id for pod_id, _ in days}, day__in={day for _, day in days}
    ):
        if (day.pod_id, day.day) in days:
            _bill_day_resum(day)
    for pod_id, stop in past.items():
        PodMeter.objects.filter(pk=pod_id).update(billed_until=stop)
    taken: dict[int, tuple[int, Decimal]] = {}
    for pod_id, _, amount in found:
        count, total = taken.get(pod_id, (0, Decimal(0)))
        taken[pod_id] = (count + 1, total + amount)
    jobs = Job.objects.in_bulk({m.job_id for m in meters if m.pod_id in taken})
    pods = Pod.objects.in_bulk(list(taken))
    for meter in meters:
        if meter.pod_id in taken:
            count, total = taken[meter.pod_id]
            log.warning("pod %s: %d minute(s) billed past its end taken back", meter.pod_id, count)
            job_event(
                job=jobs[meter.job_id],
                pod=pods[meter.pod_id],
                kind="BillCorrected",
                now=now,
                message=say_n(
                    count,
                    "Its end was reported after it had been billed {count} minute past it; "
                    "that minute (¥{amount}) was taken back",
                    "Its end was reported after it had been billed {count} minutes past it; "
                    "those minutes (¥{amount}) were taken back",
                    amount=f"{total.normalize():f}",
                ),
            )
    return [
        dataclasses.replace(m, billed_until=past[m.pod_id]) if m.pod_id in past else m
        for m in meters
    ]


def _bill_day_resum(day: BillDay) -> None:
    """A pod's day, summed again from the lines it has left (none left: no day)."""
    left = BillLine.objects.filter(
        pod_id=day.pod_id, day=day.day, instance_type_id=day.instance_type_id, pay_type=day.pay_type
    ).aggregate(
        n=Count("id"),
        total=Sum("amount"),
        first=Min("minute"),
        last=Max("minute"),
        low=Min("price_per_hour"),
        high=Max("price_per_hour"),
    )
    if not left["n"]:
        day.delete()
        return
    BillDay.objects.filter(pk=day.pk).update(
        minutes=left["n"],
        amount=left["total"],
        first_minute=left["first"],
        last_minute=left["last"],
        low=left["low"],
        high=left["high"],
    )


Slot = tuple[int, int, int]  # a job's pk, a role's pk, a pod index: one instance to its user
SlotRuns = dict[Slot, list[tuple[int, float]]]  # per slot: (attempt, when its pod ended)


def slot_runs(pods: QuerySet[Pod], *, now: datetime) -> SlotRuns:
    """Of these pods, those that ran (ending after they started; one still running counts
    until `now`), per slot: (attempt, when it ended). What `earlier_end` reads. One query."""
    runs: SlotRuns = defaultdict(list)
    for job, role, index, attempt, status, started, finished in (
        pods.filter(started_at__isnull=False)
        .annotate(started=Epoch("started_at"), finished=Epoch("finished_at"))
        .values_list("job_id", "role_id", "index", "attempt", "status", "started", "finished")
    ):
        if finished is None and status in LIVE_POD_STATUSES:
            finished = now.timestamp()
        if finished is not None and finished > started:  # it ran: those minutes are its own
            runs[job, role, index].append((attempt, finished))
    return runs


def earlier_end(runs: SlotRuns, slot: Slot, attempt: int) -> float | None:
    """When the latest of the slot's pods of attempts before `attempt` that ran ended: the
    minute it falls in is theirs (`pricing.bill_minutes`'s `earlier_end`); None if none."""
    return max((end for a, end in runs.get(slot, ()) if a < attempt), default=None)


def _earlier_ends(meters: list[_Meter], now: datetime) -> dict[int, float]:
    """For each metered pod that took over its slot from pods of earlier attempts that ran,
    when the latest of them ended (`earlier_end`). One query, over the jobs with such a pod
    only."""
    later = [m for m in meters if m.attempt > 0]
    if not later:
        return {}
    runs = slot_runs(Pod.objects.filter(job_id__in={m.job_id for m in later}), now=now)
    found = {}
    for m in later:
        end = earlier_end(runs, (m.job_id, m.role_id, m.index), m.attempt)
        if end is not None:
            found[m.pod_id] = end
    return found


def _adopt_running_pods() -> None:
    """Meter running pods of public and spot jobs that nobody opened a meter for."""
    orphans = (
        Pod.objects.filter(
            status=PodStatus.RUNNING,
            meter__isnull=True,
            job__resource_source__in=(ResourceSource.PUBLIC, ResourceSource.SPOT),
        )
        .order_by()
        .values_list("pk", flat=True)
    )
    pod_meters_open(pod_ids=list(orphans))


def _minutes(meter: _Meter, now: datetime, *, earlier_end: float | None) -> tuple[list[int], bool]:
    """The minutes to bill now, and whether the meter is done after them. A running pod is
    billed up to `now`: the caller's clock, or the last word from its agent if older."""
    ended = meter.status not in LIVE_POD_STATUSES
    if meter.started_at is None:
        return [], ended  # never ran: nothing to bill
    if ended and meter.finished_at is None:
        log.warning("pod %s ended without a finish time; billed until its last run", meter.pod_id)
        return [], True
    end = meter.finished_at if meter.finished_at is not None else now.timestamp()
    already = None if meter.billed_until is None else meter.billed_until * 60
    minutes = pricing.bill_minutes(
        meter.started_at, end, already_billed_until=already, earlier_end=earlier_end
    )
    if len(minutes) > MAX_MINUTES_PER_RUN:  # catching up after an outage: a day per run
        return minutes[:MAX_MINUTES_PER_RUN], False
    return minutes, meter.finished_at is not None


class _PriceBook:
    """Prices for the run, per type: the market price history (spot) and the original price
    history (pay-as-you-go), each over the minutes to bill."""

    def __init__(
        self,
        spot: dict[int, list[pricing.PricePoint]],
        originals: dict[int, list[pricing.PricePoint]],
    ) -> None:
        self.spot = spot
        self.originals = originals

    def charges(self, meter: _Meter, minutes: list[int]) -> list[Line] | None:
        pay_type = PAY_TYPES[meter.source]
        started, type_id = meter.started_at, meter.type_id
        assert started is not None and type_id is not None  # a meter with minutes has both
        lines = []
        for minute in minutes:
            price = self._price(meter, type_id, minute, started)
            if price is None:
                log.warning("no market price for pod %s at minute %s", meter.pod_id, minute)
                return None
            lines.append(
                Line(
                    meter.workspace_id,
                    meter.job_id,
                    meter.pod_id,
                    minute,
                    _day(minute),
                    type_id,
                    price,
                    _minute_charge(price),
                    pay_type,
                )
            )
        return lines

    def _price(self, meter: _Meter, type_id: int, minute: int, started: float) -> Decimal | None:
        history = (self.spot if meter.source == ResourceSource.SPOT else self.originals).get(
            type_id, []
        )
        return pricing.pod_minute_price(history, minute, started=started)


@functools.lru_cache(maxsize=4096)
def _day(minute: int) -> date:
    """The UTC day an epoch minute falls in (a run bills a few distinct minutes, many times)."""
    return datetime.fromtimestamp(minute * 60, UTC).date()


@functools.lru_cache(maxsize=65536)
def _minute_charge(price: Decimal) -> Decimal:
    return pricing.minute_charge(price)


def _price_book(meters: list[_Meter], plans: dict, now: datetime) -> _PriceBook:
    histories = {}
    for source, read in (
        (ResourceSource.SPOT, price_histories),
        (ResourceSource.PUBLIC, original_price_histories),
    ):
        billed = [m for m in meters if m.source == source and plans[m.pod_id][0]]
        if billed:
            first = min(plans[m.pod_id][0][0] for m in billed) * 60
            histories[source] = read(
                type_ids={m.type_id for m in billed if m.type_id is not None},
                since=datetime.fromtimestamp(first, UTC),
                until=now,
            )
    return _PriceBook(
        histories.get(ResourceSource.SPOT, {}), histories.get(ResourceSource.PUBLIC, {})
    )
