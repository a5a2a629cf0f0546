"""The API and the console read through the same selectors: for every persona, the jobs the
console lists (over each workspace the switcher offers) are the jobs ListJobs returns, and a
job's page opens in the console exactly when GetJob finds it. Every other read of the API
answers what its selector answers (a job's parts and events, instance types and prices,
workspaces' admins, quotas), in a fixed number of queries."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from alibabacloud_pai_dlc20201203.client import Client as DLCClient
from alibabacloud_pai_dlc20201203.models import GetJobRequest, ListJobsRequest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.agent.selectors import pod_addresses
from apps.api import serializers
from apps.cluster.models import InstanceType, MarketParameters
from apps.cluster.selectors import instance_type_list, quota_list
from apps.core.pricing import hour_to_per_minute
from apps.jobs.models import Job, JobEvent, JobRole, JobStatus, Pod, StatusTransition
from apps.jobs.selectors import job_events, job_get_for_user, job_parts, job_pod
from apps.market.models import MarketState
from apps.market.selectors import market_states, market_type
from apps.workspaces.middleware import SESSION_KEY
from apps.workspaces.models import Membership, Workspace
from apps.workspaces.selectors import workspace_admins, workspace_default, workspace_list
from tests.api.conftest import RawClient, config, sdk_error
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


# --- the API's other reads, each through the selector that owns the data -------------------
#
# These calls are answered in this process (Django's test client, signed as the SDK signs),
# so each test can compare the body with its selector's answer and count the queries.


@pytest.fixture
def api_get(client, keys, django_assert_max_num_queries):
    """api_get(path, query=None, user=None, max_queries=None) → the JSON body of a signed
    GET (alice's key unless another user is given), answered in this process; with
    `max_queries`, the call may make no more (the key's lookup and its last use included)."""
    secrets: dict[int, tuple[str, str]] = {}

    def get(
        path: str,
        query: dict | None = None,
        *,
        user=None,
        status: int = 200,
        max_queries: int | None = None,
    ) -> dict:
        if user is None:
            key = keys["alice"]
        else:
            if user.pk not in secrets:
                access_key, secret = make_access_key(user)
                secrets[user.pk] = (access_key.key_id, secret)
            key = secrets[user.pk]
        headers = RawClient("http://testserver", key).headers("GET", path, query=query)
        if max_queries is None:
            response = client.get(path, query or {}, headers=headers)
        else:
            with django_assert_max_num_queries(max_queries):
                response = client.get(path, query or {}, headers=headers)
        assert response.status_code == status, response.content
        return response.json()

    return get


def without_request_id(body: dict) -> dict:
    return {name: value for name, value in body.items() if name != "RequestId"}


NOW = timezone.now().replace(microsecond=0)


@pytest.fixture
def story(personas, cluster):
    """alice's quota job on its second attempt: two roles, pods of both attempts on nodes,
    events over two days (some of one pod), a status history; and charlie's job in team-b."""
    job = make_job(personas, name="story", pods=2, created=NOW - timedelta(days=2))
    Job.objects.filter(pk=job.pk).update(attempt=1)
    job.refresh_from_db()
    worker = job.roles.get()
    job.pods.update(attempt=1, node=cluster["nodes"][0])
    ps = JobRole.objects.create(
        job=job, role_type="PS", pod_count=1, cpu=1000, memory=1024, instance_type=cluster["g7"]
    )
    old = Pod.objects.create(
        job=job, role=worker, index=0, attempt=0, pod_id=f"{job.job_id}-worker-0-a0"
    )
    Pod.objects.create(
        job=job, role=ps, index=0, attempt=1, pod_id=f"{job.job_id}-ps-0", status="Running"
    )
    pod = job.pods.get(pod_id=f"{job.job_id}-worker-0")
    StatusTransition.objects.create(job=job, status="Queuing", started_at=NOW - timedelta(days=3))
    for hours, where in ((40, None), (30, old), (20, pod), (10, None), (2, pod), (1, pod)):
        JobEvent.objects.create(
            job=job, pod=where, at=NOW - timedelta(hours=hours), kind="Note", message=f"{hours}h"
        )
    other = make_job(personas, name="b-job", workspace="ws_b", user="charlie", pods=1)
    JobEvent.objects.create(job=other, at=NOW, kind="Note", message="team-b's")
    return {"job": job, "pod": pod, "old_pod": old, "other": other}


def test_it_answers_get_job_with_job_parts(api_get, story, alice):
    job = job_get_for_user(user=alice, job_id=story["job"].job_id)
    # the key and its last use, the job, then job_parts: roles (and their ElasticSpotSpecs),
    # pods, status history, restarts; its tags; the pods' processes (their addresses)
    body = api_get(f"/api/v1/jobs/{job.job_id}", max_queries=10)
    parts = job_parts(job=job)
    detail = serializers.job_detail(
        job,
        roles=parts.roles,
        pods=parts.pods,
        history=parts.status_history,
        restarts=parts.restarts,
        addresses=pod_addresses(pods=parts.pods),
    )
    # a running job's Duration reads the clock: the call and this test each read it once
    assert abs(body["Duration"] - detail["Duration"]) <= 1
    assert without_request_id(body) == {**detail, "Duration": body["Duration"]}
    assert [spec["Type"] for spec in body["JobSpecs"]] == [r.role_type for r in parts.roles]
    assert sorted(p["PodId"] for p in body["Pods"]) == sorted(
        p.pod_id for p in parts.pods if p.attempt == job.attempt
    )
    [worker_0] = [p for p in body["Pods"] if p["PodId"] == story["pod"].pod_id]
    assert [p["PodId"] for p in worker_0["HistoryPods"]] == [story["old_pod"].pod_id]


def test_job_parts_reads_pods_with_roles_and_nodes_in_six_queries(story, django_assert_num_queries):
    # roles, their ElasticSpotSpecs, pods (with node and instance type), tags, history,
    # restarts
    with django_assert_num_queries(6):
        parts = job_parts(job=story["job"])
        seen = {(p.pod_id, p.role.role_type, p.role.instance_type, p.node) for p in parts.pods}
    assert len(seen) == 4
    assert [p.attempt for p in parts.pods] == [1, 1, 1, 0]  # newest attempt first
    assert [t.status for t in parts.status_history] == ["Queuing", "Running"]  # by start


def test_job_parts_reads_no_restarts_of_a_job_on_its_first_attempt(
    api_get, personas, django_assert_num_queries
):
    job = make_job(personas, name="first-attempt", pods=2)
    # roles, their ElasticSpotSpecs, pods, tags, history: restart n starts attempt n, so none
    with django_assert_num_queries(5):
        parts = job_parts(job=job)
    assert parts.restarts == [] and job.attempt == 0
    # the key and its last use, the job, job_parts' five (the tags among them), the pods'
    # processes
    body = api_get(f"/api/v1/jobs/{job.job_id}", max_queries=9)
    assert body["RestartRecord"] == [] and len(body["Pods"]) == 2


def test_it_lists_jobs_with_their_roles_in_one_query(api_get, story, personas):
    for n in range(4):
        make_job(personas, name=f"more-{n}", pods=1)
    # the key and its last use, the count, the page, every job's roles (and their
    # ElasticSpotSpecs), every job's tags
    body = api_get("/api/v1/jobs", {"StartTime": "2000-01-01T00:00:00Z"}, max_queries=7)
    assert body["TotalCount"] == 5
    story_item = next(item for item in body["Jobs"] if item["DisplayName"] == "story")
    assert [spec["Type"] for spec in story_item["JobSpecs"]] == ["Worker", "PS"]


def test_it_answers_job_events_with_job_events(api_get, story):
    job = story["job"]
    since, until = NOW - timedelta(hours=35), NOW - timedelta(hours=1, minutes=30)
    window = {"StartTime": serializers.iso(since), "EndTime": serializers.iso(until)}
    body = api_get(f"/api/v1/jobs/{job.job_id}/events", window, max_queries=4)
    events = job_events(job=job, since=since, until=until)
    assert body["Events"] == [serializers.event_line(e) for e in events]
    assert [e.message for e in events] == ["30h", "20h", "10h", "2h"]


def test_it_answers_pod_events_with_job_pod_and_job_events(api_get, story):
    job, pod = story["job"], story["pod"]
    path = f"/api/v1/jobs/{job.job_id}/pods/{pod.pod_id}/events"
    body = api_get(path, {"MaxEventsNum": "1"}, max_queries=5)
    found = job_pod(job=job, pod_id=pod.pod_id)
    events = job_events(job=job, since=NOW - timedelta(days=7), until=timezone.now(), pod=found)
    assert body["PodUid"] == serializers.pod_uid(found)
    assert body["Events"] == [serializers.event_line(list(events)[-1])]  # MaxEventsNum: the newest
    assert [e.message for e in events] == ["20h", "2h", "1h"]


def test_job_events_keep_to_the_window_and_the_pod(story):
    job = story["job"]
    since, until = NOW - timedelta(hours=30), NOW - timedelta(hours=2)  # both ends included
    assert [e.message for e in job_events(job=job, since=since, until=until)] == [
        "30h",
        "20h",
        "10h",
        "2h",
    ]
    of_old_pod = job_events(job=job, since=NOW - timedelta(days=3), until=NOW, pod=story["old_pod"])
    assert [e.message for e in of_old_pod] == ["30h"]


def test_job_pod_never_finds_a_pod_of_another_job(story):
    other_pod = story["other"].pods.get()
    assert job_pod(job=story["job"], pod_id=other_pod.pod_id) is None
    assert job_pod(job=story["other"], pod_id=other_pod.pod_id) == other_pod
    assert job_pod(job=story["job"], pod_id=story["old_pod"].pod_id) == story["old_pod"]


@pytest.mark.parametrize("tail", ["/events", "/pods/{pod}/events", "/pods/{pod}/logs"])
def test_charlie_never_reads_the_events_of_alices_job(api_get, story, charlie, tail):
    job = story["job"]
    path = f"/api/v1/jobs/{job.job_id}" + tail.format(pod=story["pod"].pod_id)
    body = api_get(path, user=charlie, status=404)
    assert body["Code"] == "EntityNotExist.Job"


def test_alice_never_reads_a_pod_of_charlies_job_through_her_own(api_get, story):
    job, other_pod = story["job"], story["other"].pods.get()
    body = api_get(f"/api/v1/jobs/{job.job_id}/pods/{other_pod.pod_id}/events", status=404)
    assert body["Code"] == "EntityNotExist.Pod"


# --- instance types and the market ----------------------------------------------------------


G7 = "ecs.g7.xlarge"


@pytest.fixture
def priced(cluster):
    """Six more instance types, market prices for g7 and gn7, the market's parameters."""
    MarketParameters.load()
    for n in range(6):
        InstanceType.objects.create(
            name=f"ecs.extra-{n}",
            resource_type="ECS",
            cpu=2000,
            memory=4096,
            gpu=n % 2,
            price_per_hour=Decimal("1.0000"),
        )
    for itype, price in ((cluster["g7"], "0.4000"), (cluster["gn7"], "4.8000")):
        MarketState.objects.create(
            instance_type=itype, price_per_hour=Decimal(price), stepped_at=NOW, recorded_at=NOW
        )
    return cluster


@pytest.mark.parametrize(
    ("query", "filters"),
    [
        ({}, {}),
        ({"AcceleratorType": "GPU"}, {"gpu": True}),
        ({"AcceleratorType": "cpu", "ResourceType": "ECS"}, {"gpu": False, "resource_type": "ECS"}),
        ({"InstanceTypes": "ecs.g7.xlarge, ecs.extra-1,no"}, {"names": [G7, "ecs.extra-1", "no"]}),
        ({"ResourceType": "Lingjun"}, {"resource_type": "Lingjun"}),
    ],
)  # fmt: skip
def test_it_lists_ecs_specs_from_instance_type_list_and_market_states(
    api_get, priced, query, filters
):
    body = api_get("/api/v1/ecsspecs", query)
    types = list(instance_type_list(**filters).order_by("-pk"))  # newest first, as DLC
    assert [s["InstanceType"] for s in body["EcsSpecs"]] == [t.name for t in types]
    assert body["TotalCount"] == len(types)
    states = market_states(types=types)
    discounts = {
        s["InstanceType"]: s["NonProtectSpotDiscount"]
        for s in body["EcsSpecs"]
        if "NonProtectSpotDiscount" in s
    }
    assert discounts == {
        t.name: float(round(states[t.pk].price_per_hour / t.price_per_hour, 4))
        for t in types
        if t.pk in states
    }


def test_it_lists_ecs_specs_in_the_same_queries_however_many_types(api_get, priced):
    # the key and its last use, the count, the page, usage (2), prices, the market's floor:
    # no longer a read of the market's parameters per type
    body = api_get("/api/v1/ecsspecs", max_queries=8)
    assert body["TotalCount"] == 9


def test_instance_type_list_narrows_by_every_filter_given(priced):
    def names(**filters) -> set[str]:
        return set(instance_type_list(**filters).values_list("name", flat=True))

    assert len(names()) == 9
    assert names(gpu=False) == {"ecs.g7.xlarge", "ecs.extra-0", "ecs.extra-2", "ecs.extra-4"}
    assert names(gpu=True, resource_type="ECS") == {
        "ecs.gn7i-c8g1.2xlarge",
        "ecs.extra-1",
        "ecs.extra-3",
        "ecs.extra-5",
    }
    assert names(names=["ecs.g7.xlarge", "nope"], gpu=True) == set()
    assert names(resource_type="Lingjun") == {"ml.gu8xf.8xlarge-gu108"}


def test_it_prices_spot_from_market_states(api_get, priced):
    g7 = priced["g7"]
    # the key and its last use, the type, the market's floor, the history (2), the price
    body = api_get("/api/v1/spot/prices", {"InstanceType": g7.name}, max_queries=7)
    state = market_states(types=[g7])[g7.pk]
    assert body["Price"] == float(hour_to_per_minute(state.price_per_hour))
    row = market_type(name=g7.name)  # the market page's row says the same
    assert (body["Price"], body["MinPrice"], body["MaxPrice"]) == (
        float(row.price_per_minute),
        float(row.floor_per_minute),
        float(row.original_per_minute),
    )


def test_market_states_leave_out_unpriced_types(priced):
    states = market_states(types=[priced["g7"], priced["lingjun_type"]])
    assert list(states) == [priced["g7"].pk]
    assert market_states(types=[]) == {}


# --- workspaces -------------------------------------------------------------------------------


@pytest.fixture
def run_by_three(personas, people):
    """team-a has alice (owner), dave (admin, joined after bob) and erin (a second owner)."""
    Membership.objects.filter(user=people["dave"], workspace=personas["ws_a"]).update(role="admin")
    erin = make_user("erin")
    Membership.objects.create(user=erin, workspace=personas["ws_a"], role="owner")
    return people


def test_it_names_the_admins_workspace_admins_names(api_get, personas, run_by_three):
    dave = run_by_three["dave"]
    # the key and its last use, the count, the page, the admins, the default workspace
    body = api_get("/api/v1/workspaces", user=dave, max_queries=6)
    admins = workspace_admins(workspaces=workspace_list(user=dave))
    assert {w["WorkspaceName"]: w["AdminNames"] for w in body["Workspaces"]} == {
        "team-a": admins[personas["ws_a"].pk].usernames,
        "team-b": admins[personas["ws_b"].pk].usernames,
    }
    assert admins[personas["ws_a"].pk].usernames == ["alice", "dave", "erin"]
    assert {w["WorkspaceName"]: w["Creator"] for w in body["Workspaces"]} == {
        "team-a": str(personas["alice"].pk),  # the first owner
        "team-b": str(personas["charlie"].pk),
    }


def test_it_gives_get_workspace_the_first_owner_in_fewer_queries(api_get, personas, run_by_three):
    ws_a = personas["ws_a"]
    # the key and its last use, the workspace, its admins (the owner among them), the default
    body = api_get(f"/api/v1/workspaces/{ws_a.workspace_id}", max_queries=5)
    owner = workspace_admins(workspaces=[ws_a])[ws_a.pk].owner
    assert owner is not None and owner.user == personas["alice"]
    assert body["Owner"] == {
        "UserId": str(owner.user_id),
        "UserName": "alice",
        "DisplayName": "alice",
    }
    assert body["AdminNames"] == ["alice", "dave", "erin"]


def test_workspace_admins_leave_members_out(personas, run_by_three):
    bare = Workspace.objects.create(name="bare")
    Membership.objects.create(user=personas["bob"], workspace=bare, role="member")
    admins = workspace_admins(workspaces=[personas["ws_a"], bare])
    assert "bob" not in admins[personas["ws_a"].pk].usernames
    assert admins[bare.pk].usernames == [] and admins[bare.pk].owner is None


@pytest.mark.parametrize("persona", PERSONAS)
def test_the_api_default_workspace_is_the_one_the_console_opens(api_get, people, persona):
    user = people[persona]
    client = Client()
    client.force_login(user)
    opened = client.get(reverse("jobs:list")).wsgi_request.workspace
    assert opened == workspace_default(user=user)
    body = api_get("/api/v1/workspaces", user=user)
    defaults = [w["WorkspaceId"] for w in body["Workspaces"] if w["IsDefault"]]
    assert defaults == ([opened.workspace_id] if opened else [])


# --- quotas -----------------------------------------------------------------------------------


@pytest.fixture
def shared_quota(cluster, personas, people):
    """team-a's quota also serves team-b; team-c (nobody's but the superuser's) has its own."""
    cluster["team_a"].workspaces.add(personas["ws_b"])
    ws_c = Workspace.objects.create(name="team-c")
    cluster["root"].workspaces.add(ws_c)
    return people


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_lists_the_quotas_quota_list_gives(api_get, shared_quota, persona):
    user = shared_quota[persona]
    # the key and its last use, the quotas, the caller's workspaces among theirs
    body = api_get("/api/v1/quotas", user=user, max_queries=4)
    expected = {q.quota.name: [w.workspace_id for w in q.workspaces] for q in quota_list(user=user)}
    assert {q["Name"]: q["WorkspaceIds"] for q in body["Quotas"]} == expected
    assert [q["Name"] for q in body["Quotas"]] == sorted(expected)
    assert body["TotalCount"] == len(expected)


def test_quota_list_never_names_another_users_workspace(shared_quota, personas):
    ws_a, ws_b = personas["ws_a"], personas["ws_b"]

    def seen(user, **kwargs) -> dict[str, list[str]]:
        return {
            q.quota.name: [w.name for w in q.workspaces] for q in quota_list(user=user, **kwargs)
        }

    assert seen(shared_quota["charlie"]) == {"team-a": ["team-b"], "team-b": ["team-b"]}
    assert seen(shared_quota["alice"]) == {"lingjun-a": ["team-a"], "team-a": ["team-a"]}
    assert seen(shared_quota["dave"])["team-a"] == [ws_a.name, ws_b.name]
    assert seen(shared_quota["admin"]) == {
        "lingjun-a": ["team-a"],
        "root-ecs": ["team-c"],
        "team-a": ["team-a", "team-b"],
        "team-b": ["team-b"],
    }
    assert seen(shared_quota["outsider"]) == seen(shared_quota["staff"]) == {}
    assert seen(shared_quota["charlie"], name="lingjun-a") == {}
