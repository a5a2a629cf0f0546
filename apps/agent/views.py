"""Pod logs in the console: the last lines, a live follow (htmx polling), and a download.

Only members of the pod's job's workspace see them; anyone else gets 404.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext
from django.views.decorators.http import require_GET
from django_htmx.http import HTMX_STOP_POLLING

from apps.agent import logs
from apps.core.http import HtmxHttpRequest
from apps.jobs.models import Pod
from apps.jobs.selectors import jobs_visible

DEFAULT_TAIL = 200
MAX_TAIL = 10_000


def _get_pod_for_user(request: HttpRequest, pod_id: str) -> Pod:
    """The pod, if the user may see its job (`jobs_visible`); 404 otherwise (never 403)."""
    pod = (
        Pod.objects.filter(pod_id=pod_id, job__in=jobs_visible(user=request.user))
        .select_related("job", "role", "node")
        .first()
    )
    if pod is None:
        raise Http404(gettext("No such pod"))
    return pod


def _int(value: str | None, default: int, *, low: int, high: int) -> int:
    try:
        return min(max(int(value), low), high)
    except (TypeError, ValueError):
        return default


@login_required
@require_GET
def pod_logs(request: HtmxHttpRequest, pod_id: str) -> HttpResponse:
    """The log page (last `tail` lines, then following); to its own poll (target
    #log-follow, `offset`) only the new bytes, with 286 once the pod ended and all is sent;
    `format=text` gives the tail as plain text; `timestamps=1` starts each line with when it
    was written, in the reader's time zone."""
    pod = _get_pod_for_user(request, pod_id)
    path = logs.pod_log_path(pod)
    finished = logs.pod_log_finished(pod)
    timestamps = request.GET.get("timestamps") == "1"
    zone = timezone.get_current_timezone()

    def shown(text: str, end: int) -> str:
        return logs.stamped(path, text, end, zone) if timestamps and text else text

    if request.htmx and request.htmx.target == "log-follow":
        offset = _int(request.GET.get("offset"), 0, low=0, high=2**62)
        chunk = logs.log_read(path, offset, finished=finished)
        done = finished and chunk.offset >= chunk.size
        context = {
            "pod": pod,
            "chunk": shown(chunk.text, chunk.offset),
            "offset": chunk.offset,
            "finished": done,
            "timestamps": timestamps,
        }
        response = render(
            request,
            "agent/pod_logs.html#log-follow",
            context,
            status=HTMX_STOP_POLLING if done else 200,
        )
    else:
        tail = _int(request.GET.get("tail"), DEFAULT_TAIL, low=1, high=MAX_TAIL)
        text, offset = logs.log_tail(path, tail)
        text = shown(text, offset)
        if request.GET.get("format") == "text":
            response = HttpResponse(text, content_type="text/plain; charset=utf-8")
        else:
            context = {
                "pod": pod,
                "job": pod.job,
                "text": text,
                "timestamps": timestamps,
                "zone": zone,
                "tail": tail,
                "offset": offset,
                "finished": finished,
                "chunk": "",
                "has_log": logs.log_exists(path),
                "siblings": _siblings(pod),
            }
            response = render(request, "agent/pod_logs.html", context)
    patch_vary_headers(response, ["HX-Request", "HX-Target"])
    return response


def _siblings(pod: Pod) -> list[Pod]:
    """The pods of the same attempt of the job, for switching between their logs."""
    return list(
        Pod.objects.filter(job_id=pod.job_id, attempt=pod.attempt)
        .select_related("role")
        .order_by("role__role_type", "index")
    )


@login_required
@require_GET
def pod_logs_download(request: HttpRequest, pod_id: str) -> FileResponse:
    pod = _get_pod_for_user(request, pod_id)
    log = logs.log_open(logs.pod_log_path(pod))
    if log is None:
        raise Http404(gettext("This pod wrote no log"))
    return FileResponse(
        log,
        as_attachment=True,
        filename=f"{pod.pod_id}.log",
        content_type="text/plain; charset=utf-8",
    )
