"""Operations: the health panel (for platform staff) and /healthz (for load balancers)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_safe

from apps.agent.models import NodeAgent
from apps.agent.runner import isolation_status
from apps.agent.selectors import backlog
from apps.core.http import HtmxHttpRequest
from apps.core.models import Heartbeat
from apps.core.selectors import health_snapshot
from apps.ops.selectors import cluster_counts
from apps.scheduler.selectors import placement_status


@dataclass(frozen=True)
class Seen:
    """A row of the agents panel (a node agent or an agent's heartbeat) and how fresh it is."""

    row: NodeAgent | Heartbeat
    age: float  # seconds since it last reported
    ok: bool  # reported within NODE_LOST_AFTER


def _seen(rows, *, now: datetime) -> list[Seen]:
    ages = [(row, max((now - row.last_seen).total_seconds(), 0.0)) for row in rows]
    return [Seen(row, age, age <= settings.NODE_LOST_AFTER) for row, age in ages]


@login_required
@require_GET
def health(request: HtmxHttpRequest) -> HttpResponse:
    """Beat, workers and broker, the pod sandbox and node agents, work waiting too long,
    node and job counts; the panel re-polls every 10 s. Staff only: it names hosts, workers
    and the sandbox's weak spots."""
    if not request.user.is_staff:
        raise PermissionDenied(gettext("The health page is for platform staff."))
    now = timezone.now()
    snapshot = health_snapshot(now=now)
    behind = backlog(now=now)
    beat_age = (now - snapshot.beat_last_seen).total_seconds() if snapshot.beat_last_seen else None
    template = "ops/health.html"
    if request.htmx:
        template += "#health-panel"
    context = {
        "health": snapshot,
        "beat_age": beat_age,
        "counts": cluster_counts(),
        "now": now,
        "sandbox": isolation_status(settings.SANDBOX),
        "execution_backend": settings.EXECUTION_BACKEND,
        "node_agents": _seen(NodeAgent.objects.select_related("node"), now=now),
        # What the agents report decides whether pods are isolated; this host's own probe
        # only matters where no agent has reported (the web may run on another host).
        "insecure_agents": sorted(
            set(NodeAgent.objects.exclude(sandbox="strict").values_list("worker", flat=True))
        ),
        "agents_known": NodeAgent.objects.exists(),
        "backlog": behind,
        "backlog_ok": all(b.ok for b in behind),
        "behind_seconds": settings.HEALTH_BEHIND_SECONDS,
        "placement": placement_status(now=now),
        "agent_beats": _seen(
            Heartbeat.objects.filter(name__startswith="agent:").order_by("name"), now=now
        ),
    }
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the database answers, 503 when it does not. No login; no details leak."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return JsonResponse(
            {"status": "error", "checks": {"database": f"unreachable ({type(exc).__name__})"}},
            status=503,
        )
    return JsonResponse(
        {"status": "ok", "checks": {"database": "ok"}, "time": timezone.now().isoformat()}
    )
