"""Calls that race: a job or template deleted by another request between a call's read of
it and the change it makes is a 404 EntityNotExist.Job / .JobTemplate (as if it had been
gone from the start), never a 500."""

from __future__ import annotations

import json

import pytest
from alibabacloud_pai_dlc20201203 import models as m  # template calls: newer SDKs only
from alibabacloud_pai_dlc20201203.models import UpdateJobRequest

from apps.api import views
from apps.jobs import services
from apps.jobs.models import Job, JobStatus, JobTemplate
from tests.api.conftest import quota_job_body, sdk_error


@pytest.fixture
def deleted_on_the_way(monkeypatch):
    """The job is deleted (by a concurrent DeleteJob) right after the call has read it and
    checked the caller may manage it."""
    check = views.job_ensure_can_manage

    def check_then_lose(*, user, job, action):
        check(user=user, job=job, action=action)
        Job.objects.filter(pk=job.pk).delete()

    monkeypatch.setattr(views, "job_ensure_can_manage", check_then_lose)


@pytest.mark.parametrize(
    ("status", "call"),
    [
        (JobStatus.STOPPED, lambda dlc, job: dlc.delete_job(job)),
        (JobStatus.CREATING, lambda dlc, job: dlc.stop_job(job)),
        (JobStatus.CREATING, lambda dlc, job: dlc.update_job(job, UpdateJobRequest(priority=3))),
    ],
    ids=["delete", "stop", "update"],
)
def test_a_job_deleted_under_a_call_is_not_found(
    dlc, create_job, ws_a, deleted_on_the_way, status, call
):
    job_id = create_job(quota_job_body(ws_a))
    Job.objects.filter(job_id=job_id).update(status=status)
    with pytest.raises(Exception) as caught:
        call(dlc, job_id)
    assert sdk_error(caught) == ("EntityNotExist.Job", 404)


@pytest.fixture
def template_deleted_on_the_way(monkeypatch):
    """The template is deleted (by a concurrent DeleteJobTemplate) right after the call has
    checked the caller may change it."""
    check = services._ensure_can_manage

    def check_then_lose(template, by, action):
        check(template, by, action)
        JobTemplate.objects.filter(pk=template.pk).delete()

    monkeypatch.setattr(services, "_ensure_can_manage", check_then_lose)


@pytest.mark.newer_sdk
@pytest.mark.parametrize(
    "call",
    [
        lambda dlc, tid: dlc.update_job_template(tid, m.UpdateJobTemplateRequest(description="x")),
        lambda dlc, tid: dlc.set_job_template_default_version(
            tid, m.SetJobTemplateDefaultVersionRequest(version=1)
        ),
    ],
    ids=["update", "default-version"],
)
def test_a_template_deleted_under_a_call_is_not_found(dlc, ws_a, template_deleted_on_the_way, call):
    body = quota_job_body(ws_a)
    body.pop("WorkspaceId")
    request = m.CreateJobTemplateRequest(
        template_name="resnet", workspace_id=ws_a, content=json.dumps(body)
    )
    template_id = dlc.create_job_template(request).body.template_id
    with pytest.raises(Exception) as caught:
        call(dlc, template_id)
    assert sdk_error(caught) == ("EntityNotExist.JobTemplate", 404)


@pytest.fixture
def name_check_misses_once(monkeypatch):
    """The first check for a template's name misses the template that has it, as when a
    concurrent request creates it between the check and the write."""
    manager = JobTemplate.objects
    real = manager.filter
    calls = []

    def filter_missing_once(*args, **kwargs):
        if "name" in kwargs and not calls:
            calls.append(kwargs)
            return manager.none()
        return real(*args, **kwargs)

    monkeypatch.setattr(manager, "filter", filter_missing_once)
    return calls


@pytest.mark.newer_sdk
@pytest.mark.parametrize("renaming", [False, True], ids=["create", "rename"])
def test_a_template_name_taken_by_a_concurrent_call_is_a_409(
    dlc, ws_a, name_check_misses_once, renaming
):
    body = quota_job_body(ws_a)
    body.pop("WorkspaceId")

    def create(name: str) -> str:
        request = m.CreateJobTemplateRequest(
            template_name=name, workspace_id=ws_a, content=json.dumps(body)
        )
        return dlc.create_job_template(request).body.template_id

    name_check_misses_once.append("not yet")  # the first two creations check truly
    create("resnet")
    other = create("bert")
    name_check_misses_once.clear()
    with pytest.raises(Exception) as caught:
        if renaming:
            dlc.update_job_template(other, m.UpdateJobTemplateRequest(template_name="resnet"))
        else:
            create("resnet")
    assert name_check_misses_once  # the check did miss
    assert sdk_error(caught) == ("TemplateExists", 409)
    assert sorted(JobTemplate.objects.values_list("name", flat=True)) == ["bert", "resnet"]
