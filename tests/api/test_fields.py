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


def test_list_jobs_finds_the_jobs_it_names_however_old(dlc, ws_a):
    from datetime import timedelta

    from alibabacloud_pai_dlc20201203.models import ListJobsRequest
    from django.utils import timezone

    old, new, other = (_create(dlc, quota_job_body(ws_a, DisplayName=n)) for n in "abc")
    Job.objects.filter(job_id=old).update(created_at=timezone.now() - timedelta(days=40))
    listed = dlc.list_jobs(ListJobsRequest(job_ids=f"{old},{new}")).body
    assert sorted(j.job_id for j in listed.jobs) == sorted([old, new])
    assert listed.total_count == 2
    default = dlc.list_jobs(ListJobsRequest()).body  # the last 7 days, as DLC does
    assert old not in {j.job_id for j in default.jobs} and other in {j.job_id for j in default.jobs}


def test_list_jobs_searches_commands_and_reasons(dlc, ws_a):
    from alibabacloud_pai_dlc20201203.models import ListJobsRequest

    train = _create(dlc, quota_job_body(ws_a, UserCommand="python train.py --lr 0.1"))
    _create(dlc, quota_job_body(ws_a, UserCommand="python eval.py"))
    Job.objects.filter(job_id=train).update(pending_reason="quota team-a: needs 8 GPU, 0 free")
    found = dlc.list_jobs(ListJobsRequest(user_command_search="TRAIN.py")).body.jobs
    assert [j.job_id for j in found] == [train]
    found = dlc.list_jobs(ListJobsRequest(reason_search="needs 8 gpu")).body.jobs
    assert [j.job_id for j in found] == [train]


def test_list_jobs_refuses_a_filter_it_does_not_take(dlc):
    from alibabacloud_pai_dlc20201203.models import ListJobsRequest

    with pytest.raises(Exception) as excinfo:
        dlc.list_jobs(ListJobsRequest(tags="team=vision"))
    assert sdk_error(excinfo) == ("InvalidParameter", 400)
    assert "Tags: not supported here" in str(excinfo.value)
