"""The API and the console read through the same selectors: for every persona, the jobs the
console lists (over each workspace the switcher offers) are the jobs ListJobs returns, and a
job's page opens in the console exactly when GetJob finds it."""

from __future__ import annotations

import pytest
from alibabacloud_pai_dlc20201203.client import Client as DLCClient
from alibabacloud_pai_dlc20201203.models import GetJobRequest, ListJobsRequest
from django.test import Client
from django.urls import reverse

from apps.jobs.models import JobStatus
from apps.workspaces.middleware import SESSION_KEY
from apps.workspaces.models import Membership, Workspace
from apps.workspaces.selectors import workspace_list
from tests.api.conftest import config, sdk_error
from tests.factories import make_access_key, make_user
from tests.web.test_jobs_views import make_job

PERSONAS = ("alice", "bob", "charlie", "dave", "staff", "admin", "outsider")


@pytest.fixture
def people(personas) -> dict:
    """The shared personas plus dave (a member of both teams), a staff operator who belongs
    to no workspace, a superuser, and an outsider with no workspace."""
    dave = make_user("dave")
    Membership.objects.create(user=dave, workspace=personas["ws_a"], role="member")
    Membership.objects.create(user=dave, workspace=personas["ws_b"], role="member")
    staff = make_user("staff")
    staff.is_staff = True
    staff.save()
    admin = make_user("admin")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    return {
        **{name: personas[name] for name in ("alice", "bob", "charlie")},
        "dave": dave,
        "staff": staff,
        "admin": admin,
        "outsider": make_user("outsider"),
    }


@pytest.fixture
def jobs(personas, people) -> list:
    """Jobs in three workspaces (one nobody but the superuser sees) and several statuses."""
    personas["ws_c"] = Workspace.objects.create(name="team-c", display_name="Team C")
    personas["dave"] = people["dave"]
    return [
        make_job(personas, name="a-running", status=JobStatus.RUNNING, pods=1),
        make_job(personas, name="a-done", status=JobStatus.SUCCEEDED),
        make_job(personas, name="a-bob", user="bob", status=JobStatus.QUEUING),
        make_job(personas, name="a-spot", user="bob", source="spot", status=JobStatus.BIDDING),
        make_job(
            personas,
            name="b-failed",
            workspace="ws_b",
            user="charlie",
            source="public",
            status=JobStatus.FAILED,
        ),
        make_job(
            personas,
            name="b-dave",
            workspace="ws_b",
            user="dave",
            source="public",
            status=JobStatus.STOPPED,
        ),
        make_job(
            personas,
            name="c-orphan",
            workspace="ws_c",
            user="charlie",
            source="public",
            status=JobStatus.RUNNING,
        ),
    ]


@pytest.fixture
def dlc_of(endpoint, people):
    def dlc_of(name: str) -> DLCClient:
        key, secret = make_access_key(people[name])
        return DLCClient(config(endpoint, (key.key_id, secret)))

    return dlc_of


def console_job_ids(user) -> set[str]:
    """Every job id the console's list shows `user`, switching through their workspaces."""
    client = Client()
    client.force_login(user)
    shown: set[str] = set()
    for workspace in workspace_list(user=user):
        session = client.session
        session[SESSION_KEY] = workspace.pk
        session.save()
        response = client.get(reverse("jobs:list"))
        assert response.status_code == 200
        shown |= {job.job_id for job in response.context["page"].object_list}
    return shown


def api_job_ids(dlc: DLCClient) -> set[str]:
    body = dlc.list_jobs(ListJobsRequest(page_size=100)).body
    assert body.total_count == len(body.jobs)
    return {job.job_id for job in body.jobs}


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lists_the_same_jobs_in_the_console_and_the_api(people, jobs, dlc_of, persona):
    console = console_job_ids(people[persona])
    assert console == api_job_ids(dlc_of(persona))
    expected = {
        "alice": 4,
        "bob": 4,
        "charlie": 2,
        "dave": 6,
        "staff": 0,
        "admin": 7,
        "outsider": 0,
    }[persona]
    assert len(console) == expected  # the fixture really spreads jobs over the personas


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_finds_a_job_in_the_console_exactly_when_get_job_does(people, jobs, dlc_of, persona):
    client = Client()
    client.force_login(people[persona])
    dlc = dlc_of(persona)
    for job in jobs:
        page = client.get(reverse("jobs:detail", args=[job.job_id]))
        assert page.status_code in (200, 404)
        if page.status_code == 200:
            assert dlc.get_job(job.job_id, GetJobRequest()).body.job_id == job.job_id
        else:
            with pytest.raises(Exception) as caught:
                dlc.get_job(job.job_id, GetJobRequest())
            assert sdk_error(caught) == ("EntityNotExist.Job", 404), (persona, job.display_name)


# --- ListJobs' own filters, now parameters of the one job list ---------------------------


@pytest.fixture
def borrowing_job(personas, jobs):
    """alice's quota job that accepts idle resources and runs one pod outside its quota."""
    job = make_job(personas, name="a-borrow", idle_mode="acceptable", pods=2)
    job.pods.filter(index=1).update(in_quota=False)
    return job


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ({"OversoldInfo": "ForbiddenQuotaOverSold"}, {"a-running", "a-done", "a-bob"}),  # no spot
        ({"OversoldInfo": "AcceptQuotaOverSold"}, {"a-borrow"}),
        ({"OversoldInfo": "AcceptQuotaOverSold-true"}, {"a-borrow"}),
        ({"OversoldInfo": "AcceptQuotaOverSold-false"}, set()),
        ({"OversoldInfo": "AcceptQuotaOverSold", "PaymentType": "PrePaid"}, {"a-borrow"}),
        ({"OversoldInfo": "AcceptQuotaOverSold", "PaymentType": "Spot"}, set()),
        ({"PaymentType": "PostPaid"}, set()),  # pay-as-you-go only, unlike the console's PostPaid
        ({"PaymentType": "Spot", "Status": "Bidding,Running"}, {"a-spot"}),
        ({"ShowOwn": "true", "Username": "bob"}, set()),
        ({"Username": "bob"}, {"a-bob", "a-spot"}),
        ({"DisplayName": "A-B", "ResourceQuotaName": "TEAM"}, {"a-bob", "a-borrow"}),
        ({"ResourceId": "team"}, set()),  # the exact quota name
    ],
)
def test_it_filters_list_jobs_as_before(raw, borrowing_job, query, names):
    response = raw.send("GET", "/api/v1/jobs", query=query)
    assert response.status_code == 200, response.text
    body = response.json()
    assert {job["DisplayName"] for job in body["Jobs"]} == names
    assert body["TotalCount"] == len(names)


def test_it_shows_the_console_the_filters_it_sent(personas, jobs, borrowing_job):
    """The console's own filters keep their meaning (PostPaid is public and spot)."""
    from apps.jobs.selectors import job_list

    jobs = job_list(
        user=personas["alice"], workspace=personas["ws_a"], filters={"payment_type": "PostPaid"}
    )
    assert {job.display_name for job in jobs} == {"a-spot"}
    jobs = job_list(
        user=personas["alice"],
        workspace=personas["ws_a"],
        filters={"idle_mode": "acceptable", "statuses": ["Running"]},
    )
    assert [job.pods_running for job in jobs] == [2]
