"""The console while Redis (the broker) is down: what the database took is done and said so.

A submit or a stop commits, then asks for an admission or a tick through Redis. Those asks
are hints: beat's admit-creating and scheduler-tick sweeps do the same work once Redis is
back. So a refused ask must not turn a committed submit into a server error, which invites
the user to submit the job a second time."""

from __future__ import annotations

import pytest
import redis
from django.urls import reverse
from django.utils import timezone

from apps.jobs.models import Job, JobStatus
from apps.jobs.services import jobs_admit_creating
from apps.scheduler.services import scheduler_tick
from tests.web.test_jobs_views import quota_form

pytestmark = pytest.mark.django_db(transaction=True)  # on-commit asks run


@pytest.fixture
def redis_down(monkeypatch, tmp_path):
    from paiweb.celery import app

    dead = redis.Redis.from_url(f"unix://{tmp_path}/no-redis.sock", socket_connect_timeout=0.2)
    monkeypatch.setattr("apps.core.tasks.redis_client", lambda: dead)
    app.conf.task_always_eager = False  # asks go through Redis
    yield
    app.conf.task_always_eager = True


def test_a_job_submitted_while_redis_is_down_is_taken_once_and_placed_later(
    alice_client, personas, redis_down
):
    response = alice_client.post(reverse("jobs:create"), quota_form(display_name="during"))

    job = Job.objects.get()
    assert response.status_code == 302  # its page, not a server error
    assert response["Location"] == reverse("jobs:detail", args=[job.job_id])
    assert job.status == JobStatus.CREATING
    jobs_admit_creating(now=timezone.now())  # beat's sweeps, once Redis is back
    scheduler_tick(now=timezone.now())
    assert Job.objects.get().status == JobStatus.RUNNING


def test_a_job_stopped_while_redis_is_down_is_stopped(alice_client, personas, redis_down):
    alice_client.post(reverse("jobs:create"), quota_form())
    job = Job.objects.get()

    response = alice_client.post(reverse("jobs:stop", args=[job.job_id]), {"next": "/jobs/"})

    assert response.status_code == 302
    assert Job.objects.get().status == JobStatus.STOPPED
