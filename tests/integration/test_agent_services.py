"""The execution services without an agent process: the test plays the agent by calling the
report services itself. The task queue is recorded, not run (the processes themselves are
covered by test_agent_pods.py and tests/unit/test_runner.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.agent import services, tasks
from apps.agent.models import PodProcess
from apps.cluster.models import Node
from apps.console.selectors import job_live
from apps.jobs.models import Job, JobRole, JobStatus, Pod, PodStatus
from apps.jobs.services import job_stop, job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.scheduler.services import scheduler_tick

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sent(settings, monkeypatch):
    """Agent backend on; what the services enqueue is recorded as (task, args, queue)."""
    settings.EXECUTION_BACKEND = "agent"
    settings.SCHEDULER_MIN_RUN_SECONDS = 0
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 0
    calls: list[tuple[str, tuple, str]] = []

    def recorder(name: str):
        return lambda args, queue: calls.append((name, tuple(args), queue))

    monkeypatch.setattr(tasks.pod_start_task, "apply_async", recorder("pod_start_task"))
    monkeypatch.setattr(tasks.pod_stop_task, "apply_async", recorder("pod_stop_task"))
    return calls


def submit(
    personas,
    *,
    roles=None,
    pods=1,
    gpu=1,
    aimaster=False,
    max_restarts=3,
    success_policy="AllWorkers",
    execution_mode="Sync",
    idle="off",
    ws="ws_a",
    user="alice",
    quota="team-a",
    name="job",
) -> Job:
    spec = JobSpec(
        display_name=name,
        user_command="true",
        quota=quota,
        idle_mode=idle,
        enable_aimaster=aimaster,
        max_restarts=max_restarts,
        success_policy=success_policy,
        execution_mode=execution_mode,
        roles=roles or [RoleSpec(pod_count=pods, cpu=4000, memory=16384, gpu=gpu)],
    )
    job = job_submit(workspace=personas[ws], user=personas[user], spec=spec)
    job.refresh_from_db()
    return job


def run_all(job: Job) -> list[Pod]:
    """Play the agent: claim and start every queued pod of the job."""
    now = timezone.now()
    pods = list(Pod.objects.filter(job=job, process__state=PodProcess.State.QUEUED))
    for pod in pods:
        assert services.pod_claim(pod_id=pod.pod_id, agent="agent@test", hostname="h", now=now)
        services.pod_report_running(
            pod_id=pod.pod_id, pid=1, sandbox="none", work_dir="", log_path="", now=now
        )
    return pods


def test_it_routes_pods_to_their_nodes_queue_with_their_own_gpus(personas, sent):
    first = submit(personas, pods=2, gpu=1, name="first")
    second = submit(personas, pods=1, gpu=2, name="second")
    assert first.status == second.status == JobStatus.ENV_PREPARING  # until the agent reports
    pods = list(Pod.objects.filter(job__in=[first, second]).order_by("job_id", "index"))
    assert {p.node.name for p in pods} == {"gpu-node-0"}
    assert [p.gpu_ids for p in pods] == ["0", "1", "2,3"]
    assert sorted(sent) == sorted(("pod_start_task", (p.pod_id,), "node.gpu-node-0") for p in pods)
    ranks = [(p.process.rank, p.process.world_size) for p in pods]
    assert ranks == [(0, 2), (1, 2), (0, 1)]
    assert pods[0].process.master_port == pods[1].process.master_port > 0
    assert pods[0].process.master_addr == "127.0.0.1"


def test_it_runs_the_job_once_every_pod_runs(personas, sent):
    job = submit(personas, pods=2)
    first, second = job.pods.order_by("index")
    now = timezone.now()
    for pod in (first, second):
        services.pod_claim(pod_id=pod.pod_id, agent="agent@test", hostname="h", now=now)
    services.pod_report_running(
        pod_id=first.pod_id, pid=10, sandbox="strict", work_dir="w", log_path="l", now=now
    )
    job.refresh_from_db()
    assert job.status == JobStatus.ENV_PREPARING
    services.pod_report_running(
        pod_id=second.pod_id, pid=11, sandbox="strict", work_dir="w", log_path="l", now=now
    )
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING


def test_it_starts_a_pod_once_and_not_after_a_stop(personas, sent):
    job = submit(personas, pods=2)
    first, second = job.pods.order_by("index")
    now = timezone.now()
    assert services.pod_claim(pod_id=first.pod_id, agent="a@h", hostname="h", now=now)
    assert services.pod_claim(pod_id=first.pod_id, agent="a@h", hostname="h", now=now) is None
    Pod.objects.filter(pk=second.pk).update(status=PodStatus.STOPPED)
    assert services.pod_claim(pod_id=second.pod_id, agent="a@h", hostname="h", now=now) is None
    assert PodProcess.objects.get(pod=second).state == PodProcess.State.CANCELLED


def test_it_runs_pods_of_the_public_pool_on_the_public_queue(personas, sent):
    job = submit(personas, pods=1, gpu=2)
    Pod.objects.filter(job=job).delete()
    PodProcess.objects.all().delete()
    sent.clear()
    role = job.roles.get()
    pod = Pod.objects.create(
        job=job,
        role=role,
        index=0,
        attempt=job.attempt,
        pod_id=f"{job.job_id}-worker-0-public",
        status=PodStatus.PENDING,
    )
    services.pods_launch(job=job, now=timezone.now())
    pod.refresh_from_db()
    assert sent == [("pod_start_task", (pod.pod_id,), "public")]
    assert pod.gpu_ids == "0,1"


def test_a_preempted_pod_stays_preempted_when_its_process_exits(personas, sent):
    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        pods=4,
        gpu=4,
        idle="only_idle",
        aimaster=True,
        name="borrower",
    )
    run_all(borrower)
    sent.clear()
    submit(personas, pods=1, gpu=4, name="owner")  # its tick preempts the borrower
    preempted = list(borrower.pods.filter(attempt=0))
    stops = [c for c in sent if c[0] == "pod_stop_task"]
    assert sorted(stops) == sorted(
        ("pod_stop_task", (p.pod_id, 30), f"node.{p.node.name}") for p in preempted
    )
    for pod in preempted:
        services.pod_report_exit(pod_id=pod.pod_id, exit_code=143, now=timezone.now())
        pod.refresh_from_db()
        assert (pod.status, pod.exit_code) == (PodStatus.PREEMPTED, 143)
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.QUEUING  # requeued by AIMaster, not failed


def test_it_succeeds_a_chief_worker_job_when_the_chief_exits_0(personas, sent):
    job = submit(
        personas,
        success_policy="ChiefWorker",
        roles=[
            RoleSpec(role_type="Worker", pod_count=2, cpu=4000, memory=16384, gpu=0),
            RoleSpec(role_type="Master", pod_count=1, cpu=4000, memory=16384, gpu=0),
        ],
    )
    pods = run_all(job)
    master = next(p for p in pods if p.role.role_type == "Master")
    assert master.process.rank == 0  # the Master is rank 0 even though declared second
    sent.clear()
    services.pod_report_exit(pod_id=master.pod_id, exit_code=0, now=timezone.now())
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    workers = job.pods.filter(role__role_type="Worker")
    assert {(w.status, w.reason) for w in workers} == {(PodStatus.STOPPED, "JobSucceeded")}
    assert sorted(c[1][0] for c in sent) == sorted(w.pod_id for w in workers)


def test_chief_worker_waits_for_the_chief_not_the_workers(personas, sent):
    job = submit(
        personas,
        success_policy="ChiefWorker",
        roles=[
            RoleSpec(role_type="Worker", pod_count=2, cpu=4000, memory=16384, gpu=0),
            RoleSpec(role_type="Master", pod_count=1, cpu=4000, memory=16384, gpu=0),
        ],
    )
    pods = run_all(job)
    master = next(p for p in pods if p.role.role_type == "Master")
    for worker in (p for p in pods if p.role.role_type == "Worker"):
        services.pod_report_exit(pod_id=worker.pod_id, exit_code=0, now=timezone.now())
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING  # every worker done, the chief still runs
    services.pod_report_exit(pod_id=master.pod_id, exit_code=0, now=timezone.now())
    job.refresh_from_db()
    assert (job.status, job.reason_code, job.reason_message) == (
        JobStatus.SUCCEEDED,
        "JobSucceeded",
        f"The chief pod {master.pod_id} succeeded",
    )


def test_all_workers_waits_for_every_pod(personas, sent):
    job = submit(personas, pods=2)
    first, second = run_all(job)
    services.pod_report_exit(pod_id=first.pod_id, exit_code=0, now=timezone.now())
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    services.pod_report_exit(pod_id=second.pod_id, exit_code=0, now=timezone.now())
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.reason_code == "JobSucceeded"


@pytest.mark.parametrize(
    ("aimaster", "max_restarts", "policy", "why"),
    [
        (False, 3, "OnFailure", "no automatic fault tolerance"),
        (True, 0, "OnFailure", "restarts exhausted (0/0)"),
        (True, 3, "Never", "restart policy Never"),
        (True, 3, "ExitCode", "exit code 2 is permanent under restart policy ExitCode"),
    ],
)
def test_it_fails_the_job_when_aimaster_will_not_restart(
    personas, sent, aimaster, max_restarts, policy, why
):
    job = submit(personas, pods=2, aimaster=aimaster, max_restarts=max_restarts)
    JobRole.objects.filter(job=job).update(restart_policy=policy)
    first, second = run_all(job)
    sent.clear()
    services.pod_report_exit(pod_id=first.pod_id, exit_code=2, now=timezone.now())
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.reason_code == "PodFailed"
    assert f"exited with code 2 ({why})" in job.reason_message
    second.refresh_from_db()
    assert (second.status, second.reason) == (PodStatus.STOPPED, "JobFailed")
    assert sent == [("pod_stop_task", (second.pod_id, 30), f"node.{second.node.name}")]


def test_it_restarts_in_place_with_the_lost_work_since_the_checkpoint(personas, sent):
    job = submit(personas, pods=2, gpu=2, aimaster=True)
    first, second = run_all(job)
    start = timezone.now() - timedelta(seconds=100)
    Pod.objects.filter(job=job).update(started_at=start)
    services.checkpoint_report(
        job_pk=job.pk, step=50, path="/ckpt/50", size_bytes=10, at=start + timedelta(seconds=60)
    )
    now = start + timedelta(seconds=100)
    services.pod_report_exit(pod_id=first.pod_id, exit_code=1, now=now)
    job.refresh_from_db()
    assert job.status == JobStatus.ENV_PREPARING and job.attempt == 1
    restart = job.restarts.get()
    assert restart.cause == "PodFailed"
    assert restart.lost_gpu_seconds == pytest.approx(2 * 2 * 40)  # 2 pods × 2 GPU × 40 s
    second.refresh_from_db()
    assert second.status == PodStatus.STOPPED and second.reason == "JobRestarting"
    # the new attempt waits for the stopped pod's process, still winding down
    assert "waiting for 1 pod of its previous attempt to exit" in job.reason_message
    assert not PodProcess.objects.filter(pod__job=job, pod__attempt=1).exists()
    assert services.restarts_launch_sweep(now=now) == 0
    services.pod_report_exit(pod_id=second.pod_id, exit_code=0, now=now)
    new = list(job.pods.filter(attempt=1).order_by("index"))
    assert [(p.node_id, p.status) for p in new] == [
        (first.node_id, PodStatus.PENDING),
        (second.node_id, PodStatus.PENDING),
    ]
    assert {p.gpu_ids for p in new} == {first.gpu_ids, second.gpu_ids}  # the room it had
    job.refresh_from_db()
    assert job.reason_message == "Starting attempt 1"


def test_a_restart_in_place_says_the_checkpoint_it_can_load(personas, sent):
    """Not a newer step whose file is gone, nor an older one stamped by a clock ahead."""
    job = submit(personas, pods=1, aimaster=True)
    [pod] = run_all(job)
    now = timezone.now()
    for step, at in [(20, now - timedelta(seconds=20)), (30, now - timedelta(seconds=10))]:
        services.checkpoint_report(
            job_pk=job.pk, step=step, path=f"/ckpt/{step}", size_bytes=10, at=at
        )
    services.checkpoint_report(
        job_pk=job.pk, step=10, path="/ckpt/10", size_bytes=10, at=now + timedelta(hours=1)
    )
    services.checkpoints_removed(job_pk=job.pk, paths=["/ckpt/30"], at=now)
    services.pod_report_exit(pod_id=pod.pod_id, exit_code=1, now=now)
    assert job.events.get(kind="Restarted").message.endswith("resuming from checkpoint at step 20")


def test_a_restart_waiting_on_a_lost_nodes_pod_starts_from_the_sweep(personas, sent):
    job = submit(personas, pods=2, gpu=2, aimaster=True)
    first, second = run_all(job)
    services.pod_report_exit(pod_id=first.pod_id, exit_code=1, now=timezone.now())
    assert not PodProcess.objects.filter(pod__job=job, pod__attempt=1).exists()
    # the stopped pod's host dies before it reports an exit: no one ever will
    Node.objects.filter(pk=second.node_id).update(status=Node.Status.LOST)
    assert services.restarts_launch_sweep(now=timezone.now()) == 1
    assert PodProcess.objects.filter(pod__job=job, pod__attempt=1).count() == 2
    assert services.restarts_launch_sweep(now=timezone.now()) == 0  # once


def test_a_stopped_job_is_stopping_until_its_last_pod_has_exited(personas, sent):
    job = submit(personas, pods=2)
    first, second = run_all(job)
    job_stop(job=job, by=personas["alice"])
    job.refresh_from_db()
    assert (job.status, job.reason_code) == (JobStatus.STOPPING, "JobStoppedByUser")
    assert [k for k, *_ in sent if k == "pod_stop_task"] == ["pod_stop_task"] * 2
    stopping = job.events.get(kind="Stopping").message
    assert stopping == (
        "Stopped by alice: waiting for 2 pods to exit (SIGTERM, then SIGKILL after 30s)"
    )
    assert job_stop(job=job, by=personas["alice"]).status == JobStatus.STOPPING  # again: as is
    services.pod_report_exit(pod_id=first.pod_id, exit_code=0, now=timezone.now())
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPING
    services.pod_report_exit(pod_id=second.pod_id, exit_code=143, now=timezone.now())
    job.refresh_from_db()
    assert (job.status, job.reason_message) == (JobStatus.STOPPED, "Stopped by alice")
    assert [t.status for t in job.status_history.all()][-2:] == ["Stopping", "Stopped"]
    assert list(
        job.events.filter(kind__in=["Stopping", "Stopped"]).values_list("kind", flat=True)
    ) == [
        "Stopping",
        "Stopped",
    ]


def test_a_job_that_never_started_a_process_stops_at_once(personas, sent):
    job = submit(personas, pods=1)  # its start is still queued: cancelled
    job_stop(job=job, by=personas["alice"])
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED


def test_a_stopping_job_whose_node_is_lost_is_stopped_by_the_sweep(personas, sent):
    job = submit(personas, pods=1)
    [pod] = run_all(job)
    job_stop(job=job, by=personas["alice"])
    assert services.jobs_stopping_sweep(now=timezone.now()) == 0  # its pod may still save
    Node.objects.filter(pk=pod.node_id).update(status=Node.Status.LOST)  # no exit will come
    assert services.jobs_stopping_sweep(now=timezone.now()) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    assert services.jobs_stopping_sweep(now=timezone.now()) == 0  # once


def test_it_counts_the_lost_work_of_a_resumed_attempt_from_its_own_start(personas, sent):
    job = submit(personas, pods=2, gpu=2, aimaster=True)
    first, second = run_all(job)
    start = timezone.now() - timedelta(seconds=1000)
    Pod.objects.filter(job=job).update(started_at=start)
    services.checkpoint_report(
        job_pk=job.pk, step=50, path="/ckpt/50", size_bytes=10, at=start + timedelta(seconds=60)
    )
    services.pod_report_exit(pod_id=first.pod_id, exit_code=1, now=start + timedelta(seconds=100))
    services.pod_report_exit(pod_id=second.pod_id, exit_code=0, now=start + timedelta(seconds=101))
    again = start + timedelta(seconds=900)  # attempt 1 resumed from the checkpoint at 60 s
    first, _ = run_all(job)
    Pod.objects.filter(job=job, attempt=1).update(started_at=again)
    services.pod_report_exit(pod_id=first.pod_id, exit_code=1, now=again + timedelta(seconds=30))
    lost = list(job.restarts.order_by("number").values_list("lost_gpu_seconds", flat=True))
    assert lost == [pytest.approx(2 * 2 * 40), pytest.approx(2 * 2 * 30)]  # not 2 × 2 × 870


def test_an_async_restart_past_a_damaged_checkpoint_counts_the_work_lost_from_the_one_loaded(
    personas, sent
):
    """Async: worker 1 fails and only it restarts in place, worker 0 runs on. The
    replacement's load passes over step 60, damaged, for step 50 (rank 0's agent reads
    that from the manifest): the failed pod lost its work since step 50, not since 60.
    What worker 0, running on, saves later is its own and revises nothing."""
    job = submit(personas, pods=2, gpu=2, aimaster=True, execution_mode="Async")
    first, second = run_all(job)
    start = timezone.now() - timedelta(seconds=100)
    Pod.objects.filter(job=job).update(started_at=start)
    fifty, sixty = "/ckpt/ckpt-000000000050.pkl", "/ckpt/ckpt-000000000060.pkl"
    for step, path, after in [(50, fifty, 30), (60, sixty, 60)]:
        services.checkpoint_report(
            job_pk=job.pk, step=step, path=path, size_bytes=10, at=start + timedelta(seconds=after)
        )
    now = start + timedelta(seconds=100)
    services.pod_report_exit(pod_id=second.pod_id, exit_code=1, now=now)
    job.refresh_from_db()
    assert job.events.get(kind="Restarted").message.startswith("AIMaster restart 1/3: 1 pod(s)")
    restart = job.restarts.get()
    assert restart.lost_gpu_seconds == pytest.approx(2 * 40)  # the failed pod, since step 60
    run_all(job)  # its replacement starts
    services.checkpoint_resumed(
        pod_pk=first.pk, step=50, path=fifty, damaged=[sixty], at=now + timedelta(seconds=5)
    )
    restart.refresh_from_db()
    assert restart.lost_gpu_seconds == pytest.approx(2 * 70)
    assert list(job.events.filter(kind="LostWorkRevised").values_list("message", flat=True)) == [
        "Attempt 1 resumed from checkpoint at step 50: the work lost at interruption 1 is 140 "
        "GPU-seconds, not 80"
    ]
    services.checkpoint_report(
        job_pk=job.pk, step=70, path="/ckpt/70", size_bytes=10, at=timezone.now()
    )
    restart.refresh_from_db()
    assert restart.lost_gpu_seconds == pytest.approx(2 * 70)


def test_an_async_job_requeued_after_a_failure_counts_its_save_on_the_way_out(personas, sent):
    """A failed pod's node is gone, so the Async job is placed again, every pod stopped:
    rank 0's save in the grace period is what the next attempt resumes from, and the work
    lost is counted again from it, as for any requeue."""
    job = submit(personas, pods=2, gpu=2, aimaster=True, execution_mode="Async")
    first, second = run_all(job)
    start = timezone.now() - timedelta(seconds=100)
    Pod.objects.filter(job=job).update(started_at=start)
    services.checkpoint_report(
        job_pk=job.pk, step=50, path="/ckpt/50", size_bytes=10, at=start + timedelta(seconds=60)
    )
    Node.objects.filter(pk=second.node_id).update(status=Node.Status.CORDONED)
    now = start + timedelta(seconds=100)
    services.pod_report_exit(pod_id=second.pod_id, exit_code=1, now=now)
    restart = job.restarts.get()
    assert (restart.cause, restart.lost_gpu_seconds) == ("PodFailed", pytest.approx(2 * 2 * 40))
    services.checkpoint_report(
        job_pk=job.pk, step=58, path="/ckpt/58", size_bytes=10, at=now + timedelta(seconds=1)
    )
    restart.refresh_from_db()
    assert restart.lost_gpu_seconds == 0


@pytest.mark.parametrize(("aimaster", "max_restarts"), [(False, 3), (True, 0)])
def test_a_pod_failure_that_ends_the_job_keeps_the_work_it_lost(
    personas, sent, aimaster, max_restarts
):
    """No AIMaster, or no restart left: the failure ends the job, and the work it lost since
    the last checkpoint is the job's, counted as a restart in place of the same attempt
    would have counted it, and said in its Failed event. The pods' save on the way out,
    reported a moment later, revises it as for a preemption that ends a job."""
    job = submit(personas, pods=2, gpu=2, aimaster=aimaster, max_restarts=max_restarts)
    first, second = run_all(job)
    start = timezone.now() - timedelta(seconds=100)
    Pod.objects.filter(job=job).update(started_at=start)
    services.checkpoint_report(
        job_pk=job.pk, step=50, path="/ckpt/50", size_bytes=10, at=start + timedelta(seconds=60)
    )
    now = start + timedelta(seconds=100)
    services.pod_report_exit(pod_id=first.pod_id, exit_code=1, now=now)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and not job.restarts.exists()
    assert job.ended_lost_gpu_seconds == pytest.approx(2 * 2 * 40)  # 2 pods × 2 GPU × 40 s
    live = job_live(job=job)
    assert (live.lost_gpu_seconds, live.interruptions) == (pytest.approx(160), 1)
    failed = job.events.get(kind="Failed").message
    assert failed.startswith(f"Pod {first.pod_id} (Worker 0) exited with code 1 (")
    assert failed.endswith("); lost 0.04 GPU-hours")  # 160 GPU-seconds
    assert "lost" not in job.reason_message  # GetJob's reason: the failure and why it ended
    services.checkpoint_report(
        job_pk=job.pk, step=58, path="/ckpt/58", size_bytes=10, at=now + timedelta(seconds=1)
    )
    job.refresh_from_db()
    assert job.ended_lost_gpu_seconds == 0
    assert list(job.events.filter(kind="LostWorkRevised").values_list("message", flat=True)) == [
        "Checkpoint at step 58 saved by the interrupted attempt: the work lost at "
        "interruption 1 is 0 GPU-seconds, not 160"
    ]


def test_a_hang_that_ends_the_job_keeps_the_work_it_lost(personas, sent):
    """AIMaster's hang detection with no restart left fails the job: the work since the
    last checkpoint is lost as a pod failure's is."""
    job = submit(personas, pods=2, gpu=2, aimaster=True, max_restarts=0)
    run_all(job)
    start = timezone.now() - timedelta(seconds=100)
    Pod.objects.filter(job=job).update(started_at=start)
    Job.objects.filter(pk=job.pk).update(hang_seconds=30)
    services.checkpoint_report(
        job_pk=job.pk, step=50, path="/ckpt/50", size_bytes=10, at=start + timedelta(seconds=60)
    )
    assert services.job_hang(job_pk=job.pk, now=start + timedelta(seconds=100))
    job.refresh_from_db()
    assert (job.status, job.reason_code) == (JobStatus.FAILED, "JobHang")
    assert job.ended_lost_gpu_seconds == pytest.approx(2 * 2 * 40)
    assert job.events.get(kind="Failed").message.endswith("); lost 0.04 GPU-hours")


def test_a_job_that_succeeds_has_lost_nothing_at_its_end(personas, sent):
    job = submit(personas, pods=1)
    [pod] = run_all(job)
    services.pod_report_exit(pod_id=pod.pod_id, exit_code=0, now=timezone.now())
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.ended_lost_gpu_seconds is None


def test_it_requeues_instead_when_a_node_of_the_job_is_gone(personas, sent):
    job = submit(personas, pods=1, aimaster=True)
    [pod] = run_all(job)
    Node.objects.filter(pk=pod.node_id).update(status=Node.Status.CORDONED)
    services.pod_report_exit(pod_id=pod.pod_id, exit_code=1, now=timezone.now())
    job.refresh_from_db()
    assert job.restarts.get().cause == "PodFailed"
    assert job.events.filter(kind="Requeued").exists()  # through the queue …
    new = job.pods.get(attempt=1)
    assert new.node_id != pod.node_id  # … and the (eager) tick placed it elsewhere


def test_it_requeues_instead_when_a_node_of_the_job_has_gone_silent(personas, sent, settings):
    # Ready still, but not heard from for longer than NODE_LOST_AFTER: about to be Lost
    job = submit(personas, pods=1, aimaster=True)
    [pod] = run_all(job)
    now = timezone.now()
    silent = now - timedelta(seconds=settings.NODE_LOST_AFTER + 5)
    Node.objects.filter(pk=pod.node_id).update(last_heartbeat=silent)
    services.pod_report_exit(pod_id=pod.pod_id, exit_code=1, now=now)
    job.refresh_from_db()
    assert job.events.filter(kind="Requeued").exists()  # not restarted in place there
    assert job.pods.get(attempt=1).node_id != pod.node_id


def test_it_records_each_checkpoint_once(personas, sent):
    job = submit(personas)
    at = timezone.now()
    assert services.checkpoint_report(job_pk=job.pk, step=10, path="/c/10", size_bytes=5, at=at)
    assert not services.checkpoint_report(job_pk=job.pk, step=10, path="/c/10", size_bytes=5, at=at)
    services.checkpoint_report(
        job_pk=job.pk, step=5, path="/c/5", size_bytes=5, at=at - timedelta(seconds=1)
    )
    job.refresh_from_db()
    assert job.checkpoints.count() == 2 and job.last_checkpoint_at == at


def test_the_watchdog_only_marks_nodes_it_watched_go_silent(personas, sent, settings):
    settings.NODE_LOST_AFTER = 30
    now = timezone.now()
    Node.objects.filter(name="gpu-node-1").update(last_heartbeat=now - timedelta(seconds=300))
    Node.objects.filter(name="gpu-node-2").update(last_heartbeat=now - timedelta(seconds=5))
    assert services.nodes_mark_lost(now=now) == []  # not watching before: look again later
    assert services.nodes_mark_lost(now=now + timedelta(seconds=100)) == []  # a gap: again
    later = now + timedelta(seconds=110)
    assert services.nodes_mark_lost(now=later) == ["gpu-node-1", "gpu-node-2"]
    assert Node.objects.get(name="gpu-node-0").status == Node.Status.READY  # never reported


def test_a_lost_node_requeues_a_job_without_aimaster(personas, sent):
    job = submit(personas, pods=1)
    [pod] = run_all(job)
    Node.objects.filter(pk=pod.node_id).update(status=Node.Status.LOST)
    services.node_fail_pods(node=pod.node, now=timezone.now())
    job.refresh_from_db()
    pod.refresh_from_db()
    assert (pod.status, pod.reason) == (PodStatus.FAILED, "NodeLost")
    assert job.status != JobStatus.FAILED and (job.restart_times, job.attempt) == (0, 1)
    assert job.pods.get(attempt=1).node_id != pod.node_id  # placed again, elsewhere


def test_an_agent_is_told_what_to_start_and_what_it_claimed(personas, sent):
    """The reconcile's view: starts still queued on the agent's queues (their broker message
    may be lost), and the agent's own claims; a claim whose process never started goes back
    to the queue."""
    job = submit(personas, pods=2)
    first, second = job.pods.order_by("index")
    queues = [f"node.{first.node.name}", f"node.{second.node.name}", "public"]
    later = timezone.now() + timedelta(seconds=1)
    work = services.agent_work(agent="agent@test", queues=queues, queued_before=later)
    assert sorted(work.queued) == sorted([first.pod_id, second.pod_id]) and not work.claimed
    assert not services.agent_work(
        agent="agent@test", queues=["node.elsewhere"], queued_before=later
    ).queued
    assert (
        services.pod_claim(
            pod_id=first.pod_id, agent="agent@test", hostname="h", now=timezone.now()
        )
        is not None
    )
    work = services.agent_work(agent="agent@test", queues=queues, queued_before=later)
    assert work.queued == (second.pod_id,) and work.claimed == {first.pod_id: "starting"}
    assert services.pod_launch(pod_id=first.pod_id).job_pk == job.pk

    assert services.pod_unclaim(pod_id=first.pod_id, agent="agent@other") is False
    assert services.pod_unclaim(pod_id=first.pod_id, agent="agent@test") is True
    work = services.agent_work(agent="agent@test", queues=queues, queued_before=later)
    assert len(work.queued) == 2 and not work.claimed


def test_the_sweep_fails_jobs_past_their_max_running_time(personas, sent):
    job = submit(personas, pods=1)
    run_all(job)
    Job.objects.filter(pk=job.pk).update(max_running_time_minutes=5)
    now = timezone.now()
    assert services.jobs_timeout_sweep(now=now) == 0
    assert services.jobs_timeout_sweep(now=now + timedelta(minutes=6)) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.reason_code == "JobTimeout"
    assert job.pods.get().reason == "JobTimeout"
    scheduler_tick(now=now)  # the room is free again: nothing to do, nothing breaks


def test_shares_of_a_gpu_go_on_one_named_gpu_beside_whole_gpu_pods(personas, sent):
    """A pool's first share makes the scheduler name GPUs: it counts the whole-GPU pod the
    agent named, packs shares onto one GPU, and gives whole-GPU pods only empty GPUs."""

    def share(milli: int) -> RoleSpec:
        return RoleSpec(cpu=1000, memory=1024, gpu=0, gpu_milli=milli)

    whole = submit(personas, gpu=1, name="whole")
    (w,) = whole.pods.all()
    assert (w.node.name, w.gpu_ids) == ("gpu-node-0", "0")  # the agent named it
    halves = [submit(personas, roles=[share(500)], name=f"half-{i}") for i in range(2)]
    pair = submit(personas, gpu=2, name="pair")
    third = submit(personas, roles=[share(300)], name="third")
    placed = {
        job.display_name: [(p.node.name, p.gpu_ids) for p in job.pods.all()]
        for job in (*halves, pair, third)
    }
    assert placed == {
        "half-0": [("gpu-node-0", "1")],  # beside the whole GPU on the fullest node
        "half-1": [("gpu-node-0", "1")],  # on the same GPU: 0.5 + 0.5
        "pair": [("gpu-node-0", "2,3")],  # whole GPUs: only those with nothing on them
        "third": [("gpu-node-1", "0")],  # no GPU of node 0 has 0.3 left
    }
    run_all(halves[0])
    process = PodProcess.objects.get(pod__job=halves[0])
    assert process.pod.gpu_ids == "1"  # what CUDA_VISIBLE_DEVICES is set to


def test_the_quotas_page_counts_a_share_as_its_part_of_a_gpu(personas, sent):
    from apps.scheduler.selectors import quota_usage_rows

    submit(personas, roles=[RoleSpec(cpu=1000, memory=1024, gpu=0, gpu_milli=250)])
    submit(personas, gpu=2)
    rows = {r.quota.name: r for r in quota_usage_rows()["ECS"]}
    assert (rows["team-a"].gpu.used_text, rows["team-a"].gpu.min_text) == ("2.25", "8")
    assert rows["root-ecs"].gpu.used_text == "2.25"


def test_a_pod_the_host_cannot_start_for_want_of_disk_waits_and_its_job_does_not_fail(
    personas, sent, monkeypatch, settings
):
    """A start that fails because the host is short of something (a full disk under the
    pods' directories or the agent's state) is the host's fault: the pod goes back to its
    queue for the next reconcile, its job waits in EnvPreparing, and its events say why,
    once. (Before, it failed the job: StartError.) The job's own problems still fail it."""
    import errno

    from apps.agent import runner, supervisor
    from apps.jobs.models import JobEvent

    settings.SANDBOX = "insecure"
    monkeypatch.setattr(supervisor, "_netns_acquire", lambda launch: "")
    monkeypatch.setattr(supervisor, "_cgroup_create", lambda launch: None)
    monkeypatch.setattr(supervisor, "state_root", lambda: settings.BASE_DIR / "var" / "no-state")
    full = OSError(errno.ENOSPC, "No space left on device")

    def no_room(*args, **kwargs):
        raise full

    monkeypatch.setattr(supervisor, "pod_spec", no_room)
    job = submit(personas)
    pod = job.pods.get()

    for _ in range(2):  # two reconciles while the disk stays full
        started = supervisor.pod_start(pod_id=pod.pod_id)
        job.refresh_from_db()
        assert (job.status, job.reason_code) == (JobStatus.ENV_PREPARING, "JobDequeued")
        assert PodProcess.objects.get(pod=pod).state == PodProcess.State.QUEUED
        assert started is False
    assert Pod.objects.get(pk=pod.pk).status == PodStatus.PENDING
    delayed = JobEvent.objects.filter(job=job, kind="PodStartDelayed")
    assert [e.message for e in delayed] == [
        "Could not start on this host (No space left on device); trying again every "
        f"{settings.AGENT_RECONCILE_SECONDS:g} s"
    ]

    def the_jobs_own(*args, **kwargs):
        raise runner.ShimError("the job's own planted link")

    monkeypatch.setattr(supervisor, "pod_spec", the_jobs_own)
    assert supervisor.pod_start(pod_id=pod.pod_id) is False
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "planted link" in job.reason_message


def test_a_watchdog_killed_between_marking_a_node_lost_and_failing_its_pods_is_finished_by_the_next(
    personas, sent, settings, monkeypatch
):
    """The sweep marks the node Lost, then fails its pods job by job. A worker killed in
    between left the node Lost with its pods Running, and no later sweep looked at a node
    already Lost: the job ran on a dead node for ever."""
    settings.NODE_LOST_AFTER = 30
    job = submit(personas, pods=1)
    [pod] = run_all(job)
    now = timezone.now()
    Node.objects.filter(pk=pod.node_id).update(last_heartbeat=now - timedelta(seconds=300))
    services.nodes_mark_lost(now=now)  # the watchdog's first sweep only starts watching

    def killed(**kwargs):
        raise SystemExit("the worker is killed")

    fail_pods = services.node_fail_pods
    monkeypatch.setattr(services, "node_fail_pods", killed)
    with pytest.raises(SystemExit):
        services.nodes_mark_lost(now=now + timedelta(seconds=5))
    assert Node.objects.get(pk=pod.node_id).status == Node.Status.LOST
    monkeypatch.setattr(services, "node_fail_pods", fail_pods)

    assert services.nodes_mark_lost(now=now + timedelta(seconds=10)) == [pod.node.name]
    pod.refresh_from_db()
    job.refresh_from_db()
    assert (pod.status, pod.reason) == (PodStatus.FAILED, "NodeLost")
    assert job.attempt == 1 and job.restarts.get().cause == "NodeLost"
    assert services.nodes_mark_lost(now=now + timedelta(seconds=15)) == []  # done: once


def test_a_checkpoint_the_pod_announces_at_once_is_recorded_while_it_runs(
    personas, sent, monkeypatch, settings, tmp_path
):
    """The agent made its manifest reader once the pod's process had started, and took what
    the file held then for an earlier attempt's history: a record the pod wrote in its first
    instants was skipped (its checkpoint found only when the pod ended). The reader is made
    before the start now; an earlier attempt's record, recorded already, is not taken twice."""
    import json
    import time
    from datetime import UTC, datetime

    from apps.agent import runner, supervisor
    from apps.jobs.models import Checkpoint

    settings.SANDBOX = "insecure"
    settings.POD_WORK_ROOT = tmp_path / "pods"
    settings.AGENT_STATE_DIR = tmp_path / "agent"
    monkeypatch.setattr(supervisor, "_netns_acquire", lambda launch: "")
    monkeypatch.setattr(supervisor, "_cgroup_create", lambda launch: None)
    job = submit(personas)
    directory = tmp_path / "pods" / job.job_id / "checkpoints"
    directory.mkdir(parents=True)
    manifest = directory / "manifest.jsonl"
    earlier = {"step": 10, "file": "ckpt-000000000010.pkl", "bytes": 1, "time": 1.7e9}
    manifest.write_text(json.dumps(earlier) + "\n")
    manifest.chmod(0o666)
    (directory / earlier["file"]).write_bytes(b"x")
    services.checkpoint_report(
        job_pk=job.pk,
        step=10,
        path=str(directory / earlier["file"]),
        size_bytes=1,
        at=datetime.fromtimestamp(earlier["time"], UTC),
    )
    record = {"step": 20, "file": "ckpt-000000000020.pkl", "bytes": 2, "time": 1.7e9 + 100}
    command = (
        f'echo x > "$PAIWEB_CHECKPOINT_DIR/{record["file"]}" && '
        f"echo '{json.dumps(record)}' >> \"$PAIWEB_CHECKPOINT_DIR/manifest.jsonl\" && sleep 60"
    )
    Job.objects.filter(pk=job.pk).update(user_command=command)
    start = runner.start

    def slow_to_look(*args, **kwargs):  # the pod writes its record before the agent looks
        process = start(*args, **kwargs)
        deadline = time.monotonic() + 20
        while record["file"] not in manifest.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        return process

    monkeypatch.setattr(runner, "start", slow_to_look)
    pod = job.pods.get()
    try:
        assert supervisor.pod_start(pod_id=pod.pod_id)
        assert record["file"] in manifest.read_text()
        supervisor.watch_once()
        rows = Checkpoint.objects.filter(job=job).order_by("step")
        assert [(c.step, c.size_bytes) for c in rows] == [(10, 1), (20, 2)]
        assert supervisor._running[pod.pod_id].process.poll() is None  # while it runs
        # the agent restarts; meanwhile the pod announces another: the next agent takes it
        with supervisor._lock:
            supervisor._running.pop(pod.pod_id)
        later = {**record, "step": 30, "file": "ckpt-000000000030.pkl"}
        (directory / later["file"]).write_bytes(b"y")
        with manifest.open("a") as out:
            out.write(json.dumps(later) + "\n")
        supervisor._adopt(pod.pod_id, "running")
        supervisor.watch_once()
        assert [c.step for c in Checkpoint.objects.filter(job=job).order_by("step")] == [10, 20, 30]
    finally:
        supervisor.pod_stop(pod_id=pod.pod_id, grace=0)
        deadline = time.monotonic() + 20
        while supervisor.running_pods() and time.monotonic() < deadline:
            supervisor.watch_once()
            time.sleep(0.1)
    assert Checkpoint.objects.filter(job=job).count() == 3
