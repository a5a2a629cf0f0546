"""Properties of whole runs on random small traces: capacity holds, every job is accounted
for, fill's batches decide what one plan per arrival would, runs repeat for a seed, and the
simulator's decisions are the engine's for the same snapshot."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.scheduler.engine import (
    Config,
    Node,
    PendingJob,
    PodRequest,
    Resources,
    Snapshot,
    fragmentation,
    plan,
    target_workload,
)
from apps.simulator import Policy, Settings, policy_summary
from apps.simulator.policy import PRESETS
from apps.simulator.sim import workload
from tests.simulator.helpers import CPU, MEM, job, one_quota, outcome, run, two_teams

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def traces(draw, *, max_jobs: int = 14, gangs: bool = True):
    out = []
    for i in range(draw(st.integers(1, max_jobs))):
        gpu = draw(st.sampled_from([0, 1, 1, 1, 2, 4]))
        milli = draw(st.sampled_from([250, 500, 1000])) if gpu == 1 else gpu * 1000
        be = draw(st.booleans())
        out.append(
            job(
                f"j{i}",
                draw(st.integers(0, 500)),
                gpu=gpu,
                milli=milli,
                duration=draw(st.integers(1, 400)),
                pods=draw(st.integers(1, 3)) if gangs else 1,
                qos="BE" if be else "LS",
                quota=draw(st.sampled_from(["a", "b"])),
                idle_mode=draw(st.sampled_from(["acceptable", "only_idle"])) if be else "off",
                priority=draw(st.integers(1, 3)),
            )
        )
    return out


policies = st.sampled_from(sorted(PRESETS.values(), key=lambda p: p.name))


@FAST
@given(trace=traces(), policy=policies, ckpt=st.sampled_from([0, 50]), tick=st.sampled_from([0, 7]))
def test_it_never_allocates_more_than_the_cluster_and_accounts_for_every_job(
    trace, policy, ckpt, tick
):
    cluster = two_teams(4, 4, 2, a=6, b=4)
    result = run(trace, cluster, policy, checkpoint_interval=ckpt, tick=tick, min_run_seconds=20)
    s = result.series
    assert all(0 <= a <= 1 for a in s.allocated)
    assert all(0 <= o <= cluster.gpus for o in s.occupied)
    assert len(result.jobs) == len(trace)
    for j in result.jobs:
        if j.first_start is None:
            assert j.finish is None
        else:
            assert j.submit <= j.first_start and j.finish is not None and j.finish >= j.first_start
    # every job that fits the empty cluster ends
    fits = {t.name for t in trace if t.pods == 1 and t.gpu <= 4}
    assert fits <= {j.name for j in result.jobs if j.finish is not None}
    assert sum(j.preemptions for j in result.jobs) == result.preemptions
    assert result.lost_gpu_seconds >= 0
    assert s.running[-1] == 0 and s.allocated[-1] == 0
    # fragmented room is free room, and once all have left it is the empty cluster's
    assert all(0 <= f <= 1 - a + 1e-9 for f, a in zip(s.fragmented, s.allocated, strict=True))
    target = workload(trace, Settings())
    empty = sum(fragmentation((0,) * n.capacity.gpu, n.capacity.cpu, target) for n in cluster.nodes)
    assert s.fragmented[-1] == pytest.approx(empty / (cluster.gpus * 1000))


@FAST
@given(trace=traces(max_jobs=30), batch=st.integers(2, 12), policy=policies)
def test_it_fills_in_batches_as_it_would_one_arrival_at_a_time(trace, batch, policy):
    trace = [replace(t, quota=None) for t in trace]  # one quota: the FGD setting
    cluster = one_quota(4, 4, 2, 8)
    single = run(trace, cluster, policy, mode="fill", batch=1, fill_to=1.5, seed=5)
    batched = run(trace, cluster, policy, mode="fill", batch=batch, fill_to=1.5, seed=5)
    if policy.placement == "random":  # one draw per plan: batching changes the draws
        return
    assert [(j.name, j.dropped, j.nodes) for j in batched.jobs] == [
        (j.name, j.dropped, j.nodes) for j in single.jobs
    ]
    assert batched.at_arrived == single.at_arrived
    assert batched.series.allocated == single.series.allocated


@FAST
@given(trace=traces(), policy=policies, seed=st.integers(0, 3))
def test_it_repeats_a_run_exactly_for_a_seed(trace, policy, seed):
    cluster = two_teams(4, 4, a=4, b=4)

    def figures():
        summary = policy_summary(run(trace, cluster, policy, seed=seed, checkpoint_interval=30))
        summary.pop("wall_seconds"), summary.pop("cpu_seconds")
        return summary

    assert figures() == figures()


@FAST
@pytest.mark.parametrize("placement", ["best_fit", "fgd"])
@given(trace=traces(gangs=True))
def test_it_decides_as_the_engine_does_for_the_same_snapshot(placement, trace):
    """All jobs arrive at once: the simulator's first plan, against a snapshot written by
    hand the way the live tick builds one from its rows. With FGD, the live tick's workload
    is the mix of the jobs submitted lately (`recent_workload`): here, all of them, as in
    the simulator's window of the last day's arrivals."""
    trace = [replace(t, submit=0.0) for t in trace]
    cluster = two_teams(4, 4, 2, a=6, b=4)
    result = run(trace, cluster, Policy(placement, placement=placement), workload_hours=24)
    quota_ids = {"a": 2, "b": 3}
    snapshot = Snapshot(
        nodes=tuple(
            Node(id=i + 1, pool_id=1, capacity=Resources(cpu=96_000, memory=768 * 1024, gpu=g))
            for i, g in enumerate((4, 4, 2))
        ),
        quotas=cluster.quotas,
        running=(),
        pending=tuple(
            PendingJob(
                job_id=i + 1,
                name=t.name,
                quota_id=quota_ids[t.quota],
                idle_mode=t.idle_mode,
                priority=t.priority,
                submitted_at=0.0,
                pods=tuple(
                    PodRequest(
                        key=f"w{k}",
                        resources=Resources(
                            cpu=CPU * max(t.gpu, 1),
                            memory=MEM * max(t.gpu, 1),
                            gpu=0 if t.fractional else t.gpu,
                        ),
                        gpu_milli=t.gpu_milli if t.fractional else 0,  # shares one GPU
                    )
                    for k in range(t.pods)
                ),
            )
            for i, t in enumerate(sorted(trace, key=lambda t: t.submit))
        ),
    )
    workload = target_workload(
        (p.gpu_milli or p.resources.gpu * 1000, p.resources.cpu, 1)
        for job in snapshot.pending
        for p in job.pods
    )
    config = Config(min_run_seconds=60, placement=placement)
    if placement == "fgd":
        config = replace(config, workload=workload)
    decided = plan(snapshot, now=0.0, config=config)
    engine = {
        snapshot.pending[a.job_id - 1].name: tuple(p.node_id for p in a.placements)
        for a in decided.admissions
    }
    started_at_once = {
        j.name: outcome(result, j.name).nodes
        for j in result.jobs
        if j.first_start == 0 and j.name in engine
    }
    assert {j.name for j in result.jobs if j.first_start == 0} == set(engine)
    assert started_at_once == engine
