from __future__ import annotations

from decimal import Decimal

import pytest

from apps.cluster.models import InstanceType
from apps.core.errors import ValidationFailed
from apps.jobs.models import Job, JobStatus
from apps.jobs.services import job_stop, job_submit
from apps.jobs.specs import JobSpec, RoleSpec


def spot_spec(**overrides) -> JobSpec:
    role = RoleSpec(instance_type="ecs.g7.xlarge", spot_discount_limit=Decimal("0.4"))
    spec = JobSpec(
        display_name="sample-spot-job", user_command="echo hi", resource_source="spot", roles=[role]
    )
    for key, value in overrides.items():
        setattr(spec, key, value)
    return spec


def quota_spec(**overrides) -> JobSpec:
    spec = JobSpec(
        display_name="train",
        user_command="python train.py",
        quota="team-a",
        roles=[RoleSpec(pod_count=2, cpu=8000, memory=32768, gpu=2)],
    )
    for key, value in overrides.items():
        setattr(spec, key, value)
    return spec


@pytest.mark.django_db(transaction=True)
def test_it_moves_a_spot_job_from_creating_to_bidding(personas):
    job = job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spot_spec())
    job.refresh_from_db()
    assert job.status == JobStatus.BIDDING
    assert [t.status for t in job.status_history.all()] == ["Creating", "Bidding"]
    assert job.status_history.first().ended_at is not None
    role = job.roles.get()
    assert role.spot_strategy == "SpotWithPriceLimit"
    assert role.spot_discount_limit == Decimal("0.4")


@pytest.mark.django_db(transaction=True)
def test_it_queues_a_quota_job_and_the_tick_places_it(personas):
    job = job_submit(workspace=personas["ws_a"], user=personas["bob"], spec=quota_spec())
    job.refresh_from_db()
    assert [t.status for t in job.status_history.all()][:2] == ["Creating", "Queuing"]
    assert job.status == JobStatus.RUNNING
    assert job.quota.name == "team-a"
    assert job.roles.get().gpu == 2


def test_it_rejects_both_spot_limits(personas):
    role = RoleSpec(
        instance_type="ecs.g7.xlarge",
        spot_discount_limit=Decimal("0.4"),
        spot_price_limit=Decimal("0.011"),
    )
    with pytest.raises(ValidationFailed) as caught:
        job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spot_spec(roles=[role]))
    assert "roles[0].spot_price_limit" in caught.value.errors
    assert Job.objects.count() == 0


def test_it_accepts_the_seed_price_limit(personas):
    role = RoleSpec(instance_type="ecs.g7.xlarge", spot_price_limit=Decimal("0.011"))
    job = job_submit(
        workspace=personas["ws_a"], user=personas["alice"], spec=spot_spec(roles=[role])
    )
    assert job.roles.get().spot_price_limit == Decimal("0.011")


@pytest.mark.parametrize("discount", ["0", "0.05", "0.45", "1.0"])
def test_it_rejects_a_discount_off_the_list(personas, discount):
    role = RoleSpec(instance_type="ecs.g7.xlarge", spot_discount_limit=Decimal(discount))
    with pytest.raises(ValidationFailed) as caught:
        job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spot_spec(roles=[role]))
    assert caught.value.errors == {
        "roles[0].spot_discount_limit": ["must be one of 0.1, 0.2 … 0.9"]
    }


def test_it_rejects_a_price_limit_outside_the_range(personas):
    role = RoleSpec(instance_type="ecs.g7.xlarge", spot_price_limit=Decimal("0.02"))
    with pytest.raises(ValidationFailed) as caught:
        job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spot_spec(roles=[role]))
    assert "market price range" in caught.value.errors["roles[0].spot_price_limit"][0]


def test_it_refuses_a_price_limit_that_bids_below_the_floor(personas):
    # ¥0.5065/h: the floor is ¥0.0507/h; ¥0.000844/min would bid ¥0.0506/h and never start.
    InstanceType.objects.filter(name="ecs.g7.xlarge").update(price_per_hour=Decimal("0.5065"))
    role = RoleSpec(instance_type="ecs.g7.xlarge", spot_price_limit=Decimal("0.000844"))
    with pytest.raises(ValidationFailed) as caught:
        job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spot_spec(roles=[role]))
    assert caught.value.errors["roles[0].spot_price_limit"] == [
        "must lie in ecs.g7.xlarge's market price range ¥0.000845–¥0.008442 per minute"
    ]
    lowest = RoleSpec(instance_type="ecs.g7.xlarge", spot_price_limit=Decimal("0.000845"))
    job = job_submit(
        workspace=personas["ws_a"], user=personas["alice"], spec=spot_spec(roles=[lowest])
    )
    assert job.roles.get().spot_price_limit == Decimal("0.000845")


def test_it_requires_a_vpc_for_lingjun_spot_and_only_discounts(personas):
    role = RoleSpec(instance_type="ml.gu8xf.8xlarge-gu108", spot_price_limit=Decimal("1"))
    with pytest.raises(ValidationFailed) as caught:
        job_submit(
            workspace=personas["ws_a"],
            user=personas["alice"],
            spec=spot_spec(resource_type="Lingjun", roles=[role]),
        )
    errors = caught.value.errors
    assert set(errors) == {"vpc_id", "vswitch_id", "security_group_id", "roles[0].spot_price_limit"}


def test_it_lists_every_problem_at_once(personas):
    spec = quota_spec(
        display_name="",
        user_command="",
        priority=10,
        quota="team-b",
        roles=[RoleSpec(pod_count=0, cpu=1000, memory=1024)],
    )
    with pytest.raises(ValidationFailed) as caught:
        job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec)
    assert set(caught.value.errors) == {
        "display_name",
        "user_command",
        "priority",
        "quota",
        "roles[0].pod_count",
    }


def test_it_refuses_idle_mode_without_a_quota(personas):
    with pytest.raises(ValidationFailed) as caught:
        job_submit(
            workspace=personas["ws_a"],
            user=personas["alice"],
            spec=spot_spec(idle_mode="acceptable"),
        )
    assert "idle_mode" in caught.value.errors


@pytest.mark.django_db(transaction=True)
def test_it_stops_a_job_and_leaves_it_as_it_is_on_a_second_stop(personas):
    job = job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=quota_spec())
    job_stop(job=job, by=personas["alice"])
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    assert job.reason_message == "Stopped by alice"
    events = job.events.count()
    job_stop(job=job, by=personas["bob"])
    job.refresh_from_db()
    assert (job.status, job.reason_message) == (JobStatus.STOPPED, "Stopped by alice")
    assert job.events.count() == events
