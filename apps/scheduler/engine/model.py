"""The values the engine takes and gives: a snapshot of the cluster in, a plan out.

All frozen and slotted, with ids rather than references between them, so the live tick can
build them from database rows, and a test or a simulator by hand. Also the two readings of
a snapshot's quota tree that the planner and the quotas report share.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from apps.scheduler.engine.vectors import Vec, describe, grow

IdleMode = Literal["off", "acceptable", "only_idle"]
QueueStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
# Policies other than the product's, for comparing them in the simulator (Config).
VictimOrder = Literal["least_lost_work", "kueue", "random"]
PlacementRule = Literal["best_fit", "worst_fit", "random", "fgd"]

MILLI = 1000  # milli-GPUs in one GPU: a shared pod asks for 1..999 of them


class SchedulerError(ValueError):
    """The snapshot itself is inconsistent (duplicate ids, a broken quota tree)."""


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of compute: CPU in millicores, memory in MiB, GPUs as a count."""

    cpu: int = 0
    memory: int = 0
    gpu: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory, self.gpu + other.gpu)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.memory - other.memory, self.gpu - other.gpu)

    def fits_in(self, other: Resources) -> bool:
        """True when every component is at most the other's."""
        return self.cpu <= other.cpu and self.memory <= other.memory and self.gpu <= other.gpu

    @property
    def is_zero(self) -> bool:
        return self.cpu == 0 and self.memory == 0 and self.gpu == 0

    def __str__(self) -> str:
        return describe(vec(self))


ZERO = Resources()


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    pool_id: int
    capacity: Resources
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class Quota:
    id: int
    name: str
    parent_id: int | None
    pool_id: int
    min: Resources
    strategy: QueueStrategy = "StrictFIFO"


@dataclass(frozen=True, slots=True)
class RunningPod:
    """A live pod. `gpu_milli`: its share of one GPU (1..999, `resources.gpu` then 0), 0 for
    whole GPUs. `gpus`: the indexes (0..gpu-1 on its node) of the GPUs it holds; empty when
    unknown, and then the lowest free ones are assumed (sharing.py)."""

    pod_id: int
    node_id: int
    resources: Resources
    in_quota: bool
    gpu_milli: int = 0
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job with live pods. `stopping`: the job is already being stopped (preempted in an
    earlier tick, say); its pods still hold their nodes, but a reclaiming owner may count on
    their room, and it is never picked as a victim again."""

    job_id: int
    name: str
    quota_id: int | None
    idle_mode: IdleMode
    priority: int
    started_at: float  # this attempt's start: lost work and the minimum run count from it
    last_checkpoint_at: float | None  # may be older, from the attempt it resumed from
    pods: tuple[RunningPod, ...]
    stopping: bool = False


@dataclass(frozen=True, slots=True)
class PodRequest:
    """A pod to place. `gpu_milli`: a share of one GPU, 1..999 milli-GPUs, placed on one GPU
    that other shared pods may use too (`resources.gpu` must then be 0); 0 means whole GPUs,
    as many as `resources.gpu` says, each with nothing else on it."""

    key: str  # e.g. "worker-0"
    resources: Resources
    gpu_milli: int = 0


@dataclass(frozen=True, slots=True)
class PendingJob:
    job_id: int
    name: str
    quota_id: int
    idle_mode: IdleMode
    priority: int
    submitted_at: float
    pods: tuple[PodRequest, ...]
    not_before: float | None = None  # requeue backoff
    # pods of its previous attempt not yet exited (saving on SIGTERM): it waits for them
    winding_down: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[Node, ...]
    quotas: tuple[Quota, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]


@dataclass(frozen=True, slots=True)
class Config:
    """How a plan decides. The defaults are the product's rules; the other victim orders
    and placements exist to be compared with them (the simulator): "kueue" takes the lowest
    priority, then the newest; "random" a fixed random order per `seed`; "worst_fit" puts
    each pod on the node left with the most room; "random" placement on any node that fits
    (drawn from `seed` and `now`); "fgd" the node and GPU whose fragmentation grows least
    against `workload` (sharing.py; ties between nodes in a random order per `seed`).
    `workload`: (milli-GPUs a pod asks for, its CPU in millicores, weight), the mix of pods
    FGD keeps room for; empty: the pending pods of the plan."""

    min_run_seconds: float = 60.0  # a borrower younger than this is not preempted yet
    victim_order: VictimOrder = "least_lost_work"
    placement: PlacementRule = "best_fit"
    seed: int = 0
    workload: tuple[tuple[int, int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod goes: its node, and in a pool where GPUs are shared the indexes of the
    GPUs it takes there (one for a shared pod); empty elsewhere, and in a
    `Waiting.reserved`."""

    key: str
    node_id: int
    in_quota: bool
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Admission:
    job_id: int
    placements: tuple[Placement, ...]  # in the order of the job's pods


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: int
    by_job_id: int
    by_quota_id: int
    lost_gpu_seconds: float
    reason: str


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job left pending. `position` is 1-based among the jobs still waiting in its quota's
    queue after this plan, `queue_size` their number. `reserved` is the room held for a
    reclaiming owner (where it will run once the borrowers are gone); empty otherwise.
    `code` names the reason's kind: QuotaInsufficient, BlockedByQueueHead, RequeueBackoff,
    PreviousPodsExiting, ResourceInsufficient, WaitingForReclaim, UnknownQuota, NoPods."""

    job_id: int
    reason: str
    position: int
    queue_size: int
    reserved: tuple[Placement, ...] = ()
    code: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    """`loans`: the ids of the running pods placed In Quota that their quota's min no
    longer holds (lowered under its jobs' use), counted Not in Quota from this plan on.
    `returns`: the ids of pods on loan (recorded Not in Quota) that their quota's min holds
    again (raised since), counted In Quota from this plan on."""

    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    waiting: tuple[Waiting, ...]
    loans: tuple[int, ...] = ()
    returns: tuple[int, ...] = ()


def vec(r: Resources) -> Vec:
    """The planner's form of an amount: (gpu, cpu, memory)."""
    return (r.gpu, r.cpu, r.memory)


def milli_vec(r: Resources, gpu_milli: int = 0) -> Vec:
    """An amount as quotas count it: (milli-GPUs, cpu, memory); a shared pod's share, or
    1000 per whole GPU."""
    return (gpu_milli or r.gpu * MILLI, r.cpu, r.memory)


def check_share(gpu_milli: int, r: Resources, what: str) -> None:
    """A shared pod asks for 1..999 milli-GPUs of one GPU and no whole GPU."""
    if gpu_milli and (not 0 < gpu_milli < MILLI or r.gpu):
        raise SchedulerError(f"{what}: gpu_milli must be 1..999 with no whole GPU")


# --- the quota tree --------------------------------------------------------------------


def quota_chains(quotas: dict[int, Quota]) -> dict[int, tuple[Quota, ...]]:
    """Every quota with its ancestors, the quota itself first."""
    chains: dict[int, tuple[Quota, ...]] = {}
    for quota in quotas.values():
        chain: list[Quota] = []
        current: Quota | None = quota
        while current is not None:
            if current in chain:
                raise SchedulerError(f"quota {quota.name} is its own ancestor")
            chain.append(current)
            if current.parent_id is None:
                break
            current = quotas.get(current.parent_id)
            if current is None:
                raise SchedulerError(f"quota {chain[-1].name} has unknown parent")
        chains[quota.id] = tuple(chain)
    return chains


def subtree_use(
    chains: dict[int, tuple[Quota, ...]], running: Iterable[RunningJob], *, in_quota: bool
) -> dict[int, list[int]]:
    """Per quota: the use of its jobs and its descendants', In Quota or Not in Quota."""
    use = {qid: [0, 0, 0] for qid in chains}
    for job in running:
        chain = chains.get(job.quota_id) if job.quota_id is not None else None
        if not chain:
            continue
        for pod in job.pods:
            if pod.in_quota == in_quota:
                for quota in chain:
                    grow(use[quota.id], vec(pod.resources))
    return use
