"""Bad input is a 4xx with an Alibaba error code and the DLC parameter named, never a 500."""

from __future__ import annotations

import io
import json
import time
from urllib.parse import quote

import pytest
from alibabacloud_pai_dlc20201203.models import ListJobsRequest

from apps.jobs.models import Job
from tests.api.conftest import quota_job_body, sdk_error, spot_job_body


def _create_error(create_job, body) -> tuple[str, int, str]:
    with pytest.raises(Exception) as caught:
        create_job(body)
    code, status = sdk_error(caught)
    return code, status, str(caught.value)


def _spot(ws, **spot):
    return spot_job_body(ws, {"SpotStrategy": "SpotWithPriceLimit", **spot})


def _role(**fields):
    return [{"Type": "Worker", "PodCount": 1, "EcsSpec": "ecs.g7.xlarge", **fields}]


@pytest.mark.parametrize(
    ("make_body", "names"),
    [
        (
            lambda ws: _spot(ws, SpotDiscountLimit=0.4, SpotPriceLimit=0.011),
            ["JobSpecs[0].SpotSpec.SpotPriceLimit", "set only one of"],
        ),
        (
            lambda ws: _spot(ws, SpotDiscountLimit=0.45),
            ["JobSpecs[0].SpotSpec.SpotDiscountLimit", "0.1, 0.2"],
        ),
        (lambda ws: _spot(ws, SpotDiscountLimit=1.0), ["JobSpecs[0].SpotSpec.SpotDiscountLimit"]),
        (
            lambda ws: _spot(ws, SpotPriceLimit=0.02),
            ["JobSpecs[0].SpotSpec.SpotPriceLimit", "market price range"],
        ),
        (lambda ws: _spot(ws, SpotPriceLimit=0.0001), ["JobSpecs[0].SpotSpec.SpotPriceLimit"]),
        (
            lambda ws: _spot(ws),
            ["JobSpecs[0].SpotSpec.SpotDiscountLimit", "set a SpotDiscountLimit"],
        ),
        (
            lambda ws: _spot(ws, SpotStrategy="SpotAsPriceGo", SpotDiscountLimit=0.4),
            ["JobSpecs[0].SpotSpec.SpotStrategy"],
        ),
        (
            lambda ws: spot_job_body(
                ws, JobSpecs=_role(EcsSpec="ecs.nope.xlarge", SpotSpec={"SpotDiscountLimit": 0.4})
            ),
            ["JobSpecs[0].EcsSpec", "unknown instance type"],
        ),
        (
            lambda ws: spot_job_body(
                ws, JobSpecs=_role(PodCount=0, SpotSpec={"SpotDiscountLimit": 0.4})
            ),
            ["JobSpecs[0].PodCount"],
        ),
        (
            lambda ws: spot_job_body(
                ws,
                JobSpecs=_role(
                    EcsSpec="ml.gu8xf.8xlarge-gu108", SpotSpec={"SpotDiscountLimit": 0.5}
                ),
            ),
            ["UserVpc.VpcId", "UserVpc.SwitchId", "UserVpc.SecurityGroupId", "Lingjun"],
        ),
        (
            lambda ws: spot_job_body(
                ws,
                JobSpecs=_role(EcsSpec="ml.gu8xf.8xlarge-gu108", SpotSpec={"SpotPriceLimit": 2}),
                UserVpc={"VpcId": "v", "SwitchId": "s", "SecurityGroupId": "g"},
            ),
            ["JobSpecs[0].SpotSpec.SpotPriceLimit", "only a SpotDiscountLimit"],
        ),
        (lambda ws: quota_job_body(ws, ResourceId="team-b"), ["ResourceId", "team-b"]),
        (lambda ws: quota_job_body(ws, ResourceId="no-such-quota"), ["ResourceId"]),
        (
            lambda ws: quota_job_body(ws, DisplayName="", UserCommand="", Priority=10),
            ["DisplayName", "UserCommand", "Priority"],
        ),
        (lambda ws: quota_job_body(ws, JobType="SparkJob"), ["JobType"]),
        (
            lambda ws: quota_job_body(ws, Settings={"OversoldType": "Sometimes"}),
            ["Settings.OversoldType"],
        ),
        (
            lambda ws: spot_job_body(ws, Settings={"OversoldType": "AcceptQuotaOverSold"}),
            ["Settings.OversoldType", "only to jobs on a resource quota"],
        ),
        (
            lambda ws: quota_job_body(
                ws, Settings={"ErrorMonitoringArgs": "--max-num-of-job-restart=x"}
            ),
            ["Settings.ErrorMonitoringArgs"],
        ),
        *[
            (
                lambda ws, count=count: quota_job_body(
                    ws,
                    Settings={
                        "EnableErrorMonitoringInAIMaster": True,
                        "ErrorMonitoringArgs": f"--max-num-of-job-restart={count}",
                    },
                ),
                ["Settings.ErrorMonitoringArgs", text],
            )
            for count, text in (
                ("²", "--max-num-of-job-restart must be a whole number"),
                ("٣", "--max-num-of-job-restart must be a whole number"),
                ("9" * 4000, "must be from 0 to 100"),
            )
        ],
        (lambda ws: quota_job_body(ws, JobSpecs=[]), ["JobSpecs"]),
        (
            lambda ws: spot_job_body(
                ws,
                JobType="TFJob",
                JobSpecs=_role(Type="Master", SpotSpec={"SpotDiscountLimit": 0.4}),
            ),
            ["JobSpecs[0].Type: TFJob has no Master role; its roles are Worker, PS, Chief"],
        ),
        (
            lambda ws: spot_job_body(
                ws,
                JobSpecs=_role(ResourceConfig={"GPU": "0.5"}, SpotSpec={"SpotDiscountLimit": 0.5}),
            ),
            ["JobSpecs[0].ResourceConfig.GPU", "instance type"],
        ),
        (
            lambda ws: quota_job_body(ws, DataSources=[{"Uri": "oss://b/", "MountPath": "/etc"}]),
            ["DataSources[0].MountPath"],
        ),
        (
            lambda ws: quota_job_body(
                ws,
                DataSources=[
                    {"Uri": "oss://b/a", "MountPath": "/mnt/data/x"},
                    {"Uri": "oss://b/b", "MountPath": "/mnt/data/x/"},
                ],
            ),
            ["DataSources[1].MountPath: is the mount path of a data source before it"],
        ),
        (
            lambda ws: quota_job_body(
                ws,
                DataSources=[
                    {"Uri": "oss://b/a", "MountPath": "/mnt/data/x/y"},
                    {"Uri": "oss://b/b", "MountPath": "/mnt/data/x"},
                    {"Uri": "oss://b/c", "MountPath": "/mnt/data/xy"},
                    {"Uri": "oss://b/d", "MountPath": "/mnt/data/xy/z/"},
                ],
            ),
            [
                "DataSources[1].MountPath: is inside or around /mnt/data/x/y",
                "DataSources[3].MountPath: is inside or around /mnt/data/xy,",
                "mount paths must not nest",
            ],
        ),
        (
            lambda ws: quota_job_body(
                ws, DataSources=[{"Uri": "oss://b/", "MountPath": "/mnt/data/"}]
            ),
            ["DataSources[0].MountPath: must be a path under /mnt/data/"],
        ),
        (
            lambda ws: quota_job_body(
                ws, CodeSource={"CodeSourceId": "code-1", "MountPath": "code"}
            ),
            ["CodeSource.MountPath: must be an absolute path without a .. part"],
        ),
        (
            lambda ws: quota_job_body(
                ws, CodeSource={"CodeSourceId": "code-1", "MountPath": "/root/../etc/"}
            ),
            ["CodeSource.MountPath: must be an absolute path without a .. part"],
        ),
        (
            lambda ws: quota_job_body(
                ws, CodeSource={"CodeSourceId": "code-1", "MountPath": "/usr/local/code"}
            ),
            ["CodeSource.MountPath: must not be /, a system directory"],
        ),
        (
            lambda ws: quota_job_body(
                ws, CodeSource={"CodeSourceId": "code-1", "MountPath": "/mnt"}
            ),
            ["CodeSource.MountPath: must not be /, a system directory", "/mnt/data"],
        ),
        # CreateJob's Description and Settings.TerminationGracePeriodSeconds are fields of
        # newer SDKs: the pinned one leaves them out of the request
        pytest.param(
            lambda ws: quota_job_body(ws, Description="d" * 4097),
            ["Description: must be at most 4096 characters"],
            marks=pytest.mark.newer_sdk,
        ),
        *[
            pytest.param(
                lambda ws, grace=grace: quota_job_body(
                    ws, Settings={"TerminationGracePeriodSeconds": grace}
                ),
                ["Settings.TerminationGracePeriodSeconds: must be from 0 to 86400 seconds"],
                marks=pytest.mark.newer_sdk,
            )
            for grace in (-1, 86401)
        ],
        (
            lambda ws: spot_job_body(
                ws, JobSpecs=_role(Image="bad image", SpotSpec={"SpotDiscountLimit": 0.4})
            ),
            ["JobSpecs[0].Image: must be an image reference"],
        ),
        (
            lambda ws: spot_job_body(
                ws,
                JobSpecs=[
                    *_role(SpotSpec={"SpotDiscountLimit": 0.4}),
                    *_role(Type="Master", Image="a b", SpotSpec={"SpotDiscountLimit": 0.4}),
                ],
            ),
            ["JobSpecs[1].Image: must be an image reference"],
        ),
        (
            lambda ws: quota_job_body(ws, JobMaxRunningTimeMinutes=5_270_401),
            ["JobMaxRunningTimeMinutes: must be from 1 to 5,270,400 minutes (ten years)"],
        ),
        (
            lambda ws: spot_job_body(
                ws,
                JobSpecs=[
                    *_role(SpotSpec={"SpotDiscountLimit": 0.4}),
                    *_role(Type="Master", PodCount=3, SpotSpec={"SpotDiscountLimit": 0.4}),
                ],
            ),
            ["JobSpecs[1].PodCount: a job has one Master pod, not 3"],
        ),
    ],
    ids=[
        "both-limits",
        "discount-off-list",
        "discount-1",
        "price-above",
        "price-below",
        "no-limit",
        "strategy",
        "unknown-ecs-spec",
        "pod-count-0",
        "lingjun-spot-vpc",
        "lingjun-price",
        "other-quota",
        "unknown-quota",
        "basics",
        "job-type",
        "oversold",
        "oversold-without-quota",
        "aimaster-args",
        "aimaster-restarts-superscript",
        "aimaster-restarts-arabic-indic",
        "aimaster-restarts-4000-digits",
        "no-job-specs",
        "role-of-another-job-type",
        "gpu-share-on-an-instance",
        "mount-path",
        "same-mount-path",
        "nested-mount-paths",
        "mount-at-the-data-root",
        "code-mount-relative",
        "code-mount-dot-dot",
        "code-mount-system",
        "code-mount-over-data",
        "description-too-long",
        "grace-below-0",
        "grace-above-a-day",
        "image-with-a-space",
        "second-role-image",
        "running-time",
        "three-masters",
    ],
)
def test_it_refuses_a_bad_create_job_naming_the_dlc_parameter(create_job, ws_a, make_body, names):
    code, status, message = _create_error(create_job, make_body(ws_a))
    assert (code, status) == ("InvalidParameter", 400)
    for name in names:
        assert name in message
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("field", "value", "name"),
    [
        ("PodCount", "two", "JobSpecs[0].PodCount"),
        ("PodCount", 1.5, "JobSpecs[0].PodCount"),
        ("PodCount", True, "JobSpecs[0].PodCount"),
        ("EcsSpec", 7, "JobSpecs[0].EcsSpec"),
        ("SpotSpec", "cheap", "JobSpecs[0].SpotSpec"),
        ("ResourceConfig", {"CPU": "lots"}, "JobSpecs[0].ResourceConfig.CPU"),
        ("ResourceConfig", {"Memory": "16Qi"}, "JobSpecs[0].ResourceConfig.Memory"),
        ("ResourceConfig", {"GPU": "1.5"}, "JobSpecs[0].ResourceConfig.GPU"),
        ("ResourceConfig", {"GPU": "0.0005"}, "JobSpecs[0].ResourceConfig.GPU"),
        ("ResourceConfig", {"GPU": "-0.5"}, "JobSpecs[0].ResourceConfig.GPU"),
        ("Image", "x" * 600, "JobSpecs[0].Image"),
    ],
)
def test_it_refuses_wrong_types_in_a_job_spec(raw, ws_a, field, value, name):
    body = spot_job_body(ws_a)
    body["JobSpecs"][0][field] = value
    response = raw.send("POST", "/api/v1/jobs", body=json.dumps(body).encode())
    assert response.status_code == 400
    assert response.json()["Code"] == "InvalidParameter"
    assert name in response.json()["Message"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "InvalidParameter"),
        (b"\xff\xfe", "InvalidParameter"),
        (b"[1, 2]", "InvalidParameter"),
        (b"{}", "MissingParameter"),
        (b'{"WorkspaceId": {"id": 1}}', "InvalidParameter"),
        (b'{"WorkspaceId": "1", "JobSpecs": "Worker"}', None),
        (b'{"WorkspaceId": "1", "JobSpecs": [1]}', None),
        (b'{"WorkspaceId": "1", "Priority": "high"}', None),
        (b'{"WorkspaceId": "1", "Envs": ["A=1"]}', None),
        (b'{"WorkspaceId": "1", "Settings": {"EnableErrorMonitoringInAIMaster": "yes"}}', None),
        (b'{"WorkspaceId": "1", "JobMaxRunningTimeMinutes": 99999999999}', None),
        (b'{"WorkspaceId": "1", "DisplayName": "a\\u0000b"}', None),
    ],
)
def test_it_refuses_malformed_bodies(raw, ws_a, body, code):
    body = body.replace(b'"WorkspaceId": "1"', f'"WorkspaceId": "{ws_a}"'.encode())
    response = raw.send("POST", "/api/v1/jobs", body=body)
    assert response.status_code == 400
    data = response.json()
    assert data["Code"] == (code or "InvalidParameter")
    assert set(data) == {"RequestId", "Code", "Message"}
    assert response.headers["x-acs-request-id"] == data["RequestId"]


def test_get_job_reads_need_detail_as_true_or_false(raw, ws_a, create_job):
    job_id = create_job(quota_job_body(ws_a))
    for value in ("True", "false"):  # as the SDK sends its bool
        response = raw.send("GET", f"/api/v1/jobs/{job_id}", query={"NeedDetail": value})
        assert response.status_code == 200 and response.json()["JobId"] == job_id
    response = raw.send("GET", f"/api/v1/jobs/{job_id}", query={"NeedDetail": "maybe"})
    assert (response.status_code, response.json()["Message"]) == (
        400,
        "NeedDetail: must be true or false",
    )


def test_get_pod_logs_reads_download_to_file_as_true_or_false(raw, ws_a, create_job):
    """As GetJob's NeedDetail: accepted and not applied, but never any text."""
    job_id = create_job(quota_job_body(ws_a))
    pod_id = Job.objects.get(job_id=job_id).pods.first().pod_id
    path = f"/api/v1/jobs/{job_id}/pods/{pod_id}/logs"
    for value in ("True", "false"):  # as the SDK sends its bool
        response = raw.send("GET", path, query={"DownloadToFile": value})
        assert response.status_code == 200 and response.json()["PodId"] == pod_id
    response = raw.send("GET", path, query={"DownloadToFile": "maybe"})
    assert (response.status_code, response.json()["Message"]) == (
        400,
        "DownloadToFile: must be true or false",
    )


def test_a_failure_while_an_error_is_written_is_still_a_json_answer(raw, ws_a, monkeypatch):
    """A refusal whose message could not be written (as 1,200 problems once could not) was
    the server's own 500 page, which the SDK cannot read."""

    def broken(error, **_):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr("apps.api.views.from_validation", broken)
    response = raw.send(
        "POST", "/api/v1/jobs", body=json.dumps(quota_job_body(ws_a, Priority=10)).encode()
    )
    assert response.status_code == 500
    data = response.json()
    assert (data["Code"], response.headers["x-acs-request-id"]) == (
        "InternalError",
        data["RequestId"],
    )
    assert Job.objects.count() == 0


def test_an_unknown_workspace_is_not_found(create_job):
    code, status, message = _create_error(create_job, spot_job_body("999999"))
    assert (code, status) == ("EntityNotExist.Workspace", 404)


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/v1/jobs", {"PageSize": "0"}),
        ("/api/v1/jobs", {"PageNumber": "x"}),
        ("/api/v1/jobs", {"Status": "Sleeping"}),
        ("/api/v1/jobs", {"PaymentType": "Free"}),
        ("/api/v1/jobs", {"OversoldInfo": "ForceQuotaOverSold-true"}),
        ("/api/v1/jobs", {"StartTime": "last week"}),
        ("/api/v1/jobs", {"ShowOwn": "maybe"}),
        ("/api/v1/jobs", {"SortBy": "Cost"}),
        ("/api/v1/jobs", {"DisplayName": "a\x00b"}),
        ("/api/v1/ecsspecs", {"AcceleratorType": "TPU"}),
        ("/api/v1/workspaces", {"Status": "SLEEPING"}),
        ("/api/v1/spot/prices", {}),
        ("/api/v1/spot/prices", {"InstanceType": "ecs.nope"}),
    ],
)
def test_it_refuses_bad_query_parameters(raw, path, query):
    response = raw.send("GET", path, query=query)
    assert response.status_code == 400
    assert response.json()["Code"] in ("InvalidParameter", "MissingParameter")


def test_a_long_query_is_served_and_a_too_long_one_refused_in_json(dlc):
    """A query string up to 15 KiB is served (gunicorn's own 4 KiB limit answered a longer
    request line with an HTML page the SDK could not read); a longer one is a 414 the SDK
    reads."""
    long = dlc.list_jobs(ListJobsRequest(display_name="x" * 10_000)).body
    assert long.total_count == 0
    with pytest.raises(Exception) as caught:
        dlc.list_jobs(ListJobsRequest(display_name="x" * 16_000))
    assert sdk_error(caught) == ("InvalidParameter", 414)
    assert "The query string is longer than 15,360 bytes." in str(caught.value)


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/api/v1/jobs/dlc%00x", "JobId"),
        ("/api/v1/jobs/dlcx/pods/dlcx-worker-0%00/logs", "PodId"),
        ("/api/v1/jobtemplates/1%00", "TemplateId"),
        ("/api/v1/workspaces/1%00", "WorkspaceId"),
    ],
)
def test_a_nul_in_the_path_is_refused_naming_the_parameter_as_the_sdk_does(raw, path, name):
    response = raw.send("GET", path)
    assert response.status_code == 400
    assert response.json()["Message"] == f"{name}: must not contain NUL characters"


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/api/v1/nothing"), ("PATCH", "/api/v1/jobs"), ("GET", "/api/v1/jobs/x/stop")],
)
def test_an_unknown_call_is_a_json_404(raw, method, path):
    response = raw.send(method, path)
    assert response.status_code == 404
    assert response.json()["Code"] == "InvalidAction.NotFound"


# --- "no bad input gets a 5xx": the fuzzer's findings, each a 4xx naming field and reason ---


def _refusal(response, status: int = 400, code: str = "InvalidParameter") -> str:
    assert response.status_code == status, response.text
    data = response.json()
    assert data["Code"] == code
    assert set(data) == {"RequestId", "Code", "Message"}
    return data["Message"]


def _post_job(raw, body: dict | bytes):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return raw.send("POST", "/api/v1/jobs", body=data)


@pytest.mark.parametrize("depth", [33, 2_000, 100_000])
def test_it_refuses_deeply_nested_json(raw, ws_a, depth):
    nested = "[" * depth + "]" * depth
    body = f'{{"WorkspaceId": "{ws_a}", "DisplayName": "x", "Settings": {nested}}}'.encode()
    message = _refusal(_post_job(raw, body))
    assert "nested deeper than 32 levels" in message
    assert Job.objects.count() == 0


def test_it_reads_nesting_up_to_the_limit_and_names_the_field_it_does_not_take(raw, ws_a):
    nested = "[" * 31 + "]" * 31  # the body object and 31 arrays: 32 levels
    body = quota_job_body(ws_a)
    data = json.dumps(body)[:-1] + f', "Extra": {nested}}}'
    response = _post_job(raw, data.encode())
    assert response.status_code == 400  # not for its depth: for a field CreateJob has not
    assert response.json()["Code"] == "InvalidParameter"
    assert response.json()["Message"].startswith("Extra: not supported here")
    assert _post_job(raw, json.dumps(body).encode()).status_code == 200


@pytest.mark.parametrize(
    ("fragment", "name"),
    [
        (b'"DisplayName": "train-\\ud800"', "DisplayName"),
        (b'"UserCommand": "echo \\udfff"', "UserCommand"),
        (b'"Envs": {"A": "\\ud800x"}', "Envs.A"),
        (b'"Envs": {"\\ud800": "x"}', "Envs"),
        (b'"JobSpecs": [{"Image": "\\udbff"}]', "JobSpecs[0].Image"),
    ],
)
def test_it_refuses_a_lone_surrogate(raw, ws_a, fragment, name):
    body = json.dumps(quota_job_body(ws_a)).encode()[:-1] + b", " + fragment + b"}"
    message = _refusal(_post_job(raw, body))
    assert message.startswith(f"{name}: ") and "surrogate" in message
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("path", "query", "text"),
    [
        (
            "/api/v1/jobs",
            {"PageNumber": "999999999999999999"},
            "PageNumber: must be from 1 to 1000000",
        ),
        ("/api/v1/jobs", {"PageNumber": "9" * 5000}, "PageNumber: must be from 1 to 1000000"),
        ("/api/v1/jobs", {"PageNumber": "-1"}, "PageNumber: must be from 1"),
        ("/api/v1/jobs", {"PageSize": "١٠"}, "PageSize: must be an integer"),  # Arabic-Indic 10
        ("/api/v1/jobs", {"PageSize": "1_0"}, "PageSize: must be an integer"),
        ("/api/v1/workspaces", {"PageNumber": "²"}, "PageNumber: must be an integer"),
        ("/api/v1/workspaces", {"WorkspaceIds": "²"}, "WorkspaceIds: '²' is not a workspace id"),
        (
            "/api/v1/workspaces",
            {"WorkspaceIds": "1,99999999999999999999"},
            "WorkspaceIds: '99999999999999999999' is not a workspace id",
        ),
        ("/api/v1/ecsspecs", {"PageNumber": "1e3"}, "PageNumber: must be an integer"),
    ],
)
def test_it_refuses_numbers_out_of_range_or_not_in_ascii_digits(raw, path, query, text):
    assert text in _refusal(raw.send("GET", path, query=query))


@pytest.mark.parametrize("workspace_id", ["²", "١", "99999999999999999999", "-1", " 1"])
def test_a_workspace_id_no_workspace_has_is_not_found(raw, ws_a, workspace_id, create_job):
    path = f"/api/v1/workspaces/{quote(workspace_id, safe='~')}"  # as the SDK sends it
    assert _refusal(raw.send("GET", path), 404, "EntityNotExist.Workspace")
    listed = raw.send("GET", "/api/v1/jobs", query={"WorkspaceId": workspace_id})
    assert _refusal(listed, 404, "EntityNotExist.Workspace")
    body = quota_job_body(ws_a, WorkspaceId=workspace_id)
    assert _refusal(_post_job(raw, body), 404, "EntityNotExist.Workspace")
    assert _refusal(
        _post_job(raw, {**body, "WorkspaceId": 10**30}), 404, "EntityNotExist.Workspace"
    )
    assert Job.objects.count() == 0


EXTREME_TIMES = [
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "1969-12-31T23:59:59Z",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-01:00",
    "9000-01-01T00:00:01Z",
]


@pytest.mark.parametrize("when", EXTREME_TIMES)
@pytest.mark.parametrize("name", ["StartTime", "EndTime"])
def test_it_refuses_times_outside_the_range(raw, ws_a, create_job, name, when):
    job_id = create_job(quota_job_body(ws_a))
    for path, query in [
        ("/api/v1/spot/prices", {"InstanceType": "ecs.g7.xlarge"}),
        ("/api/v1/jobs", {}),
        (f"/api/v1/jobs/{job_id}/events", {}),
    ]:
        message = _refusal(raw.send("GET", path, query={**query, name: when}))
        assert message == f"{name}: must lie from 1970-01-01T00:00:00Z to 9000-01-01T00:00:00Z"


@pytest.mark.parametrize("when", ["1970-01-01T00:00:00Z", "8999-12-31T23:59:59+01:00"])
def test_it_accepts_times_at_the_edges_of_the_range(raw, ws_a, create_job, when):
    job_id = create_job(quota_job_body(ws_a))
    for path, query in [
        (
            "/api/v1/spot/prices",
            {"InstanceType": "ecs.g7.xlarge", "EndTime": when, "StartTime": "1970-01-01T00:00:00Z"},
        ),
        ("/api/v1/jobs", {"StartTime": when, "EndTime": when}),
        (f"/api/v1/jobs/{job_id}/events", {"StartTime": "1970-01-01T00:00:00Z", "EndTime": when}),
    ]:
        assert raw.send("GET", path, query=query).status_code == 200


def _envs(count: int, size: int) -> dict[str, str]:
    return {f"VAR_{i}": "x" * size for i in range(count)}


@pytest.mark.parametrize(
    ("overrides", "text"),
    [
        ({"UserCommand": "x" * 2**20}, "UserCommand: must be at most 64 KiB"),
        ({"UserCommand": "é" * (32 * 1024 + 1)}, "UserCommand: must be at most 64 KiB"),
        ({"Envs": {"BIG": "x" * 200_000}}, "Envs: BIG: the value must be at most 32 KiB"),
        ({"Envs": _envs(101, 1)}, "Envs: must hold at most 100 variables"),
        ({"Envs": _envs(9, 32 * 1024)}, "Envs: all variables together must be at most 256 KiB"),
        ({"Envs": {"1ST": "x"}}, "Envs: '1ST' is not a valid variable name"),
        ({"Envs": {"A\n": "x"}}, "Envs: 'A\\n' is not a valid variable name"),
        ({"Envs": {"A-B": "x"}}, "Envs: 'A-B' is not a valid variable name"),
        ({"DisplayName": "n" * 257}, "DisplayName: must be at most 256 characters"),
        (
            {"DisplayName": "train\u202egnp.exe"},
            "DisplayName: must not contain control or text-direction characters",
        ),
        (
            {"DisplayName": "bell\u0007"},
            "DisplayName: must not contain control or text-direction characters",
        ),
        (
            {"DataSources": [{"Uri": "oss://b/" + "u" * 1024, "MountPath": "/mnt/data/a"}]},
            "DataSources[0].Uri: must be at most 1024 characters",
        ),
        ({"CodeSource": {"Branch": "b" * 257}}, "CodeSource.Branch: must be at most 256"),
        (
            {
                "DataSources": [
                    {"Uri": f"oss://b/{i}", "MountPath": f"/mnt/data/{i}"} for i in range(33)
                ]
            },
            "DataSources: must hold at most 32",
        ),
    ],
    ids=[
        "command-1MiB",
        "command-multibyte",
        "env-200KB",
        "env-count",
        "env-total",
        "env-name-digit",
        "env-name-newline",
        "env-name-dash",
        "display-name",
        "display-name-direction-override",
        "display-name-control",
        "data-uri",
        "code-branch",
        "data-source-count",
    ],
)
def test_it_refuses_what_a_pod_could_not_be_started_with(raw, ws_a, overrides, text):
    message = _refusal(_post_job(raw, quota_job_body(ws_a, **overrides)))
    assert text in message
    assert Job.objects.count() == 0


def test_it_accepts_the_largest_command_and_environment(raw, ws_a):
    body = quota_job_body(
        ws_a,
        UserCommand="x" * 64 * 1024,
        DisplayName="n" * 256,
        Envs={**_envs(99, 1), "LAST": "y" * 32 * 1024},
    )
    assert _post_job(raw, body).status_code == 200
    job = Job.objects.get()
    assert len(job.user_command) == 64 * 1024 and len(job.envs) == 100


def test_a_body_of_many_objects_is_read_in_time(raw, ws_a):
    """Each object of the body is watched for fields nothing reads: 10,000 data sources (an
    upload well under the limit) took minutes when each watch looked through all before."""
    sources = [{"Uri": f"oss://bucket/{i}", "MountPath": f"/mnt/data/{i}"} for i in range(10_000)]
    body = json.dumps(quota_job_body(ws_a, DataSources=sources)).encode()
    started = time.monotonic()
    response = raw.send("POST", "/api/v1/jobs", body=body)
    assert response.status_code == 400
    assert response.json()["Message"] == "DataSources: must hold at most 32 data sources"
    assert time.monotonic() - started < 10
    assert Job.objects.count() == 0


def test_a_body_with_more_roles_than_any_job_has_is_refused_before_they_are_read(raw, ws_a):
    """20,000 roles (2 MiB) took seconds to read and check, to answer 20,000 problems."""
    body = quota_job_body(ws_a)
    body["JobSpecs"] *= 20_000
    response = raw.send("POST", "/api/v1/jobs", body=json.dumps(body).encode())
    assert (response.status_code, response.json()["Message"]) == (
        400,
        "JobSpecs: must hold at most 4 roles: a job type's roles, each once",
    )
    body["JobSpecs"] = body["JobSpecs"][:4]  # four: read, and refused role by role
    response = raw.send("POST", "/api/v1/jobs", body=json.dumps(body).encode())
    assert response.json()["Message"].startswith("JobSpecs[1].Type: Worker appears twice; ")
    assert Job.objects.count() == 0


@pytest.mark.parametrize("flag", ["'a' ", "--job-execution-mode=Sync "])
def test_aimaster_flags_are_read_up_to_a_length(raw, ws_a, flag):
    """2 MiB of flags took seconds to split, and as many bad ones made a 37 MB answer."""
    settings = {
        "EnableErrorMonitoringInAIMaster": True,
        "ErrorMonitoringArgs": flag * (2_000_000 // len(flag)),
    }
    body = json.dumps(quota_job_body(ws_a, Settings=settings)).encode()
    response = raw.send("POST", "/api/v1/jobs", body=body)
    assert (response.status_code, response.json()["Message"]) == (
        400,
        "Settings.ErrorMonitoringArgs: must be at most 4096 characters",
    )
    assert Job.objects.count() == 0


@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_a_message_lists_50_problems_and_counts_the_rest(raw, ws_a, create_job, method):
    """2 MiB of unknown fields answered a 15 MB message, one problem each."""
    path = (
        "/api/v1/jobs" if method == "POST" else f"/api/v1/jobs/{create_job(quota_job_body(ws_a))}"
    )
    fields = {f"k{i}": 1 for i in range(100_000)}
    response = raw.send(method, path, body=json.dumps({"WorkspaceId": ws_a, **fields}).encode())
    assert (response.status_code, response.json()["Code"]) == (400, "InvalidParameter")
    problems = response.json()["Message"].split("; ")
    unknown = 100_000 if method == "POST" else 100_001  # UpdateJob takes no WorkspaceId
    assert len(problems) == 51 and problems[-1] == f"{unknown - 50} more problems"
    assert problems[0].startswith(("k0: not supported here", "WorkspaceId: not supported"))
    assert len(response.content) < 10_000


def test_it_refuses_a_body_over_the_upload_limit(raw, ws_a, settings):
    body = json.dumps(quota_job_body(ws_a, Extra="x" * 3 * 2**20)).encode()
    message = _refusal(_post_job(raw, body), 413)
    assert "larger than 2621440 bytes" in message


def test_it_refuses_more_query_parameters_than_django_parses(raw):
    query = {f"P{i}": "1" for i in range(1001)}
    message = _refusal(raw.send("GET", "/api/v1/jobs", query=query))
    assert message == "The request has more than 1000 query parameters."


def _wsgi(
    method: str, path: str, *, query: str = "", content_type: str = "", body: bytes = b""
) -> tuple[int, bytes]:
    """One request through the WSGI application gunicorn serves (paiweb.wsgi), in-process:
    the live server runs Django's own handler, which builds requests with Django's class."""
    from wsgiref.util import setup_testing_defaults

    from apps.core.wsgi import Handler

    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "SERVER_NAME": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1",
    }
    if content_type:
        environ["CONTENT_TYPE"] = content_type
    setup_testing_defaults(environ)
    answered = []
    chunks = Handler()(environ, lambda status, headers: answered.append(status))
    return int(answered[0].split()[0]), b"".join(chunks)


@pytest.mark.django_db
def test_too_many_query_parameters_with_a_charset_body_are_refused_too():
    # Django re-reads the query string as soon as the charset is set, while it builds the
    # request: without paiweb's request class that raised before any view, a 500.
    query = "&".join(f"P{i}=1" for i in range(1001))
    status, body = _wsgi(
        "POST",
        "/api/v1/jobs",
        query=query,
        body=b"{}",
        content_type="application/json; charset=utf-8",
    )
    assert status == 400, body
    assert json.loads(body)["Code"] == "InvalidParameter"
    assert "more than 1000 query parameters" in json.loads(body)["Message"]


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/jobs", "/login/", "/jobs/"])
def test_a_content_type_that_does_not_parse_is_no_server_error(path):
    status, body = _wsgi(
        "POST" if path != "/jobs/" else "GET",
        path,
        body=b"{}",
        content_type="application/json; charset*=bad''utf-8",
    )
    assert status < 500, body
    if path.startswith("/api/"):  # unsigned: the API still answers in its own terms
        assert status == 400 and json.loads(body)["Code"], body


def test_it_refuses_an_instance_type_with_a_resource_config(raw, ws_a):
    """A pod of an instance type gets the whole instance: CPU and memory beside it would be
    dropped without a word."""
    body = quota_job_body(ws_a)
    body["JobSpecs"][0].update(
        EcsSpec="ecs.g7.xlarge", ResourceConfig={"CPU": "1", "Memory": "1Gi"}
    )
    response = raw.send("POST", "/api/v1/jobs", body=json.dumps(body).encode())
    assert response.status_code == 400
    assert response.json()["Code"] == "InvalidParameter"
    assert response.json()["Message"].startswith(
        "JobSpecs[0].ResourceConfig: give an instance type or CPU, memory and GPU, not both"
    )
    assert Job.objects.count() == 0


CPU_STEP = "must be a whole number of millicores (1m is 0.001 of a core)"
MEMORY_STEP = "must be at least 1 MiB: memory is counted in whole MiB"


@pytest.mark.parametrize(
    ("config", "text"),
    [
        ({"CPU": "1.5m"}, f"JobSpecs[0].ResourceConfig.CPU: {CPU_STEP}"),
        ({"CPU": "0.0005"}, f"JobSpecs[0].ResourceConfig.CPU: {CPU_STEP}"),
        ({"Memory": "100Ki"}, f"JobSpecs[0].ResourceConfig.Memory: {MEMORY_STEP}"),
        ({"Memory": "0.5Mi"}, f"JobSpecs[0].ResourceConfig.Memory: {MEMORY_STEP}"),
    ],
)
def test_it_refuses_resources_finer_than_it_counts(raw, ws_a, config, text):
    """CPU is kept in millicores and memory in MiB: "1.5m" was kept as 1m, "100Ki" as 0."""
    body = quota_job_body(ws_a)
    body["JobSpecs"][0]["ResourceConfig"].update(config)
    response = raw.send("POST", "/api/v1/jobs", body=json.dumps(body).encode())
    assert response.status_code == 400
    assert response.json()["Code"] == "InvalidParameter"
    assert response.json()["Message"] == text
    assert Job.objects.count() == 0


@pytest.mark.parametrize("digits", ["٣", "１", "٣Gi"])  # Arabic-Indic three, fullwidth one
@pytest.mark.parametrize("field", ["CPU", "Memory", "GPU"])
def test_a_quantity_is_written_in_ascii_digits(create_job, ws_a, field, digits):
    """As every number the API reads: "٣" was read as 3 cores, GPUs or GiB."""
    body = quota_job_body(ws_a)
    body["JobSpecs"][0]["ResourceConfig"][field] = digits
    code, status, message = _create_error(create_job, body)
    assert (code, status) == ("InvalidParameter", 400)
    assert f"JobSpecs[0].ResourceConfig.{field}: {digits!r} is not a quantity such as" in message
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("limit", "value"), [("SpotDiscountLimit", "٠.٤"), ("SpotPriceLimit", "٠.٠٠٢")]
)
def test_a_spot_limit_is_written_in_ascii_digits(create_job, ws_a, limit, value):
    code, status, message = _create_error(create_job, _spot(ws_a, **{limit: value}))
    assert (code, status) == ("InvalidParameter", 400)
    assert f"JobSpecs[0].SpotSpec.{limit}: must be a number" in message
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("change", "text"),
    [
        (
            {"ResourceConfig": {"CPU": "8", "Memory": "32Gi", "GPU": "9"}},
            "JobSpecs[0]: one pod needs 8 cores, 32 GiB, 9 GPU, more than any node of pool "
            "ecs-dedicated holds (the largest: 96 cores, 768 GiB, 4 GPU)",
        ),
        ({"PodCount": 2**70}, "JobSpecs[0].PodCount: must be from 1 to 1000"),
        ({"PodCount": 1001}, "JobSpecs[0].PodCount: must be from 1 to 1000"),
        ({"PodCount": -5}, "JobSpecs[0].PodCount: must be from 1 to 1000"),
    ],
)
def test_a_role_error_reads_in_dlc_names_and_real_limits(raw, ws_a, change, text):
    body = quota_job_body(ws_a)
    body["JobSpecs"][0].update(change)
    response = raw.send("POST", "/api/v1/jobs", body=json.dumps(body).encode())
    assert (response.status_code, response.json()["Message"]) == (400, text)


def test_an_integer_too_long_to_read_is_named_not_called_bad_json(raw, ws_a):
    body = json.dumps(quota_job_body(ws_a)).replace('"PodCount": 2', '"PodCount": ' + "9" * 5000)
    response = raw.send("POST", "/api/v1/jobs", body=body.encode())
    assert (response.status_code, response.json()["Code"]) == (400, "InvalidParameter")
    assert response.json()["Message"] == (
        "JobSpecs[0].PodCount: is a number of 5000 digits, too long to read"
    )


@pytest.mark.parametrize(
    ("make_body", "text"),
    [
        (
            lambda ws: spot_job_body(
                ws, JobSpecs=_role(PodCount=21, SpotSpec={"SpotDiscountLimit": 0.5})
            ),
            "JobSpecs[0].PodCount: 21 pods need 21 instances of ecs.g7.xlarge, more than its "
            "public capacity (20): the job could never start",
        ),
        (
            lambda ws: spot_job_body(ws, JobSpecs=_role(PodCount=1000)),
            "JobSpecs[0].PodCount: 1000 pods need 1000 instances of ecs.g7.xlarge, more than "
            "its public capacity (20): the job could never start",
        ),
        (
            lambda ws: spot_job_body(
                ws, JobType="TFJob", JobSpecs=[*_role(PodCount=12), *_role(Type="PS", PodCount=9)]
            ),
            "JobSpecs: the roles on ecs.g7.xlarge need 21 instances together, more than its "
            "public capacity (20): the job could never start",
        ),
    ],
    ids=["spot", "pay-as-you-go", "two-roles"],
)
def test_it_refuses_a_public_job_that_could_never_start(raw, ws_a, make_body, text):
    response = raw.send("POST", "/api/v1/jobs", body=json.dumps(make_body(ws_a)).encode())
    assert (response.status_code, response.json()["Message"]) == (400, text)
    assert Job.objects.count() == 0


def test_every_call_with_a_time_range_refuses_it_reversed(raw, ws_a, create_job):
    job_id = create_job(quota_job_body(ws_a))
    pod_id = Job.objects.get(job_id=job_id).pods.first().pod_id
    reversed_range = {"StartTime": "2026-11-29T10:00:00Z", "EndTime": "2026-11-29T09:00:00Z"}
    for path, query in [
        ("/api/v1/jobs", {}),
        (f"/api/v1/jobs/{job_id}/events", {}),
        (f"/api/v1/jobs/{job_id}/pods/{pod_id}/events", {}),
        (f"/api/v1/jobs/{job_id}/pods/{pod_id}/logs", {}),
        (f"/api/v1/jobs/{job_id}/metrics", {"MetricType": "CpuCoreUsage"}),
        ("/api/v1/spot/prices", {"InstanceType": "ecs.g7.xlarge"}),
    ]:
        response = raw.send("GET", path, query={**query, **reversed_range})
        assert response.status_code == 400, path
        assert response.json()["Message"] == "StartTime: must not be after EndTime", path


def test_a_host_the_server_does_not_answer_to_is_refused_in_the_apis_words(raw):
    headers = raw.headers("GET", "/api/v1/jobs")
    response = raw.send("GET", "/api/v1/jobs", headers={**headers, "host": "evil.example"})
    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert (body["Code"], body["Message"]) == (
        "InvalidParameter",
        "Host: 'evil.example' is not a name this server answers to",
    )
    assert set(body) == {"RequestId", "Code", "Message"}
    page = raw.send("GET", "/login/", headers={"host": "evil.example"})
    assert page.status_code == 400 and "text/html" in page.headers["Content-Type"]


def test_an_empty_spot_spec_asks_for_a_bid_rather_than_making_a_pay_as_you_go_job(raw, ws_a):
    body = spot_job_body(ws_a)
    body["JobSpecs"][0]["SpotSpec"] = {}
    response = raw.send("POST", "/api/v1/jobs", body=json.dumps(body).encode())
    assert (response.status_code, response.json()["Code"]) == (400, "InvalidParameter")
    assert response.json()["Message"].startswith("JobSpecs[0].SpotSpec"), response.json()
    assert not Job.objects.exists()
