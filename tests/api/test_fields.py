"""CreateJob and UpdateJob drop nothing silently (docs/api.md): a field is honoured, refused
with a 400 that names it, or accepted with no effect and an event on the job saying so.

Fields SDK 1.4.17 (the seed's pin) does not model go through `raw` (signed requests built by
hand): that SDK would drop them before they were sent."""

from __future__ import annotations

import pytest
from alibabacloud_pai_dlc20201203.models import (
    CreateJobRequest,
    GetJobEventsRequest,
    GetJobRequest,
)

from apps.jobs.models import Job
from tests.api.conftest import quota_job_body
from tests.api.test_errors import _post_job


def _create(dlc, body):
    return dlc.create_job(CreateJobRequest().from_map(body)).body.job_id


def test_it_honours_the_termination_grace_period_and_the_description(raw, dlc, ws_a):
    body = quota_job_body(
        ws_a,
        Description="resnet-50 on the new data",
        Settings={"TerminationGracePeriodSeconds": 120},
    )
    job_id = _post_job(raw, body).json()["JobId"]
    job = Job.objects.get(job_id=job_id)
    assert (job.termination_grace_seconds, job.description) == (120, "resnet-50 on the new data")
    got = raw.send("GET", f"/api/v1/jobs/{job_id}").json()
    assert got["Settings"]["TerminationGracePeriodSeconds"] == 120
    assert got["Description"] == "resnet-50 on the new data"
    settings = dlc.get_job(job_id, GetJobRequest()).body.settings
    if hasattr(settings, "termination_grace_period_seconds"):  # not in SDK 1.4.17's model
        assert settings.termination_grace_period_seconds == 120


def test_update_job_changes_the_description_in_any_status(raw, dlc, ws_a):
    import json

    job_id = _create(dlc, quota_job_body(ws_a))
    body = json.dumps({"Description": "second try"}).encode()
    assert raw.send("PUT", f"/api/v1/jobs/{job_id}", body=body).status_code == 200
    assert Job.objects.get(job_id=job_id).description == "second try"
    assert raw.send("GET", f"/api/v1/jobs/{job_id}").json()["Description"] == "second try"


@pytest.mark.parametrize(
    "overrides, field",
    [
        (
            {
                "JobSpecs": [
                    {
                        "Type": "Worker",
                        "PodCount": 1,
                        "Image": "pytorch:2.3",
                        "ResourceConfig": {"CPU": "8", "Memory": "32Gi", "GPU": "2"},
                        "AssignNodeSpec": {"NodeNames": "gpu-node-0"},
                    }
                ]
            },
            "JobSpecs[0].AssignNodeSpec",
        ),
        ({"ThirdpartyLibs": ["numpy"]}, "ThirdpartyLibs"),
        ({"Settings": {"JobReservedMinutes": 10}}, "Settings.JobReservedMinutes"),
    ],
)
def test_it_refuses_a_field_it_does_not_take_naming_it(raw, ws_a, overrides, field):
    response = _post_job(raw, quota_job_body(ws_a, **overrides))
    assert response.status_code == 400
    assert response.json()["Code"] == "InvalidParameter"
    assert f"{field}: not supported here" in response.json()["Message"]
    assert not Job.objects.exists()


def test_a_field_with_no_effect_here_is_said_on_the_job(raw, dlc, ws_a):
    body = quota_job_body(ws_a, Settings={"EnableRDMA": True})
    job_id = _post_job(raw, body).json()["JobId"]
    events = dlc.get_job_events(job_id, GetJobEventsRequest()).body.events
    [note] = [e for e in events if "FieldIgnored" in e]
    assert "Settings.EnableRDMA is accepted with no effect: this cluster has no RDMA" in note


def test_aimaster_settings_without_aimaster_are_said_on_the_job(dlc, ws_a):
    body = quota_job_body(ws_a, Settings={"ErrorMonitoringArgs": "--max-num-of-job-restart=5"})
    job_id = _create(dlc, body)
    events = dlc.get_job_events(job_id, GetJobEventsRequest()).body.events
    [note] = [e for e in events if "FieldIgnored" in e]
    assert "Settings.ErrorMonitoringArgs is accepted with no effect: AIMaster is off" in note
    assert dlc.get_job(job_id, GetJobRequest()).body.restart_times == "0/0"
    # with AIMaster on, the same flags are the job's and nothing is said
    body["Settings"]["EnableErrorMonitoringInAIMaster"] = True
    job_id = _create(dlc, body)
    events = dlc.get_job_events(job_id, GetJobEventsRequest()).body.events
    assert not [e for e in events if "FieldIgnored" in e]
    assert dlc.get_job(job_id, GetJobRequest()).body.restart_times == "0/5"


def test_list_jobs_finds_the_jobs_it_names_however_old(raw, dlc, ws_a):
    from datetime import timedelta

    from alibabacloud_pai_dlc20201203.models import ListJobsRequest
    from django.utils import timezone

    old, new, other = (_create(dlc, quota_job_body(ws_a, DisplayName=n)) for n in "abc")
    Job.objects.filter(job_id=old).update(created_at=timezone.now() - timedelta(days=40))
    listed = raw.send("GET", "/api/v1/jobs", query={"JobIds": f"{old},{new}"}).json()
    assert sorted(j["JobId"] for j in listed["Jobs"]) == sorted([old, new])
    assert listed["TotalCount"] == 2
    # JobId names a job too (and wins over JobIds): found however old
    for query in ({"JobId": old}, {"JobId": old, "JobIds": new}):
        listed = raw.send("GET", "/api/v1/jobs", query=query).json()
        assert [j["JobId"] for j in listed["Jobs"]] == [old], query
    default = dlc.list_jobs(ListJobsRequest()).body  # the last 7 days, as DLC does
    assert old not in {j.job_id for j in default.jobs} and other in {j.job_id for j in default.jobs}


def test_list_jobs_bounds_start_time_and_end_time_alone_as_the_sdk_documents(dlc, ws_a):
    """The SDK's ListJobsRequest: StartTime defaults to 7 days ago, EndTime to now, each on
    its own; EndTime alone does not reach back past the default StartTime."""
    from datetime import timedelta

    from alibabacloud_pai_dlc20201203.models import ListJobsRequest
    from django.utils import timezone

    old, mid, new, ahead = (_create(dlc, quota_job_body(ws_a, DisplayName=n)) for n in "abcd")
    now = timezone.now()
    for job_id, age in ((old, timedelta(days=40)), (mid, timedelta(days=3))):
        Job.objects.filter(job_id=job_id).update(created_at=now - age)
    Job.objects.filter(job_id=ahead).update(created_at=now + timedelta(days=1))

    def ids(**times) -> set[str]:
        times = {k: f"{v:%Y-%m-%dT%H:%M:%SZ}" for k, v in times.items()}
        return {j.job_id for j in dlc.list_jobs(ListJobsRequest(**times)).body.jobs}

    assert ids(end_time=now - timedelta(days=1)) == {mid}  # from 7 days ago
    assert ids(end_time=now - timedelta(days=30)) == set()  # before the default StartTime
    assert ids(start_time=now - timedelta(days=60)) == {old, mid, new}  # up to now
    assert ids(start_time=now - timedelta(days=60), end_time=now + timedelta(days=2)) == {
        old,
        mid,
        new,
        ahead,
    }


def test_list_jobs_searches_commands_and_reasons(raw, dlc, ws_a):
    train = _create(dlc, quota_job_body(ws_a, UserCommand="python train.py --lr 0.1"))
    _create(dlc, quota_job_body(ws_a, UserCommand="python eval.py"))
    Job.objects.filter(job_id=train).update(pending_reason="quota team-a: needs 8 GPU, 0 free")
    for query in ({"UserCommandSearch": "TRAIN.py"}, {"ReasonSearch": "needs 8 gpu"}):
        found = raw.send("GET", "/api/v1/jobs", query=query).json()["Jobs"]
        assert [j["JobId"] for j in found] == [train], query


def test_list_jobs_refuses_a_filter_it_does_not_take(raw):
    response = raw.send("GET", "/api/v1/jobs", query={"TimeRangeField": "GmtCreateTime"})
    assert response.status_code == 400
    assert response.json()["Code"] == "InvalidParameter"
    assert "TimeRangeField: not supported here" in response.json()["Message"]
