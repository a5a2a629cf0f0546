"""What a run reports: the JSON summary, and the CSV series behind the charts.

Allocation is measured as the literature does: the milli-GPUs that running pods asked for,
over the cluster's capacity (`gpu_allocation_ratio`). The GPUs with a pod on them
(`gpu_occupied_ratio`) can be higher: a GPU shared by fractional pods counts whole, as does
the whole GPU a fractional pod is given when GPU sharing is off.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from apps.simulator.sim import JobOutcome, Result, Settings
from apps.simulator.trace import TraceJob

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None when empty."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def delays(values: Sequence[float]) -> dict[str, Any]:
    out: dict[str, Any] = {f"p{q}": _round(percentile(values, q)) for q in PERCENTILES}
    out["mean"] = _round(sum(values) / len(values)) if values else None
    out["count"] = len(values)
    return out


def job_delay(job: JobOutcome) -> float | None:
    return None if job.first_start is None else job.first_start - job.submit


def policy_summary(result: Result) -> dict[str, Any]:
    """One policy's figures (docs/simulator.md, "Output")."""
    jobs = [j for j in result.jobs if not j.spot]  # quota jobs; spot ones are told apart
    started = [d for j in jobs if (d := job_delay(j)) is not None]
    by_class: dict[str, list[float]] = defaultdict(list)
    by_quota: dict[str, list[float]] = defaultdict(list)
    for j in jobs:
        if (d := job_delay(j)) is not None:
            by_class[j.qos or "-"].append(d)
            by_quota[j.quota].append(d)
    ratio, occupied, fragmented = _allocation(result)
    summary: dict[str, Any] = {
        "policy": result.policy.name,
        **result.policy.describe(),
        "gpu_allocation_ratio": _round(ratio, 6),
        "gpu_occupied_ratio": _round(occupied, 6),
        "unallocated_gpus": _round(result.capacity_gpus * (1 - ratio), 2),
        "fragmented_gpus": _round(result.capacity_gpus * fragmented, 2),
    }
    if result.mode == "fill":
        summary["allocation_at_arrived"] = {
            f"{mark:g}": _round(value, 6) for mark, value in result.at_arrived.items()
        }
        summary["arrived_ratio"] = _round(result.series.x[-1] if result.series.x else 0.0, 6)
        summary["pods_arrived"] = len(jobs)
        summary["pods_placed"] = sum(1 for j in jobs if not j.dropped)
        summary["pods_unplaced"] = sum(1 for j in jobs if j.dropped)
    else:
        summary["gpu_allocation_peak"] = _round(max(result.series.allocated, default=0.0), 6)
        summary["jobs"] = {
            "submitted": len(jobs),
            "started": len(started),
            "finished": sum(1 for j in jobs if j.finish is not None),
            "never_started": len(jobs) - len(started),
        }
        summary.update(
            {
                "delay_seconds": delays(started),
                "delay_seconds_by_class": {k: delays(v) for k, v in sorted(by_class.items())},
                "delay_seconds_by_quota": {k: delays(v) for k, v in sorted(by_quota.items())},
            }
        )
    summary.update(
        {
            "preemptions": result.preemptions,
            "preempted_jobs": sum(1 for j in jobs if j.preemptions),
            "lost_gpu_hours": _round(result.lost_gpu_seconds / 3600, 4),
            "plan_calls": result.plan_calls,
            "wall_seconds": _round(result.wall_seconds, 3),
            "cpu_seconds": _round(result.cpu_seconds, 3),
        }
    )
    if result.spot is not None:
        summary["spot"] = spot_summary(result)
    return summary


def spot_summary(result: Result) -> dict[str, Any]:
    """The spot jobs' figures: how many started, waited, were reclaimed, lost and paid."""
    figures = result.spot
    assert figures is not None
    jobs = [j for j in result.jobs if j.spot]
    started = [d for j in jobs if (d := job_delay(j)) is not None]
    return {
        "jobs": len(jobs),
        "started": len(started),
        "finished": sum(1 for j in jobs if j.finish is not None),
        "no_instance_type": figures.unplaceable,
        "delay_seconds": delays(started),
        "reclaims": figures.reclaims,
        "reclaimed_jobs": sum(1 for j in jobs if j.preemptions),
        "lost_gpu_hours": _round(figures.lost_gpu_seconds / 3600, 4),
        "instance_hours": _round(figures.instance_minutes / 60, 2),
        "cost_cny": str(figures.cost),
        "prices": {
            t: {
                "min": str(min(p for _, p in points)),
                "max": str(max(p for _, p in points)),
                "last": str(points[-1][1]),
                "changes": len(points) - 1,
            }
            for t, points in sorted(figures.prices.items())
        },
    }


def _allocation(result: Result) -> tuple[float, float, float]:
    """The allocation ratio, the occupied one and the fragmented one (÷ capacity):
    `_over_run` of each series."""
    s = result.series
    capacity = result.capacity_gpus
    occupied = [n / capacity if capacity else 0.0 for n in s.occupied]
    return (
        _over_run(result, s.allocated),
        _over_run(result, occupied),
        _over_run(result, s.fragmented),
    )


def _over_run(result: Result, values: Sequence[float]) -> float:
    """A series' figure for the whole run. Fill: its value at the end. Replay: its
    time-weighted mean over the span of arrivals (first to last submission), or, when
    every job arrived at once, from then to the run's last event (a What if on a few of
    the cluster's jobs: the end alone, all jobs gone, would read 0%)."""
    s = result.series
    if not s.x:
        return 0.0
    if result.mode == "fill":
        return values[-1]
    start = min(j.submit for j in result.jobs)
    end = max(j.submit for j in result.jobs)
    if end <= start:
        end = s.x[-1]
    if end <= start:
        return values[-1]
    area = 0.0
    for i, t in enumerate(s.x):
        nxt = s.x[i + 1] if i + 1 < len(s.x) else end
        lo, hi = max(t, start), min(nxt, end)
        if hi > lo:
            area += values[i] * (hi - lo)
    return area / (end - start)


def run_summary(
    *,
    results: Sequence[Result],
    traces: Sequence[TraceJob],
    settings: Settings,
    sources: dict[str, str | None],
    nodes: int,
    gpus: int,
) -> dict[str, Any]:
    recorded = [t.recorded_delay for t in traces if t.recorded_delay is not None]
    fractional = sum(t.pods for t in traces if t.fractional)
    return {
        "mode": settings.mode,
        "sources": sources,
        "seed": settings.seed,
        "nodes": nodes,
        "capacity_gpus": gpus,
        "jobs": len(traces),
        "pods": sum(t.pods for t in traces),
        "gpu_sharing": settings.gpu_sharing,
        "fractional_pods": fractional,
        "fractional_pods_rounded_up": 0 if settings.gpu_sharing else fractional,
        "settings": {
            "quota_rule": settings.quota_rule,
            "idle_modes": dict(settings.idle_modes),
            "checkpoint_interval": settings.checkpoint_interval,
            "min_run_seconds": settings.min_run_seconds,
            "requeue_backoff": settings.requeue_backoff,
            "tick": settings.tick,
            "speedup": settings.speedup,
            "workload_hours": settings.workload_hours,
            **(
                {"fill_to": settings.fill_to, "shuffle": settings.shuffle}
                if settings.mode == "fill"
                else {}
            ),
        },
        "recorded_delay_seconds": delays(recorded) if recorded else None,
        "policies": [policy_summary(r) for r in results],
    }


SERIES_COLUMNS = (
    "policy",
    "x",
    "gpu_allocation_ratio",
    "occupied_gpus",
    "running_jobs",
    "pending_jobs",
    "preemptions",
    "lost_gpu_hours",
    "fragmented_gpus",
)


def write_csv(results: Iterable[Result], directory: str | Path) -> list[Path]:
    """series.csv (one row per point, x = time in replay, arrived share in fill) and
    jobs.csv (one row per job and policy)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    results = list(results)
    series_path, jobs_path = out / "series.csv", out / "jobs.csv"
    with series_path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SERIES_COLUMNS)
        for r in results:
            s = r.series
            for i in range(len(s.x)):
                w.writerow(
                    (
                        r.policy.name,
                        f"{s.x[i]:.6g}",
                        f"{s.allocated[i]:.6f}",
                        s.occupied[i],
                        s.running[i],
                        s.pending[i],
                        s.preemptions[i],
                        f"{s.lost_gpu_seconds[i] / 3600:.4f}",
                        f"{s.fragmented[i] * r.capacity_gpus:.2f}",
                    )
                )
    with jobs_path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ("policy", "job", "qos", "quota", "submit", "first_start", "delay", "finish")
            + ("preemptions", "lost_gpu_hours", "dropped")
        )
        for r in results:
            for j in r.jobs:
                d = job_delay(j)
                w.writerow(
                    (
                        r.policy.name,
                        j.name,
                        j.qos,
                        j.quota,
                        f"{j.submit:g}",
                        "" if j.first_start is None else f"{j.first_start:g}",
                        "" if d is None else f"{d:g}",
                        "" if j.finish is None else f"{j.finish:g}",
                        j.preemptions,
                        f"{j.lost_gpu_seconds / 3600:.4f}",
                        int(j.dropped),
                    )
                )
    return [series_path, jobs_path]


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)
