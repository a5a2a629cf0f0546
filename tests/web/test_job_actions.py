"""The job page's daily actions beside Stop and Clone: delete a finished job, change the
priority of a queued one. Each follows the rule of the service the API calls too, and who
may do it is who may stop the job."""

from __future__ import annotations

import html

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.jobs.models import Job, JobEvent, JobStatus
from apps.jobs.services import job_admit, job_stop, job_submit
from apps.jobs.specs import JobSpec, RoleSpec

pytestmark = pytest.mark.django_db


def submit(personas, *, gpu: int = 1, pods: int = 1, user: str = "alice", name: str = "job") -> Job:
    spec = JobSpec(
        display_name=name,
        user_command="python train.py",
        quota="team-a",
        roles=[RoleSpec(pod_count=pods, cpu=4000, memory=16384, gpu=gpu)],
    )
    job = job_submit(workspace=personas["ws_a"], user=personas[user], spec=spec)
    job_admit(job_pk=job.pk, now=timezone.now())
    job.refresh_from_db()
    return job


def page(client, job: Job) -> str:
    return html.unescape(client.get(reverse("jobs:detail", args=[job.job_id])).content.decode())


def test_a_finished_job_can_be_deleted_from_its_page(alice_client, personas):
    job = submit(personas)
    job_stop(job=job, by=personas["alice"])
    assert 'id="delete-job"' in page(alice_client, job)
    response = alice_client.post(reverse("jobs:delete", args=[job.job_id]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("jobs:list")
    assert f"Job job ({job.job_id}) deleted." in response.content.decode()
    assert not Job.objects.filter(pk=job.pk).exists()


def test_a_stopping_job_is_not_deleted_and_says_it_will_be_stopped(alice_client, personas):
    job = submit(personas)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.STOPPING)
    response = alice_client.post(reverse("jobs:delete", args=[job.job_id]), follow=True)
    assert "can be deleted once its pods have exited and it is Stopped" in html.unescape(
        response.content.decode()
    )
    assert Job.objects.filter(pk=job.pk).exists()


def test_a_live_job_is_not_deleted(alice_client, personas):
    job = submit(personas)
    assert 'id="delete-job"' not in page(alice_client, job)
    response = alice_client.post(reverse("jobs:delete", args=[job.job_id]), follow=True)
    assert "only a Succeeded, Failed or Stopped job can be deleted" in html.unescape(
        response.content.decode()
    )
    assert Job.objects.filter(pk=job.pk).exists()


def test_a_member_may_not_delete_or_reprioritise_anothers_job(client, personas):
    job = submit(personas, user="alice")
    client.force_login(personas["bob"])  # a member of the workspace, not its owner
    content = page(client, job)
    assert 'id="priority-form"' not in content
    assert (
        client.post(reverse("jobs:priority", args=[job.job_id]), {"priority": 9}).status_code == 403
    )
    job_stop(job=job, by=personas["alice"])
    assert client.post(reverse("jobs:delete", args=[job.job_id])).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()


def test_a_queued_jobs_priority_changes_from_its_page(alice_client, personas):
    submit(personas, gpu=4, pods=2, name="big")  # takes team-a's 8 GPU
    job = submit(personas, gpu=4, name="waiting")
    assert job.status == JobStatus.QUEUING
    assert 'id="priority-form"' in page(alice_client, job)
    response = alice_client.post(
        reverse("jobs:priority", args=[job.job_id]), {"priority": "7"}, follow=True
    )
    assert f"Priority of job {job.job_id} set to 7." in response.content.decode()
    job.refresh_from_db()
    assert job.priority == 7
    assert JobEvent.objects.filter(job=job, kind="PriorityChanged").exists()


@pytest.mark.parametrize(
    ("value", "says"),
    [("10", "Priority: must be from 1 to 9"), ("high", "choose a whole number from 1 to 9")],
)
def test_a_bad_priority_is_refused_with_the_reason(alice_client, personas, value, says):
    submit(personas, gpu=4, pods=2, name="big")
    job = submit(personas, gpu=4, name="waiting")
    response = alice_client.post(
        reverse("jobs:priority", args=[job.job_id]), {"priority": value}, follow=True
    )
    assert says in html.unescape(response.content.decode())
    job.refresh_from_db()
    assert job.priority == 1


def test_a_running_jobs_priority_is_shown_not_offered(alice_client, personas):
    job = submit(personas)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    assert 'id="priority-form"' not in page(alice_client, job)
    response = alice_client.post(
        reverse("jobs:priority", args=[job.job_id]), {"priority": "5"}, follow=True
    )
    assert "the priority of a Running job cannot change" in response.content.decode()


def test_stopping_a_stopped_job_again_says_it_was_already_stopped(alice_client, personas):
    job = submit(personas)
    job_stop(job=job, by=personas["alice"])  # stopped in another tab, or by another user
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    response = alice_client.post(reverse("jobs:stop", args=[job.job_id]), follow=True)
    content = html.unescape(response.content.decode())
    assert f"Job {job.job_id} was already stopped: nothing changed." in content
    assert f"Job {job.job_id} stopped." not in content
