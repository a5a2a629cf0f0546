"""The platform's interruptions are not the user's: a node lost or drained, an agent that
restarted or stopped. The job is requeued (Queuing, or Bidding for spot) whether or not it
has AIMaster, spends none of its restarts, waits no backoff and keeps its queue position;
the interruption is still a JobRestart, not counted, with the work it lost. A pod's own
failure still spends the budget or fails the job."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from apps.agent import services, tasks
from apps.agent.models import PodProcess
from apps.billing.models import BillLine
from apps.billing.services import billing_accrue
from apps.cluster.models import Node
from apps.cluster.services import node_set_status
from apps.jobs.execution import pods_winding_down
from apps.jobs.models import Job, JobStatus, Pod, PodStatus
from apps.ops.selectors import cluster_counts
from apps.scheduler.services import Interruption, jobs_requeue_or_fail, scheduler_tick
from tests.integration import test_market_step as market
from tests.integration.test_agent_services import run_all, sent, submit  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast_scheduler(settings):
    settings.SCHEDULER_MIN_RUN_SECONDS = 0
    settings.NODE_LOST_AFTER = 30


@pytest.fixture
def replay(settings, tmp_path):
    return market.replay_writer(settings, tmp_path)


def lose(node: Node, *, silent_since, now) -> None:
    """The node's last heartbeat was `silent_since`; the watchdog, watching, marks it Lost."""
    Node.objects.filter(pk=node.pk).update(last_heartbeat=silent_since)
    assert services.nodes_mark_lost(now=now - timedelta(seconds=1)) == []  # starts watching
    assert services.nodes_mark_lost(now=now) == [node.name]


def requeue(job: Job):
    """The status transition that requeued the job."""
    return job.status_history.filter(status__in=[JobStatus.QUEUING, JobStatus.BIDDING]).last()


# --- a lost node -----------------------------------------------------------------------------


def test_a_lost_node_requeues_a_job_without_aimaster_instead_of_failing_it(personas):
    job = submit(personas, pods=1)
    pod = job.pods.get()
    now = timezone.now()
    lose(pod.node, silent_since=now - timedelta(seconds=60), now=now)
    job.refresh_from_db()
    pod.refresh_from_db()
    assert (pod.status, pod.reason) == (PodStatus.FAILED, "NodeLost")
    assert (job.status, job.restart_times, job.attempt) == (JobStatus.RUNNING, 0, 1)
    again = job.pods.get(attempt=1)
    assert again.status == PodStatus.RUNNING and again.node_id != pod.node_id  # placed afresh
    back = requeue(job)
    assert back.reason_code == "NodeLost"
    assert back.reason_message == (
        f"Requeued: Node {pod.node.name} stopped reporting: no heartbeat for 30s "
        "(a platform interruption: requeued although AIMaster is off)"
    )
    restart = job.restarts.get()
    assert (restart.cause, restart.counted, restart.number) == ("NodeLost", False, 1)
    assert not job.events.filter(kind="Failed").exists()


def test_a_lost_nodes_processes_hold_no_room_for_the_requeued_job(personas, sent):
    """The lost pods' processes never report their exit (their host is gone), so their
    PodProcess rows stay running; that must not keep the requeued job out of its quota."""
    job = submit(personas, pods=1, gpu=4, name="lost")
    run_all(submit(personas, pods=1, gpu=4, name="other"))  # with it, all of team-a's 8
    pods = run_all(job)
    node = pods[0].node
    now = timezone.now()
    lose(node, silent_since=now - timedelta(seconds=60), now=now)
    assert PodProcess.objects.get(pod=pods[0]).state == "running"
    scheduler_tick(now=now + timedelta(seconds=1))
    job.refresh_from_db()
    assert (job.status, job.attempt) == (JobStatus.ENV_PREPARING, 1), job.pending_reason
    assert not Pod.objects.filter(job=job, attempt=1, node=node).exists()


def test_a_lost_node_spends_no_restart_of_an_aimaster_job_with_none_left(personas):
    job = submit(personas, pods=1, aimaster=True, max_restarts=2)
    Job.objects.filter(pk=job.pk).update(restart_times=2)  # the budget is spent
    pod = job.pods.get()
    now = timezone.now()
    lose(pod.node, silent_since=now - timedelta(seconds=45), now=now)
    job.refresh_from_db()
    assert (job.status, job.restart_times, job.attempt) == (JobStatus.RUNNING, 2, 1)
    assert requeue(job).reason_message.endswith(
        "(a platform interruption: AIMaster's budget 2/2 is not used)"
    )
    assert job.not_before is None
    event = job.events.get(kind="Requeued")
    assert "a platform interruption: AIMaster's budget 2/2 is not used" in event.message
    assert "back to the queue" in event.message


def test_a_lost_node_ends_its_pods_at_the_last_heartbeat(personas):
    job = submit(personas, pods=2, gpu=4)  # one pod on each of two nodes
    first, second = job.pods.order_by("index")
    assert first.node_id != second.node_id
    started = timezone.now() - timedelta(minutes=10)
    Pod.objects.filter(job=job).update(started_at=started)
    now = timezone.now()
    silent_since = now - timedelta(seconds=90)
    lose(first.node, silent_since=silent_since, now=now)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.finished_at == silent_since  # the last time anything knew it was alive
    assert (second.status, second.reason) == (PodStatus.STOPPED, "NodeLost")
    assert second.finished_at == now  # it really ran until it was stopped
    lost = job.restarts.get().lost_gpu_seconds
    assert lost == pytest.approx(4 * (600 - 90) + 4 * 600, rel=0.01)


def test_a_pod_that_started_after_the_last_heartbeat_ends_when_it_started(personas):
    job = submit(personas, pods=1)
    pod = job.pods.get()
    now = timezone.now()
    Pod.objects.filter(pk=pod.pk).update(started_at=now - timedelta(seconds=20))
    lose(pod.node, silent_since=now - timedelta(seconds=60), now=now)
    pod.refresh_from_db()
    assert pod.finished_at == pod.started_at


def test_a_pod_lost_before_it_started_never_ends_before_it_was_created(personas, sent):
    job = submit(personas, pods=1)  # placed, its process not started yet
    pod = job.pods.get()
    now = timezone.now()
    lose(pod.node, silent_since=now - timedelta(seconds=60), now=now + timedelta(seconds=1))
    pod.refresh_from_db()
    assert (pod.status, pod.started_at) == (PodStatus.FAILED, None)
    assert pod.finished_at == pod.created_at


def test_one_outage_of_several_nodes_requeues_a_job_once(personas, sent):
    """The agent serving two nodes stops: the job lost with the first is not placed on the
    second, silent as well though the watchdog has not marked it yet, to be lost again."""
    job = submit(personas, pods=1, gpu=4)
    run_all(job)
    now = timezone.now()
    Node.objects.filter(name__in=["gpu-node-0", "gpu-node-1"]).update(
        last_heartbeat=now - timedelta(seconds=60)
    )
    Node.objects.filter(name__in=["gpu-node-2", "gpu-node-3"]).update(last_heartbeat=now)
    assert job.pods.get().node.name == "gpu-node-0"
    services.nodes_mark_lost(now=now - timedelta(seconds=1))  # starts watching
    assert services.nodes_mark_lost(now=now) == ["gpu-node-0", "gpu-node-1"]
    job.refresh_from_db()
    assert (job.status, job.attempt, job.restarts.count()) == (JobStatus.ENV_PREPARING, 1, 1)
    assert job.pods.get(attempt=1).node.name in {"gpu-node-2", "gpu-node-3"}
    assert job.status_history.filter(status=JobStatus.QUEUING).count() == 2  # admitted, requeued


def test_it_places_nothing_on_a_node_silent_too_long_before_it_is_marked_lost(personas, sent):
    stale = timezone.now() - timedelta(seconds=31)
    Node.objects.filter(name="gpu-node-0").update(last_heartbeat=stale)
    job = submit(personas, pods=1, gpu=4)
    assert job.status == JobStatus.ENV_PREPARING
    assert job.pods.get().node.name == "gpu-node-1"
    Node.objects.filter(name="gpu-node-0").update(last_heartbeat=timezone.now())  # it reports
    second = submit(personas, pods=1, gpu=4, name="second")
    assert second.pods.get().node.name == "gpu-node-0"


def test_it_bills_a_lost_nodes_pod_only_up_to_the_last_heartbeat(personas, replay):
    """Public and spot pods run on the public pool, without a node, today; wherever a
    metered pod runs, its bill ends at Pod.finished_at, which a lost node sets to its last
    heartbeat."""
    replay([(market.NOW, market.G7, "0.30")])
    job = market.submit(personas, source="public", name="payg")
    market.step(market.at(0))
    pod = job.pods.get()
    node = Node.objects.get(name="gpu-node-3")
    Pod.objects.filter(pk=pod.pk).update(node=node)
    lose(node, silent_since=market.at(3, 20), now=market.at(4, 0))
    billing_accrue(now=market.at(10))
    base = int(market.NOW.timestamp()) // 60
    minutes = list(
        BillLine.objects.filter(pod=pod).order_by("minute").values_list("minute", flat=True)
    )
    assert [m - base for m in minutes] == [0, 1, 2, 3]  # not 4, when the watchdog noticed
    job.refresh_from_db()
    assert (job.status, job.restart_times) == (JobStatus.QUEUING, 0)  # pay-as-you-go: queued


def test_a_silent_agent_loses_its_public_pool_pods_as_of_its_last_heartbeat(personas, replay, sent):
    """Public and spot pods have no node: when the agent running them stops reporting,
    they are lost with it (NodeLost, billed up to its last heartbeat) and their jobs are
    requeued; a pod of an agent that still reports is left alone."""
    from apps.agent.models import PodProcess
    from apps.core.services import heartbeat_record

    replay([(market.NOW, market.G7, "0.30")])
    gone = market.submit(personas, source="public", name="gone")
    kept = market.submit(personas, discount="0.9", name="kept")
    market.step(market.at(0))
    for job, agent in ((gone, "agent@gone"), (kept, "agent@here")):
        pod = job.pods.get()
        PodProcess.objects.filter(pod=pod).update(state="running", agent=agent)
        Pod.objects.filter(pk=pod.pk).update(status=PodStatus.RUNNING, started_at=market.at(0))
    heartbeat_record(name="agent:agent@gone", now=market.at(3, 20))
    heartbeat_record(name="agent:agent@here", now=market.at(3, 50))
    services.nodes_mark_lost(now=market.at(3, 30))  # the watchdog starts watching
    services.nodes_mark_lost(now=market.at(4, 0))

    pod = gone.pods.get(attempt=0)
    assert (pod.status, pod.reason, pod.finished_at) == (
        PodStatus.FAILED,
        "NodeLost",
        market.at(3, 20),
    )
    assert "The agent agent@gone, which ran this pod of the public pool" in pod.message
    gone.refresh_from_db()
    assert (gone.status, gone.reason_code, gone.restart_times) == (JobStatus.QUEUING, "NodeLost", 0)
    assert not gone.restarts.get().counted
    assert kept.pods.get().status == PodStatus.RUNNING  # its agent still reports
    billing_accrue(now=market.at(10))
    base = int(market.NOW.timestamp()) // 60
    assert [
        m - base
        for m in BillLine.objects.filter(pod=pod)
        .order_by("minute")
        .values_list("minute", flat=True)
    ] == [0, 1, 2, 3]


def test_a_silent_agents_pods_are_billed_no_further_than_its_last_heartbeat(personas, replay, sent):
    """Billing that runs while an agent is silent, before the watchdog declares its pods
    lost, bills no minute after the agent's last heartbeat: the pods end there, and nothing
    billed meanwhile is left to take back. An agent that was only late (its pods ran on)
    gets those minutes billed once it reports again."""
    from apps.core.services import heartbeat_record

    replay([(market.NOW, market.G7, "0.30")])
    lost, late = (market.submit(personas, source="public", name=n) for n in ("lost", "late"))
    market.step(market.at(0))
    for job in (lost, late):
        pod = job.pods.get()
        PodProcess.objects.filter(pod=pod).update(
            state="running", agent=f"agent@{job.display_name}"
        )
        Pod.objects.filter(pk=pod.pk).update(status=PodStatus.RUNNING, started_at=market.at(0))
    for name in ("lost", "late"):
        heartbeat_record(name=f"agent:agent@{name}", now=market.at(3, 20))
    base = int(market.NOW.timestamp()) // 60

    def billed(job: Job) -> list[int]:
        minutes = BillLine.objects.filter(pod__job=job).order_by("minute")
        return [m - base for m in minutes.values_list("minute", flat=True)]

    billing_accrue(now=market.at(4, 10))  # both agents silent for 50 s, not yet lost
    assert billed(lost) == billed(late) == [0, 1, 2, 3]

    heartbeat_record(name="agent:agent@late", now=market.at(4, 14))  # it was only late
    services.nodes_mark_lost(now=market.at(4, 15))  # the watchdog starts watching
    services.nodes_mark_lost(now=market.at(4, 20))
    billing_accrue(now=market.at(10))
    assert lost.pods.get(attempt=0).finished_at == market.at(3, 20)
    assert billed(lost) == [0, 1, 2, 3]
    assert late.pods.get().status == PodStatus.RUNNING
    assert billed(late) == [0, 1, 2, 3, 4]  # as far as its heartbeat at 4:14 vouches
    heartbeat_record(name="agent:agent@late", now=market.at(9, 58))
    billing_accrue(now=market.at(10))
    assert billed(late) == list(range(10))


def test_it_keeps_a_requeued_jobs_place_in_the_queue(personas):
    """team-a's 8 GPUs: `first` (4) and `filler` (4) run; `later` (4) waits behind them.
    The other two nodes run team-b's own jobs. When first's node is lost no room is left,
    and first, submitted before later, is still ahead of it."""
    first = submit(personas, pods=1, gpu=4, name="first")
    submit(personas, pods=1, gpu=4, name="filler")
    for name in ("b-1", "b-2"):
        submit(personas, ws="ws_b", user="charlie", quota="team-b", pods=1, gpu=4, name=name)
    later = submit(personas, pods=1, gpu=4, name="later")
    assert later.status == JobStatus.QUEUING
    node = first.pods.get().node
    now = timezone.now()
    lose(node, silent_since=now - timedelta(seconds=60), now=now)
    first.refresh_from_db()
    later.refresh_from_db()
    assert first.status == later.status == JobStatus.QUEUING
    assert (first.queue_position, later.queue_position) == (1, 2)
    assert "backoff" not in first.pending_reason


# --- what an agent reports -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "exit_code", "message"),
    [
        ("AgentRestarted", None, "The agent agent@test restarted and the pod's process is gone"),
        ("AgentStopped", 143, "The agent agent@test stopped, and stopped its pods"),
    ],
)
def test_it_requeues_the_job_of_a_pod_its_agent_lost(personas, sent, reason, exit_code, message):
    job = submit(personas, pods=2)
    first, second = run_all(job)
    services.pod_report_exit(
        pod_id=first.pod_id, exit_code=exit_code, now=timezone.now(), reason=reason, message=message
    )
    job.refresh_from_db()
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.reason) == (PodStatus.FAILED, reason)
    assert (second.status, second.reason) == (PodStatus.STOPPED, reason)
    # requeued; placed again once the stopped pod's process has exited
    assert (job.status, job.restart_times, job.attempt) == (JobStatus.QUEUING, 0, 1)
    assert "waiting for 1 pod of its previous attempt to exit" in job.pending_reason
    services.pod_report_exit(pod_id=second.pod_id, exit_code=143, now=timezone.now())
    job.refresh_from_db()
    assert job.status == JobStatus.ENV_PREPARING
    assert job.pods.filter(attempt=1, status=PodStatus.PENDING).count() == 2
    back = requeue(job)
    assert back.reason_code == reason
    assert f"{reason}, {message}" in back.reason_message
    assert "(a platform interruption: requeued although AIMaster is off)" in back.reason_message
    restart = job.restarts.get()
    assert (restart.cause, restart.counted) == (reason, False)


def test_it_requeues_an_aimaster_job_its_agent_lost_without_a_restart(personas, sent):
    job = submit(personas, pods=1, aimaster=True, max_restarts=3)
    [pod] = run_all(job)
    services.pod_report_exit(
        pod_id=pod.pod_id,
        exit_code=None,
        now=timezone.now(),
        reason="AgentRestarted",
        message="The agent restarted",
    )
    job.refresh_from_db()
    assert (job.restart_times, job.attempt) == (0, 1)
    assert "AIMaster's budget 0/3 is not used" in requeue(job).reason_message
    assert not job.status_history.filter(status=JobStatus.RESTARTING).exists()


def test_a_pod_failure_still_fails_a_job_without_aimaster(personas, sent):
    job = submit(personas, pods=1)
    [pod] = run_all(job)
    services.pod_report_exit(pod_id=pod.pod_id, exit_code=1, now=timezone.now())
    job.refresh_from_db()
    assert (job.status, job.reason_code) == (JobStatus.FAILED, "PodFailed")
    assert not job.restarts.exists()


def test_a_pod_failure_still_spends_the_aimaster_budget(personas, sent):
    job = submit(personas, pods=1, aimaster=True, max_restarts=3)
    [pod] = run_all(job)
    services.pod_report_exit(pod_id=pod.pod_id, exit_code=1, now=timezone.now())
    job.refresh_from_db()
    assert (job.status, job.restart_times, job.attempt) == (JobStatus.ENV_PREPARING, 1, 1)
    restart = job.restarts.get()
    assert (restart.cause, restart.counted, restart.number) == ("PodFailed", True, 1)


def test_a_spot_job_its_agent_stopped_goes_back_to_bidding_at_once(personas, replay, settings):
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 600  # an AIMaster requeue would wait this
    replay([(market.NOW, market.G7, "0.30")])
    job = market.submit(personas, discount="0.9", name="spot")
    market.step(market.at(0))
    pod = job.pods.get()
    services.pod_report_exit(
        pod_id=pod.pod_id,
        exit_code=143,
        now=market.at(1),
        reason="AgentStopped",
        message="The agent stopped",
    )
    job.refresh_from_db()
    assert (job.status, job.reason_code, job.restart_times) == (
        JobStatus.BIDDING,
        "AgentStopped",
        0,
    )
    assert job.not_before is None and not job.restarts.get().counted
    assert "back to the spot market" in job.events.get(kind="Requeued").message
    market.step(market.at(1, 5))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.attempt == 1  # no backoff to wait out


def test_one_batch_sends_each_job_where_aimaster_decides(personas, replay, sent, settings):
    """`jobs_requeue_or_fail` asks `lifecycle` per job: a spot job goes back to bidding, a
    quota job to its queue, a job without AIMaster fails; only a failure of the job's own
    spends a restart, and only the platform's skips the backoff."""
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 600
    replay([(market.NOW, market.G7, "0.30")])
    spot = market.submit(personas, discount="0.9", name="spot")  # no AIMaster
    market.step(market.at(0))
    quota = submit(personas, pods=1, aimaster=True, name="quota")
    plain = submit(personas, pods=1, name="plain")
    failing = submit(personas, pods=1, aimaster=True, name="failing")
    for job in (quota, plain, failing):
        run_all(job)
    now = timezone.now()
    with transaction.atomic():
        jobs = {
            j.display_name: j
            for j in Job.objects.select_for_update().filter(
                pk__in=[spot.pk, quota.pk, plain.pk, failing.pk]
            )
        }
        jobs_requeue_or_fail(
            interruptions=[
                Interruption(jobs["spot"], "NodeLost", "Node gone", 0.0, kind="platform"),
                Interruption(jobs["quota"], "JobPreempted", "Preempted by q", 0.0),
                Interruption(jobs["plain"], "JobPreempted", "Preempted by q", 0.0),
                Interruption(jobs["failing"], "PodFailed", "Pod exited", 0.0, kind="failure"),
            ],
            now=now,
        )
    for job in (spot, quota, plain, failing):
        job.refresh_from_db()
    assert (spot.status, spot.restart_times, spot.not_before) == (JobStatus.BIDDING, 0, None)
    assert "back to the spot market" in spot.events.get(kind="Requeued").message
    assert (quota.status, quota.restart_times, quota.not_before) == (
        JobStatus.QUEUING,
        0,
        now + timedelta(seconds=600),
    )
    assert "back to the queue" in quota.events.get(kind="Requeued").message
    assert not quota.restarts.get().counted
    assert (failing.status, failing.restart_times, failing.not_before) == (
        JobStatus.QUEUING,
        1,
        now + timedelta(seconds=600),
    )
    assert failing.events.get(kind="Requeued").message.startswith("AIMaster restart 1/3")
    assert failing.restarts.get().counted
    assert (plain.status, plain.reason_code, plain.reason_message) == (
        JobStatus.FAILED,
        "JobPreempted",
        "Preempted by q (no automatic fault tolerance)",
    )
    assert not plain.restarts.exists()


# --- drain and cordon ------------------------------------------------------------------------


def test_a_drain_cordons_the_node_and_moves_its_jobs_with_their_grace(personas, sent):
    moved = submit(personas, pods=2, gpu=1, name="moved")
    Job.objects.filter(pk=moved.pk).update(termination_grace_seconds=45)
    pods = run_all(moved)
    node = pods[0].node
    stays = submit(personas, pods=1, gpu=4, name="stays")  # a node of its own
    run_all(stays)
    assert stays.pods.get().node_id != node.pk
    sent.clear()
    assert services.node_drain(node=node, now=timezone.now()) == 1
    node.refresh_from_db()
    assert node.status == Node.Status.CORDONED
    for pod in pods:
        pod.refresh_from_db()
        assert (pod.status, pod.reason) == (PodStatus.STOPPED, "NodeDrained")
    stops = [c for c in sent if c[0] == "pod_stop_task"]
    assert sorted(stops) == sorted(
        ("pod_stop_task", (p.pod_id, 45), f"node.{node.name}") for p in pods
    )
    moved.refresh_from_db()
    assert (moved.restart_times, moved.attempt) == (0, 1)
    assert moved.status == JobStatus.QUEUING  # until its pods have saved and exited
    for pod in pods:
        services.pod_report_exit(pod_id=pod.pod_id, exit_code=143, now=timezone.now())
    assert moved.pods.filter(attempt=1).exclude(node=node).count() == 2  # placed elsewhere
    event = moved.events.get(kind="Requeued").message
    assert event.startswith(f"Moved off {node.name}: the node is being drained by an admin")
    assert "SIGTERM and 45s to save a checkpoint" in event
    assert "(a platform interruption: requeued although AIMaster is off)" in event
    assert stays.pods.get().status == PodStatus.RUNNING


def test_a_drain_killed_part_way_is_finished_by_the_watchdog(personas, sent, monkeypatch):
    """The drain is recorded (the node Draining) before any job moves; a worker killed after
    the first job leaves the node Draining, and the watchdog's sweep moves the rest."""
    first = submit(personas, pods=1, gpu=1, name="first")
    second = submit(personas, pods=1, gpu=1, name="second")
    node = run_all(first)[0].node
    assert run_all(second)[0].node_id == node.pk
    real, moves = services._job_move_off, []

    def killed_after_one(**kwargs):
        if moves:
            raise SystemExit("killed")
        moves.append(real(**kwargs))
        return moves[-1]

    monkeypatch.setattr(services, "_job_move_off", killed_after_one)
    with pytest.raises(SystemExit):
        services.node_drain(node=node, now=timezone.now())
    monkeypatch.undo()
    node.refresh_from_db()
    assert node.status == Node.Status.DRAINING
    assert second.pods.get(attempt=0).status == PodStatus.RUNNING  # not moved yet
    assert cluster_counts().draining == (node.name,)

    tasks.nodes_watchdog_task()  # beat's "nodes-watchdog"
    node.refresh_from_db()
    assert node.status == Node.Status.CORDONED
    for job in (first, second):
        job.refresh_from_db()
        assert (job.attempt, job.restart_times, job.reason_code) == (1, 0, "NodeDrained")
        assert job.pods.get(attempt=0).reason == "NodeDrained"
    assert cluster_counts().draining == ()
    assert services.nodes_drain_sweep(now=timezone.now()) == 0  # nothing left


def test_a_pod_placed_as_the_drain_began_keeps_the_node_draining(personas, sent, monkeypatch):
    """A tick that read the node Ready before the drain may place a pod there after it:
    the node stays Draining, and the sweep moves that job too."""
    job = submit(personas, pods=1, gpu=1)
    node = run_all(job)[0].node
    late = submit(personas, pods=1, gpu=1, name="late")
    assert late.pods.get().node_id == node.pk
    real = services._jobs_on

    def placed_meanwhile(on):  # the late job's pod was not there when the drain looked
        return [pk for pk in real(on) if pk != late.pk]

    monkeypatch.setattr(services, "_jobs_on", placed_meanwhile)
    assert services.node_drain(node=node, now=timezone.now()) == 1
    monkeypatch.undo()
    node.refresh_from_db()
    assert node.status == Node.Status.DRAINING
    assert services.nodes_drain_sweep(now=timezone.now()) == 1
    node.refresh_from_db()
    late.refresh_from_db()
    assert node.status == Node.Status.CORDONED
    assert (late.pods.get(attempt=0).reason, late.attempt) == ("NodeDrained", 1)


def test_two_drains_at_once_move_a_job_once(personas, sent, monkeypatch):
    """A drain that listed the job before another drain moved it (and a tick placed it
    elsewhere) leaves it where it is now."""
    job = submit(personas, pods=1, gpu=1)
    [pod] = run_all(job)
    node = pod.node
    real, now = services._jobs_on, timezone.now()

    def another_drain_meanwhile(on):
        found = real(on)
        monkeypatch.setattr(services, "_jobs_on", real)
        assert services.node_drain(node=on, now=now) == 1
        services.pod_report_exit(pod_id=pod.pod_id, exit_code=143, now=now)
        run_all(job)  # placed on another node, running
        return found

    monkeypatch.setattr(services, "_jobs_on", another_drain_meanwhile)
    assert services.node_drain(node=node, now=now) == 0
    job.refresh_from_db()
    again = job.pods.get(attempt=1)
    assert (job.status, job.attempt, again.status) == (JobStatus.RUNNING, 1, PodStatus.RUNNING)
    assert again.node_id != node.pk
    assert job.restarts.count() == 1


def test_a_drained_node_that_goes_silent_holds_its_jobs_back_no_longer(personas, sent):
    """The drained pod's process never reports its exit (its host is gone), and the node
    stays Cordoned, not Lost: the moved job waited for that exit for ever. The watchdog's
    finding holds for it as for a Lost node, until the node's agent answers again."""
    job = submit(personas, pods=1, gpu=1)
    [pod] = run_all(job)
    node = pod.node
    now = timezone.now()
    assert services.node_drain(node=node, now=now) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUING  # until the drained pod's process has exited
    Node.objects.filter(pk=node.pk).update(last_heartbeat=now - timedelta(seconds=60))
    assert services.nodes_mark_lost(now=now) == []  # starts watching
    assert services.nodes_mark_lost(now=now + timedelta(seconds=1)) == []  # no live pods
    scheduler_tick(now=now + timedelta(seconds=2))
    job.refresh_from_db()
    node.refresh_from_db()
    assert node.status == Node.Status.CORDONED
    assert job.status == JobStatus.ENV_PREPARING  # placed afresh, elsewhere
    assert job.pods.get(attempt=1).node_id != node.pk
    services.agent_heartbeat(
        worker="agent@back",
        hostname="h",
        address="10.0.0.9",
        nodes=[node.name],
        public=False,
        sandbox="strict",
        now=now + timedelta(seconds=3),
    )
    node.refresh_from_db()
    assert (node.status, node.lost_at) == (Node.Status.CORDONED, None)
    assert pod.pk in pods_winding_down().values_list("pk", flat=True)  # until it is stopped


def test_a_cordoned_nodes_pods_keep_running(personas):
    job = submit(personas, pods=1, gpu=1)
    pod = job.pods.get()
    node_set_status(nodes=[pod.node], status=Node.Status.CORDONED)
    other = submit(personas, ws="ws_b", user="charlie", quota="team-b", pods=1, gpu=1)
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    pod.refresh_from_db()
    job.refresh_from_db()
    assert (job.status, pod.status, job.attempt) == (JobStatus.RUNNING, PodStatus.RUNNING, 0)
    assert other.pods.get().node_id != pod.node_id  # no new pods there


# --- the console -----------------------------------------------------------------------------


def test_a_cordoned_node_that_goes_silent_loses_its_pods_and_stays_cordoned(personas, sent):
    job = submit(personas, pods=1)
    pod = job.pods.get()
    node = pod.node
    node_set_status(nodes=[node], status=Node.Status.CORDONED)
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(last_heartbeat=now - timedelta(seconds=60))
    assert services.nodes_mark_lost(now=now - timedelta(seconds=1)) == []  # starts watching
    assert services.nodes_mark_lost(now=now) == [node.name]
    assert services.nodes_mark_lost(now=now + timedelta(seconds=1)) == []  # nothing left
    pod.refresh_from_db()
    assert (pod.status, pod.reason) == (PodStatus.FAILED, "NodeLost")
    node.refresh_from_db()
    assert node.status == Node.Status.CORDONED
    services.agent_heartbeat(
        worker="agent@back",
        hostname="h",
        address="10.0.0.9",
        nodes=[node.name],
        public=False,
        sandbox="strict",
        now=now + timedelta(seconds=2),
    )
    node.refresh_from_db()
    assert node.status == Node.Status.CORDONED  # its agent's return does not undo the cordon


def test_the_job_page_shows_a_platform_interruption_as_not_counted(personas, alice_client, sent):
    """A node lost (not counted), then a pod failure (AIMaster's first restart): each row
    numbers its attempt, and only the counted one takes a place in the budget."""
    job = submit(personas, pods=1, aimaster=True, max_restarts=3)
    [pod] = run_all(job)
    now = timezone.now()
    lose(pod.node, silent_since=now - timedelta(seconds=60), now=now)
    job.refresh_from_db()
    [again] = run_all(job)
    services.pod_report_exit(pod_id=again.pod_id, exit_code=1, now=timezone.now())
    job.refresh_from_db()
    assert (job.attempt, job.restart_times) == (2, 1)
    assert [(r.number, r.cause, r.counted) for r in job.restarts.all()] == [
        (1, "NodeLost", False),
        (2, "PodFailed", True),
    ]
    content = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    restarts = content[content.index('id="restarts"') : content.index('id="checkpoints"')]
    assert restarts.count('class="restart-platform"') == 1
    assert ">not counted</span>" in restarts and '<td class="num">1/3</td>' in restarts
    assert "without spending AIMaster's budget" in restarts
    assert 'AIMaster restarts</dt><dd id="restart-count"><strong>1/3' in content
    first = content[content.index('id="attempt-0"') :]
    assert "by a platform interruption, not counted," in first[: first.index("</h3>")]
    second = content[content.index('id="attempt-1"') :]
    assert "by restart 1/3" in second[: second.index("</h3>")]


def test_a_pods_exit_reported_after_a_later_heartbeat_takes_back_the_minutes_billed_past_it(
    personas, replay, sent
):
    """A heartbeat says the agent is alive, not that it has looked at each pod: an agent
    that restarts (or is slow to report) answers before it reports an exit that happened
    earlier. Billing meanwhile bills up to the heartbeat; when the exit arrives, the minutes
    after the pod's end are taken back, lines and days alike, and the job says so."""
    from apps.billing.models import BillDay
    from apps.core.services import heartbeat_record

    replay([(market.NOW, market.G7, "0.30")])
    job = market.submit(personas, source="public", name="late-exit")
    market.step(market.at(0))
    pod = job.pods.get()
    PodProcess.objects.filter(pod=pod).update(state="running", agent="agent@slow")
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.RUNNING, started_at=market.at(0, 10))
    base = int(market.NOW.timestamp()) // 60

    def billed() -> list[int]:
        minutes = BillLine.objects.filter(pod=pod).order_by("minute")
        return [m - base for m in minutes.values_list("minute", flat=True)]

    heartbeat_record(name="agent:agent@slow", now=market.at(1, 5))  # before it saw the exit
    billing_accrue(now=market.at(1, 10))
    assert billed() == [0, 1]
    services.pod_report_exit(pod_id=pod.pod_id, exit_code=0, now=market.at(0, 58))
    billing_accrue(now=market.at(1, 20))
    assert billed() == [0]  # it ran in minute 0 only
    days = BillDay.objects.filter(pod=pod)
    lines = BillLine.objects.filter(pod=pod)
    assert [(d.minutes, d.amount, d.first_minute - base, d.last_minute - base) for d in days] == [
        (1, lines.get().amount, 0, 0)
    ]
    assert pod.meter.billed_until == base + 1
    assert job.events.filter(kind="BillCorrected", pod=pod).count() == 1
    billing_accrue(now=market.at(2, 0))  # nothing more: the meter is closed
    assert billed() == [0]
    assert job.events.filter(kind="BillCorrected").count() == 1


def _beat(worker: str, *, at, watched=None, rounds: bool = True) -> None:
    """The agent `worker`, running pods of the public pool, answers at `at`: the start of
    its last complete watch round is `watched` (None: none yet)."""
    services.agent_heartbeat(
        worker=worker,
        hostname="h",
        address="10.0.0.9",
        nodes=[],
        public=True,
        sandbox="strict",
        now=at,
        reports_rounds=rounds,
        pods_watched_at=watched,
    )


def _running_pod(personas, *, agent: str, started):
    """A pay-as-you-go pod of the public pool that `agent` runs since `started`."""
    job = market.submit(personas, source="public", name=agent.split("@")[1])
    market.step(market.at(0))
    pod = job.pods.get()
    PodProcess.objects.filter(pod=pod).update(state="running", agent=agent)
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.RUNNING, started_at=started)
    return job, pod


def _minutes(pod: Pod) -> list[int]:
    base = int(market.NOW.timestamp()) // 60
    lines = BillLine.objects.filter(pod=pod).order_by("minute")
    return [m - base for m in lines.values_list("minute", flat=True)]


def test_no_minute_past_a_pods_end_is_billed_when_its_exit_comes_after_a_later_heartbeat(
    personas, replay, sent
):
    """The pod ends late in minute 0 (0:58); its agent answers at 1:05, but its last
    complete watch round began at 0:57, before the exit (the exit still being written, the
    watch loop held up). Billing bills up to that round, not the heartbeat: minute 1 is
    never billed, so nothing is taken back once the exit arrives."""
    replay([(market.NOW, market.G7, "0.30")])
    job, pod = _running_pod(personas, agent="agent@watching", started=market.at(0, 10))
    _beat("agent@watching", at=market.at(0, 50), watched=market.at(0, 49))
    billing_accrue(now=market.at(0, 55))
    assert _minutes(pod) == [0]
    _beat("agent@watching", at=market.at(1, 5), watched=market.at(0, 57))
    billing_accrue(now=market.at(1, 10))
    assert _minutes(pod) == [0]  # not minute 1: no round has looked at the pod since 0:57
    services.pod_report_exit(pod_id=pod.pod_id, exit_code=0, now=market.at(0, 58))
    _beat("agent@watching", at=market.at(1, 20), watched=market.at(1, 19))
    billing_accrue(now=market.at(1, 30))
    assert _minutes(pod) == [0]
    assert pod.meter.billed_until == int(market.NOW.timestamp()) // 60 + 1
    assert not job.events.filter(kind="BillCorrected").exists()


def test_a_restarted_agent_bills_nothing_new_until_it_has_looked_at_its_pods(
    personas, replay, sent
):
    """The agent's last round before it went down began at 1:59; its pod ended at 2:30,
    while it was down. The new agent answers at 3:10, before its first round: its pod is
    billed no further than 1:59, then, the exit reported with its real time, up to 2:30.
    Minute 3, that of the heartbeat, is never billed; nor is anything taken back."""
    replay([(market.NOW, market.G7, "0.30")])
    job, pod = _running_pod(personas, agent="agent@restarts", started=market.at(0, 10))
    _beat("agent@restarts", at=market.at(2, 0), watched=market.at(1, 59))
    billing_accrue(now=market.at(2, 5))
    assert _minutes(pod) == [0, 1]
    _beat("agent@restarts", at=market.at(3, 10))  # started again: no round yet
    billing_accrue(now=market.at(3, 15))
    assert _minutes(pod) == [0, 1]
    assert pod.process.agent == "agent@restarts"
    services.pod_report_exit(pod_id=pod.pod_id, exit_code=0, now=market.at(2, 30))
    _beat("agent@restarts", at=market.at(3, 20), watched=market.at(3, 11))
    billing_accrue(now=market.at(3, 30))
    assert _minutes(pod) == [0, 1, 2]
    assert not job.events.filter(kind="BillCorrected").exists()


def test_an_agent_that_does_not_report_its_rounds_is_bounded_by_its_heartbeat(
    personas, replay, sent
):
    """An agent from before watch rounds were reported: its heartbeat alone bounds (and
    `BillCorrected` takes back what it vouched for past a pod's end), even after a newer
    agent of that name had reported rounds."""
    replay([(market.NOW, market.G7, "0.30")])
    job, pod = _running_pod(personas, agent="agent@old", started=market.at(0, 10))
    _beat("agent@old", at=market.at(1, 0), watched=market.at(0, 30))
    _beat("agent@old", at=market.at(2, 5), rounds=False)
    billing_accrue(now=market.at(2, 10))
    assert _minutes(pod) == [0, 1, 2]


def test_an_exit_reported_while_billing_reads_is_not_billed_past(
    personas, replay, sent, monkeypatch
):
    """Billing reads the meters, then how far each agent vouches: an exit reported between
    the two, and a round that vouches past it, leave the pod to the next run, which bills
    it up to its end (PostgreSQL reads each statement afresh)."""
    from apps.billing import services as billing

    replay([(market.NOW, market.G7, "0.30")])
    job, pod = _running_pod(personas, agent="agent@quick", started=market.at(0, 10))
    _beat("agent@quick", at=market.at(0, 50), watched=market.at(0, 49))
    read = billing.pods_reported_until

    def meanwhile(*, pod_ids):
        services.pod_report_exit(pod_id=pod.pod_id, exit_code=0, now=market.at(0, 58))
        _beat("agent@quick", at=market.at(1, 5), watched=market.at(1, 1))
        return read(pod_ids=pod_ids)

    monkeypatch.setattr(billing, "pods_reported_until", meanwhile)
    billing_accrue(now=market.at(1, 10))
    assert _minutes(pod) == []
    monkeypatch.setattr(billing, "pods_reported_until", read)
    billing_accrue(now=market.at(1, 20))
    assert _minutes(pod) == [0]
    assert not job.events.filter(kind="BillCorrected").exists()
