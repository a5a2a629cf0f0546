"""Tiny hand-made traces and clusters for the simulator's tests."""

from __future__ import annotations

from apps.scheduler.engine import Quota, Resources
from apps.simulator import Cluster, Policy, Settings, TraceJob, TraceNode, made_up_cluster
from apps.simulator.cluster import engine_nodes
from apps.simulator.sim import Result, simulate

CPU, MEM = 4_000, 16 * 1024  # per GPU of a test pod


def job(
    name: str,
    submit: float,
    *,
    gpu: int = 1,
    milli: int | None = None,
    duration: float | None = 100.0,
    pods: int = 1,
    qos: str = "LS",
    quota: str | None = None,
    idle_mode: str | None = None,
    priority: int = 1,
) -> TraceJob:
    return TraceJob(
        name=name,
        submit=submit,
        duration=duration,
        gpu=gpu,
        gpu_milli=gpu * 1000 if milli is None else milli,
        cpu=CPU * max(gpu, 1),
        memory=MEM * max(gpu, 1),
        pods=pods,
        qos=qos,
        quota=quota,
        idle_mode=idle_mode,
        priority=priority,
    )


def nodes(*gpus: int) -> list[TraceNode]:
    return [
        TraceNode(name=f"n{i}", cpu=96_000, memory=768 * 1024, gpu=g) for i, g in enumerate(gpus)
    ]


def one_quota(*gpus: int) -> Cluster:
    return made_up_cluster(nodes(*gpus))


def two_teams(*gpus: int, a: int, b: int) -> Cluster:
    """Quotas a and b (GPU mins as given) under a root holding the whole cluster."""
    listed = nodes(*gpus)
    big = Resources(cpu=10**7, memory=10**9, gpu=sum(gpus))
    quotas = (
        Quota(id=1, name="root", parent_id=None, pool_id=1, min=big, strategy="BestEffortFIFO"),
        Quota(
            id=2,
            name="a",
            parent_id=1,
            pool_id=1,
            min=Resources(cpu=10**6, memory=10**8, gpu=a),
            strategy="BestEffortFIFO",
        ),
        Quota(
            id=3,
            name="b",
            parent_id=1,
            pool_id=1,
            min=Resources(cpu=10**6, memory=10**8, gpu=b),
            strategy="BestEffortFIFO",
        ),
    )
    return Cluster(engine_nodes(listed), tuple(n.name for n in listed), quotas, ("a", "b"))


def run(
    traces: list[TraceJob],
    cluster: Cluster,
    policy: Policy | None = None,
    **settings: object,
) -> Result:
    return simulate(traces, cluster, policy or Policy("ours"), Settings(**settings))  # type: ignore[arg-type]


def outcome(result: Result, name: str):
    return next(j for j in result.jobs if j.name == name)
