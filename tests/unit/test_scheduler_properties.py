"""Invariants of the scheduling core, checked on generated small clusters (hypothesis).

Every generated snapshot is a valid starting state: no node over capacity, no quota's In
Quota use over its min. Placeability is judged here by an independent exhaustive search.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.scheduler.engine import (
    ClusterState,
    Config,
    Node,
    PendingJob,
    Plan,
    PodRequest,
    Quota,
    Resources,
    RunningJob,
    RunningPod,
    Snapshot,
    plan,
    reclaim,
)
from apps.scheduler.engine import room as room_module
from apps.scheduler.engine.vectors import how_many

NOW = 1_700_000_000.0
CONFIG = Config(min_run_seconds=60.0)
FAST = settings(max_examples=200, deadline=None)
TWICE = settings(max_examples=120, deadline=None)  # for properties run with both choosers
# Reclaim picks victims greedily, or node by node once greedy needs many; the clusters here
# are too small for the second, so properties about reclaim also run with it forced.
CHOOSERS = pytest.mark.parametrize("chooser", ["greedy first", "by node"])


def planned(shot: Snapshot, chooser: str = "greedy first") -> Plan:
    budget = (0, 0) if chooser == "by node" else reclaim._GREEDY_BUDGET
    with mock.patch.object(reclaim, "_GREEDY_BUDGET", budget):
        return plan(shot, now=NOW, config=CONFIG)


Vec = tuple[int, int, int]


def vec(r: Resources) -> Vec:
    return (r.gpu, r.cpu, r.memory)


def fits(a: Vec, b: Vec) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True))


def add(a: Vec, b: Vec, sign: int = 1) -> Vec:
    return tuple(x + sign * y for x, y in zip(a, b, strict=True))  # type: ignore[return-value]


def fits_somehow(pods: list[Vec], room: dict[int, Vec]) -> bool:
    """Exhaustive: can the whole gang be placed on this room?"""
    free = {n: list(v) for n, v in room.items()}
    order = sorted(pods, reverse=True)

    def fill(k: int) -> bool:
        if k == len(order):
            return True
        for r in free.values():
            if all(p <= x for p, x in zip(order[k], r, strict=True)):
                for i in range(3):
                    r[i] -= order[k][i]
                if fill(k + 1):
                    return True
                for i in range(3):
                    r[i] += order[k][i]
        return False

    return fill(0)


# --- generated snapshots -----------------------------------------------------------------

POD_SIZES = [(4, 4000, 8192), (8, 4000, 8192), (2, 2000, 4096), (1, 2000, 2048), (0, 1000, 1024)]


def chain(quotas: dict[int, Quota], qid: int) -> list[Quota]:
    out = [quotas[qid]]
    while out[-1].parent_id is not None:
        out.append(quotas[out[-1].parent_id])
    return out


@st.composite
def snapshots(draw) -> Snapshot:
    # Half the snapshots are "crowded": GPU-bound nodes and quotas, many running borrowers,
    # which is where reclaim happens; the other half vary every dimension.
    crowded = draw(st.booleans())
    nodes: list[Node] = []
    for pool in range(1, draw(st.integers(1, 2)) + 1):
        for _ in range(draw(st.integers(1, 4))):
            capacity = (
                Resources(gpu=8, cpu=32000, memory=65536)
                if crowded
                else Resources(
                    gpu=draw(st.sampled_from([8, 4, 2, 0])),
                    cpu=draw(st.sampled_from([4000, 8000, 16000])),
                    memory=draw(st.sampled_from([8192, 16384, 32768])),
                )
            )
            nodes.append(
                Node(
                    id=len(nodes) + 1,
                    pool_id=pool,
                    capacity=capacity,
                    schedulable=crowded or draw(st.integers(0, 5)) > 0,
                )
            )
    pools = sorted({n.pool_id for n in nodes})
    quotas: dict[int, Quota] = {}
    for qid in range(1, draw(st.integers(1, 4)) + 1):
        pool = draw(st.sampled_from(pools))
        parents = [q.id for q in quotas.values() if q.pool_id == pool]
        parent = draw(st.sampled_from([None, *parents])) if parents else None
        quotas[qid] = Quota(
            id=qid,
            name=f"q{qid}",
            parent_id=parent,
            pool_id=pool,
            min=Resources(
                gpu=draw(st.sampled_from([16, 24, 8] if crowded else [16, 8, 4, 0])),
                cpu=10**6 if crowded else draw(st.sampled_from([64000, 8000, 0])),
                memory=10**7 if crowded else draw(st.sampled_from([131072, 16384, 0])),
            ),
            strategy=draw(st.sampled_from(["StrictFIFO", "BestEffortFIFO"])),
        )
    room = {n.id: vec(n.capacity) for n in nodes}
    used = {qid: (0, 0, 0) for qid in quotas}
    running: list[RunningJob] = []
    for jid in range(100, 100 + draw(st.integers(4 if crowded else 0, 8))):
        job = _running(draw, jid, quotas, nodes, room, used, crowded)
        if job is not None:
            running.append(job)
    pending = [
        _pending(draw, jid, quotas, crowded)
        for jid in range(1, draw(st.integers(1 if crowded else 0, 6)) + 1)
    ]
    return Snapshot(
        nodes=tuple(nodes),
        quotas=tuple(quotas.values()),
        running=tuple(running),
        pending=tuple(pending),
    )


def _running(draw, jid, quotas, nodes, room, used, crowded) -> RunningJob | None:
    """A running job placed validly (node room, quota min), or None when it does not fit."""
    qid = draw(st.sampled_from(sorted(quotas)))
    modes = (
        ["only_idle", "acceptable"] * 3 + ["off"]
        if crowded
        else ["only_idle", "acceptable", "off", "only_idle"]
    )
    mode = draw(st.sampled_from(modes))
    sizes = draw(
        st.lists(st.sampled_from(POD_SIZES[:3] if crowded else POD_SIZES), min_size=1, max_size=3)
    )
    pool_nodes = [n.id for n in nodes if n.pool_id == quotas[qid].pool_id]
    ancestors = chain(quotas, qid)
    pods, free, taken = [], dict(room), dict(used)
    for i, size in enumerate(sizes):
        options = [n for n in pool_nodes if fits(size, free[n])]
        if not options:
            return None
        node = draw(st.sampled_from(options))
        in_quota = mode != "only_idle" and all(
            fits(add(taken[q.id], size), vec(q.min)) for q in ancestors
        )
        if mode == "off" and not in_quota:
            return None
        if in_quota:
            for q in ancestors:
                taken[q.id] = add(taken[q.id], size)
        free[node] = add(free[node], size, -1)
        pods.append(
            RunningPod(
                pod_id=jid * 10 + i,
                node_id=node,
                in_quota=in_quota,
                resources=Resources(gpu=size[0], cpu=size[1], memory=size[2]),
            )
        )
    room.update(free)
    used.update(taken)
    started = NOW - draw(st.sampled_from([3600, 600, 90, 30, 5]))
    checkpoint = draw(st.sampled_from([None, started + 1, NOW - 10]))
    return RunningJob(
        job_id=jid,
        name=f"r{jid}",
        quota_id=qid,
        idle_mode=mode,
        priority=draw(st.integers(1, 3)),
        started_at=started,
        last_checkpoint_at=checkpoint,
        pods=tuple(pods),
        stopping=draw(st.integers(0, 9)) == 5,
    )


def _pending(draw, jid, quotas, crowded) -> PendingJob:
    size = draw(st.sampled_from(POD_SIZES))
    count = draw(st.integers(1, 2 if crowded else 3))
    sizes = (
        [size] * count
        if draw(st.booleans())
        else draw(st.lists(st.sampled_from(POD_SIZES), min_size=1, max_size=4))
    )
    modes = (
        ["off", "off", "acceptable", "only_idle"]
        if crowded
        else ["off", "acceptable", "only_idle", "off"]
    )
    return PendingJob(
        job_id=jid,
        name=f"p{jid}",
        quota_id=draw(st.sampled_from(sorted(quotas))),
        idle_mode=draw(st.sampled_from(modes)),
        priority=draw(st.integers(1, 3)),
        submitted_at=NOW - draw(st.integers(0, 100)),
        pods=tuple(
            PodRequest(key=f"worker-{i}", resources=Resources(gpu=g, cpu=c, memory=m))
            for i, (g, c, m) in enumerate(sizes)
        ),
        not_before=draw(st.sampled_from([None] * 6 + [NOW - 1, NOW + 30])),
    )


@st.composite
def reclaims(draw) -> Snapshot:
    """One pool full of borrowers (mostly old), and owners of an idle quota queuing."""
    nodes = [
        Node(id=i, pool_id=1, capacity=Resources(gpu=8, cpu=32000, memory=65536))
        for i in range(1, draw(st.integers(2, 4)) + 1)
    ]
    generous = dict(cpu=10**6, memory=10**7)
    quotas = {
        1: Quota(
            1,
            "owners",
            None,
            1,
            Resources(gpu=draw(st.sampled_from([32, 16, 8])), **generous),
            draw(st.sampled_from(["StrictFIFO", "BestEffortFIFO"])),
        ),
        2: Quota(2, "lenders", None, 1, Resources(gpu=0, **generous)),
    }
    room = {n.id: vec(n.capacity) for n in nodes}
    running = []
    for jid in range(100, 100 + draw(st.integers(2, 8))):
        sizes = draw(st.lists(st.sampled_from(POD_SIZES[:3]), min_size=1, max_size=3))
        pods = []
        for i, size in enumerate(sizes):
            options = [n for n in room if fits(size, room[n])]
            if not options:
                break
            node = draw(st.sampled_from(options))
            room[node] = add(room[node], size, -1)
            pods.append(
                RunningPod(
                    jid * 10 + i, node, Resources(gpu=size[0], cpu=size[1], memory=size[2]), False
                )
            )
        if pods:
            started = NOW - draw(st.sampled_from([3600, 7200, 600, 20]))
            running.append(
                RunningJob(
                    jid,
                    f"r{jid}",
                    2,
                    draw(st.sampled_from(["only_idle", "acceptable"])),
                    draw(st.integers(1, 3)),
                    started,
                    draw(st.sampled_from([None, NOW - 60, NOW - 300])),
                    tuple(pods),
                )
            )
    pending = [
        PendingJob(
            jid,
            f"p{jid}",
            1,
            "off",
            draw(st.integers(1, 2)),
            NOW - jid,
            tuple(
                PodRequest(f"worker-{i}", Resources(gpu=g, cpu=c, memory=m))
                for i, (g, c, m) in enumerate(
                    draw(st.lists(st.sampled_from(POD_SIZES[:3]), min_size=1, max_size=3))
                )
            ),
        )
        for jid in range(1, draw(st.integers(1, 3)) + 1)
    ]
    return Snapshot(tuple(nodes), tuple(quotas.values()), tuple(running), tuple(pending))


SCENARIOS = st.one_of(snapshots(), reclaims())


@st.composite
def lowered(draw) -> Snapshot:
    """A scenario whose admin then lowered some quotas' min, maybe under what their jobs
    already run In Quota (the part above it is on loan)."""
    shot = draw(SCENARIOS)
    quotas = tuple(
        replace(q, min=replace(q.min, gpu=draw(st.sampled_from([q.min.gpu, q.min.gpu // 2, 0]))))
        for q in shot.quotas
    )
    shot = replace(shot, quotas=quotas)
    if draw(st.booleans()):
        shot = recorded(shot, plan(shot, now=NOW, config=CONFIG).loans)
    return shot


@st.composite
def lent(draw) -> Snapshot:
    """Quota 2 runs regular jobs In Quota up to its min (and maybe borrowers), then the
    admin moves part of its min to quota 1, whose owners queue: the loans an owner reclaims,
    found in this plan or recorded by an earlier one."""
    nodes = [
        Node(id=n, pool_id=1, capacity=Resources(gpu=8, cpu=32000, memory=65536), schedulable=True)
        for n in range(1, draw(st.integers(1, 3)) + 1)
    ]
    total = 8 * len(nodes)
    before = draw(st.sampled_from([total, total // 2 or 8]))
    moved = draw(st.sampled_from([before, before // 2, 4]))
    room = {n.id: vec(n.capacity) for n in nodes}
    running: list[RunningJob] = []
    used = 0
    for jid in range(100, 100 + draw(st.integers(1, 6))):
        size = draw(st.sampled_from(POD_SIZES[:4]))
        mode = draw(st.sampled_from(["off", "off", "off", "acceptable", "only_idle"]))
        in_quota = mode != "only_idle" and used + size[0] <= before
        options = [n for n in room if fits(size, room[n])]
        if not options or (mode == "off" and not in_quota):
            continue
        node = draw(st.sampled_from(options))
        room[node] = add(room[node], size, -1)
        used += size[0] if in_quota else 0
        running.append(
            RunningJob(
                jid,
                f"r{jid}",
                2,
                mode,
                draw(st.integers(1, 3)),
                NOW - draw(st.sampled_from([3600, 600, 90, 20])),
                draw(st.sampled_from([None, NOW - 60, NOW - 300])),
                (
                    RunningPod(
                        jid * 10,
                        node,
                        Resources(gpu=size[0], cpu=size[1], memory=size[2]),
                        in_quota,
                    ),
                ),
            )
        )
    big = Resources(gpu=0, cpu=10**6, memory=10**7)
    quotas = (
        Quota(1, "q1", None, 1, replace(big, gpu=moved), "BestEffortFIFO"),
        Quota(2, "q2", None, 1, replace(big, gpu=before - moved), "BestEffortFIFO"),
    )
    pending = tuple(
        PendingJob(
            jid,
            f"p{jid}",
            1,
            "off",
            draw(st.integers(1, 2)),
            NOW - jid,
            tuple(
                PodRequest(f"worker-{i}", Resources(gpu=size[0], cpu=size[1], memory=size[2]))
                for i, size in enumerate(
                    draw(st.lists(st.sampled_from(POD_SIZES[:4]), min_size=1, max_size=2))
                )
            ),
        )
        for jid in range(1, draw(st.integers(1, 3)) + 1)
    )
    shot = Snapshot(tuple(nodes), quotas, tuple(running), pending)
    if draw(st.booleans()):
        shot = recorded(shot, plan(shot, now=NOW, config=CONFIG).loans)
        if draw(st.booleans()):  # and then the admin gave quota 2 some of its min back
            back = draw(st.sampled_from([moved, moved // 2, 1]))
            shot = replace(
                shot,
                quotas=(quotas[0], replace(quotas[1], min=replace(big, gpu=before - moved + back))),
            )
    return shot


def recorded(shot: Snapshot, loans: tuple[int, ...]) -> Snapshot:
    """The snapshot after a tick recorded the loans: their pods read Not in Quota."""
    lent = set(loans)
    return replace(
        shot,
        running=tuple(
            replace(
                j,
                pods=tuple(
                    replace(p, in_quota=p.in_quota and p.pod_id not in lent) for p in j.pods
                ),
            )
            for j in shot.running
        ),
    )


WITH_LOWERED_MINS = st.one_of(SCENARIOS, lowered(), lent())


# --- helpers over a plan -------------------------------------------------------------------


def queue_key(job: PendingJob):
    return (-job.priority, job.submitted_at, job.job_id)


def pending_by_id(shot: Snapshot) -> dict[int, PendingJob]:
    return {j.job_id: j for j in shot.pending}


def admitted_pods(shot: Snapshot, result: Plan):
    """(node id, size, in quota, job) for every pod the plan starts."""
    jobs = pending_by_id(shot)
    for admission in result.admissions:
        job = jobs[admission.job_id]
        sizes = {p.key: vec(p.resources) for p in job.pods}
        for placement in admission.placements:
            yield placement.node_id, sizes[placement.key], placement.in_quota, job


def room_without(shot: Snapshot, gone: set[int]) -> dict[int, Vec]:
    """Free room of schedulable nodes if the jobs in `gone` had stopped."""
    room = {n.id: vec(n.capacity) for n in shot.nodes if n.schedulable}
    for job in shot.running:
        if job.job_id not in gone:
            for pod in job.pods:
                if pod.node_id in room:
                    room[pod.node_id] = add(room[pod.node_id], vec(pod.resources), -1)
    return room


def in_pool(room: dict[int, Vec], shot: Snapshot, pool_id: int) -> dict[int, Vec]:
    pools = {n.id: n.pool_id for n in shot.nodes}
    return {n: v for n, v in room.items() if pools[n] == pool_id}


def eligible_borrowers(
    shot: Snapshot,
    pool_id: int,
    loans: frozenset[int] = frozenset(),
    returns: frozenset[int] = frozenset(),
) -> set[int]:
    """Old enough jobs with pods Not in Quota in the pool: placed so, or on loan (but for
    those a raised min gives back)."""
    pools = {n.id: n.pool_id for n in shot.nodes}
    return {
        j.job_id
        for j in shot.running
        if not j.stopping
        and NOW - j.started_at >= CONFIG.min_run_seconds
        and any(
            ((not p.in_quota and p.pod_id not in returns) or p.pod_id in loans)
            and pools[p.node_id] == pool_id
            for p in j.pods
        )
    }


# --- properties ------------------------------------------------------------------------


@CHOOSERS
@TWICE
@given(shot=WITH_LOWERED_MINS)
def test_it_never_fills_a_node_beyond_capacity(shot, chooser):
    result = planned(shot, chooser)
    load = {n.id: (0, 0, 0) for n in shot.nodes}
    for job in shot.running:
        for pod in job.pods:
            load[pod.node_id] = add(load[pod.node_id], vec(pod.resources))
    for node_id, size, _, _ in admitted_pods(shot, result):
        load[node_id] = add(load[node_id], size)
    assert all(fits(load[n.id], vec(n.capacity)) for n in shot.nodes)


def held_pods(shot: Snapshot, result: Plan):
    """(node id, size, job) for every pod of room held for a reclaiming owner."""
    jobs = pending_by_id(shot)
    for w in result.waiting:
        sizes = {p.key: vec(p.resources) for p in jobs[w.job_id].pods}
        for placement in w.reserved:
            yield placement.node_id, sizes[placement.key], jobs[w.job_id]


@CHOOSERS
@settings(max_examples=250, deadline=None)
@given(shot=WITH_LOWERED_MINS)
def test_it_keeps_in_quota_use_and_held_quota_within_every_min(shot, chooser):
    """Running pods In Quota but for those on loan (a min lowered under them: none in a
    scenario as generated), admitted In Quota and held for reclaiming owners."""
    result = planned(shot, chooser)
    quotas = {q.id: q for q in shot.quotas}
    placed = {qid: (0, 0, 0) for qid in quotas}
    for qid, size in [
        (j.quota_id, vec(p.resources)) for j in shot.running for p in j.pods if p.in_quota
    ]:
        for q in chain(quotas, qid):
            placed[q.id] = add(placed[q.id], size)
    # pods go on loan only where a quota's min is lowered under its use, and then some do
    assert bool(result.loans) == any(not fits(placed[qid], vec(q.min)) for qid, q in quotas.items())
    loans, returns = set(result.loans), set(result.returns)
    assert not loans & returns
    used = {qid: (0, 0, 0) for qid in quotas}
    pods = [
        (j.quota_id, vec(p.resources))
        for j in shot.running
        for p in j.pods
        if (p.in_quota and p.pod_id not in loans) or p.pod_id in returns
    ]
    pods += [
        (job.quota_id, size) for _, size, in_quota, job in admitted_pods(shot, result) if in_quota
    ]
    pods += [(job.quota_id, size) for _, size, job in held_pods(shot, result)]
    for qid, size in pods:
        for q in chain(quotas, qid):
            used[q.id] = add(used[q.id], size)
    assert all(fits(used[qid], vec(q.min)) for qid, q in quotas.items())


@CHOOSERS
@TWICE
@given(shot=WITH_LOWERED_MINS)
def test_it_gives_no_one_the_room_held_for_a_reclaiming_owner(shot, chooser):
    """Once the leaving jobs are gone, admissions and held room fit every node together.
    Leaving: jobs already stopping and this plan's victims; and when an owner waits for
    young borrowers to reach the minimum run time, every borrower (it holds the room of
    the set it will preempt then, old members included, without preempting any yet), on
    loan ones too."""
    result = planned(shot, chooser)
    waits_for_young = any("minimum" in w.reason for w in result.waiting)
    loans, returns = set(result.loans), set(result.returns)
    leaving = {
        j.job_id
        for j in shot.running
        if j.stopping
        or (
            waits_for_young
            and (
                j.idle_mode != "off"
                or any(
                    (not p.in_quota and p.pod_id not in returns) or p.pod_id in loans
                    for p in j.pods
                )
            )
        )
    }
    room = room_without(shot, leaving | {p.job_id for p in result.preemptions})
    for node_id, size, _, _ in admitted_pods(shot, result):
        room[node_id] = add(room[node_id], size, -1)
    for node_id, size, _ in held_pods(shot, result):
        room[node_id] = add(room[node_id], size, -1)
    assert all(min(v) >= 0 for v in room.values()), room


@FAST
@given(snapshots())
def test_it_places_gangs_whole_on_their_quotas_pool(shot):
    result = planned(shot)
    jobs = pending_by_id(shot)
    quotas = {q.id: q for q in shot.quotas}
    nodes = {n.id: n for n in shot.nodes}
    decided = [a.job_id for a in result.admissions] + [w.job_id for w in result.waiting]
    assert sorted(decided) == sorted(jobs)
    for admission in result.admissions:
        job = jobs[admission.job_id]
        assert [p.key for p in admission.placements] == [p.key for p in job.pods]
        for placement in admission.placements:
            node = nodes[placement.node_id]
            assert node.schedulable and node.pool_id == quotas[job.quota_id].pool_id
        flags = {p.in_quota for p in admission.placements}
        if job.idle_mode == "off":
            assert flags <= {True}
        if job.idle_mode == "only_idle":
            assert flags <= {False}


@CHOOSERS
@TWICE
@given(shot=WITH_LOWERED_MINS)
def test_it_only_preempts_old_borrowers_running_on_idle_room(shot, chooser):
    """Borrowers: jobs with pods Not in Quota, placed so or on loan (a min lowered under
    them)."""
    result = planned(shot, chooser)
    loans, returns = set(result.loans), set(result.returns)
    running = {j.job_id: j for j in shot.running}
    jobs = pending_by_id(shot)
    pools = {n.id: n.pool_id for n in shot.nodes}
    quotas = {q.id: q for q in shot.quotas}
    assert len({p.job_id for p in result.preemptions}) == len(result.preemptions)
    for preemption in result.preemptions:
        victim, owner = running[preemption.job_id], jobs[preemption.by_job_id]
        assert not victim.stopping
        assert NOW - victim.started_at >= CONFIG.min_run_seconds
        pool = quotas[owner.quota_id].pool_id
        assert any(
            ((not p.in_quota and p.pod_id not in returns) or p.pod_id in loans)
            and pools[p.node_id] == pool
            for p in victim.pods
        )
        assert owner.idle_mode == "off" and preemption.job_id not in jobs
        assert preemption.by_quota_id == owner.quota_id


@CHOOSERS
@settings(max_examples=200, deadline=None)
@given(shot=SCENARIOS)
def test_it_preempts_minimal_sets(shot, chooser):
    """Dropping any one victim leaves the owner's gang unplaceable on the room it planned on.

    That room is bounded above by: capacity, less every running pod but those of stopping
    jobs and of this owner's victims, less every admission, less the room held by owners
    ahead of it in the queue.
    """
    result = planned(shot, chooser)
    jobs = pending_by_id(shot)
    quotas = {q.id: q for q in shot.quotas}
    by_owner: dict[int, set[int]] = {}
    for p in result.preemptions:
        by_owner.setdefault(p.by_job_id, set()).add(p.job_id)
    stopping = {j.job_id for j in shot.running if j.stopping}
    running = {j.job_id: j for j in shot.running}
    for owner_id, chosen in by_owner.items():
        owner = jobs[owner_id]
        room = room_without(shot, stopping | chosen)
        for node_id, size, _, _ in admitted_pods(shot, result):
            room[node_id] = add(room[node_id], size, -1)
        for w in result.waiting:
            if w.reserved and queue_key(jobs[w.job_id]) < queue_key(owner):
                sizes = {p.key: vec(p.resources) for p in jobs[w.job_id].pods}
                for placement in w.reserved:
                    room[placement.node_id] = add(room[placement.node_id], sizes[placement.key], -1)
        room = in_pool(room, shot, quotas[owner.quota_id].pool_id)
        pods = [vec(p.resources) for p in owner.pods]
        for victim in chosen:
            without = dict(room)
            for pod in running[victim].pods:
                if pod.node_id in without:
                    without[pod.node_id] = add(without[pod.node_id], vec(pod.resources), -1)
            assert not fits_somehow(pods, without), f"victim {victim} was not needed"


@CHOOSERS
@TWICE
@given(shot=WITH_LOWERED_MINS)
def test_it_gives_the_queue_head_its_quota_back_from_borrowers(shot, chooser):
    """The first job in queue order, regular, with free min, that would fit were every old
    borrower gone, starts, reclaims, or waits only for young borrowers or leaving jobs.
    Where a min was lowered, what its quota runs above it is on loan: not its use, and
    borrowed."""
    live = [j for j in shot.pending if j.not_before is None or j.not_before <= NOW]
    if not live:
        return
    head = min(live, key=queue_key)
    result = planned(shot, chooser)
    loans, returns = frozenset(result.loans), frozenset(result.returns)
    quotas = {q.id: q for q in shot.quotas}
    used = {qid: (0, 0, 0) for qid in quotas}
    for job in shot.running:
        for pod in job.pods:
            if (pod.in_quota and pod.pod_id not in loans) or pod.pod_id in returns:
                for q in chain(quotas, job.quota_id):
                    used[q.id] = add(used[q.id], vec(pod.resources))
    need = (0, 0, 0)
    for pod in head.pods:
        need = add(need, vec(pod.resources))
    if head.idle_mode != "off" or not all(
        fits(add(used[q.id], need), vec(q.min)) for q in chain(quotas, head.quota_id)
    ):
        return
    pool = quotas[head.quota_id].pool_id
    stopping = {j.job_id for j in shot.running if j.stopping}
    old = eligible_borrowers(shot, pool, loans, returns)
    room = in_pool(room_without(shot, stopping | old), shot, pool)
    if not fits_somehow([vec(p.resources) for p in head.pods], room):
        return
    if any(a.job_id == head.job_id for a in result.admissions):
        return
    if any(p.by_job_id == head.job_id for p in result.preemptions):
        return
    reason = next(w.reason for w in result.waiting if w.job_id == head.job_id)
    assert "minimum" in reason or "being freed" in reason, reason


@CHOOSERS
@TWICE
@given(shot=st.one_of(lowered(), lent()))
def test_a_recorded_loan_changes_no_decision(shot, chooser):
    """The live tick records the loans a plan finds on their pods (Not in Quota from then
    on); the next plan decides as it would had they not been recorded."""
    first = planned(shot, chooser)
    again = planned(recorded(shot, first.loans), chooser)
    assert again.loans == () and again.returns == first.returns
    assert again.admissions == first.admissions
    assert again.preemptions == first.preemptions
    assert [(w.job_id, w.reason, w.reserved) for w in again.waiting] == [
        (w.job_id, w.reason, w.reserved) for w in first.waiting
    ]


@CHOOSERS
@TWICE
@given(shot=lent())
def test_it_gives_back_in_quota_what_a_raised_min_holds(shot, chooser):
    """Pods on loan come back In Quota exactly as far as their quota's min holds them,
    after every pod In Quota (a pod placed so first): one more that fits would have come
    back too."""
    result = planned(shot, chooser)
    returns, loans = set(result.returns), set(result.loans)
    quotas = {q.id: q for q in shot.quotas}
    kept = {qid: (0, 0, 0) for qid in quotas}
    used = {qid: (0, 0, 0) for qid in quotas}
    for j in shot.running:
        for p in j.pods:
            for q in chain(quotas, j.quota_id):
                if p.in_quota or p.pod_id in returns:
                    used[q.id] = add(used[q.id], vec(p.resources))
                if (p.in_quota and p.pod_id not in loans) or p.pod_id in returns:
                    kept[q.id] = add(kept[q.id], vec(p.resources))
    assert all(fits(kept[qid], vec(q.min)) for qid, q in quotas.items())
    assert not (returns and loans)
    for j in shot.running:
        for p in j.pods:
            if j.idle_mode == "off" and not p.in_quota and p.pod_id not in returns:
                assert not all(
                    fits(add(used[q.id], vec(p.resources)), vec(q.min))
                    for q in chain(quotas, j.quota_id)
                )
    assert not returns & {p.pod_id for j in shot.running for p in j.pods if j.idle_mode != "off"}


@FAST
@given(snapshots())
def test_it_decides_owners_the_same_whatever_borrowers_queue(shot):
    """Pending only_idle jobs change nothing for regular jobs: no starvation by borrowers."""
    owners_only = Snapshot(
        shot.nodes,
        shot.quotas,
        shot.running,
        tuple(j for j in shot.pending if j.idle_mode != "only_idle"),
    )
    regular = {j.job_id for j in shot.pending if j.idle_mode == "off"}

    def owners_view(result: Plan):
        return (
            [a for a in result.admissions if a.job_id in regular],
            result.preemptions,
            [(w.job_id, w.reason, w.reserved) for w in result.waiting if w.job_id in regular],
        )

    assert owners_view(plan(shot, now=NOW, config=CONFIG)) == owners_view(
        plan(owners_only, now=NOW, config=CONFIG)
    )


@FAST
@given(snapshots(), st.randoms(use_true_random=False))
def test_it_plans_deterministically(shot, rng: random.Random):
    shuffled = Snapshot(
        *(
            tuple(rng.sample(part, len(part)))
            for part in (shot.nodes, shot.quotas, shot.running, shot.pending)
        )
    )
    first = plan(shot, now=NOW, config=CONFIG)
    assert first == plan(shot, now=NOW, config=CONFIG) == plan(shuffled, now=NOW, config=CONFIG)


def planned_on(state: ClusterState, pending, chooser: str) -> Plan:
    budget = (0, 0) if chooser == "by node" else reclaim._GREEDY_BUDGET
    with mock.patch.object(reclaim, "_GREEDY_BUDGET", budget):
        return state.plan(pending, now=NOW)


@CHOOSERS
@TWICE
@given(shot=SCENARIOS, data=st.data())
def test_a_kept_cluster_state_plans_as_a_fresh_snapshot_does(shot, chooser, data):
    """The simulator's ClusterState, told jobs start, stop and checkpoint in any order, and
    planned on again and again, decides exactly what plan() decides on the same snapshot."""
    running = list(shot.running)
    first = data.draw(st.integers(0, len(running)), label="running at build")
    state = ClusterState(shot.nodes, shot.quotas, running[:first], config=CONFIG)
    some_pending = (
        data.draw(st.lists(st.sampled_from(shot.pending), unique=True)) if shot.pending else []
    )
    planned_on(state, some_pending, chooser)  # a plan leaves the state as it was
    for job in running[first:]:
        state.start(job)
    for job in data.draw(st.lists(st.sampled_from(running), unique=True)) if running else []:
        state.stop(job.job_id)
        planned_on(state, shot.pending, chooser)
        state.start(replace(job, last_checkpoint_at=None, stopping=not job.stopping))
        state.update(job)
    expected = planned(shot, chooser)
    assert planned_on(state, shot.pending, chooser) == expected
    assert planned_on(state, shot.pending, chooser) == expected


@FAST
@given(snapshots())
def test_it_positions_waiting_jobs_within_their_quotas_queue(shot):
    result = planned(shot)
    jobs = pending_by_id(shot)
    per_quota = Counter(jobs[w.job_id].quota_id for w in result.waiting)
    seen: dict[int, list[int]] = {}
    for w in sorted(result.waiting, key=lambda w: queue_key(jobs[w.job_id])):
        seen.setdefault(jobs[w.job_id].quota_id, []).append(w.position)
        assert w.queue_size == per_quota[jobs[w.job_id].quota_id] and w.reason
    assert all(positions == list(range(1, len(positions) + 1)) for positions in seen.values())


ROWS = st.tuples(st.integers(0, 200_000), st.integers(0, 4_000_000), st.integers(0, 50_000))


@FAST
@given(
    first=st.lists(ROWS, unique=True, max_size=600),
    moves=st.lists(st.tuples(st.booleans(), ROWS), max_size=120),
    bounds=st.lists(st.tuples(st.integers(-5, 200_000), st.integers(-5, 4_000_000)), max_size=6),
)
def test_the_fut_index_lists_rooms_in_the_order_of_their_tuples(first, moves, bounds):
    """The index of room by (cpu, memory, node), which holds each entry as one integer,
    answers every lower bound with the entries a sorted list of the tuples would give."""
    index = room_module._Chunked(first)
    rows = set(first)
    for removing, row in moves:
        if removing and rows:
            row = sorted(rows)[row[2] % len(rows)]
            index.remove(row)
            rows.discard(row)
        elif row not in rows:
            index.add(row)
            rows.add(row)
    for cpu, memory in [*bounds, (0, 0)]:
        expected = [r for r in sorted(rows) if r >= (cpu, memory)]
        assert list(index.from_key(cpu, memory)) == expected


SHAPES = st.tuples(st.integers(0, 3), st.integers(0, 9_000), st.integers(0, 9_000))


@FAST
@given(
    caps=st.lists(SHAPES, min_size=1, max_size=8),
    used=st.lists(SHAPES, max_size=8),
    shape=SHAPES,
    count=st.integers(1, 4),
    steps=st.lists(
        st.tuples(st.booleans(), st.dictionaries(st.integers(1, 8), SHAPES, max_size=3)),
        max_size=12,
    ),
)
def test_a_gang_of_one_shape_counts_its_room_as_any_gang_would(caps, used, shape, count, steps):
    """The count of slots for a gang of alike pods, kept inline as victims' room is added
    and taken away again, is what a gang of several shapes counts, and what counting every
    node anew gives."""
    nodes = [Node(i + 1, 1, Resources(gpu=c[0], cpu=c[1], memory=c[2])) for i, c in enumerate(caps)]
    pool = room_module.Pool(1, nodes)
    for n, u in zip(pool.cap, used, strict=False):
        pool.occupy(n, u, leaving=False)
    pool.build()
    alone = reclaim._Fit([shape] * count, pool)
    spread = reclaim._Fit([shape] * count, pool)
    spread.alone = None  # the general count, shape by shape
    added: list[dict[int, Vec]] = []
    for removing, freed in steps:
        freed = {n: v for n, v in freed.items() if n in pool.cap}
        if removing and added:
            freed = added.pop()
            sign = -1
        else:
            added.append(freed)
            sign = 1
        alone.add(freed, sign)
        spread.add(freed, sign)
        anew = sum(how_many(alone.room.get(n, tuple(pool.fut[n])), shape) for n in pool.cap)
        assert alone.counts == spread.counts == [anew]
        assert alone.enough() == spread.enough() == (anew >= count)


@st.composite
def scattered(draw) -> Snapshot:
    """Every GPU of a pool taken by 1-GPU pods of borrowers spread over the nodes at random,
    and owners queuing for gangs that need nodes emptied one step at a time (the scatter
    case of benchmarks/scheduler_plan.py, small)."""
    gpus = draw(st.sampled_from([2, 4, 4]))
    nodes = [
        Node(id=i, pool_id=1, capacity=Resources(gpu=gpus, cpu=32000, memory=65536))
        for i in range(1, draw(st.integers(4, 10)) + 1)
    ]
    generous = dict(cpu=10**6, memory=10**7)
    quotas = (
        Quota(1, "owners", None, 1, Resources(gpu=gpus * len(nodes), **generous), "BestEffortFIFO"),
        Quota(2, "lenders", None, 1, Resources(gpu=0, **generous)),
    )
    slots = draw(st.permutations([n.id for n in nodes for _ in range(gpus)]))
    running = []
    while slots:
        jid = 100 + len(running)
        count = min(draw(st.integers(1, 4)), len(slots))
        pods = tuple(
            RunningPod(jid * 10 + i, slots.pop(), Resources(gpu=1, cpu=1000, memory=1024), False)
            for i in range(count)
        )
        running.append(
            RunningJob(
                jid,
                f"r{jid}",
                2,
                "only_idle",
                draw(st.integers(1, 2)),
                NOW - draw(st.sampled_from([600, 3600, 7200, 9000])),
                draw(st.sampled_from([None, NOW - 60, NOW - 300, NOW - 500])),
                pods,
            )
        )
    pending = [
        PendingJob(
            jid,
            f"p{jid}",
            1,
            "off",
            1,
            NOW - jid,
            tuple(
                PodRequest(f"worker-{i}", Resources(gpu=size, cpu=1000, memory=1024))
                for i in range(draw(st.integers(1, 3)))
            ),
        )
        for jid, size in enumerate(
            draw(st.lists(st.sampled_from([gpus, gpus // 2, gpus // 2]), min_size=3, max_size=8)), 1
        )
    ]
    return Snapshot(tuple(nodes), quotas, tuple(running), tuple(pending))


@settings(max_examples=500, deadline=None)
@given(shot=scattered())
def test_node_by_node_choice_keeps_its_steps_as_a_fresh_look_at_every_node_would(shot):
    """Choosing victims node by node keeps every node's first step in a heap for the plan,
    refreshed from the nodes that changed, and takes the next steps a selection worked out as
    the first steps of the nodes its claim left that way: the plan is the one a fresh look at
    every node, before every choice, gives."""
    fresh_look = reclaim.Reclaimer._first_steps

    def anew(self, pool, envelope, young_ok):
        self.first_steps.pop((pool.id, envelope, young_ok), None)
        self.settled.clear()
        return fresh_look(self, pool, envelope, young_ok)

    kept = planned(shot, "by node")
    with mock.patch.object(reclaim.Reclaimer, "_first_steps", anew):
        assert planned(shot, "by node") == kept


@settings(max_examples=400, deadline=None)
@given(
    shot=st.one_of(scattered(), SCENARIOS),
    budget=st.tuples(st.integers(0, 3), st.integers(0, 8)),
)
def test_the_greedy_gives_up_where_adding_its_victims_one_by_one_would(shot, budget):
    """The greedy keeps its first victims for each gang shape through the plan, and gives
    up at its budget without adding them one by one again: the plan is the one it makes
    when it adds them every time."""

    def one_by_one(self, pods, pool, young_ok, budget):
        return False

    with mock.patch.object(reclaim, "_GREEDY_BUDGET", budget):
        kept = plan(shot, now=NOW, config=CONFIG)
        with mock.patch.object(reclaim.Reclaimer, "_gives_up", one_by_one):
            assert plan(shot, now=NOW, config=CONFIG) == kept


@FAST
@given(shot=scattered(), data=st.data())
def test_the_greedys_kept_victims_answer_as_counting_them_afresh_would(shot, data):
    """The greedy's first victims, kept through claims and changes of room on their nodes,
    say it gives up exactly when the same victims counted afresh do, and only when adding
    them one by one gives up too."""
    pool = room_module.Pool(1, list(shot.nodes))
    for job in shot.running:
        for pod in job.pods:
            pool.occupy(pod.node_id, vec(pod.resources), leaving=False)
    pool.build()
    reclaimer = reclaim.Reclaimer({1: pool})
    borrowers = []
    for job in shot.running:
        borrower = reclaim.Borrower(job, now=NOW, min_run=60.0)
        freed: dict[int, Vec] = {}
        for pod in job.pods:
            freed[pod.node_id] = add(freed.get(pod.node_id, (0, 0, 0)), vec(pod.resources))
        borrower.freed = {1: freed}
        reclaimer.add(borrower, [1])
        borrowers.append(borrower)
    reclaimer.sort()
    gpus = shot.nodes[0].capacity.gpu
    for _ in range(data.draw(st.integers(1, 10), label="changes")):
        change = data.draw(st.sampled_from(["claim", "hold", "leave"]))
        node = data.draw(st.sampled_from([n.id for n in shot.nodes]))
        if change == "claim":
            unclaimed = [b for b in borrowers if not b.claimed]
            if unclaimed:
                reclaimer.claim([data.draw(st.sampled_from(unclaimed))])
        elif change == "hold" and pool.fut[node][0] > 0:
            pool.reserve(node, (1, 1000, 1024))
        elif change == "leave":
            pool.release(node, (1, 1000, 1024))
        for size in {gpus, gpus // 2, 1}:
            for count in (1, 2, 3):
                pods = [(size, 1000, 1024)] * count
                for budget in (0, 1, 3):
                    kept = reclaimer._gives_up(pods, pool, False, budget)
                    ahead, reclaimer.ahead = reclaimer.ahead, {}
                    assert reclaimer._gives_up(pods, pool, False, budget) == kept
                    reclaimer.ahead = ahead
                    if kept:
                        with mock.patch.object(reclaim.Reclaimer, "_gives_up", lambda *a: False):
                            assert reclaimer._choose_greedy(
                                pods, pool, young_ok=False, budget=budget
                            )[1]
