"""Pods outlive their agent: a killed agent's pods keep running under their shims, the next
agent of the same name re-adopts them (or reports how they ended meanwhile), and what the
database says should run is reconciled with what runs, whatever the broker kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from apps.agent.models import PodProcess
from apps.agent.runner import process_alive
from apps.agent.testing import AgentProcess
from apps.jobs.models import JobStatus, PodStatus
from apps.jobs.services import job_stop
from tests.integration.test_agent_pods import NODES, job_in, pod_log, submit, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent_backend(settings):
    from paiweb.celery import app

    settings.EXECUTION_BACKEND = "agent"
    app.conf.task_always_eager = False
    yield
    app.control.purge()


@pytest.fixture
def same_agent(tmp_path_factory):
    """`same_agent()` makes an agent process of one name and one state directory: each
    call is that agent started again (a restart, an upgrade)."""
    name = f"agent-restart-{uuid.uuid4().hex[:6]}"
    var_dir = Path(os.path.realpath(tmp_path_factory.mktemp("agent")))
    made: list[AgentProcess] = []

    def make(**env: str) -> AgentProcess:
        agent = AgentProcess(
            database=dict(connection.settings_dict),
            nodes=NODES,
            name=name,
            redis_url=django_settings.REDIS_URL,
            var_dir=var_dir,
            env={"AGENT_STOP_PODS_ON_EXIT": "false", "AGENT_RECONCILE_SECONDS": "1", **env},
        )
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.stop()
    made[0].cleanup() if made else None


def _kill(agent: AgentProcess) -> None:
    """kill -9 of the agent and everything in its process group (not the shims)."""
    os.killpg(agent.process.pid, signal.SIGKILL)
    agent.process.wait()


def test_pods_outlive_a_killed_agent_and_the_next_one_adopts_them(
    personas, agent_backend, same_agent
):
    first = same_agent().start()
    lives = submit(
        personas,
        name="lives-on",
        command=(  # until the test says "go"
            "echo before; while [ ! -e go ]; do sleep 0.2; done; echo after"
        ),
    )
    ends = submit(personas, name="ends-alone", command="echo alone; sleep 2; exit 3")
    job_in(lives, JobStatus.RUNNING, agent=first)
    job_in(ends, JobStatus.RUNNING, agent=first)
    pid = PodProcess.objects.get(pod__job=lives).pid

    _kill(first)
    assert process_alive(pid), "the pod died with its agent"
    time.sleep(3)  # "ends-alone" exits while no agent watches
    restarted_at = time.time()

    second = same_agent().start()
    job_in(ends, JobStatus.FAILED, agent=second)
    pod = ends.pods.get()
    assert (pod.status, pod.exit_code, pod.reason) == (PodStatus.FAILED, 3, "Error")
    assert pod.finished_at.timestamp() < restarted_at  # when it ended, not when it was seen
    assert "alone" in pod_log(pod)

    pod = lives.pods.get()
    wait_for(
        lambda: "re-adopted by agent" in pod_log(pod), what="the pod to be re-adopted", agent=second
    )
    (Path(PodProcess.objects.get(pod=pod).work_dir) / "go").touch()
    job_in(lives, JobStatus.SUCCEEDED, agent=second)  # carried on, under the new agent
    pod.refresh_from_db()
    assert (pod.status, pod.exit_code, pod.attempt) == (PodStatus.SUCCEEDED, 0, 0)
    log = pod_log(pod)
    assert "before" in log and "after" in log and "re-adopted by agent" in log
    assert lives.restarts.count() == 0
    assert "kept running" in lives.events.get(kind="PodReadopted").message
    wait_for(lambda: not second.shims(), what="the shims to exit", agent=second)


def test_a_stop_sent_while_no_agent_runs_is_carried_out_by_the_next(
    personas, agent_backend, same_agent
):
    first = same_agent().start()
    job = submit(personas, name="stop-me", command="sleep 120", grace=1)
    job_in(job, JobStatus.RUNNING, agent=first)
    pid = PodProcess.objects.get(pod__job=job).pid
    _kill(first)
    job_stop(job=job, by=None)  # its message reaches no agent: Redis is purged below
    from paiweb.celery import app

    app.control.purge()
    assert process_alive(pid)

    second = same_agent().start()
    wait_for(lambda: not process_alive(pid), what="the next agent to stop the pod", agent=second)
    wait_for(
        lambda: PodProcess.objects.get(pod__job=job).state == PodProcess.State.EXITED,
        what="the pod's exit to be recorded",
        agent=second,
    )
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED and job.pods.get().status == PodStatus.STOPPED


def test_starts_whose_message_was_lost_are_started_by_the_reconcile(
    personas, agent_backend, same_agent
):
    """No agent runs while two jobs are admitted; the broker then loses their start
    messages (purged), and one claim is left half-done, as by an agent killed between its
    claim and its start. The agent's reconcile starts both all the same."""
    from paiweb.celery import app

    agent = same_agent()
    queued = submit(personas, name="queued", command="echo one")
    claimed = submit(personas, name="claimed", command="echo two")
    with app.connection_for_write() as conn:  # the broker loses the starts
        for queue in [f"node.{name}" for name in NODES.split(",")] + ["public"]:
            conn.default_channel.queue_purge(queue)
    PodProcess.objects.filter(pod__job=claimed).update(
        state=PodProcess.State.STARTING, agent=agent.name, host="gone"
    )

    agent.start()
    job_in(queued, JobStatus.SUCCEEDED, agent=agent)
    job_in(claimed, JobStatus.SUCCEEDED, agent=agent)
    assert "two" in pod_log(claimed.pods.get())
    assert agent.log_path.read_text().count("whose start message never came") == 2


def test_an_agent_stopping_its_pods_on_exit_is_a_platform_interruption(
    personas, agent_backend, same_agent
):
    """With AGENT_STOP_PODS_ON_EXIT, SIGTERM stops the pods (AgentStopped): the job, even
    without AIMaster, is requeued, not failed, and its restart budget is untouched."""
    agent = same_agent(AGENT_STOP_PODS_ON_EXIT="true").start()
    job = submit(personas, name="stopped-with-agent", command="sleep 60")
    job_in(job, JobStatus.RUNNING, agent=agent)
    pid = PodProcess.objects.get(pod__job=job).pid
    agent.stop()  # SIGTERM: the agent stops its pods and reports them before it exits
    assert not process_alive(pid)
    job.refresh_from_db()
    pod = job.pods.get(attempt=0)
    assert (pod.status, pod.reason, pod.exit_code) == (PodStatus.FAILED, "AgentStopped", 143)
    assert job.status == JobStatus.QUEUING and job.restart_times == 0


def test_an_agent_of_the_same_name_elsewhere_on_the_host_leaves_its_pods_alone(
    personas, agent_backend, same_agent, tmp_path
):
    """Two installations on one host (two demos, a test beside a demo) may name their agents
    alike: the one starting up sweeps only its own leftovers, never the other's pods."""
    first = same_agent().start()
    job = submit(personas, name="other-installation", command="sleep 60")
    job_in(job, JobStatus.RUNNING, agent=first)
    pid = PodProcess.objects.get(pod__job=job).pid
    other = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'other.sqlite3'}",
        "PAIWEB_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "paiweb.settings",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        check=True,
        cwd=django_settings.BASE_DIR,
        env={**os.environ, **other},
        capture_output=True,
        timeout=120,
    )
    twin = AgentProcess(
        database=dict(connection.settings_dict),
        nodes="",
        name=first.prefix,
        redis_url=django_settings.REDIS_URL,
        var_dir=tmp_path,
        env={**other, "AGENT_RECONCILE_SECONDS": "1"},
    )
    try:
        twin.start()
        time.sleep(2)
        assert process_alive(pid), "the twin's start-up swept the other installation's pod"
    finally:
        twin.stop()


def test_an_agent_starting_up_deletes_only_its_own_jobs_unused_namespaces(
    personas, agent_backend, same_agent
):
    """Two installations on one host: the other's job namespace, made and not yet entered
    by its pod, is not this agent's leftover; this installation's unused one is."""
    from apps.agent import netns
    from paiweb.celery import app

    job = submit(personas, name="stopped", command="sleep 60")
    job_stop(job=job, by=None)
    app.control.purge()  # its start never reaches an agent: its namespace is a leftover
    mine = netns.name_for(job.job_id)
    theirs = netns.name_for("dlc" + uuid.uuid4().hex[:14])  # a job of another database
    netns.ensure(mine)
    netns.ensure(theirs)
    try:
        agent = same_agent().start()
        wait_for(lambda: not netns.path(mine).exists(), what="the sweep", agent=agent)
        assert netns.path(theirs).exists(), "the start-up swept another installation's namespace"
    finally:
        netns.delete(mine)
        netns.delete(theirs)
