"""Bad input is a 4xx with an Alibaba error code and the DLC parameter named, never a 500."""

from __future__ import annotations

import json

import pytest

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
        (lambda ws: _spot(ws, SpotDiscountLimit=0.4, SpotPriceLimit=0.011),
         ["JobSpecs[0].SpotSpec.SpotPriceLimit", "set only one of"]),
        (lambda ws: _spot(ws, SpotDiscountLimit=0.45),
         ["JobSpecs[0].SpotSpec.SpotDiscountLimit", "0.1, 0.2"]),
        (lambda ws: _spot(ws, SpotDiscountLimit=1.0), ["JobSpecs[0].SpotSpec.SpotDiscountLimit"]),
        (lambda ws: _spot(ws, SpotPriceLimit=0.02),
         ["JobSpecs[0].SpotSpec.SpotPriceLimit", "market price range"]),
        (lambda ws: _spot(ws, SpotPriceLimit=0.0001), ["JobSpecs[0].SpotSpec.SpotPriceLimit"]),
        (lambda ws: _spot(ws),
         ["JobSpecs[0].SpotSpec.SpotDiscountLimit", "set a SpotDiscountLimit"]),
        (lambda ws: _spot(ws, SpotStrategy="SpotAsPriceGo", SpotDiscountLimit=0.4),
         ["JobSpecs[0].SpotSpec.SpotStrategy"]),
        (lambda ws: spot_job_body(ws, JobSpecs=_role(EcsSpec="ecs.nope.xlarge",
                                                     SpotSpec={"SpotDiscountLimit": 0.4})),
         ["JobSpecs[0].EcsSpec", "unknown instance type"]),
        (lambda ws: spot_job_body(ws, JobSpecs=_role(PodCount=0,
                                                     SpotSpec={"SpotDiscountLimit": 0.4})),
         ["JobSpecs[0].PodCount"]),
        (lambda ws: spot_job_body(ws, JobSpecs=_role(
            EcsSpec="ml.gu8xf.8xlarge-gu108", SpotSpec={"SpotDiscountLimit": 0.5})),
         ["UserVpc.VpcId", "UserVpc.SwitchId", "UserVpc.SecurityGroupId", "Lingjun"]),
        (lambda ws: spot_job_body(ws, JobSpecs=_role(
            EcsSpec="ml.gu8xf.8xlarge-gu108", SpotSpec={"SpotPriceLimit": 2}),
            UserVpc={"VpcId": "v", "SwitchId": "s", "SecurityGroupId": "g"}),
         ["JobSpecs[0].SpotSpec.SpotPriceLimit", "only a SpotDiscountLimit"]),
        (lambda ws: quota_job_body(ws, ResourceId="team-b"), ["ResourceId", "team-b"]),
        (lambda ws: quota_job_body(ws, ResourceId="no-such-quota"), ["ResourceId"]),
        (lambda ws: quota_job_body(ws, DisplayName="", UserCommand="", Priority=10),
         ["DisplayName", "UserCommand", "Priority"]),
        (lambda ws: quota_job_body(ws, JobType="SparkJob"), ["JobType"]),
        (lambda ws: quota_job_body(ws, Settings={"OversoldType": "Sometimes"}),
         ["Settings.OversoldType"]),
        (lambda ws: spot_job_body(ws, Settings={"OversoldType": "AcceptQuotaOverSold"}),
         ["Settings.OversoldType", "only to jobs on a resource quota"]),
        (lambda ws: quota_job_body(
            ws, Settings={"ErrorMonitoringArgs": "--max-num-of-job-restart=x"}),
         ["Settings.ErrorMonitoringArgs"]),
        (lambda ws: quota_job_body(ws, JobSpecs=[]), ["JobSpecs"]),
        (lambda ws: quota_job_body(ws, DataSources=[{"Uri": "oss://b/", "MountPath": "/etc"}]),
         ["DataSources[0].MountPath"]),
    ],
    ids=["both-limits", "discount-off-list", "discount-1", "price-above", "price-below",
         "no-limit", "strategy", "unknown-ecs-spec", "pod-count-0", "lingjun-spot-vpc",
         "lingjun-price", "other-quota", "unknown-quota", "basics", "job-type", "oversold",
         "oversold-without-quota", "aimaster-args", "no-job-specs", "mount-path"],
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
        ("/api/v1/spot/prices", {}),
        ("/api/v1/spot/prices", {"InstanceType": "ecs.nope"}),
    ],
)
def test_it_refuses_bad_query_parameters(raw, path, query):
    response = raw.send("GET", path, query=query)
    assert response.status_code == 400
    assert response.json()["Code"] in ("InvalidParameter", "MissingParameter")


@pytest.mark.parametrize(("method", "path"), [("GET", "/api/v1/nothing"),
                                              ("PATCH", "/api/v1/jobs"),
                                              ("GET", "/api/v1/jobs/x/stop")])
def test_an_unknown_call_is_a_json_404(raw, method, path):
    response = raw.send(method, path)
    assert response.status_code == 404
    assert response.json()["Code"] == "InvalidAction.NotFound"
