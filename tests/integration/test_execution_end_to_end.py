"""End to end with a real agent: a training job borrowing idle room checkpoints, is preempted
when the room's owner needs it, is requeued by AIMaster, resumes from its last checkpoint
and finishes — and its page shows the work the preemption cost.

The cluster (tests.factories.make_cluster): 4 nodes × 4 GPU; team-a and team-b each
guarantee 8 GPU. The borrower (team-b, Acceptable, 3 pods × 4 GPU) runs 2 pods In Quota and
1 on team-a's idle room; team-a's own job (2 × 4 GPU) needs that room back.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.template.defaultfilters import floatformat
from django.urls import reverse
from django.utils import timezone

from apps.agent.models import PodProcess
from apps.jobs.models import JobStatus, PodStatus
from apps.scheduler.services import scheduler_tick
from tests.integration.test_agent_pods import (  # noqa: F401 (fixtures)
    agent,
    agent_backend,
    job_in,
    submit,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

TRAIN = Path(django_settings.BASE_DIR) / "examples" / "train.py"
TOTAL_STEPS = 60


def test_a_preempted_training_job_resumes_from_its_checkpoint(
    personas,
    agent_backend,
    settings,
    client,  # noqa: F811 (the fixture imported above)
):
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 0.2
    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        idle="acceptable",
        pods=3,
        gpu=4,
        aimaster=True,
        name="train-borrower",
        command=f"python {TRAIN}",
        envs={
            "TOTAL_STEPS": str(TOTAL_STEPS),
            "STEP_SECONDS": "0.05",
            "CKPT_EVERY": "10",
            "LOG_EVERY": "10",
        },
    )
    assert sorted(borrower.pods.values_list("in_quota", flat=True)) == [False, True, True]
    job_in(borrower, JobStatus.RUNNING, agent=agent_backend)
    wait_for(
        lambda: borrower.checkpoints.filter(step__gte=20).exists(),
        what="the borrower's checkpoint at step 20",
        agent=agent_backend,
    )

    owner = submit(personas, name="owner", pods=2, gpu=4, command="echo owner; sleep 1")
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.QUEUING and borrower.reason_code == "JobPreempted"
    preempted = list(borrower.pods.filter(attempt=0))
    assert {p.status for p in preempted} == {PodStatus.PREEMPTED}

    # Beat is not running: tick until the owner has run and the borrower is back and done.
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        scheduler_tick(now=timezone.now())
        borrower.refresh_from_db()
        if borrower.status in {JobStatus.SUCCEEDED, JobStatus.FAILED}:
            break
        time.sleep(0.3)
    owner.refresh_from_db()
    assert owner.status == JobStatus.SUCCEEDED, agent_backend.log()
    assert borrower.status == JobStatus.SUCCEEDED, (borrower.reason_message, agent_backend.log())

    # The old pods stay Preempted (the agent did not turn them Failed) with their exit code:
    # train.py saved on SIGTERM and exited 143.
    for pod in preempted:
        pod.refresh_from_db()
        assert pod.status == PodStatus.PREEMPTED and pod.exit_code == 143

    resumed = sorted(borrower.pods.filter(attempt=1), key=lambda p: p.index)
    assert [p.status for p in resumed] == [PodStatus.SUCCEEDED] * 3
    rank0_log = Path(PodProcess.objects.get(pod=resumed[0]).log_path).read_text()
    step = int(re.search(r"resumed from step (\d+)", rank0_log).group(1))
    # The new attempt started only once the old pods had exited (the save on SIGTERM done),
    # and resumed from the newest checkpoint there was, one the agent recorded.
    old_exits = PodProcess.objects.filter(pod__in=preempted).values_list("exited_at", flat=True)
    assert max(old_exits) <= min(p.started_at for p in resumed)
    saved_before = borrower.checkpoints.filter(created_at__lte=resumed[0].started_at)
    assert step >= 20 and step == max(saved_before.values_list("step", flat=True))
    assert f"final step {TOTAL_STEPS}" in rank0_log
    assert "starting from scratch" not in rank0_log
    assert borrower.events.filter(kind="Resumed", message__contains=f"step {step}").exists()

    restart = borrower.restarts.get()
    assert restart.cause == "JobPreempted" and "owner" in restart.message
    # Its pods saved the step they had reached on SIGTERM, and the next attempt resumed from
    # it: the work the preemption first counted as lost (since the save before) is revised.
    assert restart.lost_gpu_seconds == 0
    assert borrower.events.filter(kind="LostWorkRevised").exists()

    client.force_login(personas["charlie"])
    page = client.get(reverse("jobs:detail", args=[borrower.job_id])).content.decode()
    assert "JobPreempted" in page
    assert f"{floatformat(restart.lost_gpu_seconds, 0)} GPU·s" in page
    log_page = client.get(reverse("pods:logs", args=[resumed[0].pod_id])).content.decode()
    assert f"resumed from step {step}" in log_page
