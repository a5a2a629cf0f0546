"""The shared database expressions, on whichever database the suite runs against."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db.models import Max

from apps.cluster.models import InstanceType
from apps.core.db import Epoch
from apps.market.models import PricePoint
from tests.web.test_jobs_views import make_job

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 3, 2, 0, 0, tzinfo=UTC),  # a minute boundary must not move
        datetime(2026, 3, 2, 12, 34, 56, 789012, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_it_reads_a_datetime_as_exact_epoch_seconds(cluster, moment):
    point = PricePoint.objects.create(
        instance_type=InstanceType.objects.get(name="ecs.g7.xlarge"),
        at=moment,
        price_per_hour="0.3",
    )
    seconds = (
        PricePoint.objects.filter(pk=point.pk)
        .annotate(s=Epoch("at"))
        .values_list("s", flat=True)
        .get()
    )
    assert seconds == moment.timestamp()


def test_it_reads_no_datetime_as_none(cluster):
    assert PricePoint.objects.aggregate(s=Epoch(Max("at")))["s"] is None


def test_it_inserts_plain_rows_with_defaults_and_returns_their_ids_in_order(personas):
    from apps.core.db import rows_insert
    from apps.jobs.models import JobEvent

    job = make_job(personas)
    at = datetime(2026, 3, 2, 12, 0, 0, 123456, tzinfo=UTC)
    ids = rows_insert(
        JobEvent,
        ["job_id", "kind", "message", "at"],
        [(job.pk, "A", "first", at), (job.pk, "B", "second", at)],
        chunk=1,
    )
    events = JobEvent.objects.in_bulk(ids)
    assert [(events[i].kind, events[i].message, events[i].at) for i in ids] == [
        ("A", "first", at),
        ("B", "second", at),
    ]
    assert events[ids[0]].pod_id is None  # a column not given takes its default
    assert rows_insert(JobEvent, ["job_id"], []) == []


def test_it_refuses_to_share_a_default_computed_per_row(personas):
    from apps.core.db import rows_insert
    from apps.jobs.models import Job

    with pytest.raises(ValueError, match="job_id"):  # default=new_job_id: unique per job
        rows_insert(Job, ["display_name"], [("a",)])


def test_it_updates_rows_by_primary_key(personas):
    from apps.core.db import pks_update
    from apps.jobs.models import Job

    jobs = [make_job(personas, name=f"j{i}") for i in range(3)]
    pks_update(Job, [jobs[0].pk, jobs[2].pk], display_name="renamed", priority=7)
    pks_update(Job, [], display_name="nobody")
    assert sorted(Job.objects.values_list("display_name", "priority")) == [
        ("j1", 1),
        ("renamed", 7),
        ("renamed", 7),
    ]


def test_it_updates_each_row_with_its_own_values_where_it_still_matches(personas):
    from apps.core.db import rows_update
    from apps.jobs.models import Job, JobStatus

    jobs = [make_job(personas, name=f"j{i}", status=JobStatus.QUEUING) for i in range(4)]
    Job.objects.filter(pk=jobs[3].pk).update(status=JobStatus.STOPPED)
    at = datetime(2026, 3, 2, 12, 0, 0, 123456, tzinfo=UTC)
    rows_update(
        Job,
        ["display_name", "queue_position", "not_before"],
        [
            (jobs[0].pk, "first", 1, at),
            (jobs[1].pk, "second", None, None),
            (jobs[3].pk, "stopped", 4, at),  # no longer Queuing: left alone
        ],
        where={"status": JobStatus.QUEUING},
        chunk=2,
    )
    rows_update(Job, ["display_name"], [])
    assert list(
        Job.objects.order_by("id").values_list("display_name", "queue_position", "not_before")
    ) == [("first", 1, at), ("second", None, None), ("j2", None, None), ("j3", None, None)]
