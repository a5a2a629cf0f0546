"""Rules of a job's life that the scheduler, the market and the node agent share. No Django,
no Celery, no clock: times are seconds since the epoch, passed in.

The engine (choosing victims), the market (reclaiming spot jobs) and the agent (restarts,
lost nodes) all call these, so an interruption costs the same whoever causes it: the work
it loses (`lost_gpu_seconds`), what AIMaster does about it (`after_interruption`,
`after_pod_failure`, the one budget check `aimaster_declines`), and when a job has
succeeded (`success_outcome`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from apps.core.words import say, say_n


def lost_gpu_seconds(
    *,
    gpus: float,
    started_at: float,
    last_checkpoint_at: float | None,
    now: float,
) -> float:
    """GPU-seconds of work an interruption at `now` throws away: computed since the job's
    last checkpoint, or since `started_at` (when this attempt, or this pod, started) if
    there is no checkpoint or it is older — an attempt that resumed from an old checkpoint
    has lost nothing from before its own start. Never negative (a checkpoint stamped after
    `now`, or a pod that finished before its job's checkpoint, lose nothing)."""
    since = started_at if last_checkpoint_at is None else max(started_at, last_checkpoint_at)
    return max(0.0, gpus * (now - since))


def resume_step(checkpoints: Iterable[tuple[int, bool]]) -> int | None:
    """The step a job's next attempt resumes from, of its recorded checkpoints as
    (step, loadable: its file still there and not found damaged): the highest loadable step
    — EasyCkpt's `load_latest` goes by step, not by the time a checkpoint records (a clock
    ahead makes an older step look newer), and a file already removed, or one an earlier
    load passed over as damaged, cannot be loaded. None: from the start. The "Resumed" and
    "Restarted" events both ask here."""
    return max((step for step, left in checkpoints if left), default=None)


def resume_message(step: int | None, *, passed_over: Sequence[str] = ()) -> str:
    """What a restarted job's events say it resumes from. Before its pods run (no
    `passed_over`), only the step its load will try (`resume_step`): "Resuming from
    checkpoint at step 230", an intent. Once the load passed over damaged files (their
    names, `passed_over`), the step it really loaded (None: from the start), which is what
    the job resumed from: "Damaged checkpoints passed over: …; resumed from checkpoint at
    step 220". So the job's events read a plan, then what came of it, and never two
    resumes from different steps. The scheduler, the market and the agent all word it
    here; an in-place restart's "Restarted" event says the same intent in its own words."""
    if passed_over:
        files = ", ".join(passed_over)
        if step is None:
            return say(
                "Damaged checkpoints passed over: {files}; resumed from the start", files=files
            )
        return say(
            "Damaged checkpoints passed over: {files}; resumed from checkpoint at step {step}",
            step=step,
            files=files,
        )
    if step is None:
        return say("Resuming from the start (no checkpoint yet)")
    return say("Resuming from checkpoint at step {step}", step=step)


def lost_work_revised(*, was: float, recounted: float, resumed: bool) -> float | None:
    """The work an interruption lost, `was`, counted again (`recounted`, by
    `lost_gpu_seconds`) from a checkpoint learnt of after it, or None when `was` stands.
    The interruption's cost is the work since the checkpoint the job goes on from, so:
    a checkpoint the interrupted pods saved after the one counted from (on their way out,
    in the grace period, or read from the manifest a moment late) only lowers it — a save
    older than the one counted from is not what the job goes on from; the next attempt's
    own word of what its load resumed from (`resumed`: it passed over damaged files for an
    older checkpoint, or for the start) sets it, more or less. The same for every
    interruption: a requeue, a restart in place (the whole job, or in Async mode only the
    failed pods), or the one that ended the job."""
    if recounted == was or (recounted > was and not resumed):
        return None
    return recounted


def hang_message(*, quiet_since: float | None, interval: int | None, now: float) -> str | None:
    """AIMaster's hang detection: why the job is hung — no pod of its attempt has written
    any output since `quiet_since` (the newest output or pod start, whichever is later),
    `interval` seconds or more ago — or None while it is not (or detection is off, or
    nothing has started). The agent's check and the restart it asks for both ask here."""
    if interval is None or quiet_since is None or now - quiet_since < interval:
        return None
    return say(
        "no output from any pod for {quiet} s (hang detection: {interval} s)",
        quiet=f"{now - quiet_since:.0f}",
        interval=interval,
    )


def after_hang(*, budget: Budget, spot: bool, nodes_ready: bool) -> Requeue | RestartInPlace | Fail:
    """AIMaster's hang detection found the job hung (`hang_message`): what a failed pod in
    Sync mode gets — the whole job restarted in place, or placed again when a node of it is
    gone, or failed when AIMaster declines. No restart policy declines: no pod exited."""
    return after_pod_failure(
        budget=budget,
        platform=False,
        restart_policy="Always",
        exit_code=None,
        spot=spot,
        async_mode=False,
        pod_node_ready=nodes_ready,
        nodes_ready=nodes_ready,
    )


def winding_down_reason(pods: int) -> str:
    """Why a job's next attempt waits although room may be free: `pods` of its previous
    attempt have been told to stop and have not exited yet (SIGTERM, the grace period, a
    save on the way out). Two attempts never run at once, so none reads or writes the
    checkpoint directory while the other still does. The scheduler and the market say it."""
    return say_n(
        pods,
        "waiting for {count} pod of its previous attempt to exit (grace period)",
        "waiting for {count} pods of its previous attempt to exit (grace period)",
    )


# --- success policy ------------------------------------------------------------------------

SuccessPolicy = Literal["AllWorkers", "ChiefWorker"]
# Rank 0 is the Master (PyTorchJob) or Chief (TFJob); Workers follow; then the rest. The
# agent hands out RANK in this order, and the rank-0 pod is the chief of ChiefWorker.
ROLE_ORDER = ("Master", "Chief", "Launcher", "Head", "Worker", "PS", "Evaluator")


def rank_key(role: str, index: int) -> tuple[int, int]:
    """Where a pod stands in its job's rank order (smallest first)."""
    return (ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER), index)


@dataclass(frozen=True, slots=True)
class PodState:
    """One pod of the job's current attempt: its role, index in the role, status
    (Pending, Running, Succeeded, Failed, …) and name (for messages)."""

    role: str
    index: int
    status: str
    name: str = ""


@dataclass(frozen=True, slots=True)
class Succeeded:
    """The job succeeded; `message` is its ReasonMessage."""

    message: str


@dataclass(frozen=True, slots=True)
class Failed:
    """A pod of the attempt failed: under every policy that ends the attempt, and AIMaster
    decides what follows (`after_pod_failure`)."""

    pod: PodState


def success_outcome(*, policy: str, pods: Iterable[PodState]) -> Succeeded | Failed | None:
    """What the attempt's pod states say about the job; None while it still runs.
    ChiefWorker: Succeeded once the chief (the rank-0 pod) has; AllWorkers (and any other
    policy): once every pod has. A failed pod fails the attempt whatever the policy. An
    attempt without pods still runs."""
    ranked = sorted(pods, key=lambda p: (rank_key(p.role, p.index), p.name, p.status))
    failed = [p for p in ranked if p.status == "Failed"]
    if failed:
        return Failed(failed[0])
    if not ranked:
        return None
    if policy == "ChiefWorker":
        chief = ranked[0]
        return (
            Succeeded(say("The chief pod {pod} succeeded", pod=chief.name))
            if chief.status == "Succeeded"
            else None
        )
    if all(p.status == "Succeeded" for p in ranked):
        return Succeeded(say("All pods succeeded"))
    return None


# --- AIMaster ------------------------------------------------------------------------------

RestartPolicy = Literal["Never", "OnFailure", "Always", "ExitCode"]
# A pod the platform took away (a node lost or drained, its agent restarted or stopped): the
# job is requeued without spending AIMaster's budget, with or without AIMaster.
PLATFORM_REASONS = ("NodeLost", "NodeDrained", "AgentRestarted", "AgentStopped")


@dataclass(frozen=True, slots=True)
class Budget:
    """A job's automatic fault tolerance: AIMaster on or off, and restarts spent of its max."""

    aimaster: bool
    max_restarts: int
    restart_times: int


def aimaster_declines(budget: Budget) -> str | None:
    """Why AIMaster will not restart the job after a failure of its own (a pod failed or
    hung), or None while restarts remain. The one budget check."""
    if not budget.aimaster:
        return _no_aimaster()
    if budget.restart_times >= budget.max_restarts:
        return say(
            "restarts exhausted ({used}/{most})",
            used=budget.restart_times,
            most=budget.max_restarts,
        )
    return None


def _no_aimaster() -> str:
    return say("no automatic fault tolerance")


def reclaim_note(budget: Budget) -> str:
    """What a preemption's or a spot reclaim's messages add: AIMaster requeues the job
    whatever its budget, and spends none of it."""
    return say(
        "its resources were taken back: AIMaster's budget {used}/{most} is not used",
        used=budget.restart_times,
        most=budget.max_restarts,
    )


def platform_note(budget: Budget) -> str:
    """What a platform interruption's messages add, so nobody reads it as the job's fault
    or looks for a spent restart."""
    if budget.aimaster:
        return say(
            "a platform interruption: AIMaster's budget {used}/{most} is not used",
            used=budget.restart_times,
            most=budget.max_restarts,
        )
    return say("a platform interruption: requeued although AIMaster is off")


@dataclass(frozen=True, slots=True)
class Requeue:
    """Place the whole job again: back to the spot market (Bidding) when `rebid`, else to
    its queue. `counted`: it spends one restart (a failure of the job's own). `backoff`: it
    waits out the requeue backoff (all but a platform interruption: the job did nothing to
    thrash)."""

    rebid: bool
    counted: bool
    backoff: bool


@dataclass(frozen=True, slots=True)
class RestartInPlace:
    """Replace the job's pods where they ran, spending one restart: only the failed pods
    when `pods_only` (Async), else every pod of the attempt (Sync)."""

    pods_only: bool


@dataclass(frozen=True, slots=True)
class Fail:
    """The job ends Failed; `reason` says why AIMaster does not restart it."""

    reason: str


# Why a job lost its pods: a quota's owner or the spot market took them back (`reclaim`), the
# platform took them (`platform`: PLATFORM_REASONS), or a failure of its own (`failure`: a pod
# failed or hung, and a node of the job is gone, so it is placed again rather than in place).
Interruption = Literal["reclaim", "platform", "failure"]


def after_interruption(*, budget: Budget, kind: Interruption, spot: bool) -> Requeue | Fail:
    """The job lost its pods (`kind`, above); a spot job goes back to bidding.

    - platform: always requeued, at once, and never counted;
    - reclaim: never terminal for a job with AIMaster — it waits again, after the backoff,
      whatever its budget, which it does not spend (the job did nothing wrong); without
      AIMaster it ends the job;
    - failure: requeued, spending a restart, while AIMaster has restarts left.
    """
    if kind == "platform":
        return Requeue(rebid=spot, counted=False, backoff=False)
    if kind == "reclaim":
        if not budget.aimaster:
            return Fail(_no_aimaster())
        return Requeue(rebid=spot, counted=False, backoff=True)
    if (why := aimaster_declines(budget)) is not None:
        return Fail(why)
    return Requeue(rebid=spot, counted=True, backoff=True)


def restart_policy_declines(policy: str, exit_code: int | None) -> str | None:
    """Why the role's restart policy forbids restarting its failed pod, or None. Under
    ExitCode, codes below 128 are the program's own (permanent); 128+N is a signal, and a
    vanished process (no code) may be retried."""
    if policy == "Never":
        return say("restart policy Never")
    if policy == "ExitCode" and exit_code is not None and exit_code < 128:
        return say("exit code {code} is permanent under restart policy ExitCode", code=exit_code)
    return None


def after_pod_failure(
    *,
    budget: Budget,
    platform: bool,
    restart_policy: str,
    exit_code: int | None,
    spot: bool,
    async_mode: bool,
    pod_node_ready: bool,
    nodes_ready: bool,
) -> Requeue | RestartInPlace | Fail:
    """A pod of the job's current attempt failed. `platform`: the platform took it (its
    reason is one of PLATFORM_REASONS). `pod_node_ready` / `nodes_ready`: the failed pod's
    node, and every node of the attempt, can take pods again. In order: a platform failure
    is requeued uncounted; AIMaster's budget, then the restart policy, may decline; Async
    restarts the failed pod in place, Sync the whole job; when a node is gone the whole job
    is placed again."""
    if platform:
        return after_interruption(budget=budget, kind="platform", spot=spot)
    why = aimaster_declines(budget) or restart_policy_declines(restart_policy, exit_code)
    if why is not None:
        return Fail(why)
    if async_mode and pod_node_ready:
        return RestartInPlace(pods_only=True)
    if nodes_ready:
        return RestartInPlace(pods_only=False)
    return after_interruption(budget=budget, kind="failure", spot=spot)
