"""Reads compiled once (`ReusedSql`) answer what the ORM answers, whoever asks and for
whichever job: the job read of GetJob and the job page, its parts, and the AccessKey."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth import get_user_model
from django.http import Http404

from apps.cluster.models import InstanceType
from apps.core.db import ReusedSql
from apps.jobs.models import Accessibility, ElasticSpotSpec, Job, JobRole, JobTag, Pod
from apps.jobs.selectors import job_get_for_user, job_parts, jobs_visible
from apps.workspaces.models import AccessKey, Membership
from tests.factories import make_access_key, make_user
from tests.web.test_jobs_views import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def askers(personas):
    staff = make_user("staff")
    staff.is_staff = True
    staff.save()
    admin = make_user("dana")  # a workspace administrator: sees PRIVATE jobs of team-a
    Membership.objects.create(user=admin, workspace=personas["ws_a"], role="admin")
    return {
        "alice": personas["alice"],
        "bob": personas["bob"],
        "charlie": personas["charlie"],
        "root": make_user("root", superuser=True),
        "staff": staff,
        "admin": admin,
    }


@pytest.fixture
def jobs(personas):
    made = []
    for user, accessibility in itertools.product(("alice", "bob"), Accessibility.values):
        job = make_job(personas, user=user, name=f"{user}-{accessibility}", pods=2)
        Job.objects.filter(pk=job.pk).update(accessibility=accessibility)
        made.append(job)
    made.append(make_job(personas, user="charlie", workspace="ws_b", name="other-team"))
    return made


def test_every_asker_gets_the_job_the_orm_gives_and_a_404_where_it_gives_none(askers, jobs):
    seen = 0
    for (name, user), job in itertools.product(askers.items(), jobs):
        expected = (
            jobs_visible(user=user)
            .select_related("workspace", "quota", "user")
            .filter(job_id=job.job_id)
            .first()
        )
        if expected is None:
            with pytest.raises(Http404):
                job_get_for_user(user=user, job_id=job.job_id)
            continue
        seen += 1
        got = job_get_for_user(user=user, job_id=job.job_id)
        assert got.pk == expected.pk, name
        assert got.accessibility == expected.accessibility
        assert got.workspace.name == expected.workspace.name  # read in the same query
        assert got.user.username == expected.user.username
        assert (got.quota and got.quota.name) == (expected.quota and expected.quota.name)
    # the set is not trivial: some see everything, some see part of it
    assert 0 < seen < len(askers) * len(jobs)


def test_an_unknown_job_and_an_anonymous_asker_get_404(askers, jobs):
    from django.contrib.auth.models import AnonymousUser

    with pytest.raises(Http404):
        job_get_for_user(user=askers["root"], job_id="dlc-nothing")
    with pytest.raises(Http404):
        job_get_for_user(user=AnonymousUser(), job_id=jobs[0].job_id)


def test_a_jobs_parts_are_the_rows_the_orm_reads(personas, jobs):
    job = jobs[0]
    role = job.roles.get()
    second = JobRole.objects.create(job=job, role_type="PS", pod_count=1, cpu=1000, memory=1024)
    small, large = InstanceType.objects.order_by("name")[:2]
    for position, instance_type in ((1, large), (0, small)):
        ElasticSpotSpec.objects.create(
            role=role, position=position, instance_type=instance_type, spot_discount_limit="0.5"
        )
    JobTag.objects.create(job=job, key="team", value="vision")
    JobTag.objects.create(job=job, key="a", value="first")
    other = jobs[1]
    JobTag.objects.create(job=other, key="not", value="mine")

    parts = job_parts(job=job)

    assert [r.pk for r in parts.roles] == [role.pk, second.pk]
    assert [
        [(s.position, s.instance_type.name) for s in r.elastic_spot_specs.all()]
        for r in parts.roles
    ] == [[(0, small.name), (1, large.name)], []]
    assert [p.pk for p in parts.pods] == list(
        Pod.objects.filter(job=job).values_list("pk", flat=True)
    )
    assert all(p.role.pk == role.pk for p in parts.pods)
    assert [s.pk for s in parts.status_history] == list(
        job.status_history.values_list("pk", flat=True)
    )
    assert [(t.key, t.value) for t in job.tags.all()] == [("a", "first"), ("team", "vision")]
    # the other job's parts are its own, read by the same compiled SQL
    other_parts = job_parts(job=other)
    assert [(t.key, t.value) for t in other.tags.all()] == [("not", "mine")]
    assert [r.pk for r in other_parts.roles] == [other.roles.get().pk]


def test_the_access_key_read_finds_the_key_and_its_user(personas):
    from apps.api.auth import _key_sql

    key, _ = make_access_key(personas["bob"])
    make_access_key(personas["alice"])
    [got] = _key_sql(key_id=key.key_id)
    assert (got.pk, got.user.username) == (key.pk, "bob")
    assert _key_sql(key_id="LTAI-no-such-key") == []
    assert AccessKey.objects.count() == 2


def test_it_refuses_what_it_cannot_compile_once(personas):
    by_name = ReusedSql(
        lambda shape, name: Job.objects.filter(display_name__icontains=name), name=str
    )
    with pytest.raises(ValueError, match="did not reach the SQL"):
        by_name(name="train")
    first = ReusedSql(lambda shape, n: Job.objects.all()[:n], n=int)
    with pytest.raises(ValueError, match="did not reach the SQL"):
        first(n=1)
    prefetching = ReusedSql(
        lambda shape, pk: Job.objects.filter(pk=pk).prefetch_related("tags"), pk=int
    )
    with pytest.raises(ValueError, match="prefetch_related"):
        prefetching(pk=1)
    nothing = ReusedSql(lambda shape, pk: Job.objects.filter(pk__in=[]).filter(pk=pk), pk=int)
    with pytest.raises(ValueError, match="matches nothing"):
        nothing(pk=1)
    plain = ReusedSql(lambda shape, pk: Job.objects.filter(pk=pk), pk=int)
    with pytest.raises(ValueError, match="none of them None"):
        plain(pk=None)
    with pytest.raises(ValueError, match="exactly"):
        plain(id=1)
    with pytest.raises(ValueError, match="kind"):
        ReusedSql(lambda shape, at: Job.objects.filter(created_at=at), at=float)


def test_a_shape_is_compiled_apart(personas, jobs):
    """The shape is what changes the SQL's text: each has its own."""
    users = ReusedSql(
        lambda shape, pk: get_user_model().objects.filter(pk=pk, is_staff=shape),
        pk=int,
    )
    dana = make_user("dana")
    assert users(False, pk=dana.pk) == [dana]
    assert users(True, pk=dana.pk) == []
    assert users(False, pk=personas["alice"].pk) == [personas["alice"]]


def test_the_workspace_read_answers_members_and_superusers_only(personas, askers):
    from apps.workspaces.selectors import workspace_for_user, workspace_list

    workspaces = [personas["ws_a"], personas["ws_b"]]
    for user, workspace in itertools.product(askers.values(), workspaces):
        expected = workspace_list(user=user).filter(pk=workspace.pk).first()
        assert workspace_for_user(user=user, workspace_id=str(workspace.pk)) == expected
    assert workspace_for_user(user=askers["root"], workspace_id=str(workspaces[1].pk))
    assert not workspace_for_user(user=askers["alice"], workspace_id=str(workspaces[1].pk))
    for odd in ("abc", "", None, str(2**63), "-1"):
        assert workspace_for_user(user=askers["root"], workspace_id=odd) is None
