"""A crawl of the whole console, as each persona: every URL pattern (read from the URLconf,
so a new page is crawled without anyone adding it here), with the real ids of every
workspace and with odd values in the path and in the query string.

Nothing answers 5xx, and nobody is shown a page of a job (or pod) of a workspace they are
not in: such a URL answers 400, 403, 404 or 405 (or sends an anonymous user to the login page),
and the job's id appears in no page they get.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern

from apps.jobs.models import Job, Pod
from apps.whatif.models import WhatIfRun
from tests.factories import make_access_key
from tests.web.test_jobs_views import make_job

# Django's admin is Django's own; the API answers in JSON and has its own tests (tests/api).
NOT_CONSOLE = ("admin/", "api/v1/")
# A POST there would log the persona out halfway through the crawl.
NO_POST = {"logout/"}

# Path values as they travel in a URL (already percent-encoded).
ODD_PATH_VALUES = [
    "%00",
    "a%00b",
    "%00%00" * 8,
    "x" * 3000,
    quote("日本語-✓-ü"),
    quote("😀" * 50),
    "..",
    ".",
    "-1",
    "0",
    "9" * 40,
    "-" + "9" * 40,
    "%FF",
    "%25",
    "%20",
    "%2F",
    quote("'\"<>;"),
    "1e308",
]
# Query values as they are meant (the client encodes them).
ODD_QUERY_VALUES = ["\x00", "a\x00b", "x" * 3000, "日本語✓", "..", "-1", "9" * 40, "%FF", ""]
QUERY_KEYS = [
    "q",
    "status",
    "page",
    "quota",
    "idle_mode",
    "payment_type",
    "pay_type",
    "window",
    "tail",
    "offset",
    "format",
    "row",
    "instance_type",
    "r0-instance_type",
    "next",
]
# The fragments the pages serve to their own htmx polls.
HTMX_TARGETS = [
    "job-live",
    "spot-bids",
    "job-table",
    "log-follow",
    "market-table",
    "price-chart",
    "job-bills",
    "key-table",
    "health-panel",
]
PERSONAS = ["alice", "bob", "charlie", "admin", "anonymous"]


def console_routes() -> list[str]:
    """Every route of the console, as the URLconf spells it (`jobs/<str:job_id>/`)."""

    def walk(patterns, prefix: str):
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if route.startswith(NOT_CONSOLE):
                continue
            assert isinstance(pattern.pattern, RoutePattern), f"teach the crawl {route!r}"
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, route)
            else:
                assert isinstance(pattern, URLPattern)
                yield route

    return sorted(set(walk(get_resolver().url_patterns, "")))


PARAM = re.compile(r"<(?:\w+:)?(\w+)>")


def params_of(route: str) -> list[str]:
    return PARAM.findall(route)


def fill(route: str, value: str) -> str:
    return "/" + PARAM.sub(value, route)


@dataclass
class World:
    """The crawl's data: a live job with a pod for alice and bob (team-a) and charlie
    (team-b), an access key each; which real path values each persona may see."""

    clients: dict[str, Client]
    real: dict[str, dict[str, set[str]]]  # parameter → value → personas who may see it
    jobs: list[Job]
    seen_by: dict[str, set[str]] = field(default_factory=dict)  # job id → personas

    def foreign_ids(self, persona: str) -> list[str]:
        return [job_id for job_id, who in self.seen_by.items() if persona not in who]


@pytest.fixture(autouse=True)
def _no_worker_ping(monkeypatch):
    """The health page waits a second for the Celery workers' pings; the crawl opens it often."""
    from apps.core.selectors import Health

    monkeypatch.setattr(
        "apps.ops.views.health_snapshot",
        lambda **kwargs: Health(
            beat_last_seen=None, beat_ok=False, workers=[], broker_ok=True, broker_error=""
        ),
    )


@pytest.fixture
def world(personas, admin_user) -> World:
    team_a, team_b = {"alice", "bob", "admin"}, {"charlie", "admin"}
    everyone = {"alice", "bob", "charlie", "admin"}
    jobs = [
        make_job(personas, name="alice-job", pods=1),
        make_job(personas, name="bob-job", user="bob", pods=1),
        make_job(personas, name="charlie-job", user="charlie", workspace="ws_b", pods=1),
    ]
    seen_by = {jobs[0].job_id: team_a, jobs[1].job_id: team_a, jobs[2].job_id: team_b}
    pods = {pod.pod_id: seen_by[pod.job.job_id] for pod in Pod.objects.select_related("job")}
    keys = {
        make_access_key(personas[name])[0].key_id: {name} for name in ("alice", "bob", "charlie")
    }
    keys[make_access_key(admin_user)[0].key_id] = {"admin"}
    run = WhatIfRun.objects.create(created_by=admin_user, source="jobs", days=1, cluster_file="")
    real = {
        "pk": {str(run.pk): {"admin"}},  # What if: staff only
        "job_id": {job_id: who for job_id, who in seen_by.items()},
        "pod_id": pods,
        "name": {name: everyone for name in ("ecs.g7.xlarge", "ml.gu8xf.8xlarge-gu108")},
        "key_id": keys,
    }
    clients = {}
    for persona in PERSONAS:
        clients[persona] = Client(raise_request_exception=False)  # a 500 is a finding
        user = admin_user if persona == "admin" else personas.get(persona)
        if user is not None:
            clients[persona].force_login(user)
    return World(clients=clients, real=real, jobs=jobs, seen_by=seen_by)


def body_of(response) -> str:
    if getattr(response, "streaming", False):
        content = b"".join(response.streaming_content)  # the test client closes it then
    else:
        content = response.content
    return content.decode("utf-8", "replace")


class Crawl:
    def __init__(self, world: World, persona: str) -> None:
        self.world, self.persona = world, persona
        self.client = world.clients[persona]
        self.problems: list[str] = []
        self.foreign = world.foreign_ids(persona)
        self.requests = 0

    def visit(self, method: str, url: str, *, query=None, headers=None, hidden=False) -> int:
        """One request; a problem noted if it answers 5xx, shows a foreign job's id, or
        (`hidden`: the URL names something of another workspace) shows the page at all."""
        self.requests += 1
        call = self.client.get if method == "GET" else self.client.post
        response = call(url, query or {}, headers=headers or {})
        status, where = response.status_code, f"{method} {url[:120]} {headers or ''}"
        if status == 200 and "HX-Redirect" in response:  # htmx's sign-in: a whole page there
            assert not response.content, where
            status, response["Location"] = 302, response["HX-Redirect"]
        if status >= 500:
            self.problems.append(f"{status} for {where}")
        if hidden and status not in (302, 400, 403, 404, 405):
            self.problems.append(f"{status} (not hidden) for {where}")
        if hidden and status == 302 and not response["Location"].startswith("/login/"):
            self.problems.append(f"302 to {response['Location']} (not hidden) for {where}")
        body = body_of(response)
        for job_id in self.foreign:
            if job_id in body:
                self.problems.append(f"{status} for {where} shows job {job_id}")
        return status


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_answers_every_console_url_without_5xx_or_leaks(world, persona):
    crawl = Crawl(world, persona)
    routes = console_routes()
    assert {"jobs/<str:job_id>/", "pods/<str:pod_id>/logs/", "market/<str:name>/"} <= set(routes)
    for route in routes:
        methods = ["GET"] if route in NO_POST else ["GET", "POST"]
        names = params_of(route)
        if not names:
            for method in methods:
                crawl.visit(method, fill(route, ""))
            continue
        assert len(names) == 1, f"teach the crawl two parameters in {route!r}"
        assert names[0] in world.real, f"give the crawl real values for <{names[0]}>"
        for value, who in world.real[names[0]].items():
            for method in methods:
                crawl.visit(method, fill(route, quote(value, safe="")), hidden=persona not in who)
        for value in ODD_PATH_VALUES:
            for method in methods:
                crawl.visit(method, fill(route, value))
    assert not crawl.problems, "\n".join(crawl.problems)


@pytest.mark.parametrize("persona", PERSONAS)
def test_it_takes_odd_query_strings_and_htmx_targets_without_5xx_or_leaks(world, persona):
    crawl = Crawl(world, persona)
    for route in console_routes():
        names = params_of(route)
        values = world.real[names[0]] if names else {"": set(PERSONAS)}
        for value, who in values.items():
            url = fill(route, quote(value, safe=""))
            hidden = persona not in who
            for odd in ODD_QUERY_VALUES:
                crawl.visit("GET", url, query={key: odd for key in QUERY_KEYS}, hidden=hidden)
            for target in HTMX_TARGETS:
                crawl.visit(
                    "GET", url, headers={"HX-Request": "true", "HX-Target": target}, hidden=hidden
                )
    assert not crawl.problems, "\n".join(crawl.problems)


def test_it_reaches_the_pages_it_crawls(world):
    """The crawl proves something only if the real ids open the pages for those who may."""
    alice_job, _, charlie_job = world.jobs
    pod = alice_job.pods.get()
    for persona, url in (
        ("alice", f"/jobs/{alice_job.job_id}/"),
        ("bob", f"/jobs/{alice_job.job_id}/"),
        ("admin", f"/jobs/{charlie_job.job_id}/"),
        ("bob", f"/pods/{pod.pod_id}/logs/"),
        ("charlie", "/market/ecs.g7.xlarge/"),
    ):
        assert world.clients[persona].get(url).status_code == 200, (persona, url)
    assert world.clients["charlie"].get(f"/jobs/{alice_job.job_id}/").status_code == 404


@pytest.mark.parametrize(
    "url",
    [
        "/jobs/%00/",
        "/pods/%00/logs/",
        "/market/%00/",
        "/jobs/a%00b/stop/",
        "/workspaces/access-keys/%00/delete/",
    ],
)
def test_it_answers_404_for_a_nul_in_the_path(world, url):
    client = world.clients["alice"]
    assert client.get(url).status_code == 404
    assert client.post(url).status_code == 404


@pytest.mark.parametrize("query", [{"q": "\x00"}, {"status": "a\x00"}, {"\x00": "1"}])
def test_it_answers_400_for_a_nul_in_the_query_string(world, query):
    assert world.clients["alice"].get("/jobs/", query).status_code == 400


def test_it_leaves_nul_in_the_api_to_the_api(world):
    """The API answers in its own JSON shape (tests/api covers what it answers)."""
    response = world.clients["alice"].get("/api/v1/jobs/%00")
    assert response.status_code < 500
    assert response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("value", ["%00", "-1", "9" * 40, "0", "١٢", "²", "x" * 3000, ""])
def test_it_switches_workspace_only_to_a_real_one(world, value):
    from urllib.parse import unquote

    client = world.clients["bob"]
    status = client.post(
        "/workspaces/switch/", {"workspace_id": unquote(value), "next": unquote(value)}
    ).status_code
    assert status in (400, 404)
