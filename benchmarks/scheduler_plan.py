"""Time of the pure planning pass, no database:

    python benchmarks/scheduler_plan.py [--seed 7] [--repeat 3]

Synthetic cluster: 2,000 nodes × 8 GPUs (one pool, then two), a tree of 20 quotas
(4 roots × 4 children), 10,000 pending jobs of 1–16 pods (regular, acceptable, only_idle;
seeded random). Cases:
- fill:    empty cluster, the whole queue; admits what fits.
- idle:    the same queue minus what `fill` admitted, on the cluster `fill` left: nothing
           more is admissible (every job is explained and positioned).
- reclaim: the cluster full of borrowers, 1,000 regular jobs of owners with free quota
           arriving; owners preempt borrowers. reclaim+: the same with 9,000 more jobs queued.
- scatter: the cluster full of 1-GPU borrowers spread at random, so an 8-GPU pod needs
           up to 8 victims on one node; 1,000 owners arriving.
Prints the best of --repeat runs of `plan()` (building the snapshot is not timed), in wall
seconds and in CPU seconds of this process: on a shared machine the two part when other
work takes the CPU, and the CPU figure is the steadier one.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps.scheduler.engine import (  # noqa: E402
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
)

NOW = 1_700_000_000.0
NODES = 2_000
PENDING = 10_000
GPU_SIZES = (1, 2, 4, 8, 8)
POD_COUNTS = (1, 1, 1, 2, 2, 4, 4, 8, 16)


def node_capacity() -> Resources:
    return Resources(cpu=96_000, memory=768 * 1024, gpu=8)


def pod_size(gpu: int) -> Resources:
    return Resources(cpu=gpu * 10_000, memory=gpu * 80 * 1024, gpu=gpu)


def cluster(pools: int, count: int = NODES) -> tuple[tuple[Node, ...], tuple[Quota, ...]]:
    """Nodes split evenly over the pools; 4 root quotas (over the pools) × 4 children.
    Roots guarantee 80% of their pool; children 25% of their root, a few over-committed."""
    nodes = tuple(
        Node(id=i + 1, pool_id=1 + i % pools, capacity=node_capacity()) for i in range(count)
    )
    roots_per_pool = 4 // pools
    pool_gpus = count // pools * 8
    root_gpus = pool_gpus * 8 // 10 // roots_per_pool
    quotas: list[Quota] = []
    for r in range(4):
        pool = 1 + r // roots_per_pool
        root_id = len(quotas) + 1
        quotas.append(Quota(root_id, f"dept-{r}", None, pool, _min(root_gpus), "StrictFIFO"))
        for c in range(4):
            share = root_gpus // 4 + (root_gpus // 8 if c == 0 else 0)
            strategy = "BestEffortFIFO" if c % 2 else "StrictFIFO"
            quotas.append(
                Quota(len(quotas) + 1, f"team-{r}{c}", root_id, pool, _min(share), strategy)
            )
    return nodes, tuple(quotas)


def _min(gpus: int) -> Resources:
    return Resources(cpu=gpus * 12_000, memory=gpus * 96 * 1024, gpu=gpus)


def queue(
    rng: random.Random,
    quotas: tuple[Quota, ...],
    count: int,
    *,
    first_id: int = 1,
    modes=("off", "off", "off", "acceptable", "only_idle"),
) -> tuple[PendingJob, ...]:
    jobs = []
    for jid in range(first_id, first_id + count):
        gpu = rng.choice(GPU_SIZES)
        pods = tuple(
            PodRequest(f"worker-{i}", pod_size(gpu)) for i in range(rng.choice(POD_COUNTS))
        )
        quota = rng.choice(quotas)
        jobs.append(
            PendingJob(
                job_id=jid,
                name=f"job-{jid}",
                quota_id=quota.id,
                idle_mode=rng.choice(modes),
                priority=rng.choice((1, 1, 1, 3, 5, 9)),
                submitted_at=NOW - rng.uniform(0, 86_400),
                pods=pods,
            )
        )
    return tuple(jobs)


def after(shot: Snapshot, result: Plan) -> Snapshot:
    """The snapshot of the next tick: admitted jobs running, the rest still queued."""
    jobs = {j.job_id: j for j in shot.pending}
    started = []
    for admission in result.admissions:
        job = jobs.pop(admission.job_id)
        sizes = {p.key: p.resources for p in job.pods}
        pods = tuple(
            RunningPod(admission.job_id * 100 + i, p.node_id, sizes[p.key], p.in_quota)
            for i, p in enumerate(admission.placements)
        )
        started.append(
            RunningJob(
                job.job_id, job.name, job.quota_id, job.idle_mode, job.priority, NOW, None, pods
            )
        )
    return Snapshot(shot.nodes, shot.quotas, shot.running + tuple(started), tuple(jobs.values()))


def borrowers_everywhere(rng: random.Random, nodes, quotas) -> tuple[RunningJob, ...]:
    """Fill every node with old borrowers (1–8 pods, spread over neighbouring nodes)."""
    free = {n.id: 8 for n in nodes}
    by_pool: dict[int, list[int]] = {}
    for n in nodes:
        by_pool.setdefault(n.pool_id, []).append(n.id)
    jobs: list[RunningJob] = []
    for pool_nodes in by_pool.values():
        i = 0
        while i < len(pool_nodes):
            gpu = rng.choice((2, 4, 8))
            pods = []
            for _ in range(rng.choice((1, 2, 4, 8))):
                while i < len(pool_nodes) and free[pool_nodes[i]] < gpu:
                    i += 1
                if i == len(pool_nodes):
                    break
                free[pool_nodes[i]] -= gpu
                pods.append(
                    RunningPod(len(jobs) * 100 + len(pods), pool_nodes[i], pod_size(gpu), False)
                )
            if pods:
                jid = 1_000_000 + len(jobs)
                quota = rng.choice(
                    [q for q in quotas if q.pool_id == nodes[pool_nodes[0] - 1].pool_id]
                )
                started = NOW - rng.uniform(120, 36_000)
                checkpoint = started + rng.uniform(0, NOW - started) if rng.random() < 0.7 else None
                jobs.append(
                    RunningJob(
                        jid,
                        f"borrower-{jid}",
                        quota.id,
                        rng.choice(("only_idle", "acceptable")),
                        rng.choice((1, 3, 5)),
                        started,
                        checkpoint,
                        tuple(pods),
                    )
                )
    return tuple(jobs)


def scattered_borrowers(rng: random.Random, nodes, quotas) -> tuple[RunningJob, ...]:
    """Every GPU of the pool used by 1-GPU pods of borrowers, spread over random nodes."""
    slots = [n.id for n in nodes for _ in range(8)]
    rng.shuffle(slots)
    jobs: list[RunningJob] = []
    while slots:
        jid = 2_000_000 + len(jobs)
        count = min(rng.choice((1, 2, 4, 8)), len(slots))
        pods = tuple(
            RunningPod(jid * 100 + i, slots.pop(), pod_size(1), False) for i in range(count)
        )
        quota = rng.choice([q for q in quotas if q.pool_id == nodes[pods[0].node_id - 1].pool_id])
        jobs.append(
            RunningJob(
                jid,
                f"borrower-{jid}",
                quota.id,
                "only_idle",
                1,
                NOW - rng.uniform(120, 36_000),
                None,
                pods,
            )
        )
    return tuple(jobs)


def timed(shot: Snapshot, repeat: int) -> tuple[float, float, Plan]:
    """The best wall and the best CPU seconds of `repeat` runs, and the plan."""
    best, best_cpu, result = float("inf"), float("inf"), None
    for _ in range(repeat):
        gc.collect()  # each run starts from a collected heap: no collection left over
        start, start_cpu = time.perf_counter(), time.process_time()
        result = plan(shot, now=NOW)
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - start_cpu)
    assert result is not None
    return best, best_cpu, result


def report(case: str, shot: Snapshot, seconds: float, cpu: float, result: Plan) -> None:
    admitted = len(result.admissions)
    rate = f"{admitted / seconds:,.0f} admissions/s" if admitted else "—"
    print(
        f"  {case:<8} {len(shot.pending):>6,} pending {len(shot.running):>6,} running   "
        f"plan {seconds:6.3f} s (CPU {cpu:6.3f} s)   admitted {admitted:>5,} ({rate})   "
        f"preempted {len(result.preemptions):>4,}   waiting {len(result.waiting):>6,}   "
        f"{len(shot.pending) / seconds:>8,.0f} jobs/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--scatter-scale",
        metavar="OWNERSxNODES",
        action="append",
        help="only the scatter case, 1 pool, at these sizes (e.g. 10000x20000; repeatable); "
        "prints the growth exponent between successive sizes",
    )
    args = parser.parse_args()
    if args.scatter_scale:
        scatter_scaling(args)
        return
    print(f"scheduler plan(): {NODES:,} nodes × 8 GPU, 20 quotas, best of {args.repeat}")
    for pools in (1, 2):
        rng = random.Random(args.seed)
        nodes, quotas = cluster(pools)
        print(f"{pools} pool{'s' if pools > 1 else ''}:")
        fill = Snapshot(nodes, quotas, (), queue(rng, quotas, PENDING))
        seconds, cpu, result = timed(fill, args.repeat)
        report("fill", fill, seconds, cpu, result)
        idle = after(fill, result)
        seconds, cpu, result = timed(idle, args.repeat)
        report("idle", idle, seconds, cpu, result)
        assert not result.admissions and not result.preemptions
        running = borrowers_everywhere(rng, nodes, quotas)
        owners = queue(rng, quotas, 1_000, modes=("off",))
        reclaim = Snapshot(nodes, quotas, running, owners)
        seconds, cpu, result = timed(reclaim, args.repeat)
        report("reclaim", reclaim, seconds, cpu, result)
        mixed = Snapshot(
            nodes, quotas, running, owners + queue(rng, quotas, PENDING - 1_000, first_id=5_000)
        )
        seconds, cpu, result = timed(mixed, args.repeat)
        report("reclaim+", mixed, seconds, cpu, result)
        scatter = Snapshot(nodes, quotas, scattered_borrowers(rng, nodes, quotas), owners)
        seconds, cpu, result = timed(scatter, args.repeat)
        report("scatter", scatter, seconds, cpu, result)


def scatter_scaling(args: argparse.Namespace) -> None:
    """The scatter case at growing sizes: how plan() grows with owners × nodes (the
    exponent from the CPU seconds)."""
    import math

    print(f"scheduler plan(), scatter case, 1 pool, best of {args.repeat}")
    previous: tuple[int, int, float] | None = None
    for size in args.scatter_scale:
        owners, count = (int(x) for x in size.lower().split("x"))
        rng = random.Random(args.seed)
        nodes, quotas = cluster(1, count)
        pending = queue(rng, quotas, owners, modes=("off",))
        shot = Snapshot(nodes, quotas, scattered_borrowers(rng, nodes, quotas), pending)
        seconds, cpu, result = timed(shot, args.repeat)
        growth = ""
        if previous is not None:
            p_owners, p_count, p_cpu = previous
            work = math.log((owners * count) / (p_owners * p_count))
            if work > 0:
                growth = f"   CPU time ∝ (owners × nodes)^{math.log(cpu / p_cpu) / work:.2f}"
        print(f"  {owners:>6,} owners × {count:>6,} nodes", end="")
        report("", shot, seconds, cpu, result)
        if growth:
            print(growth)
        previous = (owners, count, cpu)


if __name__ == "__main__":
    main()
