"""Random signed requests through the real HTTP server: none answers 5xx, and none that is
refused (4xx) leaves a job behind.

Every request is signed correctly (the path percent-encoded as the SDK sends it), so it
reaches the handlers; what varies is the action, the path parameters, the query (known and
unknown names, huge and negative numbers, digits that are not ASCII, NUL, long text, odd
times) and the body (a CreateJob body with fields replaced, lone surrogates, deep nesting,
any JSON, any bytes). Derandomized: CI runs the same requests every time.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.jobs.models import Job
from tests.api.conftest import quota_job_body, spot_job_body

# raw signed HTTP, no SDK: the pinned-SDK pass (make test-api-pinned in CI) leaves it out
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.no_sdk]

EXAMPLES = 700  # each sends 1 to 8 requests: about 2,500 in all
REAL = "<real>"  # stands for the id of a job, pod or workspace that exists
# The live server tries every path as a file under MEDIA_ROOT first (MEDIA_URL is unset) and
# fails on a name longer than NAME_MAX (255), before paiweb sees the request; the
# production stack (gunicorn, WhiteNoise under /static/) has no such handler.
MAX_SEGMENT = 200

PAGING = ["PageNumber", "PageSize", "SortBy", "Order"]
TIMES = ["StartTime", "EndTime"]
# Each action with the query parameters it reads.
ACTIONS = [
    (
        "GET",
        "/api/v1/jobs",
        [
            *PAGING,
            *TIMES,
            "WorkspaceId",
            "Status",
            "PaymentType",
            "OversoldInfo",
            "ResourceQuotaName",
            "ResourceId",
            "DisplayName",
            "JobId",
            "JobType",
            "Username",
            "ShowOwn",
        ],
    ),
    ("POST", "/api/v1/jobs", []),
    ("GET", "/api/v1/jobs/{job}", []),
    ("PUT", "/api/v1/jobs/{job}", []),
    ("DELETE", "/api/v1/jobs/{job}", []),
    ("POST", "/api/v1/jobs/{job}/stop", []),
    ("GET", "/api/v1/jobs/{job}/events", [*TIMES, "MaxEventsNum"]),
    ("GET", "/api/v1/jobs/{job}/cost", PAGING),
    ("GET", "/api/v1/jobs/{job}/metrics", [*TIMES, "MetricType", "TimeStep", "Token"]),
    ("GET", "/api/v1/jobs/{job}/pods/{pod}/events", [*TIMES, "MaxEventsNum", "PodUid"]),
    ("GET", "/api/v1/jobs/{job}/pods/{pod}/logs", [*TIMES, "MaxLines", "PodUid"]),
    ("GET", "/api/v1/ecsspecs", [*PAGING, "AcceleratorType", "InstanceTypes", "ResourceType"]),
    ("GET", "/api/v1/spot/prices", [*TIMES, "InstanceType"]),
    ("GET", "/api/v1/workspaces", [*PAGING, "WorkspaceName", "WorkspaceIds", "Status"]),
    ("GET", "/api/v1/workspaces/{workspace}", []),
    ("GET", "/api/v1/quotas", ["Name"]),
    (
        "GET",
        "/api/v1/jobtemplates",
        [*PAGING, "WorkspaceId", "TemplateName", "TemplateId", "UserId", "Description"],
    ),
    ("POST", "/api/v1/jobtemplates", []),
    ("GET", "/api/v1/jobtemplates/{template}", ["Version"]),
    ("PUT", "/api/v1/jobtemplates/{template}", []),
    ("DELETE", "/api/v1/jobtemplates/{template}", []),
    ("PUT", "/api/v1/jobtemplates/{template}/defaultversion", []),
    ("PATCH", "/api/v1/jobs", []),
    ("GET", "/api/v1/{other}", []),
]
INT_NAMES = {"PageNumber", "PageSize", "MaxEventsNum", "MaxLines"}
# Values that pass, so that a request gets as far as the parameter under test.
GOOD_VALUES = {
    "PageNumber": ["1", "2"],
    "PageSize": ["10"],
    "SortBy": ["GmtCreateTime", "DisplayName"],
    "Order": ["asc", "desc"],
    "Status": ["Running", "Queuing,Failed"],
    "PaymentType": ["Spot"],
    "OversoldInfo": ["AcceptQuotaOverSold-true"],
    "ShowOwn": ["true"],
    "InstanceType": ["ecs.g7.xlarge"],
    "AcceleratorType": ["GPU"],
    "ResourceType": ["ECS"],
    "StartTime": ["2026-01-01T00:00:00Z"],
    "EndTime": ["2030-01-01T00:00:00Z"],
    "MetricType": ["CpuCoreUsage", "MemoryUsage"],
    "TimeStep": ["5m", "3600"],
}
BODY_FIELDS = [
    "WorkspaceId",
    "DisplayName",
    "JobType",
    "UserCommand",
    "Envs",
    "ResourceId",
    "Priority",
    "JobMaxRunningTimeMinutes",
    "SuccessPolicy",
    "DataSources",
    "CodeSource",
    "Settings",
    "UserVpc",
    "JobSpecs",
    # CreateJob from a template, and the JobTemplate calls' own fields
    "TemplateId",
    "TemplateVersion",
    "TemplateName",
    "Content",
    "Constraints",
    "Metadata",
    "SetAsDefault",
    "Version",
]
TEXT_FIELDS = ["DisplayName", "UserCommand", "Image", "Envs"]
ROLE_FIELDS = [
    "Type",
    "PodCount",
    "Image",
    "EcsSpec",
    "ResourceConfig",
    "SpotSpec",
    "RestartPolicy",
    "UseSpotInstance",
    "OversoldType",
    "QuotaId",
    "ElasticSpotSpecs",
]
ELASTIC_SPOT_FIELDS = ["InstanceType", "SpotStrategy", "SpotDiscountLimit", "SpotPriceLimit"]

huge_ints = st.one_of(  # every magnitude up to 10**40 as likely as small numbers
    st.tuples(st.integers(min_value=0, max_value=40), st.sampled_from([1, -1])).flatmap(
        lambda m: st.integers(min_value=10 ** m[0], max_value=10 ** (m[0] + 1)).map(
            lambda v: v * m[1]
        )
    ),
    st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**18]),
)
odd_numbers = st.sampled_from(
    [
        "²",
        "١٢",
        "５",
        "٣",
        "1_000",
        "0x10",
        "1e3",
        " 7 ",
        "+3",
        "-0",
        "9" * 4400,
        "NaN",
        "inf",
        "999999999999999999",
        "-1",
        "0",
        "1",
        "10",
    ]
)
odd_times = st.one_of(
    st.sampled_from(
        [
            "0001-01-01T00:00:00Z",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59Z",
            "9999-12-31T23:59:59-23:59",
            "1970-01-01T00:00:00Z",
            "8999-12-31T23:59:59Z",
            "2026-02-30T00:00:00Z",
            "2026-W01",
            "20261129T100000Z",
            "2026-11-29 10:00:00",
            "2026-11-29T10:00:00.123456789Z",
            "2026-11-29T24:00:00Z",
            "1900-01-01",
        ]
    ),
    st.datetimes(timezones=st.timezones()).map(lambda t: t.isoformat()),
)
plain_text = st.text(max_size=40)
nasty_text = st.one_of(
    plain_text,
    odd_numbers,
    odd_times,
    huge_ints.map(str),
    plain_text.map(lambda t: f"{t}\x00{t}"),
    st.integers(min_value=1, max_value=6000).map(lambda n: "x" * n),
    st.sampled_from(
        [
            "PrePaid",
            "Spot",
            "Running",
            "asc",
            "desc",
            "true",
            "ecs.g7.xlarge",
            "team-a",
            "GmtCreateTime",
            "AcceptQuotaOverSold-true",
            "GPU",
            "",
        ]
    ),
)
# Text in a JSON body may hold what UTF-8 cannot: lone surrogates.
body_text = st.one_of(
    nasty_text,
    st.tuples(plain_text, st.sampled_from(["\ud800", "\udfff", "\udbff\udbff"])).map("".join),
    st.integers(min_value=60_000, max_value=300_000).map(lambda n: "c" * n),
)
json_scalars = st.one_of(
    st.none(), st.booleans(), huge_ints, st.floats(allow_nan=True, allow_infinity=True), body_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(body_text, inner, max_size=4)
    ),
    max_leaves=12,
)


def _deep(depth: int, opener: str) -> str:
    if opener == "[":
        return "[" * depth + "]" * depth
    return '{"a": ' * depth + "1" + "}" * depth


@st.composite
def create_job_bodies(draw, workspace_id: str) -> dict:
    """A valid CreateJob body with some fields (top level or in its JobSpec) replaced."""
    body = draw(st.sampled_from([quota_job_body, spot_job_body]))(workspace_id)
    if draw(st.booleans()):  # text where text belongs, so that the rest still passes
        name = draw(st.sampled_from(TEXT_FIELDS))
        value = draw(body_text)
        if name == "Image":
            body["JobSpecs"][0]["Image"] = value
        elif name == "Envs":
            body["Envs"] = {draw(st.sampled_from(["A", "B_1"])): value}
        else:
            body[name] = value
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        if draw(st.booleans()):
            body[draw(st.sampled_from(BODY_FIELDS) | body_text)] = draw(json_values)
        elif isinstance(body.get("JobSpecs"), list) and body["JobSpecs"]:
            role = body["JobSpecs"][0]
            if isinstance(role, dict) and draw(st.booleans()):
                role[draw(st.sampled_from(ROLE_FIELDS))] = draw(json_values)
            elif isinstance(role, dict):  # fallback types with odd entries
                role["ElasticSpotSpecs"] = draw(
                    st.lists(
                        st.dictionaries(
                            st.sampled_from(ELASTIC_SPOT_FIELDS) | body_text,
                            json_values | st.sampled_from(["ecs.gn7i-c8g1.2xlarge", 0.5]),
                            max_size=4,
                        )
                        | json_values,
                        max_size=7,
                    )
                )
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        body["Envs"] = draw(
            st.dictionaries(
                st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), body_text),
                body_text,
                max_size=120,
            )
        )
    return body


@st.composite
def bodies(draw, workspace_id: str) -> bytes:
    kind = draw(st.integers(min_value=0, max_value=9))
    if kind <= 4:
        data = draw(create_job_bodies(workspace_id))
        return json.dumps(data, allow_nan=True).encode()
    if kind == 5:  # {"Priority": …} for UpdateJob
        return json.dumps({"Priority": draw(json_values)}).encode()
    if kind == 6:
        depth = draw(st.sampled_from([31, 32, 33, 1000, 2_000, 20_000, 100_000]))
        nested = _deep(depth, draw(st.sampled_from(["[", "{"])))
        return f'{{"WorkspaceId": "{workspace_id}", "Settings": {nested}}}'.encode()
    if kind == 7:
        return json.dumps(draw(json_values)).encode()
    return draw(st.binary(max_size=200))


def _query_values(name: str) -> st.SearchStrategy[str]:
    """Mostly what breaks a parameter of that kind, sometimes anything."""
    if name in INT_NAMES:
        return st.one_of(odd_numbers, huge_ints.map(str), nasty_text)
    if name in ("StartTime", "EndTime"):
        return st.one_of(odd_times, odd_times, nasty_text)
    if name in ("WorkspaceId", "WorkspaceIds"):
        return st.one_of(
            odd_numbers,
            huge_ints.map(str),
            nasty_text,
            st.lists(odd_numbers, min_size=1, max_size=3).map(",".join),
        )
    return nasty_text


@st.composite
def requests_to_send(draw, ids: dict[str, str]) -> tuple[str, str, dict, bytes]:
    method, template, known = draw(st.sampled_from(ACTIONS))
    params = {}
    for name in ("job", "pod", "workspace", "template", "other"):
        if "{" + name + "}" in template:
            value = draw(st.one_of(st.just(REAL), nasty_text.filter(bool)))
            params[name] = quote(ids[name] if value == REAL else value, safe="~")[:MAX_SEGMENT]
    path = template.format(**params)
    query = {}
    for _ in range(draw(st.integers(min_value=0, max_value=6))):
        name = draw(st.sampled_from(known) if known and draw(st.integers(0, 4)) else plain_text)
        good = GOOD_VALUES.get(name)
        bad = draw(st.integers(min_value=0, max_value=2))  # one in three passes, if it can
        query[name] = draw(_query_values(name) if bad or not good else st.sampled_from(good))
    body = draw(bodies(ids["workspace"])) if method in ("POST", "PUT") else b""
    # Around Django's 1,000 fields; not with a body, whose charset makes Django parse the
    # query before any view can answer (test_errors' xfail beside the 1,001-field test).
    if not body and draw(st.integers(min_value=0, max_value=49)) == 0:
        query.update({f"P{i}": "1" for i in range(draw(st.sampled_from([990, 1001])))})
    return method, path, query, body


def test_it_never_answers_5xx_and_refused_requests_create_nothing(raw, ws_a, create_job):
    job_id = create_job(quota_job_body(ws_a))
    body = quota_job_body(ws_a)
    body.pop("WorkspaceId")
    template = raw.send(
        "POST",
        "/api/v1/jobtemplates",
        body=json.dumps(
            {"TemplateName": "fuzz", "WorkspaceId": ws_a, "Content": json.dumps(body)}
        ).encode(),
    )
    assert template.status_code == 200, template.text
    ids = {
        "job": job_id,
        "pod": f"{job_id}-worker-0",
        "workspace": ws_a,
        "template": template.json()["TemplateId"],
        "other": "jobs",
    }
    seen: list[int] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(requests_to_send(ids), min_size=1, max_size=8))
    def check(batch):
        for method, path, query, body in batch:
            before = Job.objects.count()
            response = raw.send(method, path, query=query, body=body)
            seen.append(response.status_code)
            assert response.status_code < 500, (method, path, query, body[:300], response.text)
            if 400 <= response.status_code < 500:
                assert Job.objects.count() == before, (method, path, query, body[:300])
                if response.headers.get("content-type", "").startswith("application/json"):
                    data = response.json()
                    assert data["Code"] and data["Message"], data

    started = time.monotonic()
    check()
    print(
        f"{len(seen)} requests in {time.monotonic() - started:.1f}s:",
        dict(sorted(Counter(seen).items())),
    )
    assert len(seen) > 1000
    assert any(status == 200 for status in seen)
