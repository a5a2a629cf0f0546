"""The job pages: list, create, detail (with its live fragment) and stop.

Views are thin: fetch with permission, validate a form, call one service, redirect, or
render a fragment of the page for htmx.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HTMX_STOP_POLLING

from apps.console.selectors import job_live
from apps.core.errors import ApplicationError, ValidationFailed
from apps.core.http import HtmxHttpRequest
from apps.jobs import selectors
from apps.jobs.forms import ROLE_ROWS, JobCreateForm, JobFilterForm, RoleForm
from apps.jobs.models import Job
from apps.jobs.services import job_stop, job_submit
from apps.market.selectors import job_bid_history, waiting_reasons


def _get_job_for_user(request: HttpRequest, job_id: str) -> Job:
    """The job, if the user belongs to its workspace; 404 otherwise."""
    return selectors.job_get_for_user(user=request.user, job_id=job_id)


def _get_job_to_manage(request: HttpRequest, job_id: str, *, action: str) -> Job:
    """The job, if the user may also stop or change it (`job_can_manage`): 404 outside its
    workspace, 403 with the reason for a member who may only view it."""
    job = _get_job_for_user(request, job_id)
    try:
        selectors.job_ensure_can_manage(user=request.user, job=job, action=action)
    except ApplicationError as error:
        raise PermissionDenied(error.message) from None
    return job


def _htmx_target(request: HtmxHttpRequest) -> str | None:
    return request.htmx.target if request.htmx else None


def _show_waiting_reasons(jobs: list[Job]) -> None:
    """A bidding spot job's reason is not stored (the market does not rewrite thousands of
    them each tick): it is worked out from the market's last quotes, for these jobs only."""
    reasons = waiting_reasons(jobs=jobs)
    for job in jobs:
        if job.pk in reasons:
            job.pending_reason = reasons[job.pk]


@login_required
@require_GET
def job_list(request: HtmxHttpRequest) -> HttpResponse:
    form = JobFilterForm(request.GET, quotas=selectors.quotas_for(workspace=request.workspace))
    filters = form.filters()
    jobs = selectors.job_list(user=request.user, workspace=request.workspace, filters=filters)
    page = Paginator(jobs, settings.JOBS_PAGE_SIZE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    _show_waiting_reasons(page.object_list)
    template = "jobs/list.html"
    if _htmx_target(request) == "job-table":
        template += "#job-table"
    context = {"form": form, "page": page, "filtered": bool(filters)}
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request", "HX-Target"])
    return response


def _job_create_form(request: HttpRequest, data=None) -> JobCreateForm:
    workspace = request.workspace
    return JobCreateForm(
        data,
        workspace=workspace,
        resource_types=selectors.resource_types_for(workspace=workspace),
        quotas=selectors.quotas_for(workspace=workspace),
        instance_types=selectors.instance_types(),
    )


@login_required
@require_http_methods(["GET", "POST"])
def job_create(request: HtmxHttpRequest) -> HttpResponse:
    form = _job_create_form(request, request.POST if request.method == "POST" else None)
    if request.method == "POST" and request.workspace is not None:
        if form.is_valid():
            try:
                job = job_submit(
                    workspace=request.workspace, user=request.user, spec=form.to_spec()
                )
            except ValidationFailed as failed:
                form.add_spec_errors(failed.errors)
            except ApplicationError as error:
                form.other_errors.append(error.message)
            else:
                messages.success(request, f"Job “{job.display_name}” submitted as {job.job_id}.")
                return redirect("jobs:detail", job_id=job.job_id)
    # A rejected form answers 200, as Django's own form views do: the page is the answer,
    # and browsers and htmx treat it as an ordinary page.
    return render(request, "jobs/create.html", {"form": form})


@login_required
@require_GET
def job_price_info(request: HtmxHttpRequest) -> HttpResponse:
    """The create form's price line for one role row: the instance type's prices and the
    row's bid in ¥/h. The row's inputs come in the query string under their usual names."""
    try:
        row = min(max(int(request.GET.get("row", 0)), 0), ROLE_ROWS - 1)
    except ValueError:
        row = 0
    role = RoleForm(request.GET, index=row, instance_types=selectors.instance_types())
    role.is_valid()
    return render(request, "jobs/create.html#price-info", {"role": role})


# The job page's own polls: the live story every few seconds, the spot chart per market step.
DETAIL_PARTIALS = {
    "job-live": "jobs/detail.html#job-live",
    "spot-bids": "jobs/detail.html#spot-bids",
}


def _bid_poll_seconds() -> int:
    return max(int(settings.MARKET_STEP_INTERVAL), 2)


@login_required
@require_GET
def job_detail(request: HtmxHttpRequest, job_id: str) -> HttpResponse:
    """The job page; to the page's own polls (targets #job-live and #spot-bids) only that
    fragment, with 286 once the job has finished so htmx stops asking."""
    job = _get_job_for_user(request, job_id)
    _show_waiting_reasons([job])
    target = _htmx_target(request)
    context = {
        "job": job,
        "bid_poll_seconds": _bid_poll_seconds(),
        "retention_hours": settings.POD_WORK_RETENTION_HOURS,
    }
    if target != "spot-bids":
        context["live"] = job_live(job=job)
        if not job.is_finished:  # the Stop button
            context["can_manage"] = selectors.job_can_manage(user=request.user, job=job)
    if target != "job-live" and job.is_spot:
        context["bid_history"] = job_bid_history(job=job)
    if target in DETAIL_PARTIALS:
        status = HTMX_STOP_POLLING if job.is_finished else 200
        response = render(request, DETAIL_PARTIALS[target], context, status=status)
    else:
        context["roles"] = selectors.job_roles(job=job)
        response = render(request, "jobs/detail.html", context)
    patch_vary_headers(response, ["HX-Request", "HX-Target"])
    return response


@login_required
@require_POST
def job_stop_view(request: HtmxHttpRequest, job_id: str) -> HttpResponse:
    job = _get_job_to_manage(request, job_id, action="stop")
    try:
        job_stop(job=job, by=request.user)
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Job {job.job_id} stopped.")
    return redirect("jobs:detail", job_id=job.job_id)
