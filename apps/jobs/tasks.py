from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from apps.core.tasks import task_soon_started
from apps.jobs.services import ADMIT_TASK, jobs_admit_creating


@shared_task
def jobs_admit_creating_task() -> None:
    """Admit every job in Creating: asked for by each submit (`task_soon`) and run by beat's
    "admit-creating", which also admits what a lost message or a killed worker left behind.
    Runs at once are safe: each admits the jobs it could lock."""
    task_soon_started(ADMIT_TASK)
    jobs_admit_creating(now=timezone.now())


@shared_task
def job_admit_task(job_pk: int) -> None:
    """The per-job message submits once sent (some may still be queued): it admits every
    job in Creating too, so a backlog of them holds no new job back; each one after the
    first finds nothing to do in one query."""
    jobs_admit_creating(now=timezone.now())
