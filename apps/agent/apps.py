from __future__ import annotations

from django.apps import AppConfig


class AgentConfig(AppConfig):
    """Node agents: Celery workers that run pods as real processes, and their logs."""

    name = "apps.agent"
    label = "agent"
    verbose_name = "Node agents"
