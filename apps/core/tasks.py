from __future__ import annotations

import socket

from celery import shared_task
from django.utils import timezone

from apps.core.services import heartbeat_record


@shared_task
def heartbeat_task() -> None:
    """Beat's pulse: the health panel reads it to tell whether beat and a worker run."""
    heartbeat_record(name="beat", now=timezone.now(), detail=socket.gethostname())
