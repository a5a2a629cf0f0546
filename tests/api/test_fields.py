"""CreateJob and UpdateJob drop nothing silently (docs/api.md): a field is honoured, refused
with a 400 that names it, or accepted with no effect and an event on the job saying so."""

from __future__ import annotations

import pytest
from alibabacloud_pai_dlc20201203.models import (
    CreateJobRequest,
    GetJobEventsRequest,
    GetJobRequest,
    UpdateJobRequest,
)

from apps.jobs.models import Job
from tests.api.conftest import quota_job_body, sdk_error


def _create(dlc, body):
    return dlc.create_job(CreateJobRequest().from_map(body)).body.job_id


def test_it_honours_the_termination_grace_period_and_the_description(dlc, ws_a):
    job_id = _create(
        dlc,
        quota_job_body(
            ws_a,
            Description="resnet-50 on the new data",
            Settings={"TerminationGracePeriodSeconds": 120},
        ),
    )
    job = Job.objects.get(job_id=job_id)
    assert (job.termination_grace_seconds, job.description) == (120, "resnet-50 on the new data")
    body = dlc.get_job(job_id, GetJobRequest()).body
    assert body.settings.termination_grace_period_seconds == 120
    assert body.description == "resnet-50 on the new data"


def test_update_job_changes_the_description_in_any_status(dlc, ws_a):
    job_id = _create(dlc, quota_job_body(ws_a))
    dlc.update_job(job_id, UpdateJobRequest(description="second try"))
    assert Job.objects.get(job_id=job_id).description == "second try"
    assert dlc.get_job(job_id, GetJobRequest()).body.description == "second try"


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
                        "ElasticSpotSpecs": [{"EcsSpec": "ecs.g7.xlarge"}],
                    }
                ]
            },
            "JobSpecs[0].ElasticSpotSpecs",
        ),
        ({"ThirdpartyLibs": ["numpy"]}, "ThirdpartyLibs"),
        ({"Settings": {"JobReservedMinutes": 10}}, "Settings.JobReservedMinutes"),
    ],
)
def test_it_refuses_a_field_it_does_not_take_naming_it(dlc, ws_a, overrides, field):
    with pytest.raises(Exception) as excinfo:
        _create(dlc, quota_job_body(ws_a, **overrides))
    assert sdk_error(excinfo) == ("InvalidParameter", 400)
    assert f"{field}: not supported here" in str(excinfo.value)
    assert not Job.objects.exists()


def test_a_field_with_no_effect_here_is_said_on_the_job(dlc, ws_a):
    job_id = _create(dlc, quota_job_body(ws_a, Settings={"EnableRDMA": True}))
    events = dlc.get_job_events(job_id, GetJobEventsRequest()).body.events
    [note] = [e for e in events if "FieldIgnored" in e]
    assert "Settings.EnableRDMA is accepted with no effect: this cluster has no RDMA" in note
