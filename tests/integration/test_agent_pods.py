"""Pods as real processes, run by a real node agent: `manage.py agent` in a subprocess (a
Celery worker on the nodes' queues) on the test database and Redis.

The test process plays the scheduler (it calls job_admit and scheduler_tick itself: no beat
here) and the web; the agent starts, watches, stops and reports the pods.
"""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from apps.agent.models import NodeAgent, PodProcess
from apps.agent.services import nodes_mark_lost
from apps.agent.tasks import agents_ping
from apps.agent.testing import AgentProcess
from apps.cluster.models import Node
from apps.jobs.models import Job, JobStatus, Pod, PodStatus, gpu_hours_text
from apps.jobs.services import job_admit, job_stop, job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.scheduler.services import scheduler_tick

pytestmark = pytest.mark.django_db(transaction=True)

NODES = "gpu-node-0,gpu-node-1,gpu-node-2,gpu-node-3,lingjun-node-0"
SEED_COMMAND = "echo 'Hello World' && ls -R /mnt/data/ && sleep 1 && echo 'DONE'"
WAIT = 25.0  # seconds: a bound on every wait, far above what each step takes


@contextlib.contextmanager
def running_agent(django_db_blocker, **env: str):
    """An agent serving every node of tests.factories.make_cluster, with `env` on top."""
    with django_db_blocker.unblock():
        database = dict(connection.settings_dict)
    process = AgentProcess(
        database=database,
        redis_url=django_settings.REDIS_URL,
        nodes=NODES,
        env={"SCHEDULER_MIN_RUN_SECONDS": "0", "SCHEDULER_REQUEUE_BACKOFF_SECONDS": "0", **env},
    )
    try:
        process.start()
        yield process
    finally:
        process.stop()
        _purge_queues()
        process.cleanup()


@pytest.fixture(scope="module")
def agent(django_db_setup, django_db_blocker):
    """One agent for the module."""
    with running_agent(django_db_blocker) as process:
        yield process


def _purge_queues() -> None:
    """Drop what nobody consumed here (admission and tick tasks sent to the default queue)."""
    from paiweb.celery import app

    app.control.purge()


@pytest.fixture
def agent_backend(settings, agent):
    """This test runs pods for real: the execution hook dispatches to the agent, and tasks
    the test process sends go to Redis instead of running inline."""
    from paiweb.celery import app

    settings.EXECUTION_BACKEND = "agent"
    settings.POD_WORK_ROOT = agent.pod_work_root
    settings.SCHEDULER_MIN_RUN_SECONDS = 0
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 0
    app.conf.task_always_eager = False
    yield agent
    # Leave no process behind for the next test: stop whatever of this test still runs.
    for job in Job.objects.exclude(
        status__in=[JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED]
    ):
        job_stop(job=job, by=None)
    wait_for(
        lambda: (
            not PodProcess.objects.filter(
                state__in=[PodProcess.State.STARTING, PodProcess.State.RUNNING]
            ).exists()
        ),
        what="every pod process to end",
        agent=agent,
    )


def submit(
    personas,
    *,
    command: str,
    ws: str = "ws_a",
    user: str = "alice",
    quota: str = "team-a",
    pods: int = 1,
    gpu: int = 1,
    gpu_milli: int = 0,
    idle: str = "off",
    aimaster: bool = False,
    name: str = "job",
    envs: dict | None = None,
    data_sources: list | None = None,
    execution_mode: str = "Sync",
    max_minutes: int | None = None,
    grace: int | None = None,
    schedule: bool = True,
    memory: int = 16384,
    hang: int | None = None,
) -> Job:
    spec = JobSpec(
        display_name=name,
        user_command=command,
        quota=quota,
        idle_mode=idle,
        enable_aimaster=aimaster,
        execution_mode=execution_mode,
        envs=envs or {},
        data_sources=data_sources or [],
        max_running_time_minutes=max_minutes,
        hang_seconds=hang,
        enable_easyckpt=True,
        roles=[
            RoleSpec(
                pod_count=pods,
                cpu=4000,
                memory=memory,
                gpu=0 if gpu_milli else gpu,
                gpu_milli=gpu_milli,
            )
        ],
    )
    job = job_submit(workspace=personas[ws], user=personas[user], spec=spec)
    if grace is not None:
        Job.objects.filter(pk=job.pk).update(termination_grace_seconds=grace)
    job_admit(job_pk=job.pk, now=timezone.now())
    if schedule:
        scheduler_tick(now=timezone.now())
    job.refresh_from_db()
    return job


def wait_for(check, *, what: str, agent: AgentProcess, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.1)
    raise AssertionError(
        f"timed out after {timeout:.0f}s waiting for {what}\n--- agent log ---\n{agent.log()}"
    )


def job_in(job: Job, *statuses: str, agent: AgentProcess, timeout: float = WAIT) -> Job:
    def check():
        job.refresh_from_db()
        return job.status in statuses

    wait_for(
        check,
        what=f"{job.display_name} to be {'/'.join(statuses)} (is {job.status})",
        agent=agent,
        timeout=timeout,
    )
    return job


def pod_log(pod: Pod) -> str:
    return Path(PodProcess.objects.get(pod=pod).log_path).read_text()


def test_it_runs_the_seed_command_and_shows_its_log(personas, agent_backend, client):
    job = submit(
        personas,
        command=SEED_COMMAND,
        data_sources=[{"uri": "oss://examplebucket/data/", "mount_path": "/mnt/data/dataset"}],
    )
    assert job.status == JobStatus.ENV_PREPARING
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    assert [t.status for t in job.status_history.all()] == [
        "Creating",
        "Queuing",
        "EnvPreparing",
        "Running",
        "Succeeded",
    ]
    pod = job.pods.get()
    assert (pod.status, pod.exit_code) == (PodStatus.SUCCEEDED, 0)
    assert pod.started_at and pod.finished_at and pod.finished_at >= pod.started_at

    client.force_login(personas["alice"])
    url = reverse("pods:logs", args=[pod.pod_id])
    page = client.get(url).content.decode()
    assert "Hello World" in page and "DONE" in page and "/mnt/data/dataset" in page
    follow = client.get(
        url, {"offset": 0}, headers={"HX-Request": "true", "HX-Target": "log-follow"}
    )
    assert follow.status_code == 286 and "Hello World" in follow.content.decode()
    download = client.get(reverse("pods:logs-download", args=[pod.pod_id]))
    assert download.status_code == 200
    assert b"DONE" in b"".join(download.streaming_content)
    client.force_login(personas["charlie"])
    assert client.get(url).status_code == 404


def test_it_fails_the_pod_and_the_job_with_the_exit_code(personas, agent_backend):
    job = submit(personas, command="echo failing; exit 3")
    job_in(job, JobStatus.FAILED, agent=agent_backend)
    pod = job.pods.get()
    assert (pod.status, pod.exit_code) == (PodStatus.FAILED, 3)
    assert job.reason_code == "PodFailed"
    assert "exited with code 3" in job.reason_message
    assert "failing" in pod_log(pod)


def test_a_failure_that_ends_the_job_counts_the_work_it_lost_from_the_last_checkpoint(
    personas, agent_backend, client
):
    """No AIMaster: the pod saves a checkpoint, trains 3 s more and fails, which ends the
    job. The work it lost is its 2 GPUs' since that checkpoint, not since its start, and
    the job page counts it."""
    command = (
        'python -c "import easyckpt, time\n'
        "time.sleep(2); easyckpt.save({'step': 1}, 1); easyckpt.wait(); time.sleep(3)\n"
        'raise SystemExit(1)"'
    )
    job = submit(personas, command=command, gpu=2)
    job_in(job, JobStatus.FAILED, agent=agent_backend)
    assert job.reason_code == "PodFailed" and not job.restarts.exists()
    assert job.ended_lost_gpu_seconds is not None
    pod = job.pods.get()
    one = wait_for(
        lambda: job.checkpoints.filter(step=1).first(), what="the checkpoint", agent=agent_backend
    )
    since = max(one.created_at, pod.started_at)
    lost = 2 * (pod.finished_at - since).total_seconds()
    wait_for(  # read from the manifest after the exit, it revises the figure a moment later
        lambda: Job.objects.get(pk=job.pk).ended_lost_gpu_seconds == pytest.approx(lost, abs=0.01),
        what=f"the work lost since step 1, {lost:.2f} GPU-seconds",
        agent=agent_backend,
    )
    assert 0 < lost < 2 * (pod.finished_at - pod.started_at).total_seconds() - 1
    client.force_login(personas["alice"])
    page = client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    work = page[page.index('id="work-lost"') :]
    work = work[: work.index("</dd>")]
    assert f"{gpu_hours_text(lost)} GPU-hours" in work and "over 1 interruption" in work
    failed = job.events.get(kind="Failed").message  # as counted at the exit
    assert "exited with code 1 (no automatic fault tolerance); lost " in failed


def test_it_stops_with_sigterm_and_escalates_to_sigkill(personas, agent_backend):
    command = "trap 'echo got TERM' TERM; echo ready; while true; do sleep 0.2; done"
    job = submit(personas, command=command, grace=1)
    job_in(job, JobStatus.RUNNING, agent=agent_backend)
    pod = job.pods.get()
    wait_for(lambda: "ready" in pod_log(pod), what="the pod to print", agent=agent_backend)
    stopped_at = time.monotonic()
    job_stop(job=job, by=personas["alice"])
    process = wait_for(
        lambda: PodProcess.objects.filter(pod=pod, state=PodProcess.State.EXITED).first(),
        what="the process to end",
        agent=agent_backend,
    )
    assert time.monotonic() - stopped_at >= 1.0  # it ignored SIGTERM for the whole grace
    pod.refresh_from_db()
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    assert (pod.status, pod.reason) == (PodStatus.STOPPED, "JobStopped")  # not Failed
    assert process.exit_code == pod.exit_code == 137
    log = pod_log(pod)
    assert "got TERM" in log and "SIGKILL" in log


# A training script run by the pod's shell (no trap of its own) that saves on SIGTERM, as
# examples/train.py does: the save takes 2 s.
SAVES_ON_SIGTERM = """python3 - <<'PAIWEB_EOF'
import signal, sys, time
def save(*_):
    print("got SIGTERM, saving", flush=True)
    time.sleep(2)
    print("saved, bye", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, save)
print("training", flush=True)
while True:
    time.sleep(0.1)
PAIWEB_EOF
echo "the script goes on"
sleep 600
"""


def test_a_process_the_shell_runs_gets_its_grace_period_to_save(personas, agent_backend):
    # The shell's own death at the SIGTERM used to take the sandbox down with it, killing
    # the save at once: "saved, bye" never came and the checkpoint was lost.
    job = submit(personas, command=SAVES_ON_SIGTERM, grace=30)
    job_in(job, JobStatus.RUNNING, agent=agent_backend)
    pod = job.pods.get()
    wait_for(lambda: "training" in pod_log(pod), what="the pod to print", agent=agent_backend)
    stopped_at = time.monotonic()
    job_stop(job=job, by=personas["alice"])
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPING  # while it saves
    process = wait_for(
        lambda: PodProcess.objects.filter(pod=pod, state=PodProcess.State.EXITED).first(),
        what="the process to end",
        agent=agent_backend,
    )
    took = time.monotonic() - stopped_at
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    log = pod_log(pod)
    assert "got SIGTERM, saving" in log and "saved, bye" in log, log
    # then the shell is told too: it stops there, well before the 30 s grace period ends
    assert 2 <= took < 20, (took, log)
    assert "grace period over" not in log and process.exit_code != 137, log


def test_a_command_typed_in_a_browser_runs_line_by_line(personas, agent_backend):
    # a text box's lines arrive as CRLF: each CR used to stick to the last word of its line
    command = 'A=hello\r\necho "[$A]"\r\ncd /tmp\r\npwd\r\necho done'
    job = submit(personas, command=command, gpu=0)
    job_in(job, JobStatus.SUCCEEDED, JobStatus.FAILED, agent=agent_backend)
    log = pod_log(job.pods.get())
    assert "[hello]\n/tmp\ndone\n" in log and "\r" not in log, log
    assert job.status == JobStatus.SUCCEEDED


def test_a_shell_that_runs_nothing_stops_at_once(personas, agent_backend):
    job = submit(personas, command="echo ready; while :; do :; done", grace=30, gpu=0)
    job_in(job, JobStatus.RUNNING, agent=agent_backend)
    pod = job.pods.get()
    wait_for(lambda: "ready" in pod_log(pod), what="the pod to print", agent=agent_backend)
    stopped_at = time.monotonic()
    job_stop(job=job, by=personas["alice"])
    wait_for(
        lambda: PodProcess.objects.filter(pod=pod, state=PodProcess.State.EXITED).first(),
        what="the process to end",
        agent=agent_backend,
    )
    assert time.monotonic() - stopped_at < 10
    assert "grace period over" not in pod_log(pod)


def test_it_gives_each_pod_its_env_gpus_and_a_sandbox(personas, agent_backend):
    other_job = agent_backend.pod_work_root / "dlc-other-job"
    other_job.mkdir(parents=True, exist_ok=True)
    (other_job / "secret.txt").write_text("the other job's secret")
    db_name = str(connection.settings_dict["NAME"])
    db_file = db_name if Path(db_name).is_file() else "/nonexistent"
    settings_py = Path(django_settings.BASE_DIR) / "paiweb" / "settings.py"
    command = (
        'echo "RANK=$RANK WORLD_SIZE=$WORLD_SIZE MASTER=$MASTER_ADDR:$MASTER_PORT '
        'GPUS=$CUDA_VISIBLE_DEVICES ROLE=$ROLE POD=$POD_NAME JOB=$JOB_ID"; '
        f"cat {other_job / 'secret.txt'} || echo no-other-job; "
        f"test -r {db_file} && echo DB-VISIBLE || echo no-db; "
        f"test -r {settings_py} && echo SETTINGS-VISIBLE || echo no-settings; "
        "env | grep -E '^(SECRET_KEY|DATABASE_URL|REDIS_URL)=' || echo no-secrets-in-env; "
        "python -c \"import easyckpt; print('easyckpt on PYTHONPATH')\"; "
        'test -w "$PAIWEB_CHECKPOINT_DIR" && echo ckpt-writable'
    )
    job = submit(personas, command=command, pods=2, gpu=2, envs={"MY_SETTING": "on"})
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    pods = sorted(job.pods.all(), key=lambda p: p.index)
    assert pods[0].node_id == pods[1].node_id  # bin-packed onto one node …
    assert sorted(p.gpu_ids for p in pods) == ["0,1", "2,3"]  # … with different GPUs
    ports = set()
    for rank, pod in enumerate(pods):
        log = pod_log(pod)
        process = PodProcess.objects.get(pod=pod)
        assert process.sandbox == "strict", f"the agent runs pods without isolation:\n{log}"
        assert (
            f"RANK={rank} WORLD_SIZE=2 MASTER=127.0.0.1:{process.master_port} "
            f"GPUS={pod.gpu_ids} ROLE=Worker POD={pod.pod_id} JOB={job.job_id}"
        ) in log
        ports.add(process.master_port)
        for line in (
            "no-other-job",
            "no-db",
            "no-settings",
            "no-secrets-in-env",
            "easyckpt on PYTHONPATH",
            "ckpt-writable",
        ):
            assert line in log
        assert "the other job's secret" not in log
    assert len(ports) == 1 and ports.pop() > 0


def test_it_restarts_the_whole_job_in_sync_mode(personas, agent_backend):
    command = (
        'if [ -e "$PAIWEB_CHECKPOINT_DIR/failed-once" ]; then echo second try; '
        'else touch "$PAIWEB_CHECKPOINT_DIR/failed-once"; echo first try; exit 5; fi'
    )
    job = submit(personas, command=command, aimaster=True)
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    assert job.restart_times == 1 and job.attempt == 1
    restart = job.restarts.get()
    assert restart.cause == "PodFailed" and "exited with code 5" in restart.message
    first, second = job.pods.order_by("attempt")
    assert (first.attempt, first.status, first.exit_code) == (0, PodStatus.FAILED, 5)
    assert (second.attempt, second.status, second.exit_code) == (1, PodStatus.SUCCEEDED, 0)
    assert "second try" in pod_log(second)
    assert "Restarting" in [t.status for t in job.status_history.all()]


def test_an_in_place_restart_starts_once_the_old_pods_have_exited(personas, agent_backend):
    """Rank 1 fails; rank 0 of that attempt takes 3 s to save on SIGTERM. The restart's new
    pods wait for it: two attempts never run at once on the same GPUs and checkpoints."""
    command = (
        'if [ -e "$PAIWEB_CHECKPOINT_DIR/failed-once" ]; then echo second try; exit 0; fi; '
        'if [ "$RANK" = 1 ]; then sleep 1; touch "$PAIWEB_CHECKPOINT_DIR/failed-once"; exit 3; fi; '
        "trap 'sleep 3; echo saved on the way out; exit 0' TERM; "
        "while true; do sleep 0.2; done"
    )
    job = submit(personas, command=command, pods=2, aimaster=True, grace=30)
    wait_for(
        lambda: Job.objects.filter(pk=job.pk, attempt=1).exists(),
        what="the restart",
        agent=agent_backend,
    )
    job.refresh_from_db()
    assert job.status == JobStatus.ENV_PREPARING
    assert "waiting for 1 pod of its previous attempt to exit" in job.reason_message
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    old = list(job.pods.filter(attempt=0).select_related("process").order_by("index"))
    new = list(job.pods.filter(attempt=1).order_by("index"))
    assert [p.status for p in old] == [PodStatus.STOPPED, PodStatus.FAILED]
    assert [p.status for p in new] == [PodStatus.SUCCEEDED] * 2
    saver = old[0]
    assert "saved on the way out" in pod_log(saver) and saver.process.exited_at is not None
    for pod in new:
        assert pod.started_at >= saver.process.exited_at, "a new pod ran beside the old one"


def test_it_restarts_only_the_failed_pod_in_async_mode(personas, agent_backend):
    command = (
        'if [ "$RANK" = 1 ] && [ ! -e "$PAIWEB_CHECKPOINT_DIR/rank1-failed" ]; then '
        'touch "$PAIWEB_CHECKPOINT_DIR/rank1-failed"; exit 4; fi; sleep 2; echo done'
    )
    job = submit(personas, command=command, pods=2, aimaster=True, execution_mode="Async")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    assert job.restart_times == 1 and job.restarts.get().cause == "PodFailed"
    pods = list(job.pods.order_by("index", "attempt"))
    assert [(p.index, p.attempt, p.status) for p in pods] == [
        (0, 1, PodStatus.SUCCEEDED),  # rank 0 ran on, carried into attempt 1
        (1, 0, PodStatus.FAILED),  # the failed pod is a history pod …
        (1, 1, PodStatus.SUCCEEDED),  # … replaced by a new one
    ]
    survivor, _, replacement = pods
    assert survivor.pod_id.endswith("-a0") and replacement.pod_id.endswith("-a1")
    ports = {p.process.master_port for p in (survivor, replacement)}
    assert len(ports) == 1  # the replacement rejoins the same master


def test_an_async_restart_past_a_damaged_checkpoint_counts_the_work_lost_from_the_one_loaded(
    personas, agent_backend
):
    """Async: rank 0 saves steps 1 and 2, damages step 2's file and runs on; rank 1 then
    fails, and only it restarts in place. Its replacement's EasyCkpt load passes over step 2
    for step 1, which rank 0's agent reads from the manifest: the failed pod's work lost
    counts from step 1, as after a requeue or a whole restart."""
    command = (
        'python -c "import easyckpt, os, pathlib, time\n'
        "d = pathlib.Path(os.environ['PAIWEB_CHECKPOINT_DIR'])\n"
        "def wait(name):\n"
        "    for _ in range(600):\n"
        "        if (d / name).exists(): return\n"
        "        time.sleep(0.1)\n"
        "if os.environ['RANK'] == '1' and not (d / 'rank1-failed').exists():\n"
        "    wait('damaged'); time.sleep(3); (d / 'rank1-failed').touch(); raise SystemExit(4)\n"
        "if os.environ['RANK'] == '1':\n"
        "    resumed = easyckpt.load_latest(); (d / 'loaded').touch()\n"
        "    print('resumed from', resumed[0]); raise SystemExit(0)\n"
        "easyckpt.save({'step': 1}, 1); easyckpt.wait(); time.sleep(1)\n"
        "easyckpt.save({'step': 2}, 2); easyckpt.wait(); time.sleep(1)\n"
        "two = d / 'ckpt-000000000002.pkl'\n"
        "two.write_bytes(two.read_bytes()[:-5] + b'xxxxx'); (d / 'damaged').touch()\n"
        "wait('loaded'); time.sleep(3)\""
    )
    job = submit(personas, command=command, pods=2, aimaster=True, execution_mode="Async")
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend, timeout=90)
    assert job.restart_times == 1
    failed, replacement = job.pods.filter(index=1).order_by("attempt")
    assert "resumed from 1" in pod_log(replacement)
    wait_for(
        lambda: job.events.filter(kind="Resumed").exists(),
        what="the resume's word",
        agent=agent_backend,
    )
    assert job.events.get(kind="Resumed").message == (
        "Damaged checkpoints passed over: ckpt-000000000002.pkl; resumed from checkpoint at step 1"
    )
    one = job.checkpoints.get(step=1)
    assert job.restarts.get().lost_gpu_seconds == pytest.approx(
        (failed.finished_at - max(one.created_at, failed.started_at)).total_seconds(), abs=0.01
    )


def test_aimaster_restarts_a_job_that_prints_nothing_for_its_hang_interval(personas, agent_backend):
    """The first attempt prints once and hangs; AIMaster's hang detection (10 s) restarts
    it. The second prints every second for longer than the interval, and is left alone."""
    command = (
        'if [ -e "$PAIWEB_CHECKPOINT_DIR/hung-once" ]; then '
        "for i in $(seq 14); do echo tick $i; sleep 1; done; echo done; "
        'else touch "$PAIWEB_CHECKPOINT_DIR/hung-once"; echo started; sleep 120; fi'
    )
    job = submit(personas, command=command, aimaster=True, hang=10, grace=1)
    job_in(job, JobStatus.RUNNING, agent=agent_backend)
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend, timeout=90)
    restart = job.restarts.get()
    assert restart.cause == "JobHang" and restart.counted
    assert "no output from any pod for" in restart.message and "10 s" in restart.message
    assert job.restart_times == 1
    hung, second = job.pods.order_by("attempt")
    assert (hung.attempt, hung.status) == (0, PodStatus.STOPPED)
    assert second.status == PodStatus.SUCCEEDED and "tick 14" in pod_log(second)
    # it was quiet at least the interval, from its output (or start) to the restart
    quiet_since = hung.process.output_at or hung.started_at
    assert (restart.at - quiet_since).total_seconds() >= 10
    assert job.events.filter(kind="JobHang").exists()


def test_it_fails_a_job_past_its_max_running_time(personas, agent_backend):
    job = submit(personas, command="sleep 30", max_minutes=1)
    job_in(job, JobStatus.RUNNING, agent=agent_backend)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(minutes=2))
    job_in(job, JobStatus.FAILED, agent=agent_backend)  # the agent notices within a second
    assert job.reason_code == "JobTimeout"
    pod = job.pods.get()
    assert (pod.status, pod.reason) == (PodStatus.STOPPED, "JobTimeout")
    wait_for(
        lambda: PodProcess.objects.filter(pod=pod, state="exited").exists(),
        what="the process to end",
        agent=agent_backend,
    )


def test_it_records_heartbeats_and_requeues_the_jobs_of_a_lost_node(personas, agent_backend):
    assert agents_ping(timeout=1.0) >= 5
    node = Node.objects.get(name="gpu-node-0")
    assert node.last_heartbeat is not None
    assert NodeAgent.objects.get(node=node).worker == agent_backend.name
    # With its heartbeat, when its last watch round over every pod it runs began: what
    # billing bills its pods up to (apps.jobs.execution.pods_vouched_until).
    wait_for(
        lambda: (
            agents_ping(timeout=1.0)
            and Node.objects.get(name="gpu-node-0").pods_watched_at is not None
        ),
        what="a heartbeat with the agent's last complete watch round",
        agent=agent_backend,
    )
    node.refresh_from_db()
    assert node.pods_watched_at <= node.last_heartbeat  # it began before the agent answered

    job = submit(personas, command="sleep 30", aimaster=True)
    job_in(job, JobStatus.RUNNING, agent=agent_backend)
    pod = job.pods.get()
    silent_since = timezone.now() - timedelta(seconds=120)
    Node.objects.filter(pk=pod.node_id).update(last_heartbeat=silent_since)
    # It had run for a minute before that heartbeat: the work lost ends at the heartbeat.
    Pod.objects.filter(pk=pod.pk).update(started_at=silent_since - timedelta(seconds=60))
    now = timezone.now()
    assert nodes_mark_lost(now=now) == []  # the watchdog's first look only starts watching
    assert nodes_mark_lost(now=now + timedelta(seconds=1)) == [pod.node.name]

    pod.refresh_from_db()
    job.refresh_from_db()
    assert (pod.status, pod.reason) == (PodStatus.FAILED, "NodeLost")
    assert job.status == JobStatus.QUEUING and job.reason_code == "NodeLost"
    restart = job.restarts.get()  # a platform interruption: no AIMaster restart spent
    assert (restart.cause, restart.counted, job.restart_times) == ("NodeLost", False, 0)
    assert restart.lost_gpu_seconds == pytest.approx(60 * pod.role.gpu)
    assert pod.finished_at == silent_since
    wait_for(
        lambda: PodProcess.objects.filter(pod=pod, state="exited").exists(),
        what="the lost node's process to be stopped",
        agent=agent_backend,
    )

    agents_ping(timeout=1.0)  # it answers again: Ready
    assert Node.objects.get(pk=pod.node_id).status == Node.Status.READY


def test_pods_on_shares_of_one_gpu_see_that_gpu(personas, agent_backend):
    command = 'echo "GPUS=$CUDA_VISIBLE_DEVICES"'
    jobs = [submit(personas, command=command, gpu_milli=500, name=f"half-{i}") for i in range(2)]
    for job in jobs:
        job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    pods = [job.pods.get() for job in jobs]
    assert pods[0].node_id == pods[1].node_id and pods[0].gpu_ids == pods[1].gpu_ids
    for pod in pods:
        assert f"GPUS={pod.gpu_ids}\n" in pod_log(pod) and pod.gpu_ids.isdigit()


def test_checkpoints_easyckpt_rotates_away_are_marked_removed(personas, agent_backend):
    command = (
        'python -c "import easyckpt\n'
        "for step in range(1, 6):\n"
        "    easyckpt.save({'step': step}, step)\n"
        '    easyckpt.wait()"'
    )
    job = submit(personas, command=command, envs={"PAIWEB_CKPT_KEEP": "2"})
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    rows = dict(job.checkpoints.values_list("step", "removed_at"))
    assert sorted(rows) == [1, 2, 3, 4, 5]
    assert [step for step, removed in sorted(rows.items()) if removed is None] == [4, 5]
    left = sorted(p.name for p in Path(job.checkpoints.get(step=5).path).parent.iterdir())
    assert left == ["ckpt-000000000004.pkl", "ckpt-000000000005.pkl", "manifest.jsonl"]


def test_a_restart_past_a_damaged_checkpoint_says_the_step_it_resumed_from(personas, agent_backend):
    """The first attempt saves steps 1 and 2, its step 2 file is damaged, and it fails: the
    restart in place names step 2, the one recorded last. The next attempt's EasyCkpt load
    passes over step 2 for step 1 and says so through the manifest: the job's latest resume
    event names step 1, step 2 is marked damaged, and the work lost counts from step 1."""
    command = (
        'python -c "import easyckpt, os, pathlib, time\n'
        "resumed = easyckpt.load_latest()\n"
        "if resumed:\n"
        "    print('resumed from', resumed[0]); raise SystemExit(0)\n"
        "easyckpt.save({'step': 1}, 1); easyckpt.wait(); time.sleep(1)\n"
        "easyckpt.save({'step': 2}, 2); easyckpt.wait(); time.sleep(1)\n"
        "two = pathlib.Path(os.environ['PAIWEB_CHECKPOINT_DIR']) / 'ckpt-000000000002.pkl'\n"
        "two.write_bytes(two.read_bytes()[:-5] + b'xxxxx')\n"
        'raise SystemExit(5)"'
    )
    job = submit(personas, command=command, aimaster=True)
    job_in(job, JobStatus.SUCCEEDED, agent=agent_backend)
    assert job.restart_times == 1
    assert "resumed from 1" in pod_log(job.pods.get(attempt=1))
    restarted = job.events.get(kind="Restarted")
    assert "resuming from checkpoint at step 2" in restarted.message
    wait_for(
        lambda: job.events.filter(kind="Resumed").exists(),
        what="the resume's word",
        agent=agent_backend,
    )
    assert job.events.get(kind="Resumed").message == (
        "Damaged checkpoints passed over: ckpt-000000000002.pkl; resumed from checkpoint at step 1"
    )
    one, two = job.checkpoints.get(step=1), job.checkpoints.get(step=2)
    assert two.damaged_at is not None and one.damaged_at is None
    restart = job.restarts.get()
    failed = job.pods.get(attempt=0)
    assert restart.lost_gpu_seconds == pytest.approx(
        (failed.finished_at - max(one.created_at, failed.started_at)).total_seconds(), abs=0.01
    )
    assert job.events.filter(kind="LostWorkRevised").exists()
