from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from apps.core.redis import singleton_lock
from apps.jobs.services import job_admit, jobs_admit_creating


@shared_task
def job_admit_task(job_pk: int) -> None:
    job_admit(job_pk=job_pk, now=timezone.now())


@shared_task
def jobs_admit_creating_task() -> None:
    with singleton_lock("jobs-admit-creating", timeout=30) as acquired:
        if acquired:
            jobs_admit_creating(now=timezone.now())
