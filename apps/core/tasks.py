from __future__ import annotations

import socket

from celery import current_app, shared_task
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from apps.core.redis import redis_client
from apps.core.services import heartbeat_record


@shared_task
def heartbeat_task() -> None:
    """Beat's pulse: the health panel reads it to tell whether beat and a worker run."""
    heartbeat_record(name="beat", now=timezone.now(), detail=socket.gethostname())


def task_soon(name: str) -> None:
    """Run the Celery task called `name` (it takes no arguments) right after this transaction
    commits; asks made while a run is queued make no second one (a Redis flag, cleared by
    `task_soon_started` as the task starts). By name, so an app asks for a tick of an app
    above it (the scheduler's, after a submit or a pod's end) without importing it."""

    def enqueue() -> None:
        task = import_string(name)  # the task's module, as Celery's autodiscovery would
        if current_app.conf.task_always_eager or redis_client().set(
            _soon_flag(name), 1, nx=True, ex=10
        ):
            task.delay()

    transaction.on_commit(enqueue)


def task_soon_started(name: str) -> None:
    redis_client().delete(_soon_flag(name))


def _soon_flag(name: str) -> str:
    return f"task-soon:{name}"
