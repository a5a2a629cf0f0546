"""The bills page (daily bills of the current workspace, per day and per job, with the
`acs:pai:dlc:payType` tag filter) and its CSV export."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from apps.billing import selectors
from apps.billing.models import PAY_TYPE_TAG, PayType
from apps.core.csvexport import csv_lines
from apps.core.http import HtmxHttpRequest
from apps.workspaces.middleware import refreshes_on_workspace_switch


def _pay_type(request: HttpRequest) -> str:
    value = request.GET.get("pay_type", "")
    return value if value in PayType.values else ""


@login_required
@require_GET
@refreshes_on_workspace_switch
def bill_index(request: HtmxHttpRequest) -> HttpResponse:
    pay_type = _pay_type(request)
    scope = {"user": request.user, "workspace": request.workspace, "pay_type": pay_type}
    jobs = Paginator(selectors.job_daily_bills(**scope), settings.JOBS_PAGE_SIZE)
    context = {
        "days": selectors.workspace_daily_bills(**scope),
        "page": jobs.get_page(request.GET.get("page")),
        "pay_type": pay_type,
        "pay_types": PayType.choices,
        "tag": PAY_TYPE_TAG,
        "today": selectors.utc_today(),
    }
    template = "billing/index.html"
    if request.htmx and request.htmx.target == "job-bills":
        template += "#job-bills"
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request", "HX-Target"])
    return response


@login_required
@require_GET
def bill_export(request: HttpRequest) -> StreamingHttpResponse:
    pay_type = _pay_type(request)
    rows = selectors.bill_export_rows(
        user=request.user, workspace=request.workspace, pay_type=pay_type
    )
    response = StreamingHttpResponse(csv_lines(rows), content_type="text/csv; charset=utf-8")
    name = request.workspace.name if request.workspace else "none"
    suffix = f"-{pay_type}" if pay_type else ""
    response["Content-Disposition"] = f'attachment; filename="bills-{name}{suffix}.csv"'
    return response
