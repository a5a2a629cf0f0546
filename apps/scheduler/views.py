"""The quota page: the quota tree per resource type, with each quota's guarantee and use, and
who borrows from whom."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from apps.cluster.models import Quota, ResourceType
from apps.core.http import HtmxHttpRequest
from apps.scheduler import selectors
from apps.scheduler.selectors import quota_page


@login_required
@require_GET
def quota_tree(request: HtmxHttpRequest) -> HttpResponse:
    """The whole tree: every team sees every quota, since idle capacity is shared."""
    rows, lending = quota_page()
    groups = [(rt, ResourceType(rt).label, rows[rt]) for rt in ResourceType.values if rt in rows]
    template = "scheduler/quotas.html"
    if request.htmx:
        template += "#quota-tables"
    response = render(request, template, {"groups": groups, "lending": lending})
    patch_vary_headers(response, ["HX-Request"])
    return response


@login_required
@require_GET
def quota_detail(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """One quota: its use over time (?window=6h|24h|7d, ?resource=gpu|cpu|memory) against
    its min, In Quota and borrowed, and who borrows from whom where it takes part."""
    quota = get_object_or_404(Quota.objects.select_related("pool", "parent"), name=name)
    window = request.GET.get("window", "24h")
    if window not in selectors.HISTORY_WINDOWS:
        window = "24h"
    resource = request.GET.get("resource") or ("gpu" if quota.min_gpu else "cpu")
    if resource not in selectors.RESOURCES:
        resource = "gpu"
    rows, lending = quota_page()
    row = next(r for group in rows.values() for r in group if r.quota.pk == quota.pk)
    loans = [
        loan
        for pool in lending
        for loan in pool.loans
        if quota.pk in (loan.borrower.pk, loan.lender and loan.lender.pk)
    ]
    label = selectors.RESOURCES[resource][0]
    context = {
        "quota": quota,
        "row": row,
        "loans": loans,
        "chart": selectors.quota_history_chart(quota, resource=resource, window=window),
        "window": window,
        "windows": list(selectors.HISTORY_WINDOWS),
        "resource": resource,
        "resources": [(key, value[0]) for key, value in selectors.RESOURCES.items()],
        "unit": label,
    }
    template = "scheduler/quota.html"
    if request.htmx:
        template += "#quota-history"
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    return response
