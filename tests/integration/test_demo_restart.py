"""`manage.py demo` keeps the console up: a child that dies is started again, alone, with a
backoff, and says so; a whole demo stopped and started again finds every job where it was.
A real demo on its own ports, SQLite file and embedded Redis."""

from __future__ import annotations

import os
import re
import signal
import time

from apps.agent.runner import process_alive
from apps.ops.testing import DemoProcess

# Each demo has its own SQLite file and embedded Redis, the defaults README's first command
# starts: CI runs these in its pass on the defaults (they use neither the suite's database
# nor its Redis, so its PostgreSQL pass leaves them out).


def test_a_child_that_dies_is_restarted_alone_and_the_console_stays_up():
    demo = DemoProcess()
    try:
        demo.wait_for(r"paiweb demo is running")
        pids = {
            name: int(pid)
            for name, pid in re.findall(r"started (\w+) \(pid (\d+)\)", "\n".join(demo.lines))
        }
        assert {"worker", "beat", "web", "flower", "redis"} <= set(pids), pids
        mark = len(demo.lines)
        os.kill(pids["beat"], signal.SIGKILL)
        demo.wait_for(
            r"beat exited with code -9: restarting it in 1s \(restart 1 in a row\); "
            r"the others keep running",
            after=mark,
        )
        again = int(demo.wait_for(r"started beat \(pid (\d+)\)", after=mark).group(1))
        assert again != pids["beat"]
        mark = len(demo.lines)
        os.kill(again, signal.SIGKILL)  # dies again at once: the backoff doubles
        demo.wait_for(
            r"beat exited with code -9: restarting it in 2s \(restart 2 in a row\)", after=mark
        )
        demo.wait_for(r"started beat \(pid \d+\)", after=mark)
        for name in ("worker", "web", "flower", "redis"):  # untouched
            os.kill(pids[name], 0)
        assert demo.healthz() == 200
        assert not any("stopping the others" in line for line in demo.lines)
    finally:
        code = demo.stop()
    assert code == 0, "\n".join(demo.lines[-40:])
    assert "all stopped" in demo.lines[-1] or any("all stopped" in x for x in demo.lines[-5:])


SUBMIT = """
import json
from apps.jobs.services import job_stop, job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.workspaces.models import Workspace
from django.contrib.auth import get_user_model
alice = get_user_model().objects.get(username="alice")
ws = Workspace.objects.get(name="team-a")
def submit(name, command, pods=1, gpu=1):
    spec = JobSpec(display_name=name, user_command=command, quota="team-a",
                   roles=[RoleSpec(pod_count=pods, cpu=4000, memory=16384, gpu=gpu)])
    return job_submit(workspace=ws, user=alice, spec=spec).job_id
print(json.dumps({
    "running": submit("running", "echo started; sleep 45; echo finished"),
    "succeeded": submit("succeeded", "echo done"),
    "failed": submit("failed", "exit 4"),
    "stopped": submit("stopped", "sleep 300"),
    "waiting": submit("waiting", "true", pods=2, gpu=8),  # all of team-a's 16: 15 free
}))
"""

STATUS = """
import json
from apps.jobs.models import Job
jobs = {}
for job in Job.objects.all():
    pods = [(p.pod_id, p.status, p.process.pid if hasattr(p, "process") else None)
            for p in job.pods.order_by("pk")]
    jobs[job.job_id] = {"status": job.status, "attempt": job.attempt,
                        "restarts": job.restarts.count(), "reason": job.pending_reason,
                        "pods": pods, "why": f"{job.reason_code}: {job.reason_message}"}
print(json.dumps(jobs))
"""


def _wait_jobs(demo: DemoProcess, ids: dict, want, *, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        jobs = demo.python(STATUS)
        if all(want(name, jobs[job_id]) for name, job_id in ids.items()):
            return jobs
        if time.monotonic() > deadline:
            raise AssertionError(
                f"jobs not as wanted within {timeout:.0f}s: {jobs}\n" + "\n".join(demo.lines[-40:])
            )
        time.sleep(1)


FIRST = {
    "running": "Running",
    "succeeded": "Succeeded",
    "failed": "Failed",
    "stopped": "Running",
    "waiting": "Queuing",
}


def test_a_restarted_demo_finds_every_job_where_it_was():
    """Jobs running, finished, stopped and waiting; Ctrl-C; `manage.py demo` again (a new
    embedded Redis that kept nothing): the running pod kept running under its shim and is
    re-adopted, and every other job is as it was."""
    demo = DemoProcess(backend="agent")
    try:
        demo.wait_for(r"paiweb demo is running")
        ids = demo.python(SUBMIT)
        _wait_jobs(demo, ids, lambda name, job: job["status"] == FIRST[name])
        demo.python(f"""
import json
from apps.jobs.models import Job
from apps.jobs.services import job_stop
job_stop(job=Job.objects.get(job_id={ids["stopped"]!r}), by=None)
print("{{}}")
""")
        before = _wait_jobs(
            demo,
            ids,
            lambda name, job: job["status"] == ("Stopped" if name == "stopped" else FIRST[name]),
        )
        assert before[ids["waiting"]]["reason"]
        [(pod_id, _, pid)] = before[ids["running"]]["pods"]
        assert demo.stop() == 0
        assert process_alive(pid), "the running pod was stopped with the demo"
    finally:
        demo.stop()

    again = DemoProcess(var=demo.var, backend="agent")
    try:
        again.wait_for(r"paiweb demo is running")
        after = _wait_jobs(
            again,
            ids,
            lambda name, job: job["status"] == ("Stopped" if name == "stopped" else FIRST[name]),
            timeout=30,
        )
        for name in ("succeeded", "failed", "stopped", "waiting"):
            assert after[ids[name]]["status"] == before[ids[name]]["status"]
            assert after[ids[name]]["pods"] == before[ids[name]]["pods"]
        assert after[ids["waiting"]]["reason"]
        running = after[ids["running"]]
        assert running["pods"] == [[pod_id, "Running", pid]] and running["restarts"] == 0
        done = _wait_jobs(
            again,
            {"running": ids["running"]},
            lambda name, job: job["status"] == "Succeeded",
            timeout=90,
        )
        assert done[ids["running"]]["attempt"] == 0 and done[ids["running"]]["restarts"] == 0
        log = (demo.var / "pods" / ids["running"] / "logs" / f"{pod_id}.log").read_text()
        assert "started" in log and "finished" in log and "re-adopted" in log
    finally:
        code = again.stop()
    assert code == 0, "\n".join(again.lines[-40:])


def test_an_agent_in_a_crash_loop_is_back_well_before_its_nodes_are_lost(monkeypatch, settings):
    """Each time it dies at once: the waits grow 1, 2, 4 s, then stay at a sixth of
    NODE_LOST_AFTER, never reaching it (the other children still wait up to 30 s)."""
    from apps.ops.management.commands import demo as command

    settings.NODE_LOST_AFTER = 30
    clock = [1000.0]
    monkeypatch.setattr(command.time, "monotonic", lambda: clock[0])
    supervisor = command.Supervisor(env=dict(os.environ), write=lambda line: None, colour=False)
    waits = {}
    for name in ("agent", "beat"):
        child = supervisor.start(name, ["true"])
        for _ in range(7):
            child.process.wait()
            supervisor.watch()  # it exited: restart it after a while
            assert child.restart_at is not None
            waits.setdefault(name, []).append(child.restart_at - clock[0])
            clock[0] = child.restart_at
            supervisor.watch()  # the while is over: started again
            child = supervisor.children[-1]
        supervisor.stop_all(last=None, timeout=1)
    assert waits == {"agent": [1, 2, 4, 5, 5, 5, 5], "beat": [1, 2, 4, 8, 16, 30, 30]}
