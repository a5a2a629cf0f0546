"""The quota page: the quota tree per resource type, with each quota's guarantee and use, and
who borrows from whom."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from apps.cluster.models import ResourceType
from apps.core.http import HtmxHttpRequest
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
