"""Node agents and pod processes in the admin: for looking only (agents write them)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from apps.agent.models import NodeAgent, PodProcess


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(NodeAgent)
class NodeAgentAdmin(_ReadOnly):
    list_display = ("node", "worker", "hostname", "address", "sandbox", "last_seen")
    search_fields = ("node__name", "worker", "hostname")


@admin.register(PodProcess)
class PodProcessAdmin(_ReadOnly):
    list_display = (
        "pod",
        "state",
        "queue",
        "rank",
        "world_size",
        "agent",
        "pid",
        "sandbox",
        "exit_code",
        "started_at",
        "exited_at",
    )
    list_filter = ("state", "sandbox")
    search_fields = ("pod__pod_id", "agent")
    list_select_related = ("pod",)
    raw_id_fields = ("pod",)
