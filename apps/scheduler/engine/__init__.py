"""The scheduling core: plain frozen dataclasses in, a plan out. No Django, no Celery, no clock.

One call, `plan(snapshot, now=..., config=...)`, decides for the queue of a dedicated pool
which pending jobs start now (and on which nodes), which borrowers are preempted, and why
every other job is still waiting. The live tick and the tests call it; the simulator keeps a
`ClusterState` between plans instead (told which jobs start and stop), which plans by the
same code without rebuilding the room index of every node each time.

Import from here; the modules are the engine's parts, each importing only those above it:

- `vectors`: room as (gpu, cpu, memory) triples, and the words reasons are written in;
- `model`: the values in and out (`Snapshot`, `Plan`, ...), `SchedulerError`, the quota tree;
- `room`: room on a pool's nodes during a pass, gang placement by best fit;
- `reclaim`: which borrowers an owner preempts (victim choice);
- `sharing`: GPUs one by one, in a pool where some pod asks for part of one, and FGD;
- `plan`: the planner, the two passes over the queues (how a pass runs is told there);
- `report`: quota use, free guarantee, borrowing and lending, for the quotas page.
"""

from __future__ import annotations

from apps.scheduler.engine.model import (
    ZERO,
    Admission,
    Config,
    IdleMode,
    Node,
    PendingJob,
    Placement,
    PlacementRule,
    Plan,
    PodRequest,
    Preemption,
    QueueStrategy,
    Quota,
    Resources,
    RunningJob,
    RunningPod,
    SchedulerError,
    Snapshot,
    VictimOrder,
    Waiting,
)
from apps.scheduler.engine.plan import ClusterState, plan
from apps.scheduler.engine.report import (
    Lending,
    Loan,
    QuotaReport,
    lending,
    quota_report,
    quota_usage,
    snapshot_lending,
    use_over_time,
)
from apps.scheduler.engine.sharing import fragmentation, target_workload

__all__ = [
    "ZERO",
    "Admission",
    "ClusterState",
    "Config",
    "IdleMode",
    "Lending",
    "Loan",
    "Node",
    "PendingJob",
    "Placement",
    "PlacementRule",
    "Plan",
    "PodRequest",
    "Preemption",
    "QueueStrategy",
    "Quota",
    "QuotaReport",
    "Resources",
    "RunningJob",
    "RunningPod",
    "SchedulerError",
    "Snapshot",
    "VictimOrder",
    "Waiting",
    "fragmentation",
    "lending",
    "plan",
    "quota_report",
    "quota_usage",
    "snapshot_lending",
    "target_workload",
    "use_over_time",
]
