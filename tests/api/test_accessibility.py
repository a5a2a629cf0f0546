"""Accessibility through the SDK: a PRIVATE job is seen only by its submitter and the
workspace's administrators; UpdateJob makes it PUBLIC; ListJobs filters by it."""

from __future__ import annotations

import pytest
from alibabacloud_pai_dlc20201203.models import (
    GetJobRequest,
    GetPodLogsRequest,
    ListJobsRequest,
    UpdateJobRequest,
)

from apps.jobs.models import Job
from apps.workspaces.models import Membership
from tests.api.conftest import sdk_error, spot_job_body


def _ids(client, **params) -> set[str]:
    return {j.job_id for j in client.list_jobs(ListJobsRequest(**params)).body.jobs}


def test_a_private_job_is_seen_by_its_submitter_and_admins_only(
    dlc_for, create_job, ws_a, personas
):
    alice, bob = dlc_for("alice"), dlc_for("bob")  # alice owns ws_a; bob is a member
    secret = create_job(spot_job_body(ws_a, DisplayName="secret", Accessibility="PRIVATE"))
    shared = create_job(spot_job_body(ws_a, DisplayName="shared"))
    assert Job.objects.get(job_id=secret).accessibility == "PRIVATE"
    assert alice.get_job(secret, GetJobRequest()).body.accessibility == "PRIVATE"
    assert alice.get_job(shared, GetJobRequest()).body.accessibility == "PUBLIC"

    with pytest.raises(Exception) as caught:
        bob.get_job(secret, GetJobRequest())
    assert sdk_error(caught) == ("EntityNotExist.Job", 404)  # as if it did not exist
    with pytest.raises(Exception) as caught:
        bob.get_pod_logs(secret, f"{secret}-worker-0", GetPodLogsRequest())
    assert sdk_error(caught)[1] == 404
    assert _ids(bob, workspace_id=ws_a) == {shared}
    if hasattr(ListJobsRequest(), "job_ids"):  # not in SDK 1.4.17's model
        assert _ids(bob, job_ids=f"{secret},{shared}") == {shared}
    assert _ids(alice, workspace_id=ws_a) == {secret, shared}
    assert _ids(alice, workspace_id=ws_a, accessibility="PRIVATE") == {secret}
    assert _ids(alice, workspace_id=ws_a, accessibility="PUBLIC") == {shared}
    # in any case, as ListJobs' other choices (Status, JobType, SortBy, Order)
    assert _ids(alice, workspace_id=ws_a, accessibility="private") == {secret}

    # bob's own private job is his to see; alice, the workspace's owner, sees it too
    his = create_job(spot_job_body(ws_a, DisplayName="his", Accessibility="PRIVATE"), client=bob)
    assert bob.get_job(his, GetJobRequest()).body.job_id == his
    assert his in _ids(alice, workspace_id=ws_a)
    # an administrator of the workspace sees them all
    Membership.objects.filter(user=personas["bob"], workspace=personas["ws_a"]).update(role="admin")
    assert _ids(bob, workspace_id=ws_a) == {secret, shared, his}
    Membership.objects.filter(user=personas["bob"], workspace=personas["ws_a"]).update(
        role="member"
    )

    alice.update_job(secret, UpdateJobRequest(accessibility="PUBLIC"))
    assert bob.get_job(secret, GetJobRequest()).body.accessibility == "PUBLIC"
    events = Job.objects.get(job_id=secret).events.filter(kind="AccessibilityChanged")
    assert [e.message for e in events] == ["Made PUBLIC by alice"]


def test_accessibility_takes_only_public_or_private(dlc, create_job, ws_a):
    with pytest.raises(Exception) as caught:
        create_job(spot_job_body(ws_a, Accessibility="SECRET"))
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert "Accessibility" in str(caught.value)
    job = create_job(spot_job_body(ws_a))
    with pytest.raises(Exception) as caught:
        dlc.update_job(job, UpdateJobRequest(accessibility="secret"))
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert "Accessibility: must be one of PUBLIC, PRIVATE" in str(caught.value)
    with pytest.raises(Exception) as caught:
        dlc.list_jobs(ListJobsRequest(accessibility="ALL"))
    assert sdk_error(caught) == ("InvalidParameter", 400)


def test_update_job_widens_visibility_and_never_narrows_it(dlc, create_job, ws_a):
    """As the SDK documents UpdateJob's Accessibility: it can only be expanded."""
    shared = create_job(spot_job_body(ws_a))
    with pytest.raises(Exception) as caught:
        dlc.update_job(shared, UpdateJobRequest(accessibility="PRIVATE"))
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert "Accessibility: a PUBLIC job cannot be made PRIVATE" in str(caught.value)
    assert Job.objects.get(job_id=shared).accessibility == "PUBLIC"
    assert not Job.objects.get(job_id=shared).events.filter(kind="AccessibilityChanged")
    dlc.update_job(shared, UpdateJobRequest(accessibility="PUBLIC"))  # as it is: no change

    secret = create_job(spot_job_body(ws_a, Accessibility="PRIVATE"))
    dlc.update_job(secret, UpdateJobRequest(accessibility="PRIVATE"))  # as it is
    dlc.update_job(secret, UpdateJobRequest(accessibility="PUBLIC"))
    assert Job.objects.get(job_id=secret).accessibility == "PUBLIC"
