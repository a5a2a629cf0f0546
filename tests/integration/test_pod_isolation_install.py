"""An installation under a system directory the sandbox shows read-only (/opt here, as
`git clone … /opt/paiweb` makes it): its var/ (the installation secret, the database file,
the agents' state) and every other job's directory must not exist in a pod all the same.

A module of its own: its agent keeps its var/ under /opt, and two agents of one module
would share the nodes' queues.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from apps.agent.models import PodProcess
from apps.agent.testing import AgentProcess
from apps.jobs.models import JobStatus
from apps.jobs.services import job_stop
from tests.integration.test_agent_pods import (  # noqa: F401 (fixtures)
    NODES,
    _purge_queues,
    agent_backend,
    job_in,
    pod_log,
    submit,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def agent(django_db_setup, django_db_blocker):
    """The pod tests' agent, its var/ (and so its work root and state) under /opt, readable
    by all as an installation's is."""
    made_opt = not Path("/opt").exists()
    Path("/opt").mkdir(exist_ok=True)
    var = Path(tempfile.mkdtemp(prefix="paiweb-test-", dir="/opt"))
    var.chmod(0o755)
    (var / "paiweb.sqlite3").write_text("SQLite format 3 (a stand-in)")
    with django_db_blocker.unblock():
        database = dict(connection.settings_dict)
    process = AgentProcess(
        database=database,
        redis_url=django_settings.REDIS_URL,
        nodes=NODES,
        var_dir=var,
        env={"SCHEDULER_MIN_RUN_SECONDS": "0", "SCHEDULER_REQUEUE_BACKOFF_SECONDS": "0"},
    )
    try:
        process.start()
        yield process
    finally:
        process.stop()
        _purge_queues()
        process.cleanup()
        shutil.rmtree(var, ignore_errors=True)
        if made_opt:
            shutil.rmtree("/opt", ignore_errors=True)


def test_an_installation_under_opt_shows_a_pod_neither_its_var_nor_another_jobs_files(
    personas, agent_backend
):
    var = agent_backend.var_dir
    victim = submit(
        personas,
        command="echo bobs-secret > secret.txt; chmod 644 secret.txt; sleep 60",
        user="bob",
        name="victim",
    )
    job_in(victim, JobStatus.RUNNING, agent=agent_backend)
    victim_dir = Path(PodProcess.objects.get(pod=victim.pods.get()).work_dir)
    wait_for(
        lambda: (victim_dir / "secret.txt").exists(), what="the victim's file", agent=agent_backend
    )
    command = (
        f"echo VAR: $(ls -A {var}); echo PODS: $(ls -A {var}/pods); "
        f"cat {victim_dir}/secret.txt {var}/paiweb.sqlite3; ls {var}/agent; echo pwd=$PWD; true"
    )
    job = submit(personas, command=command, user="charlie", ws="ws_b", quota="team-b")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    log = pod_log(job.pods.get())
    assert f"pwd={var}/pods/{job.job_id}/" in log, log  # its own work dir, there
    assert "VAR: pods\n" in log, log  # the way to its own directories, nothing else
    assert f"PODS: {job.job_id}\n" in log, log
    assert "bobs-secret" not in log and "SQLite" not in log, log
    victim.refresh_from_db()
    assert victim.status == JobStatus.RUNNING
    job_stop(job=victim, by=personas["bob"])
