"""The engine's policy options the simulator compares (Config.victim_order, Config.placement),
called directly: the defaults keep the product's rules."""

from __future__ import annotations

from apps.scheduler.engine import (
    Config,
    Node,
    PendingJob,
    PodRequest,
    Quota,
    Resources,
    RunningJob,
    RunningPod,
    Snapshot,
    plan,
)

NOW = 10_000.0
POD = Resources(cpu=1_000, memory=1_024, gpu=1)


def node(nid: int, gpu: int) -> Node:
    return Node(id=nid, pool_id=1, capacity=Resources(cpu=64_000, memory=256 * 1024, gpu=gpu))


def quota(qid: int, name: str, gpu: int, parent: int | None = None) -> Quota:
    return Quota(
        id=qid,
        name=name,
        parent_id=parent,
        pool_id=1,
        min=Resources(cpu=10**6, memory=10**8, gpu=gpu),
        strategy="BestEffortFIFO",
    )


def pending(jid: int, gpu: int = 1, quota_id: int = 1) -> PendingJob:
    return PendingJob(
        job_id=jid,
        name=f"job-{jid}",
        quota_id=quota_id,
        idle_mode="off",
        priority=1,
        submitted_at=float(jid),
        pods=(PodRequest("w", Resources(cpu=1_000, memory=1_024, gpu=gpu)),),
    )


def placed(config: Config, nodes: tuple[Node, ...], *jobs: PendingJob) -> list[int]:
    shot = Snapshot(nodes=nodes, quotas=(quota(1, "all", 100),), running=(), pending=jobs)
    return [a.placements[0].node_id for a in plan(shot, now=NOW, config=config).admissions]


def test_it_places_by_best_fit_by_default():
    assert placed(Config(), (node(1, 8), node(2, 2)), pending(1)) == [2]


def test_it_places_on_the_emptiest_node_under_worst_fit():
    nodes = (node(1, 2), node(2, 8), node(3, 4))
    assert placed(Config(placement="worst_fit"), nodes, pending(1)) == [2]


def test_it_places_randomly_but_the_same_way_for_a_seed():
    nodes = tuple(node(i, 1) for i in range(1, 21))
    jobs = [pending(j) for j in range(1, 6)]
    first = placed(Config(placement="random", seed=1), nodes, *jobs)
    assert first == placed(Config(placement="random", seed=1), nodes, *jobs)
    assert len(set(first)) == 5  # never twice on a full node
    others = {tuple(placed(Config(placement="random", seed=s), nodes, *jobs)) for s in range(2, 6)}
    assert len(others | {tuple(first)}) > 1
    assert placed(Config(), nodes, *jobs) == [1, 2, 3, 4, 5]


def borrower(jid: int, *, started: float, priority: int, ckpt: float | None, node_id: int):
    return RunningJob(
        job_id=jid,
        name=f"b{jid}",
        quota_id=3,
        idle_mode="only_idle",
        priority=priority,
        started_at=started,
        last_checkpoint_at=ckpt,
        pods=(RunningPod(jid, node_id, POD, in_quota=False),),
    )


def victim(config: Config) -> int:
    """One owner needs one GPU back from three borrowers on two full nodes."""
    shot = Snapshot(
        nodes=(node(1, 2), node(2, 1)),
        quotas=(quota(1, "root", 3), quota(2, "a", 2, parent=1), quota(3, "b", 1, parent=1)),
        running=(
            # old and checkpointed a moment ago: least to lose
            borrower(11, started=0, priority=5, ckpt=NOW - 10, node_id=1),
            # newest, not checkpointed
            borrower(12, started=NOW - 500, priority=5, ckpt=None, node_id=1),
            # lowest priority
            borrower(13, started=NOW - 4000, priority=1, ckpt=None, node_id=2),
        ),
        pending=(pending(1, quota_id=2),),
    )
    (preemption,) = plan(shot, now=NOW, config=config).preemptions
    return preemption.job_id


def test_it_chooses_victims_by_least_lost_work_by_default():
    assert victim(Config()) == 11


def test_it_chooses_the_lowest_priority_then_the_newest_in_kueues_order():
    assert victim(Config(victim_order="kueue")) == 13


def test_it_chooses_victims_in_a_fixed_random_order_per_seed():
    chosen = {victim(Config(victim_order="random", seed=s)) for s in range(12)}
    assert chosen <= {11, 12, 13} and len(chosen) > 1
    assert victim(Config(victim_order="random", seed=4)) == victim(
        Config(victim_order="random", seed=4)
    )


def whole_node_victims(config: Config) -> set[int]:
    """An owner needs a whole 8-GPU node back; four nodes are full of 1-GPU borrowers whose
    start times interleave across the nodes, so that no victim order frees one node within
    a few victims (the planner goes node by node). Node 1's were checkpointed a moment ago."""
    run = []
    for k in range(1, 5):
        for j in range(8):
            jid = 100 * k + j
            started = 1_000.0 + 10 * (4 * j + k - 1)
            ckpt = NOW - 5 if k == 1 else None
            run.append(borrower(jid, started=started, priority=1, ckpt=ckpt, node_id=k))
    shot = Snapshot(
        nodes=tuple(node(k, 8) for k in range(1, 5)),
        quotas=(quota(1, "root", 32), quota(2, "a", 8, parent=1), quota(3, "b", 1, parent=1)),
        running=tuple(run),
        pending=(pending(1, gpu=8, quota_id=2),),
    )
    p = plan(shot, now=NOW, config=config)
    return {v.job_id // 100 for v in p.preemptions}


def test_node_by_node_reclaim_keeps_the_victim_order():
    # least lost work empties the node that checkpointed; Kueue's order the node whose
    # oldest borrower is newest (node 4: its borrowers are each the newest of their round)
    assert whole_node_victims(Config()) == {1}
    assert whole_node_victims(Config(victim_order="kueue")) == {4}
