"""The scheduling core, one rule per test (design.md §4). Pure: no database, fixed clock."""

from __future__ import annotations

import dataclasses
import gc
import importlib
import random
import subprocess
import sys
from unittest import mock

import pytest

from apps.scheduler.engine import (
    ZERO,
    Config,
    Node,
    PendingJob,
    PodRequest,
    Quota,
    Resources,
    RunningJob,
    RunningPod,
    SchedulerError,
    Snapshot,
    plan,
    quota_report,
    quota_usage,
    reclaim,
)
from apps.scheduler.engine.model import vec
from apps.scheduler.engine.reclaim import Borrower, Reclaimer
from apps.scheduler.engine.room import Pool
from apps.scheduler.engine.vectors import add

plan_module = importlib.import_module("apps.scheduler.engine.plan")

NOW = 1_700_000_000.0
CPU_PER_POD = 4_000
MEM_PER_POD = 16 * 1024


def gpus(n: int, cpu: int = CPU_PER_POD, memory: int = MEM_PER_POD) -> Resources:
    return Resources(cpu=cpu, memory=memory, gpu=n)


def machines(*ids: int, pool: int = 1, gpu: int = 8, schedulable: bool = True) -> list[Node]:
    capacity = Resources(cpu=96_000, memory=768 * 1024, gpu=gpu)
    return [Node(id=i, pool_id=pool, capacity=capacity, schedulable=schedulable) for i in ids]


def quota(
    qid: int,
    name: str,
    min_gpu: int,
    *,
    parent: int | None = None,
    pool: int = 1,
    strategy: str = "StrictFIFO",
) -> Quota:
    return Quota(
        id=qid,
        name=name,
        parent_id=parent,
        pool_id=pool,
        min=Resources(cpu=10**6, memory=10**8, gpu=min_gpu),
        strategy=strategy,
    )


def queued(
    jid: int,
    quota_id: int,
    *sizes: int,
    idle: str = "off",
    priority: int = 1,
    submitted: float | None = None,
    not_before: float | None = None,
    name: str | None = None,
) -> PendingJob:
    return PendingJob(
        job_id=jid,
        name=name or f"job-{jid}",
        quota_id=quota_id,
        idle_mode=idle,
        priority=priority,
        submitted_at=NOW - 1000 + jid if submitted is None else submitted,
        pods=tuple(PodRequest(key=f"worker-{i}", resources=gpus(g)) for i, g in enumerate(sizes)),
        not_before=not_before,
    )


def running(
    jid: int,
    quota_id: int | None,
    *on: tuple[int, int],
    idle: str = "only_idle",
    in_quota: bool = False,
    started: float = NOW - 3600,
    checkpoint: float | None = None,
    priority: int = 1,
    stopping: bool = False,
    name: str | None = None,
) -> RunningJob:
    """A running job; `on` lists (node id, GPUs) for each pod."""
    pods = tuple(
        RunningPod(pod_id=jid * 100 + i, node_id=node, resources=gpus(g), in_quota=in_quota)
        for i, (node, g) in enumerate(on)
    )
    return RunningJob(
        job_id=jid,
        name=name or f"job-{jid}",
        quota_id=quota_id,
        idle_mode=idle,
        priority=priority,
        started_at=started,
        last_checkpoint_at=checkpoint,
        pods=pods,
        stopping=stopping,
    )


def snapshot(nodes, quotas, run=(), pending=()) -> Snapshot:
    return Snapshot(
        nodes=tuple(nodes), quotas=tuple(quotas), running=tuple(run), pending=tuple(pending)
    )


def admitted(result) -> dict[int, dict[str, int]]:
    return {a.job_id: {p.key: p.node_id for p in a.placements} for a in result.admissions}


def waiting(result, job_id: int):
    return next(w for w in result.waiting if w.job_id == job_id)


def victims(result) -> list[int]:
    return [p.job_id for p in result.preemptions]


TEAM_A = quota(1, "team-a", 8)
TEAM_B = quota(2, "team-b", 8)


# --- resources ---------------------------------------------------------------------------


def test_it_adds_subtracts_and_compares_resources():
    a, b = Resources(cpu=1000, memory=2048, gpu=1), Resources(cpu=500, memory=1024, gpu=1)
    assert a + b == Resources(cpu=1500, memory=3072, gpu=2)
    assert a - b == Resources(cpu=500, memory=1024, gpu=0)
    assert b.fits_in(a) and not a.fits_in(b)
    assert ZERO.is_zero and ZERO == Resources() and not a.is_zero


# --- 1. pools and node room ------------------------------------------------------------


def test_a_pool_knows_the_least_capacity_of_its_nodes_in_each_resource():
    """What fits `smallest` fits every node: victim choice then skips its check of each
    node's capacity."""
    nodes = [
        Node(1, 1, Resources(gpu=8, cpu=32000, memory=65536)),
        Node(2, 1, Resources(gpu=4, cpu=64000, memory=32768)),
        Node(3, 1, Resources(gpu=8, cpu=96000, memory=262144)),
    ]
    assert Pool(1, nodes).smallest == (4, 32000, 32768)
    assert Pool(1, nodes[2:]).smallest == (8, 96000, 262144)
    assert Pool(2, []).smallest == (0, 0, 0)


def test_it_places_only_on_schedulable_nodes_of_the_quota_pool():
    nodes = machines(1, schedulable=False) + machines(2) + machines(3, pool=2)
    result = plan(
        snapshot(nodes, [quota(1, "team-a", 16)], pending=[queued(1, 1, 8), queued(2, 1, 8)]),
        now=NOW,
    )
    assert admitted(result) == {1: {"worker-0": 2}}
    assert waiting(result, 2).reason.startswith("no node has room")


def test_it_counts_running_pods_against_node_room():
    run = [
        running(9, 2, (1, 6), idle="off", in_quota=True),
        running(10, 2, (2, 4), idle="off", in_quota=True),
    ]
    result = plan(
        snapshot(machines(1, 2), [TEAM_A, quota(2, "team-b", 16)], run, [queued(1, 1, 4)]), now=NOW
    )
    assert admitted(result) == {1: {"worker-0": 2}}


def test_it_counts_admissions_earlier_in_the_same_plan():
    result = plan(
        snapshot(
            machines(1),
            [quota(1, "team-a", 16, strategy="BestEffortFIFO")],
            pending=[queued(1, 1, 6), queued(2, 1, 6)],
        ),
        now=NOW,
    )
    assert list(admitted(result)) == [1]
    assert waiting(result, 2).reason.startswith("no node has room")


@pytest.mark.parametrize("idle", ["off", "acceptable", "only_idle"])
def test_a_job_read_without_pods_is_never_admitted(idle):
    # Nothing to place "fits" anywhere: admitted, it would wait in EnvPreparing for pods
    # that never come (the live loader once read a job before its roles).
    result = plan(
        snapshot(
            machines(1),
            [quota(1, "team-a", 16)],
            pending=[queued(1, 1, idle=idle), queued(2, 1, 1, idle=idle)],
        ),
        now=NOW,
    )
    assert list(admitted(result)) == [2]
    assert waiting(result, 1).reason == "it has no pods to place"


# --- 2. regular jobs run on their quota's free min -----------------------------------------


def test_it_runs_every_pod_of_a_regular_job_in_quota():
    result = plan(
        snapshot(machines(1, 2), [quota(1, "team-a", 16)], pending=[queued(1, 1, 8, 8)]), now=NOW
    )
    assert [p.in_quota for p in result.admissions[0].placements] == [True, True]


def test_it_keeps_a_regular_job_waiting_when_its_quota_is_short():
    run = [running(9, 1, (1, 6), idle="off", in_quota=True)]
    result = plan(snapshot(machines(1, 2), [TEAM_A], run, [queued(1, 1, 4)]), now=NOW)
    assert result.admissions == ()
    assert waiting(result, 1).reason == "quota team-a: needs 4 GPU, 2 free"
    assert waiting(result, 1).code == "QuotaInsufficient"


def test_it_checks_the_free_min_of_every_ancestor():
    quotas = [
        quota(1, "team-a", 16),
        quota(2, "team-a1", 16, parent=1),
        quota(3, "team-a2", 16, parent=1),
    ]
    run = [running(9, 3, (1, 8), (2, 4), idle="off", in_quota=True)]
    result = plan(snapshot(machines(1, 2, 3, 4), quotas, run, [queued(1, 2, 8)]), now=NOW)
    assert waiting(result, 1).reason == "quota team-a (ancestor of team-a1): needs 8 GPU, 4 free"


# --- 3. idle resources -------------------------------------------------------------------


def test_it_runs_acceptable_pods_in_quota_first_and_the_rest_on_idle_room():
    result = plan(
        snapshot(machines(1, 2), [TEAM_A], pending=[queued(1, 1, 4, 4, 4, idle="acceptable")]),
        now=NOW,
    )
    assert [p.in_quota for p in result.admissions[0].placements] == [True, True, False]


def test_it_never_counts_only_idle_pods_against_a_quota():
    pending = [queued(1, 1, 8, idle="only_idle"), queued(2, 1, 8)]
    result = plan(snapshot(machines(1, 2), [TEAM_A], pending=pending), now=NOW)
    flags = {a.job_id: [p.in_quota for p in a.placements] for a in result.admissions}
    assert flags == {1: [False], 2: [True]}


# --- 4. gang placement, best fit ---------------------------------------------------------


def test_it_starts_a_gang_whole_or_not_at_all():
    quotas = [quota(1, "team-a", 32, strategy="BestEffortFIFO")]
    result = plan(
        snapshot(machines(1, 2), quotas, pending=[queued(1, 1, 8, 8, 8), queued(2, 1, 8)]), now=NOW
    )
    assert admitted(result) == {2: {"worker-0": 1}}
    assert waiting(result, 1).reason.startswith("no node has room: needs 3×8 GPU")


def test_a_plan_holds_the_garbage_collector_off_and_gives_it_back():
    seen = []
    real = plan_module._Planner.run

    def run(self):
        seen.append(gc.isenabled())
        return real(self)

    shot = snapshot(machines(1, 2), [TEAM_A], pending=[queued(1, 1, 8)])
    with mock.patch.object(plan_module._Planner, "run", run):
        assert gc.isenabled()
        plan(shot, now=NOW)
        assert gc.isenabled()
        gc.disable()  # a caller that holds it off itself keeps it off
        try:
            plan(shot, now=NOW)
            assert not gc.isenabled()
        finally:
            gc.enable()
        with mock.patch.object(plan_module._Pending, "__init__", side_effect=RuntimeError):
            with pytest.raises(RuntimeError):
                plan(shot, now=NOW)
        assert gc.isenabled()  # given back when a plan fails too
    assert seen == [False, False, False]


def test_it_packs_a_pod_onto_the_fullest_node_that_holds_it():
    run = [running(9, 2, (2, 4), idle="off", in_quota=True)]
    result = plan(
        snapshot(machines(1, 2, 3), [TEAM_A, quota(2, "team-b", 8)], run, [queued(1, 1, 4)]),
        now=NOW,
    )
    assert admitted(result) == {1: {"worker-0": 2}}


def test_it_compares_gpus_before_cpu_in_best_fit():
    nodes = [
        Node(1, 1, Resources(cpu=64_000, memory=10**6, gpu=2)),
        Node(2, 1, Resources(cpu=CPU_PER_POD, memory=10**6, gpu=4)),
    ]
    result = plan(snapshot(nodes, [TEAM_A], pending=[queued(1, 1, 2)]), now=NOW)
    assert admitted(result) == {1: {"worker-0": 1}}


def test_it_breaks_best_fit_ties_by_node_id():
    result = plan(snapshot(machines(3, 1, 2), [TEAM_A], pending=[queued(1, 1, 8)]), now=NOW)
    assert admitted(result) == {1: {"worker-0": 1}}


def test_it_finds_a_packing_that_best_fit_misses():
    # Best fit puts 5+4 on one node and then has 1 GPU left on each for the last 2-GPU pod;
    # {5, 3, 2} and {4, 4, 2} fit.
    sizes = (5, 4, 4, 3, 2, 2)
    result = plan(
        snapshot(machines(1, 2, gpu=10), [quota(1, "team-a", 20)], pending=[queued(1, 1, *sizes)]),
        now=NOW,
    )
    placed = admitted(result)[1]
    for node in (1, 2):
        assert sum(sizes[int(k.split("-")[1])] for k, n in placed.items() if n == node) <= 10


# --- 5. reclaim ----------------------------------------------------------------------------


def test_it_preempts_a_borrower_to_give_an_owner_its_quota():
    run = [running(9, 2, (1, 8), name="bob-sweep")]
    result = plan(
        snapshot(machines(1), [TEAM_A, TEAM_B], run, [queued(1, 1, 8, name="alice-train")]), now=NOW
    )
    (preemption,) = result.preemptions
    assert (preemption.job_id, preemption.by_job_id, preemption.by_quota_id) == (9, 1, 1)
    assert "alice-train" in preemption.reason and "team-a" in preemption.reason
    # the work lost is the restart's own figure, which a later checkpoint may revise
    assert "GPU-seconds" not in preemption.reason and preemption.lost_gpu_seconds > 0
    assert result.admissions == ()
    assert waiting(result, 1).reason == "borrowers being reclaimed: 1 job"
    assert waiting(result, 1).code == "WaitingForReclaim"


def test_it_measures_lost_work_from_the_last_checkpoint():
    run = [running(9, 2, (1, 4), (1, 4), started=NOW - 1000, checkpoint=NOW - 100)]
    result = plan(snapshot(machines(1), [TEAM_A, TEAM_B], run, [queued(1, 1, 8)]), now=NOW)
    assert result.preemptions[0].lost_gpu_seconds == 800.0


def test_it_measures_lost_work_from_the_attempt_start_after_an_old_checkpoint():
    """Job 9 was requeued and resumed from its checkpoint of 600 s ago 100 s ago: it loses
    100 s of 8 GPUs, less than job 10 (150 s since its checkpoint), so it goes first."""
    run = [
        running(9, 2, (1, 8), started=NOW - 100, checkpoint=NOW - 600),
        running(10, 2, (2, 8), started=NOW - 3600, checkpoint=NOW - 150),
    ]
    result = plan(snapshot(machines(1, 2), [TEAM_A, TEAM_B], run, [queued(1, 1, 8)]), now=NOW)
    assert victims(result) == [9]
    assert result.preemptions[0].lost_gpu_seconds == 8 * 100


def test_it_preempts_the_borrower_that_loses_least_work():
    run = [
        running(9, 2, (1, 8), started=NOW - 3600),
        running(10, 2, (2, 8), started=NOW - 7200, checkpoint=NOW - 60),
    ]
    result = plan(snapshot(machines(1, 2), [TEAM_A, TEAM_B], run, [queued(1, 1, 8)]), now=NOW)
    assert victims(result) == [10]


def test_it_preempts_the_lower_priority_borrower_when_lost_work_ties():
    run = [running(9, 2, (1, 8), priority=2), running(10, 2, (2, 8), priority=5)]
    result = plan(snapshot(machines(1, 2), [TEAM_A, TEAM_B], run, [queued(1, 1, 8)]), now=NOW)
    assert victims(result) == [9]


def test_it_preempts_the_newest_borrower_when_lost_work_and_priority_tie():
    run = [
        running(9, 2, (1, 8), started=NOW - 1000, checkpoint=NOW - 100),
        running(10, 2, (2, 8), started=NOW - 500, checkpoint=NOW - 100),
    ]
    result = plan(snapshot(machines(1, 2), [TEAM_A, TEAM_B], run, [queued(1, 1, 8)]), now=NOW)
    assert victims(result) == [10]


def test_it_never_preempts_regular_or_wholly_in_quota_jobs():
    run = [
        running(9, 2, (1, 8), idle="off", in_quota=True),
        running(10, 2, (2, 8), idle="acceptable", in_quota=True),
    ]
    quotas = [TEAM_A, quota(2, "team-b", 16)]
    result = plan(snapshot(machines(1, 2), quotas, run, [queued(1, 1, 8)]), now=NOW)
    assert result.preemptions == ()
    assert waiting(result, 1).reason.startswith("no node has room")


def test_it_only_reclaims_from_borrowers_in_the_owners_pool():
    nodes = machines(1) + machines(2, pool=2)
    run = [running(9, 2, (1, 8), idle="off", in_quota=True), running(10, 3, (2, 8))]
    quotas = [TEAM_A, TEAM_B, quota(3, "team-c", 0, pool=2)]
    result = plan(snapshot(nodes, quotas, run, [queued(1, 1, 8)]), now=NOW)
    assert result.preemptions == ()


def test_it_preempts_no_more_borrowers_than_needed():
    # The cheapest borrower sits beside a regular job: preempting it would free nothing
    # the owner can use, so only the borrower on node 2 goes.
    run = [
        running(8, 2, (1, 6), idle="off", in_quota=True),
        running(9, 2, (1, 2), started=NOW - 100),
        running(10, 2, (2, 8), started=NOW - 3600),
        running(11, 2, (3, 8), started=NOW - 7200),
    ]
    result = plan(snapshot(machines(1, 2, 3), [TEAM_A, TEAM_B], run, [queued(1, 1, 8)]), now=NOW)
    assert victims(result) == [10]


def test_it_drops_a_victim_that_later_victims_make_unneeded():
    # Greedy takes 9 and 10 (node 1) before 11 (node 2); with 11 gone, one of node 1's
    # borrowers is enough for the 4-GPU pod, so the costlier of the two is spared.
    run = [
        running(9, 2, (1, 4), started=NOW - 100),
        running(10, 2, (1, 4), started=NOW - 200),
        running(11, 2, (2, 8), started=NOW - 3600),
    ]
    result = plan(
        snapshot(machines(1, 2), [quota(1, "team-a", 16), TEAM_B], run, [queued(1, 1, 8, 4)]),
        now=NOW,
    )
    assert sorted(victims(result)) == [9, 11]


def test_it_holds_the_quota_of_a_reclaiming_owner():
    run = [running(9, 2, (1, 8)), running(10, 2, (2, 8)), running(11, 2, (3, 8))]
    quotas = [quota(1, "team-a", 16, strategy="BestEffortFIFO"), TEAM_B]
    result = plan(
        snapshot(machines(1, 2, 3), quotas, run, [queued(1, 1, 8, 8), queued(2, 1, 8)]), now=NOW
    )
    assert {p.by_job_id for p in result.preemptions} == {1}
    assert waiting(result, 2).reason == "quota team-a: needs 8 GPU, 0 free"


def test_it_clears_the_cheapest_node_when_cheap_borrowers_are_scattered():
    # Each node holds six cheap 1-GPU borrowers and two dear ones. Taking borrowers
    # cheapest first would preempt all 24 cheap ones and still free no node; the owner
    # instead takes the node whose eight borrowers lose least in total: node 3.
    dear = {1: 10_000, 2: 9_000, 3: 5_000, 4: 8_000}
    run = []
    for node, lost in dear.items():
        for i in range(8):
            age = 100 + node * 10 + i if i < 6 else lost
            run.append(running(node * 10 + i, 2, (node, 1), started=NOW - age))
    result = plan(snapshot(machines(1, 2, 3, 4), [TEAM_A, TEAM_B], run, [queued(1, 1, 8)]), now=NOW)
    assert sorted(victims(result)) == list(range(30, 38))


def test_it_gives_each_reclaiming_owner_its_own_victims():
    run = [
        running(9, 2, (1, 8), started=NOW - 100),
        running(10, 2, (2, 8), started=NOW - 200),
        running(11, 2, (3, 8), started=NOW - 300),
    ]
    quotas = [quota(1, "team-a", 16, strategy="BestEffortFIFO"), TEAM_B]
    result = plan(
        snapshot(machines(1, 2, 3), quotas, run, [queued(1, 1, 8), queued(2, 1, 8)]), now=NOW
    )
    assert [(p.job_id, p.by_job_id) for p in result.preemptions] == [(9, 1), (10, 2)]


def test_it_spares_borrowers_younger_than_the_minimum_run_time():
    run = [running(9, 2, (1, 8), started=NOW - 10)]
    result = plan(
        snapshot(machines(1), [TEAM_A, TEAM_B], run, [queued(1, 1, 8)]),
        now=NOW,
        config=Config(min_run_seconds=60),
    )
    assert result.preemptions == ()
    assert "minimum 60 s" in waiting(result, 1).reason


def test_it_holds_reclaimed_room_from_the_borrowers_behind():
    run = [running(9, 2, (1, 8))]
    pending = [queued(1, 1, 8, 8), queued(2, 2, 8, idle="only_idle")]
    result = plan(snapshot(machines(1, 2), [quota(1, "team-a", 16), TEAM_B], run, pending), now=NOW)
    assert victims(result) == [9]
    assert result.admissions == ()
    assert {p.node_id for p in waiting(result, 1).reserved} == {1, 2}
    assert waiting(result, 2).reason.startswith("no idle room")


def test_it_does_not_preempt_again_while_the_victims_stop():
    run = [running(9, 2, (1, 8), stopping=True), running(10, 2, (2, 8))]
    result = plan(snapshot(machines(1, 2), [TEAM_A, TEAM_B], run, [queued(1, 1, 8)]), now=NOW)
    assert result.preemptions == ()
    assert waiting(result, 1).reason == "room being freed by 1 job"
    assert waiting(result, 1).code == "WaitingForReclaim"


def test_it_admits_the_owner_once_the_borrowers_are_gone():
    pending = [queued(1, 1, 8)]
    first = plan(snapshot(machines(1), [TEAM_A, TEAM_B], [running(9, 2, (1, 8))], pending), now=NOW)
    assert victims(first) == [9]
    second = plan(snapshot(machines(1), [TEAM_A, TEAM_B], [], pending), now=NOW + 30)
    assert admitted(second) == {1: {"worker-0": 1}}


def test_a_lowered_min_lends_what_its_quota_runs_above_it_to_an_owner_short_of_its_own():
    """team-a's min went from 8 to 4 GPUs under its two 4-GPU jobs, team-b's from 8 to 12:
    the newer team-a job is on loan, and team-b's owner reclaims it as any borrower."""
    quotas = [quota(1, "team-a", 4), quota(2, "team-b", 12)]
    run = [
        running(9, 1, (1, 4), idle="off", in_quota=True, started=NOW - 7200),
        running(10, 1, (1, 4), idle="off", in_quota=True, name="alice-big"),
        running(11, 2, (2, 8), idle="off", in_quota=True),
    ]
    pending = [queued(1, 2, 4, name="bob-next")]
    result = plan(snapshot(machines(1, 2), quotas, run, pending), now=NOW)
    assert result.loans == (1000,)
    (preemption,) = result.preemptions
    assert (preemption.job_id, preemption.by_job_id, preemption.by_quota_id) == (10, 1, 2)
    assert "bob-next" in preemption.reason and "team-b" in preemption.reason
    assert waiting(result, 1).reason == "borrowers being reclaimed: 1 job"
    assert waiting(result, 1).code == "WaitingForReclaim"


def test_a_loan_recorded_by_an_earlier_plan_stays_reclaimable():
    """The live tick marks a loan's pods Not in Quota; a later owner still reclaims them."""
    quotas = [quota(1, "team-a", 4), quota(2, "team-b", 12)]
    run = [
        running(9, 1, (1, 4), idle="off", in_quota=True, started=NOW - 7200),
        running(10, 1, (1, 4), idle="off", in_quota=False, name="alice-big"),
        running(11, 2, (2, 8), idle="off", in_quota=True),
    ]
    result = plan(snapshot(machines(1, 2), quotas, run, [queued(1, 2, 4)]), now=NOW)
    assert result.loans == ()  # recorded already
    (preemption,) = result.preemptions
    assert (preemption.job_id, preemption.by_job_id) == (10, 1)


def test_a_loan_its_raised_min_holds_again_is_back_in_quota():
    """team-a's min went back from 4 to 8 GPUs: its job on loan runs In Quota again, and
    team-b's owner, short of its min, has nothing to reclaim there."""
    quotas = [quota(1, "team-a", 8), quota(2, "team-b", 12)]
    run = [
        running(9, 1, (1, 4), idle="off", in_quota=True, started=NOW - 7200),
        running(10, 1, (1, 4), idle="off", in_quota=False, name="alice-big"),
        running(11, 2, (2, 8), idle="off", in_quota=True),
    ]
    result = plan(snapshot(machines(1, 2), quotas, run, [queued(1, 2, 4)]), now=NOW)
    assert result.returns == (1000,)
    assert result.preemptions == ()
    half = [quota(1, "team-a", 6), quota(2, "team-b", 12)]  # holds 2 of its 4 GPUs: not all
    result = plan(snapshot(machines(1, 2), half, run, [queued(1, 2, 4)]), now=NOW)
    assert result.returns == ()
    assert [p.job_id for p in result.preemptions] == [10]


def test_a_lowered_min_keeps_the_victim_rules_of_any_borrower():
    quotas = [quota(1, "team-a", 4), quota(2, "team-b", 12)]
    run = [
        running(9, 1, (1, 4), idle="off", in_quota=True, started=NOW - 7200),
        running(10, 1, (1, 4), idle="off", in_quota=True, started=NOW - 10),
        running(11, 2, (2, 8), idle="off", in_quota=True),
    ]
    result = plan(snapshot(machines(1, 2), quotas, run, [queued(1, 2, 4)]), now=NOW)
    assert result.preemptions == ()
    assert waiting(result, 1).reason == (
        "borrowers to reclaim have run less than the minimum 60 s: 1 job"
    )


def test_a_lowered_min_preempts_nothing_while_no_owner_is_short():
    """On loan is not stopped: team-a's pods above its new min run on, and team-a's own
    next job waits for its quota, not for them."""
    quotas = [quota(1, "team-a", 4), quota(2, "team-b", 12)]
    run = [running(10, 1, (1, 1), (1, 1), (1, 1), (1, 1), (1, 4), idle="off", in_quota=True)]
    result = plan(snapshot(machines(1, 2), quotas, run, [queued(1, 1, 1)]), now=NOW)
    assert result.loans == (1004,)
    assert result.preemptions == ()
    assert waiting(result, 1).reason == "quota team-a: needs 1 GPU, 0 free"
    assert plan(snapshot(machines(1, 2), quotas, run), now=NOW).preemptions == ()


def test_a_lowered_ancestor_min_lends_the_newest_use_of_its_children():
    root = quota(1, "root", 8)
    children = [quota(2, "team-a", 8, parent=1), quota(3, "team-b", 8, parent=1)]
    run = [
        running(9, 2, (1, 8), idle="off", in_quota=True, started=NOW - 7200),
        running(10, 3, (2, 4), idle="acceptable", in_quota=True),
    ]
    result = plan(snapshot(machines(1, 2), [root, *children], run, [queued(1, 2, 1)]), now=NOW)
    assert result.loans == (1000,)
    assert waiting(result, 1).reason == "quota team-a: needs 1 GPU, 0 free"


# --- 6. queue order ------------------------------------------------------------------------


def test_it_orders_the_queue_by_priority_then_submission_time():
    pending = [
        queued(1, 1, 8, priority=1, submitted=NOW - 300),
        queued(2, 1, 8, priority=5, submitted=NOW - 100),
        queued(3, 1, 8, priority=5, submitted=NOW - 200),
    ]
    quotas = [quota(1, "team-a", 8, strategy="BestEffortFIFO")]
    result = plan(snapshot(machines(1, 2), quotas, pending=pending), now=NOW)
    assert list(admitted(result)) == [3]
    assert [(w.job_id, w.position) for w in result.waiting] == [(2, 1), (1, 2)]


def test_it_blocks_the_queue_behind_a_strict_fifo_head():
    pending = [queued(1, 1, 8, 8, name="big"), queued(2, 1, 8)]
    result = plan(snapshot(machines(1), [quota(1, "team-a", 16)], pending=pending), now=NOW)
    assert result.admissions == ()
    assert waiting(result, 2).reason == "blocked behind big (StrictFIFO)"
    assert waiting(result, 2).code == "BlockedByQueueHead"
    assert waiting(result, 1).code == "ResourceInsufficient"  # no node holds 8 + 8 GPUs


def test_it_skips_a_head_that_cannot_start_under_best_effort_fifo():
    pending = [queued(1, 1, 8, 8), queued(2, 1, 8)]
    quotas = [quota(1, "team-a", 16, strategy="BestEffortFIFO")]
    result = plan(snapshot(machines(1), quotas, pending=pending), now=NOW)
    assert list(admitted(result)) == [2]


def test_it_waits_out_a_requeue_backoff_without_blocking_the_queue():
    pending = [queued(1, 1, 8, not_before=NOW + 30), queued(2, 1, 8)]
    result = plan(snapshot(machines(1), [TEAM_A], pending=pending), now=NOW)
    assert list(admitted(result)) == [2]
    assert waiting(result, 1).reason.startswith("requeue backoff: ")
    assert waiting(result, 1).code == "RequeueBackoff"


def test_a_new_attempt_waits_for_its_previous_pods_to_exit():
    pending = [dataclasses.replace(queued(1, 1, 8), winding_down=2), queued(2, 1, 8)]
    result = plan(snapshot(machines(1, 2), [TEAM_A], pending=pending), now=NOW)
    assert list(admitted(result)) == [2]  # room for both: job 1 waits only for itself
    assert waiting(result, 1).reason == (
        "waiting for 2 pods of its previous attempt to exit (grace period)"
    )
    assert waiting(result, 1).code == "PreviousPodsExiting"
    assert list(admitted(plan(snapshot(machines(1), [TEAM_A], pending=[queued(1, 1, 8)]), now=NOW)))


# --- 7. owners before borrowers --------------------------------------------------------------


def test_it_serves_owners_before_borrowers_earlier_in_the_queue():
    pending = [queued(1, 2, 8, idle="only_idle", priority=9), queued(2, 1, 8)]
    result = plan(snapshot(machines(1), [TEAM_A, TEAM_B], pending=pending), now=NOW)
    assert list(admitted(result)) == [2]
    assert waiting(result, 1).reason.startswith("no idle room")


def test_it_lends_room_that_no_owner_can_use():
    pending = [queued(1, 1, 16), queued(2, 2, 8, idle="only_idle")]
    result = plan(snapshot(machines(1), [TEAM_A, TEAM_B], pending=pending), now=NOW)
    assert list(admitted(result)) == [2]
    assert waiting(result, 1).reason.startswith("quota team-a")


def test_it_does_not_let_a_waiting_borrower_block_owners_in_a_strict_queue():
    pending = [queued(1, 1, 8, 8, idle="acceptable"), queued(2, 1, 8)]
    result = plan(snapshot(machines(1), [TEAM_A], pending=pending), now=NOW)
    assert list(admitted(result)) == [2]
    assert waiting(result, 1).reason.startswith("no idle room")


def test_it_keeps_the_queue_place_of_an_acceptable_job_that_fits_its_quota():
    pending = [queued(1, 1, 8, idle="acceptable"), queued(2, 1, 8)]
    result = plan(snapshot(machines(1, 2), [TEAM_A], pending=pending), now=NOW)
    assert list(admitted(result)) == [1]
    assert waiting(result, 2).reason == "quota team-a: needs 8 GPU, 0 free"


# --- 8. every waiting job says why and where -------------------------------------------------


def test_it_tells_each_waiting_job_its_place_in_its_quotas_queue():
    quotas = [quota(1, "team-a", 0, strategy="BestEffortFIFO"), quota(2, "team-b", 0)]
    pending = [queued(1, 1, 8), queued(2, 2, 8), queued(3, 1, 8), queued(4, 1, 8)]
    result = plan(snapshot(machines(1), quotas, pending=pending), now=NOW)
    assert [(w.job_id, w.position, w.queue_size) for w in result.waiting] == [
        (1, 1, 3),
        (2, 1, 1),
        (3, 2, 3),
        (4, 3, 3),
    ]


def test_it_says_when_no_node_has_room_for_the_gang():
    run = [running(9, 2, (1, 4), (2, 4), idle="off", in_quota=True)]
    result = plan(
        snapshot(
            machines(1, 2),
            [quota(1, "team-a", 32), quota(2, "team-b", 8)],
            run,
            [queued(1, 1, 8, 8, 8, 8)],
        ),
        now=NOW,
    )
    assert waiting(result, 1).reason == (
        "no node has room: needs 4×8 GPU (8 GPU free in pool, at most 4 GPU on one node)"
    )


def test_it_keeps_a_job_of_an_unknown_quota_waiting():
    result = plan(snapshot(machines(1), [TEAM_A], pending=[queued(1, 7, 8)]), now=NOW)
    assert waiting(result, 1).reason == "unknown quota 7"


# --- 9. determinism ----------------------------------------------------------------------


def test_it_plans_the_same_snapshot_the_same_way():
    run = [
        running(9, 2, (1, 8)),
        running(10, 2, (2, 4), started=NOW - 20),
        running(11, 1, (3, 4), idle="off", in_quota=True),
    ]
    pending = [
        queued(1, 1, 4, 4),
        queued(2, 2, 8, idle="only_idle"),
        queued(3, 1, 8, idle="acceptable"),
        queued(4, 2, 2, priority=3),
    ]
    shot = snapshot(machines(1, 2, 3, 4), [quota(1, "team-a", 16), TEAM_B], run, pending)
    rng = random.Random(7)
    shuffled = Snapshot(
        *(
            tuple(rng.sample(part, len(part)))
            for part in (shot.nodes, shot.quotas, shot.running, shot.pending)
        )
    )
    assert plan(shot, now=NOW) == plan(shot, now=NOW) == plan(shuffled, now=NOW)


# --- quotas page -------------------------------------------------------------------------


def test_it_reports_in_quota_use_of_a_quota_and_its_descendants():
    quotas = [quota(1, "team-a", 16), quota(2, "team-a1", 8, parent=1), quota(3, "team-b", 8)]
    run = [
        running(9, 2, (1, 4), idle="off", in_quota=True),
        running(10, 1, (2, 2), idle="off", in_quota=True),
        running(11, 2, (3, 8)),
    ]
    usage = quota_usage(snapshot(machines(1, 2, 3), quotas, run))
    assert {qid: r.gpu for qid, r in usage.items()} == {1: 6, 2: 4, 3: 0}


def test_it_reports_what_quotas_borrow_and_lend():
    # Node room 16 GPU, all of it guaranteed; team-b borrows 8 GPU of team-a's idle min.
    quotas = [TEAM_A, TEAM_B]
    run = [running(9, 2, (1, 8), idle="off", in_quota=True), running(10, 2, (2, 8))]
    report = quota_report(snapshot(machines(1, 2), quotas, run))
    assert (report[1].used[0], report[1].free[0], report[1].lent[0]) == (0, 8000, 8000)
    assert (report[2].used[0], report[2].borrowed[0], report[2].lent[0]) == (8000, 8000, 0)


def test_it_rejects_a_quota_tree_with_a_cycle():
    quotas = [quota(1, "team-a", 8, parent=2), quota(2, "team-b", 8, parent=1)]
    with pytest.raises(SchedulerError):
        plan(snapshot(machines(1), quotas), now=NOW)


def test_it_rejects_duplicate_node_ids():
    with pytest.raises(SchedulerError):
        plan(snapshot(machines(1, 1), [TEAM_A]), now=NOW)


def test_it_imports_nothing_of_django_celery_or_the_other_apps():
    code = (
        "import sys; import apps.scheduler.engine; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'celery')]; "
        "assert not [m for m in sys.modules if m.startswith('apps.') "
        "and not m.startswith('apps.scheduler.engine') "
        "and m not in ('apps.scheduler', 'apps.scheduler.lifecycle', "
        "'apps.core', 'apps.core.words')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_its_kept_first_steps_choose_what_a_fresh_reclaimer_would_after_earlier_claims():
    """Reclaim node by node keeps every node's first step for the whole plan and looks
    again only at the nodes whose room changed: after earlier owners' claims and held room,
    each choice is still the one a reclaimer starting afresh on the same room makes."""
    rng = random.Random(3)
    nodes = machines(*range(1, 41))
    pool = Pool(1, nodes)
    slots = [n.id for n in nodes for _ in range(8)]
    rng.shuffle(slots)
    borrowers: list[Borrower] = []
    while slots:
        jid = 1000 + len(borrowers)
        pods = tuple(
            RunningPod(jid * 10 + i, slots.pop(), gpus(1), False)
            for i in range(min(rng.choice((1, 2, 4)), len(slots)))
        )
        started = NOW - rng.uniform(600, 36_000)
        job = RunningJob(jid, f"b{jid}", 1, "only_idle", rng.choice((1, 3)), started, None, pods)
        borrower = Borrower(job, now=NOW, min_run=60.0)
        freed = borrower.freed.setdefault(1, {})
        for pod in pods:
            pool.occupy(pod.node_id, vec(pod.resources), leaving=False)
            freed[pod.node_id] = add(freed.get(pod.node_id, (0, 0, 0)), vec(pod.resources))
        borrowers.append(borrower)
    pool.build()

    def reclaimer() -> Reclaimer:
        fresh = Reclaimer({1: pool})
        for borrower in borrowers:
            fresh.add(borrower, [1])
        fresh.sort()
        return fresh

    kept = reclaimer()
    with mock.patch.object(reclaim, "_GREEDY_BUDGET", (0, 0)):  # node by node every time
        for size, count in [(8, 2), (4, 3), (8, 1), (2, 2), (8, 3), (1, 4), (8, 2), (4, 1)]:
            pods = [vec(gpus(size))] * count
            expected = reclaimer().choose(pods, pool, young_ok=False)
            got = kept.choose(pods, pool, young_ok=False)
            assert got is not None and expected is not None
            assert [v.job.job_id for v in got[0]] == [v.job.job_id for v in expected[0]]
            assert got[1] == expected[1]
            kept.claim(got[0])
            for pod, n in zip(pods, got[1], strict=True):
                pool.reserve(n, pod)
