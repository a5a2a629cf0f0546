from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from apps.whatif.services import whatif_run, whatif_sweep


@shared_task
def whatif_run_task(run_pk: int) -> None:
    whatif_run(run_pk=run_pk)


@shared_task
def whatif_sweep_task() -> int:
    return whatif_sweep(now=timezone.now())
