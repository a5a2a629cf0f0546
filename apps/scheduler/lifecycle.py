"""Rules of a job's life that the scheduler, the market and the node agent share. No Django,
no Celery, no clock: times are seconds since the epoch, passed in.

The engine (choosing victims), the market (reclaiming spot jobs) and the agent (restarts,
lost nodes) all call these, so an interruption costs the same whoever causes it.
"""

from __future__ import annotations


def lost_gpu_seconds(
    *, gpus: float, started_at: float, last_checkpoint_at: float | None, now: float,
) -> float:
    """GPU-seconds of work an interruption at `now` throws away: computed since the job's
    last checkpoint, or since `started_at` (when this attempt, or this pod, started) if
    there is no checkpoint or it is older — an attempt that resumed from an old checkpoint
    has lost nothing from before its own start. Never negative (a checkpoint stamped after
    `now`, or a pod that finished before its job's checkpoint, lose nothing)."""
    since = started_at if last_checkpoint_at is None else max(started_at, last_checkpoint_at)
    return max(0.0, gpus * (now - since))
