from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.core.redis import singleton_lock
from apps.core.tasks import task_soon, task_soon_started
from apps.jobs.services import SCHEDULER_TICK_TASK
from apps.scheduler.services import scheduler_tick


@shared_task
def scheduler_tick_task() -> None:
    task_soon_started(SCHEDULER_TICK_TASK)
    with singleton_lock(
        "scheduler-tick", timeout=max(30.0, settings.SCHEDULER_TICK_INTERVAL)
    ) as ok:
        if ok:
            scheduler_tick(now=timezone.now())


def scheduler_tick_soon() -> None:
    """Ask for a tick right after this transaction commits; many asks make one tick."""
    task_soon(SCHEDULER_TICK_TASK)
