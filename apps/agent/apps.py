from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AgentConfig(AppConfig):
    """Node agents: Celery workers that run pods as real processes, and their logs."""

    name = "apps.agent"
    label = "agent"
    verbose_name = _("Node agents")

    def ready(self) -> None:
        from apps.agent import services
        from apps.jobs.execution import executor_register

        executor_register(services)  # placed pods reach the agents through apps.jobs.execution
