"""What becomes of pods when their agent dies (SIGKILL) or is stopped (SIGTERM)."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from apps.agent.models import PodProcess
from apps.agent.testing import AgentProcess
from apps.jobs.models import JobStatus, PodStatus
from tests.integration.test_agent_pods import NODES, job_in, submit, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent_backend(settings):
    from paiweb.celery import app

    settings.EXECUTION_BACKEND = "agent"
    app.conf.task_always_eager = False
    yield
    app.control.purge()


def test_an_agent_fails_its_pods_when_it_dies_and_when_it_stops(personas, agent_backend):
    name = f"agent-restart-{uuid.uuid4().hex[:6]}"
    agents = [AgentProcess(database=dict(connection.settings_dict), nodes=NODES, name=name,
                           redis_url=django_settings.REDIS_URL) for _ in range(2)]
    try:
        first, second = agents
        first.start()
        job = submit(personas, command="sleep 60", name="dies")
        job_in(job, JobStatus.RUNNING, agent=first)
        pid = PodProcess.objects.get(pod__job=job).pid
        os.killpg(first.process.pid, signal.SIGKILL)  # the agent dies; its pods die with it
        first.process.wait()
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), what="the pod to die with it",
                 agent=first)

        second.start()  # the same agent, restarted: its old pods are gone
        job_in(job, JobStatus.FAILED, agent=second)
        pod = job.pods.get()
        assert (pod.status, pod.reason) == (PodStatus.FAILED, "AgentRestarted")

        job = submit(personas, command="sleep 60", name="stopped")
        job_in(job, JobStatus.RUNNING, agent=second)
        second.stop()  # SIGTERM: the agent stops its pods and reports them before it exits
        job.refresh_from_db()
        pod = job.pods.get()
        assert (pod.status, pod.reason, pod.exit_code) == (
            PodStatus.FAILED, "AgentStopped", 143)
        assert job.status == JobStatus.FAILED
    finally:
        for agent in agents:
            agent.stop()
            agent.cleanup()
