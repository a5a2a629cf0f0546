from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.core.redis import redis_client, singleton_lock
from apps.scheduler.services import scheduler_tick

QUEUED_FLAG = "scheduler:tick-queued"


@shared_task
def scheduler_tick_task() -> None:
    redis_client().delete(QUEUED_FLAG)
    with singleton_lock(
        "scheduler-tick", timeout=max(30.0, settings.SCHEDULER_TICK_INTERVAL)
    ) as ok:
        if ok:
            scheduler_tick(now=timezone.now())


def scheduler_tick_soon() -> None:
    """Ask for a tick right after this transaction commits; many asks make one tick."""

    def enqueue() -> None:
        eager = scheduler_tick_task.app.conf.task_always_eager
        if eager or redis_client().set(QUEUED_FLAG, 1, nx=True, ex=10):
            scheduler_tick_task.delay()

    transaction.on_commit(enqueue)
