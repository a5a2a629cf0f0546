"""The What-if pages (platform staff): start a run, watch its progress, compare the reports."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.core.http import HtmxHttpRequest
from apps.whatif.forms import WhatIfForm
from apps.whatif.models import WhatIfRun
from apps.whatif.selectors import current_cluster_file, whatif_runs
from apps.whatif.services import SIDES, report_path, whatif_create, whatif_queue

ROWS = (
    ("gpu_allocation_ratio", _("GPU allocation"), "pct"),
    ("unallocated_gpus", _("Unallocated GPUs"), "num"),
    ("fragmented_gpus", _("Fragmented GPUs"), "num"),
    ("preemptions", _("Preemptions"), "num"),
    ("lost_gpu_hours", _("Lost GPU-hours"), "num"),
    ("wall_seconds", _("Run time, s"), "num"),
)


def _staff(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise PermissionDenied(gettext("What if is for platform staff."))


@login_required
@require_http_methods(["GET", "POST"])
def whatif_index(request: HtmxHttpRequest) -> HttpResponse:
    _staff(request)
    if request.method == "POST":
        form = WhatIfForm(request.POST, request.FILES)
    else:  # the changed cluster file starts as the current one
        form = WhatIfForm(initial={"cluster_file": current_cluster_file()})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        run = whatif_create(
            user=request.user,
            title=data["title"],
            source=data["source"],
            days=data.get("days"),
            trace=data.get("trace") if data["source"] == WhatIfRun.Source.UPLOAD else None,
            mode=data["mode"],
            policies=data["policies"],
            cluster_file=data["cluster_file"],
        )
        return redirect("whatif:detail", pk=run.pk)
    status = 400 if request.method == "POST" else 200
    return render(
        request, "whatif/index.html", {"form": form, "runs": whatif_runs()}, status=status
    )


@login_required
@require_GET
def whatif_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    _staff(request)
    run = get_object_or_404(WhatIfRun.objects.select_related("created_by"), pk=pk)
    template = "whatif/detail.html"
    if request.htmx:
        template += "#run-state"
    context = {"run": run, "comparison": _comparison(run)}
    # 286 tells htmx to stop polling once the run has finished
    response = render(
        request, template, context, status=286 if request.htmx and run.finished else 200
    )
    patch_vary_headers(response, ["HX-Request"])
    return response


@login_required
@require_POST
def whatif_again(request: HttpRequest, pk: int) -> HttpResponse:
    _staff(request)
    run = get_object_or_404(WhatIfRun, pk=pk)
    whatif_queue(run=run)
    return redirect("whatif:detail", pk=run.pk)


@login_required
@require_GET
def whatif_report(request: HttpRequest, pk: int, side: str) -> FileResponse:
    _staff(request)
    run = get_object_or_404(WhatIfRun, pk=pk)
    path = report_path(run, side)
    if side not in SIDES or not path.is_file():
        raise Http404(gettext("No such report."))
    return FileResponse(open(path, "rb"), content_type="text/html; charset=utf-8")


def _comparison(run: WhatIfRun) -> list[dict]:
    """Per policy: each figure on the current cluster and with the changed file, and the
    change; the delay percentiles too."""
    if not (run.current and run.changed):
        return []
    changed = {p["policy"]: p for p in run.changed.get("policies", [])}
    out = []
    for now in run.current.get("policies", []):
        then = changed.get(now["policy"])
        if then is None:
            continue
        rows = [(label, kind, now.get(key), then.get(key)) for key, label, kind in ROWS]
        for q in ("p50", "p90", "p99"):
            rows.append(
                (
                    gettext("Queueing delay %(percentile)s, s") % {"percentile": q},
                    "num",
                    (now.get("delay_seconds") or {}).get(q),
                    (then.get("delay_seconds") or {}).get(q),
                )
            )
        out.append({"policy": now["policy"], "rows": rows})
    return out
