"""How fast pods really start and stop: submit → process running, and stop → process gone.

    python benchmarks/execution_latency.py [--jobs 20] [--gap 0.3] [--tick 2] [--backlog 800]

It runs the real pipeline on a fresh database (a temporary SQLite file unless DATABASE_URL is
set — which is then WIPED: never point it at real data) and Redis (a temporary embedded one
unless REDIS_URL is set): a Celery worker on the default queue (admission, ticks asked for
by `scheduler_tick_soon`), a tick loop standing in for beat (every --tick seconds), and a
node agent (`manage.py agent`) running pods as sandboxed processes. It submits --jobs small
jobs to an idle cluster, --gap seconds apart, waits for every process to run, then stops
each job and waits for every process to be gone. Times come from the database: the job's
submission, its admission (Creating → Queuing), the agent's report that the process runs,
the stop, the agent's report of the exit. Goal: p50 of submit → running within one tick + 1 s.

With --backlog N, each job is submitted behind N stale admission messages (the per-job
`job_admit_task` of a job long done, sent just before it to the default queue),
and the next job waits until the worker has taken them all: a backlog must not delay new
jobs. It prints how many were still queued at each submit (the worker starts on them while
they are sent).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORK = Path(tempfile.mkdtemp(prefix="pw-bench-"))
os.environ.setdefault("DATABASE_URL", f"sqlite:///{WORK / 'bench.sqlite3'}")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paiweb.settings")
os.environ.setdefault("DEBUG", "true")  # a development run: no SECRET_KEY needed
os.environ["PAIWEB_VAR_DIR"] = str(WORK / "var")
os.environ["EXECUTION_BACKEND"] = "agent"
os.environ["CELERY_TASK_ALWAYS_EAGER"] = "false"

_redis = None
if not os.environ.get("REDIS_URL"):
    from paiweb import embedded_redis

    _socket = WORK / "redis.sock"
    _redis = embedded_redis.start(_socket)
    os.environ["REDIS_URL"] = f"unix://{_socket}"

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from apps.agent.models import PodProcess  # noqa: E402
from apps.agent.runner import isolation_status  # noqa: E402
from apps.agent.testing import AgentProcess  # noqa: E402
from apps.core.redis import redis_client  # noqa: E402
from apps.jobs.models import Job, Pod, PodStatus, StatusTransition  # noqa: E402
from apps.jobs.services import job_stop, job_submit  # noqa: E402
from apps.jobs.specs import JobSpec, RoleSpec  # noqa: E402
from apps.jobs.tasks import job_admit_task  # noqa: E402
from apps.scheduler.tasks import scheduler_tick_task  # noqa: E402
from tests.factories import make_cluster, make_personas  # noqa: E402


def percentiles(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return (
        f"p50 {statistics.median(values):.2f}s  p95 {p95:.2f}s  "
        f"min {values[0]:.2f}s  max {values[-1]:.2f}s  (n={len(values)})"
    )


def spec_of(i: int) -> JobSpec:
    return JobSpec(
        display_name=f"bench-{i}",
        user_command="sleep 600",
        quota="team-a",
        roles=[RoleSpec(pod_count=1, cpu=1000, memory=1024, gpu=0)],
    )


def wait(check, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between submissions")
    parser.add_argument("--tick", type=float, default=settings.SCHEDULER_TICK_INTERVAL)
    parser.add_argument(
        "--backlog", type=int, default=0, help="stale admission messages ahead of each job"
    )
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    personas = make_personas(make_cluster())
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    main_worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "paiweb",
            "worker",
            "-Q",
            "celery",
            "-P",
            "threads",
            "-c",
            "4",
            "-n",
            "bench-main@%h",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        stdout=(WORK / "main-worker.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    agent = AgentProcess(
        database=dict(connection.settings_dict),
        redis_url=settings.REDIS_URL,
        log_path=WORK / "agent.log",
    )
    stop_ticks = threading.Event()

    def beat() -> None:  # beat's "scheduler-tick"
        while not stop_ticks.wait(args.tick):
            scheduler_tick_task()
        connection.close()

    ticker = threading.Thread(target=beat, daemon=True)
    try:
        agent.start()
        ticker.start()
        print(
            f"agent up; sandbox: {isolation_status(settings.SANDBOX).mode}; tick every "
            f"{args.tick:g}s; {args.jobs} jobs, {args.gap:g}s apart"
        )
        jobs, queued = [], []
        stale = None
        if args.backlog:  # a job long done: its admission messages are stale
            stale = job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec_of(-1))
            job_stop(job=stale, by=None)
        for i in range(args.jobs):
            if stale is not None:
                for _ in range(args.backlog):
                    job_admit_task.delay(stale.pk)
                queued.append(redis_client().llen("celery"))
            job = job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec_of(i))
            jobs.append(job)
            if stale is not None:  # this job's backlog gone (and the job running) first
                wait(
                    lambda job=job: (
                        redis_client().llen("celery") == 0
                        and Pod.objects.filter(job=job, status=PodStatus.RUNNING).exists()
                    ),
                    timeout=120,
                    what="the backlog to drain",
                )
            time.sleep(args.gap)
        wait(
            lambda: Pod.objects.filter(job__in=jobs, status=PodStatus.RUNNING).count() == len(jobs),
            timeout=60 + args.jobs * args.tick,
            what="every pod to run",
        )
        starts, admitted, placed, launched = [], [], [], []
        for job in Job.objects.filter(pk__in=[j.pk for j in jobs]):
            process = PodProcess.objects.select_related("pod").get(pod__job=job)
            starts.append((process.started_at - job.submitted_at).total_seconds())
            queuing = StatusTransition.objects.get(job=job, status="Queuing")
            admitted.append((queuing.started_at - job.submitted_at).total_seconds())
            placed.append((process.queued_at - job.submitted_at).total_seconds())
            launched.append((process.started_at - process.queued_at).total_seconds())

        stopped_at = {}
        for job in jobs:
            now = timezone.now()
            job_stop(job=job, by=None, now=now)
            stopped_at[job.pk] = now
        wait(
            lambda: (
                PodProcess.objects.filter(pod__job__in=jobs, state="exited").count() == len(jobs)
            ),
            timeout=60,
            what="every process to end",
        )
        stops = [
            (p.exited_at - stopped_at[p.pod.job_id]).total_seconds()
            for p in PodProcess.objects.select_related("pod").filter(pod__job__in=jobs)
        ]
        if queued:
            backlog = f"median {statistics.median(queued):.0f}, min {min(queued)}"
            print(f"stale admission messages queued at each submit: {backlog}")
        print(f"submit → admitted (Queuing) {percentiles(admitted)}")
        print(f"submit → process running   {percentiles(starts)}")
        print(f"  of which submit → placed  {percentiles(placed)}")
        print(f"  of which placed → running {percentiles(launched)}")
        print(f"stop → process gone        {percentiles(stops)}")
        goal = args.tick + 1
        verdict = "met" if statistics.median(starts) <= goal else "MISSED"
        print(f"goal p50 ≤ one tick + 1 s = {goal:g}s: {verdict}")
    finally:
        stop_ticks.set()
        agent.stop()
        agent.cleanup()
        main_worker.send_signal(signal.SIGTERM)
        try:
            main_worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(main_worker.pid, signal.SIGKILL)
            main_worker.wait()
        if _redis is not None:
            _redis.terminate()
            _redis.wait(timeout=10)
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
