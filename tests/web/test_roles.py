"""Who may do what in the console: a member views every job of the workspace but stops (or
deletes, or reprioritises) only their own; the workspace's owners and administrators and
platform admins manage every job; outsiders see none. The health page is for staff."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.core.errors import ApplicationError
from apps.jobs.models import JobStatus
from apps.jobs.selectors import job_can_manage, job_ensure_can_manage
from apps.workspaces.models import Membership
from tests.factories import make_user
from tests.web.test_jobs_views import make_job


@pytest.fixture
def jobs(personas):
    return {
        "alice": make_job(personas, name="alices-job", pods=1),
        "bob": make_job(personas, name="bobs-job", user="bob", pods=1),
        "charlie": make_job(personas, name="charlies-job", user="charlie", workspace="ws_b"),
    }


def login(client, user):
    client.force_login(user)
    return client


def stop(client, job):
    return client.post(reverse("jobs:stop", args=[job.job_id]))


def status_of(job) -> str:
    job.refresh_from_db()
    return job.status


# --- the rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "owner", "allowed"),
    [
        ("alice", "alice", True),  # her own
        ("alice", "bob", True),  # she owns team-a
        ("bob", "bob", True),  # his own
        ("bob", "alice", False),  # a member: view only
        ("charlie", "alice", False),  # another workspace
        ("charlie", "charlie", True),
    ],
)
def test_it_lets_submitters_and_owners_manage_jobs(personas, jobs, persona, owner, allowed):
    assert job_can_manage(user=personas[persona], job=jobs[owner]) is allowed


def test_it_lets_platform_admins_manage_every_job(jobs, admin_user):
    staff = make_user("operator")
    staff.is_staff = True
    staff.save()
    for job in jobs.values():
        assert job_can_manage(user=admin_user, job=job)
        assert job_can_manage(user=staff, job=job)


def test_it_lets_a_workspace_administrator_manage_every_job(personas, jobs):
    Membership.objects.filter(user=personas["bob"]).update(role=Membership.Role.ADMIN)
    assert job_can_manage(user=personas["bob"], job=jobs["alice"])


def test_it_stops_a_former_member_managing_their_old_jobs(personas, jobs):
    Membership.objects.filter(user=personas["bob"]).delete()
    assert not job_can_manage(user=personas["bob"], job=jobs["bob"])


def test_it_refuses_anonymous_users(jobs):
    from django.contrib.auth.models import AnonymousUser

    assert not job_can_manage(user=AnonymousUser(), job=jobs["alice"])


def test_it_refuses_with_a_403_application_error(personas, jobs):
    with pytest.raises(ApplicationError) as refused:
        job_ensure_can_manage(user=personas["bob"], job=jobs["alice"], action="stop")
    assert refused.value.status == 403
    assert refused.value.code == "Forbidden.NotJobManager"
    assert f"You cannot stop job {jobs['alice'].job_id}" in refused.value.message
    job_ensure_can_manage(user=personas["alice"], job=jobs["bob"])  # no error


# --- the console -------------------------------------------------------------------------


def test_it_lets_bob_view_but_not_stop_alices_job(client, personas, jobs):
    bob = login(client, personas["bob"])
    job = jobs["alice"]
    page = bob.get(reverse("jobs:detail", args=[job.job_id]))
    assert page.status_code == 200
    content = page.content.decode()
    assert 'id="stop-job"' not in content and reverse("jobs:stop", args=[job.job_id]) not in content
    assert "Only alice, an owner of Team A or a platform admin can stop this job." in content
    live = bob.get(
        reverse("jobs:detail", args=[job.job_id]),
        headers={"HX-Request": "true", "HX-Target": "job-live"},
    ).content.decode()
    assert 'id="stop-job"' not in live and 'id="stop-not-allowed"' in live
    refused = stop(bob, job)
    assert refused.status_code == 403
    assert (
        f"You cannot stop job {job.job_id}: only the user who submitted it, an owner of "
        "workspace team-a or a platform admin can."
    ) in refused.content.decode()
    assert status_of(job) == JobStatus.RUNNING


def test_it_lets_bob_stop_his_own_job(client, personas, jobs):
    bob = login(client, personas["bob"])
    job = jobs["bob"]
    assert 'id="stop-job"' in bob.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    assert stop(bob, job).status_code == 302
    assert status_of(job) == JobStatus.STOPPED


def test_it_lets_alice_stop_bobs_job_as_the_workspace_owner(alice_client, jobs):
    job = jobs["bob"]
    page = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    assert 'id="stop-job"' in page
    assert stop(alice_client, job).status_code == 302
    assert status_of(job) == JobStatus.STOPPED


def test_it_lets_an_admin_stop_anyones_job(admin_client, jobs):
    for job in jobs.values():
        page = admin_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
        assert 'id="stop-job"' in page
        assert stop(admin_client, job).status_code == 302
        assert status_of(job) == JobStatus.STOPPED


def test_it_hides_team_as_jobs_from_charlie(client, personas, jobs):
    charlie = login(client, personas["charlie"])
    listing = charlie.get(reverse("jobs:list")).content.decode()
    for name in ("alice", "bob"):
        job = jobs[name]
        assert job.job_id not in listing and job.display_name not in listing
        assert charlie.get(reverse("jobs:detail", args=[job.job_id])).status_code == 404
        assert stop(charlie, job).status_code == 404
        pod = job.pods.get()
        assert charlie.get(reverse("pods:logs", args=[pod.pod_id])).status_code == 404
        assert status_of(job) == JobStatus.RUNNING
    assert jobs["charlie"].job_id in listing


# --- operations pages ----------------------------------------------------------------------


@pytest.fixture
def quiet_health(monkeypatch):
    from apps.core.selectors import Health

    monkeypatch.setattr(
        "apps.ops.views.health_snapshot",
        lambda **kwargs: Health(
            beat_last_seen=None, beat_ok=False, workers=[], broker_ok=True, broker_error=""
        ),
    )


@pytest.mark.parametrize("persona", ["alice", "bob", "charlie"])
def test_it_refuses_the_health_page_to_non_staff(client, personas, persona, quiet_health, settings):
    user = login(client, personas[persona])
    response = user.get(reverse("ops:health"))
    assert response.status_code == 403
    assert "The health page is for platform staff." in response.content.decode()
    assert user.get(reverse("ops:health"), headers={"HX-Request": "true"}).status_code == 403
    page = user.get(reverse("jobs:list")).content.decode()
    assert reverse("ops:health") not in page and settings.FLOWER_URL not in page


def test_it_shows_the_health_page_and_flower_to_staff(client, personas, quiet_health, settings):
    alice = personas["alice"]
    alice.is_staff = True
    alice.save()
    response = login(client, alice).get(reverse("ops:health"))
    assert response.status_code == 200
    assert f'href="{settings.FLOWER_URL}"' in response.content.decode()


def test_it_keeps_healthz_public(client, db):
    assert client.get(reverse("ops:healthz")).status_code == 200
