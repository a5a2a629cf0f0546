"""The What-if pages (platform staff): start a run, watch its progress, compare the reports."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.core.http import HtmxHttpRequest
from apps.core.middleware import unsent_form
from apps.whatif.forms import WhatIfForm
from apps.whatif.models import WhatIfRun
from apps.whatif.selectors import current_cluster_file, whatif_policy_names, whatif_runs
from apps.whatif.services import (
    SIDES,
    report_path,
    whatif_create,
    whatif_queue,
    whatif_trace_forget,
    whatif_trace_keep,
)

ROWS = (
    ("gpu_allocation_ratio", _("GPU allocation"), "pct"),
    ("unallocated_gpus", _("Unallocated GPUs"), "num"),
    ("fragmented_gpus", _("Fragmented GPUs"), "num"),
    ("preemptions", _("Preemptions"), "num"),
    ("lost_gpu_hours", _("Lost GPU-hours"), "num"),
    ("wall_seconds", _("Run time, s"), "num"),
)


KEPT_TRACES = (
    "whatif_kept_traces"  # the session's uploads kept for a form shown again (token: name)
)
MAX_KEPT_TRACES = 3


def _staff(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise PermissionDenied(gettext("What if is for platform staff."))


@login_required
@require_http_methods(["GET", "POST"])
def whatif_index(request: HtmxHttpRequest) -> HttpResponse:
    _staff(request)
    kept: dict[str, str] = request.session.get(KEPT_TRACES, {})
    unsent = None
    if request.method == "POST":
        form = WhatIfForm(request.POST, request.FILES, kept=kept)
    else:  # the changed cluster file starts as the current one, or as typed before a sign-in
        initial = {"cluster_file": current_cluster_file()}
        if (unsent := unsent_form(request)) is not None:
            initial |= {name: unsent[name] for name in WhatIfForm.base_fields if name in unsent}
        form = WhatIfForm(initial=initial)
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
        if data.get("trace") is not None:
            data["trace"].close()
        if form.kept_token:
            _forget_kept(request, form.kept_token)
        return redirect("whatif:detail", pk=run.pk)
    if request.method == "POST":
        _keep_trace(request, form)
    status = 400 if request.method == "POST" else 200
    context = {"form": form, "runs": whatif_runs(), "unsent": unsent is not None}
    return render(request, "whatif/index.html", context, status=status)


def _keep_trace(request: HttpRequest, form: WhatIfForm) -> None:
    """A refused form's trace, newly chosen and fine itself, is kept for the form shown again:
    a browser cannot put a file back in a file input."""
    trace = getattr(form, "cleaned_data", {}).get("trace")
    if trace is None or form.kept_token:
        return
    token = whatif_trace_keep(trace=trace, now=timezone.now())
    kept = dict(request.session.get(KEPT_TRACES, {}))
    kept[token] = trace.name
    for old in list(kept)[:-MAX_KEPT_TRACES]:
        whatif_trace_forget(token=old)
        del kept[old]
    request.session[KEPT_TRACES] = kept
    form.keep_trace(token, trace.name)


def _forget_kept(request: HttpRequest, token: str) -> None:
    whatif_trace_forget(token=token)
    kept = dict(request.session.get(KEPT_TRACES, {}))
    kept.pop(token, None)
    request.session[KEPT_TRACES] = kept


@login_required
@require_GET
def whatif_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    _staff(request)
    run = get_object_or_404(WhatIfRun.objects.select_related("created_by"), pk=pk)
    template = "whatif/detail.html"
    if request.htmx:
        template += "#run-state"
    policies = ", ".join(whatif_policy_names(run))
    if not run.policies:
        policies = gettext("%(policies)s (the mode's default)") % {"policies": policies}
    context = {"run": run, "comparison": _comparison(run), "policies": policies}
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
                    gettext("Queueing delay %(percentile)s") % {"percentile": q},
                    "dur",
                    (now.get("delay_seconds") or {}).get(q),
                    (then.get("delay_seconds") or {}).get(q),
                )
            )
        out.append({"policy": now["policy"], "rows": rows})
    return out
