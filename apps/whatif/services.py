"""What-if runs: create one, and carry it out (in a Celery worker: `whatif_run_task`)."""

from __future__ import annotations

import re
import secrets
import time
import tomllib
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.tasks import hint_on_commit
from apps.simulator import (
    Cluster,
    ClusterError,
    PolicyError,
    Settings,
    TraceError,
    parse_policies,
    read_jobs,
    run_summary,
    simulate,
)
from apps.simulator.cluster import cluster_from_toml
from apps.simulator.report import render
from apps.whatif.models import WhatIfRun
from apps.whatif.selectors import current_cluster, default_policies, jobs_trace

SIDES = ("current", "changed")
PROGRESS_EVERY = 0.5  # seconds between progress writes
# A run that wrote no progress for this long has lost its worker (or its message): it is
# queued again. Progress is written every PROGRESS_EVERY while a run works.
STALE = timedelta(minutes=5)


def run_dir(run: WhatIfRun) -> Path:
    return Path(settings.VAR_DIR) / "whatif" / str(run.pk)


def report_path(run: WhatIfRun, side: str) -> Path:
    return run_dir(run) / f"{side}.html"


# An uploaded trace is kept while its form is shown again after an error (a browser cannot
# put a file back in a file input): under a random token, for a day at most.
KEPT_TRACES_FOR = timedelta(days=1)
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{20,64}$")


def _kept_dir() -> Path:
    return Path(settings.VAR_DIR) / "whatif" / "uploads"  # beside the runs' numbered folders


def whatif_trace_keep(*, trace: UploadedFile, now: datetime) -> str:
    """Store an upload of a form that was refused for another field; returns its token.
    Uploads kept longer than KEPT_TRACES_FOR are removed."""
    folder = _kept_dir()
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if old.stat().st_mtime < (now - KEPT_TRACES_FOR).timestamp():
            old.unlink(missing_ok=True)
    token = secrets.token_urlsafe(24)
    trace.seek(0)
    with open(folder / token, "wb") as out:
        for chunk in trace.chunks():
            out.write(chunk)
    return token


def whatif_trace_kept(*, token: str, name: str) -> UploadedFile | None:
    """The kept upload of `token` under its uploaded name, or None (gone, or no token)."""
    path = _kept_dir() / token
    if not _TOKEN.match(token) or not path.is_file():
        return None
    return UploadedFile(open(path, "rb"), name=name, size=path.stat().st_size)  # noqa: SIM115


def whatif_trace_forget(*, token: str) -> None:
    if _TOKEN.match(token):
        (_kept_dir() / token).unlink(missing_ok=True)


@transaction.atomic
def whatif_create(
    *,
    user,
    title: str,
    source: str,
    days: int | None,
    trace: UploadedFile | None,
    mode: str,
    policies: str,
    cluster_file: str,
) -> WhatIfRun:
    """Store the run (and its uploaded trace) and queue it once the transaction commits."""
    run = WhatIfRun.objects.create(
        created_by=user,
        title=title,
        source=source,
        days=days,
        trace_name=trace.name if trace else "",
        mode=mode,
        policies=policies,
        cluster_file=cluster_file,
    )
    if trace is not None:
        folder = run_dir(run)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "trace.csv", "wb") as out:
            for chunk in trace.chunks():
                out.write(chunk)
    whatif_queue(run=run)
    return run


def whatif_queue(*, run: WhatIfRun) -> None:
    """Queue the run (again: a run left Running by a worker that died starts over)."""
    from apps.whatif.tasks import whatif_run_task  # the task module imports this one

    WhatIfRun.objects.filter(pk=run.pk).update(
        status=WhatIfRun.Status.QUEUED, progress=0.0, message="", updated_at=timezone.now()
    )
    hint_on_commit(lambda: whatif_run_task.delay(run.pk), what="whatif_run_task")  # or the sweep


def whatif_sweep(*, now: datetime) -> int:
    """Queue again the runs whose worker died mid-run or whose message was lost (no progress
    for STALE); returns how many. Beat calls it every minute."""
    stale = list(
        WhatIfRun.objects.filter(
            status__in=(WhatIfRun.Status.QUEUED, WhatIfRun.Status.RUNNING),
            updated_at__lt=now - STALE,
        )
    )
    for run in stale:
        whatif_queue(run=run)
    return len(stale)


def whatif_run(*, run_pk: int) -> None:
    """Replay the run's trace on the current cluster and on its changed cluster file, each
    policy in turn, writing progress as it goes; the summaries land on the run and the HTML
    reports beside its trace. A problem with the inputs fails the run with its message."""
    now = timezone.now()
    claimed = (
        WhatIfRun.objects.filter(pk=run_pk)
        .filter(
            Q(status=WhatIfRun.Status.QUEUED)
            | Q(status=WhatIfRun.Status.RUNNING, updated_at__lt=now - STALE)
        )
        .update(status=WhatIfRun.Status.RUNNING, progress=0.0, updated_at=now)
    )
    run = WhatIfRun.objects.filter(pk=run_pk).first()
    if not claimed or run is None:
        return  # finished, or another worker has it (a message delivered twice)
    try:
        policies = parse_policies(run.policies or default_policies(run.mode))
        try:
            data = tomllib.loads(run.cluster_file)
        except tomllib.TOMLDecodeError as e:
            raise ClusterError(f"cluster file: {e}") from e
        clusters: dict[str, Cluster] = {
            "current": current_cluster(),
            "changed": cluster_from_toml(data),
        }
        if run.source == WhatIfRun.Source.UPLOAD:
            traces = read_jobs(run_dir(run) / "trace.csv", name=run.trace_name)
        else:
            traces = jobs_trace(days=run.days or 7, now=run.created_at)
        if not traces:
            raise TraceError(
                "the trace has no jobs"
                if run.source == WhatIfRun.Source.UPLOAD
                else f"no quota job of the last {run.days or 7} days ran or waits: "
                "nothing to replay"
            )
        if not clusters["current"].nodes:
            raise ClusterError("the current cluster has no dedicated nodes")
        sim = Settings(mode=run.mode, seed=42)  # type: ignore[arg-type]
        steps, done = len(SIDES) * len(policies), 0
        summaries = {}
        for side in SIDES:
            cluster, results = clusters[side], []
            for policy in policies:
                results.append(
                    simulate(traces, cluster, policy, sim, progress=_progress(run, done, steps))
                )
                done += 1
            summary = run_summary(
                results=results,
                traces=traces,
                settings=sim,
                sources={"trace": run.replayed, "nodes": None, "cluster": side},
                nodes=len(cluster.nodes),
                gpus=cluster.gpus,
            )
            report_path(run, side).parent.mkdir(parents=True, exist_ok=True)
            report_path(run, side).write_text(render(summary, results))
            summaries[side] = summary
    except (TraceError, ClusterError, PolicyError, ValueError) as e:
        WhatIfRun.objects.filter(pk=run.pk).update(
            status=WhatIfRun.Status.FAILED, message=str(e), updated_at=timezone.now()
        )
        return
    WhatIfRun.objects.filter(pk=run.pk).update(
        status=WhatIfRun.Status.DONE,
        progress=1.0,
        current=summaries["current"],
        changed=summaries["changed"],
        updated_at=timezone.now(),
    )


def _progress(run: WhatIfRun, done: int, steps: int):
    """A simulator progress callback writing the run's share done, at most twice a second."""
    last = [0.0]

    def report(count: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] < PROGRESS_EVERY and count < total:
            return
        last[0] = now
        share = (done + (count / total if total else 1.0)) / steps
        WhatIfRun.objects.filter(pk=run.pk).update(progress=share, updated_at=timezone.now())

    return report
