from __future__ import annotations

import logging
import socket
from collections.abc import Callable

from celery import current_app, shared_task
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string
from kombu.exceptions import OperationalError
from redis import RedisError

from apps.core.redis import redis_client
from apps.core.services import heartbeat_record

logger = logging.getLogger(__name__)


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

    hint_on_commit(enqueue, what=name)


def hint_on_commit(send: Callable[[], None], *, what: str) -> None:
    """Run `send`, which puts messages on the broker, once this transaction commits. The
    messages are hints that make work happen sooner (an admission, a tick, a pod's start
    or stop); a sweep does the same work without them (beat's admit-creating and
    scheduler-tick, the agent's reconcile and watch loops). So a broker that is down
    (Redis restarting) costs a warning, not an error after the commit: the submit or stop
    the user asked for is done, and an error page would invite them to do it twice."""

    def hint() -> None:
        if current_app.conf.task_always_eager:  # the tasks run here and now: let them raise
            send()
            return
        try:
            send()
        except (RedisError, OperationalError, OSError) as exc:
            logger.warning("could not send %s (%s); a sweep will do its work", what, exc)

    transaction.on_commit(hint)


def task_soon_started(name: str) -> None:
    redis_client().delete(_soon_flag(name))


def _soon_flag(name: str) -> str:
    return f"task-soon:{name}"
