from __future__ import annotations

from celery import shared_task

from apps.whatif.services import whatif_run


@shared_task
def whatif_run_task(run_pk: int) -> None:
    whatif_run(run_pk=run_pk)
