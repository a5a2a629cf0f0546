"""The disk quota's walk of a job's files does not hold up the agent's watch of its other
pods: a job with a large tree (a dataset of many files) took the watch loop a second or more
per walk, every POD_DISK_CHECK_SECONDS, and every other pod's exit, stop and timeout waited.

The agent of this module checks disk use every half second (the quota's own tests are in
test_pod_isolation.py, whose agent has small limits).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from apps.agent import housekeeping
from apps.agent.models import PodProcess
from apps.jobs.models import JobStatus
from apps.jobs.services import job_stop
from tests.integration.test_agent_pods import (  # noqa: F401 (fixtures)
    agent_backend,
    job_in,
    pod_log,
    running_agent,
    submit,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def agent(django_db_setup, django_db_blocker):
    with running_agent(django_db_blocker, POD_DISK_CHECK_SECONDS="0.5") as process:
        yield process


# 80,000 directories: a walk of about a second on the 2-core development machine
TREE = "python -c 'import os\nfor i in range(80_000): os.mkdir(str(i))' && echo made && sleep 120"


def walk_seconds(path: Path) -> float:
    began = time.monotonic()
    housekeeping.disk_usage(path)
    return time.monotonic() - began


def test_a_job_with_many_files_does_not_hold_up_the_other_pods_exits(personas, agent_backend):
    trees = [
        submit(personas, command=TREE, name="tree-a"),
        submit(personas, command=TREE, name="tree-b", user="charlie", ws="ws_b", quota="team-b"),
    ]
    for tree in trees:
        job_in(tree, JobStatus.RUNNING, agent=agent_backend)
    for tree in trees:
        wait_for(
            lambda tree=tree: "made" in pod_log(tree.pods.get()),
            what="the tree",
            agent=agent_backend,
            timeout=60,
        )
    time.sleep(2)  # the walks of both trees are under way
    work_dir = Path(PodProcess.objects.get(pod=trees[0].pods.get()).work_dir)
    walks = [walk_seconds(work_dir)]
    delays = []
    for _ in range(5):
        quick = submit(personas, command="true", name="quick")
        job_in(quick, JobStatus.SUCCEEDED, JobStatus.FAILED, agent=agent_backend, timeout=30)
        seen = time.time()
        pod = quick.pods.get()
        assert quick.status == JobStatus.SUCCEEDED, (pod.reason, pod.message)
        delays.append(seen - pod.finished_at.timestamp())
    walks.append(walk_seconds(work_dir))
    # The watch loop's round is a second: an exit is reported within it (and the poll's
    # 0.1 s). Walked on the watch loop, each round would also take both trees' walks, and an
    # exit would wait up to a second and two walks. The bound grows with the walk measured
    # here, on the machine as loaded as it is for the agent.
    walk = sum(walks) / len(walks)
    assert max(delays) < 1.0 + walk / 2, (delays, walks)
    for tree in trees:
        tree.refresh_from_db()
        assert tree.status == JobStatus.RUNNING  # far under its quota of files and bytes
        assert tree.disk_bytes and tree.disk_bytes > 100 * 2**20, tree.disk_bytes  # measured
        job_stop(job=tree, by=None)
    for tree in trees:
        job_in(tree, JobStatus.STOPPED, agent=agent_backend)
        work_dir = PodProcess.objects.get(pod=tree.pods.get()).work_dir
        subprocess.run(["rm", "-rf", "--one-file-system", work_dir], check=True)
