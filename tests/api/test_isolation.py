"""An AccessKey acts as its user: only that user's workspaces exist for it. Another
workspace's job is 404 (EntityNotExist), never 403, so its existence does not leak."""

from __future__ import annotations

import pytest
from alibabacloud_aiworkspace20210204.models import GetWorkspaceRequest, ListWorkspacesRequest
from alibabacloud_pai_dlc20201203.models import (
    GetJobEventsRequest,
    GetJobRequest,
    GetPodLogsRequest,
    ListJobsRequest,
    UpdateJobRequest,
)

from apps.jobs.models import Job, JobStatus
from tests.api.conftest import quota_job_body, sdk_error, spot_job_body


@pytest.fixture
def alices_job(create_job, ws_a) -> str:
    return create_job(quota_job_body(ws_a))


@pytest.fixture
def charlie(dlc_for):
    return dlc_for("charlie")


@pytest.mark.parametrize(
    "call",
    [
        lambda c, job: c.get_job(job, GetJobRequest()),
        lambda c, job: c.stop_job(job),
        lambda c, job: c.delete_job(job),
        lambda c, job: c.update_job(job, UpdateJobRequest(priority=9)),
        lambda c, job: c.get_job_events(job, GetJobEventsRequest()),
        lambda c, job: c.get_pod_logs(job, f"{job}-worker-0-a0", GetPodLogsRequest()),
    ],
    ids=["get", "stop", "delete", "update", "events", "pod-logs"],
)
def test_charlie_cannot_touch_alices_job(charlie, alices_job, call):
    with pytest.raises(Exception) as caught:
        call(charlie, alices_job)
    assert sdk_error(caught) == ("EntityNotExist.Job", 404)
    job = Job.objects.get(job_id=alices_job)
    assert job.status != JobStatus.STOPPED and job.priority == 1


def test_charlie_does_not_see_alices_jobs_or_workspace(
    charlie, alices_job, dlc, endpoint, keys, ws_a
):
    assert [j.job_id for j in dlc.list_jobs(ListJobsRequest()).body.jobs] == [alices_job]
    assert charlie.list_jobs(ListJobsRequest()).body.jobs == []
    assert charlie.list_jobs(ListJobsRequest()).body.total_count == 0
    with pytest.raises(Exception) as caught:
        charlie.list_jobs(ListJobsRequest(workspace_id=ws_a))
    assert sdk_error(caught) == ("EntityNotExist.Workspace", 404)

    from alibabacloud_aiworkspace20210204.client import Client as WorkspaceClient

    from tests.api.conftest import config

    workspaces = WorkspaceClient(config(endpoint, keys["charlie"]))
    names = [
        w.workspace_name
        for w in workspaces.list_workspaces(ListWorkspacesRequest()).body.workspaces
    ]
    assert names == ["team-b"]
    with pytest.raises(Exception) as caught:
        workspaces.get_workspace(ws_a, GetWorkspaceRequest())
    assert sdk_error(caught) == ("EntityNotExist.Workspace", 404)


def test_charlie_cannot_submit_into_alices_workspace(charlie, ws_a):
    from alibabacloud_pai_dlc20201203.models import CreateJobRequest

    with pytest.raises(Exception) as caught:
        charlie.create_job(CreateJobRequest().from_map(spot_job_body(ws_a)))
    assert sdk_error(caught) == ("EntityNotExist.Workspace", 404)
    assert Job.objects.count() == 0


def test_bob_shares_alices_workspace_and_sees_her_job_but_may_not_stop_it(dlc_for, alices_job):
    bob = dlc_for("bob")
    assert bob.get_job(alices_job, GetJobRequest()).body.job_id == alices_job
    assert [j.job_id for j in bob.list_jobs(ListJobsRequest(show_own=True)).body.jobs] == []
    with pytest.raises(Exception) as caught:
        bob.stop_job(alices_job)
    assert sdk_error(caught) == ("Forbidden.NotJobManager", 403)
    dlc_for("alice").stop_job(alices_job)
    assert Job.objects.get(job_id=alices_job).reason_message == "Stopped by alice"
