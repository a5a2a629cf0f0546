"""The job pages: list (polled, sortable, with Stop, Clone and bulk Stop), create (or clone),
detail (with its live fragment) and stop.

Views are thin: fetch with permission, validate a form, call one service, redirect, or
render a fragment of the page for htmx.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import prefetch_related_objects
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_cache_control, patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext, ngettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HTMX_STOP_POLLING

from apps.cluster.selectors import image_list
from apps.console.selectors import (
    job_list_clocks,
    job_list_version,
    job_live,
    job_metrics_panels,
)
from apps.core.errors import ApplicationError, ValidationFailed
from apps.core.http import HtmxHttpRequest
from apps.core.i18n import localized
from apps.core.middleware import unsent_form
from apps.jobs import selectors
from apps.jobs.forms import (
    ROLE_ROWS,
    JobCreateForm,
    JobFilterForm,
    RoleForm,
    clone_initial,
    template_initial,
)
from apps.jobs.models import Job, JobStatus
from apps.jobs.services import (
    PRIORITY_EDITABLE,
    job_delete,
    job_priority_update,
    job_stop,
    job_submit,
    template_delete,
    template_save,
)
from apps.jobs.specs import job_spec_of
from apps.market.selectors import job_bid_history, waiting_show
from apps.workspaces.middleware import refreshes_on_workspace_switch
from apps.workspaces.selectors import workspace_for_user


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
        raise PermissionDenied(localized(error.message)) from None
    return job


def _htmx_target(request: HtmxHttpRequest) -> str | None:
    return request.htmx.target if request.htmx else None


# The job list polls itself this often; answered 204 while its rows are unchanged.
LIST_POLL_SECONDS = 5
LIST_FILTERS = ("q", "status", "payment_type", "quota", "idle_mode")


def _list_query(form: JobFilterForm, *, sort: str, page: int) -> str:
    """The list's query string as the page understood it: the valid filters, the order
    (unless the default) and the page (unless the first). The poll asks for exactly this."""
    query = QueryDict(mutable=True)
    valid = form.filters()
    for name in LIST_FILTERS:
        if name in valid:
            query[name] = form.data.get(name, "")
    if sort != selectors.JOB_SORT_DEFAULT:
        query["sort"] = sort
    if page > 1:
        query["page"] = str(page)
    return query.urlencode()


def _etag_matches(request: HttpRequest, etag: str) -> bool:
    held = request.headers.get("If-None-Match", "")
    return etag in (tag.strip().removeprefix("W/") for tag in held.split(","))


@login_required
@require_GET
@refreshes_on_workspace_switch
def job_list(request: HtmxHttpRequest) -> HttpResponse:
    """The job list; to its own poll (target #job-table with If-None-Match), 204 while the
    rows it shows are as the client holds them, else the table alone."""
    form = JobFilterForm(request.GET, quotas=selectors.quotas_for(workspace=request.workspace))
    filters, sort = form.filters(), form.order()
    now = timezone.now()
    jobs = selectors.job_list_rows(
        user=request.user, workspace=request.workspace, filters=filters, sort=sort, now=now
    )
    page = Paginator(jobs, settings.JOBS_PAGE_SIZE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    prefetch_related_objects(page.object_list, "tags")
    waiting_show(jobs=page.object_list)
    manageable = selectors.jobs_can_manage(user=request.user, jobs=page.object_list)
    query = _list_query(form, sort=sort, page=page.number)
    version = job_list_version(
        jobs=page.object_list, query=query, count=page.paginator.count, manageable=manageable
    )
    etag = f'"{version}"'
    target = _htmx_target(request)
    if target == "job-table" and _etag_matches(request, etag):
        response = HttpResponse(status=204)
    else:
        job_list_clocks(jobs=page.object_list, now=now)
        context = {
            "form": form,
            "page": page,
            "filtered": bool(filters),
            "sort": sort,
            "sort_links": _sort_links(request, sort),
            "stoppable": {j.pk for j in page if j.pk in manageable and not j.is_finished},
            "list_url": reverse("jobs:list") + (f"?{query}" if query else ""),
            "poll_headers": json.dumps({"If-None-Match": etag}),
            "poll_seconds": LIST_POLL_SECONDS,
        }
        template = "jobs/list.html" + ("#job-table" if target == "job-table" else "")
        response = render(request, template, context)
    response["ETag"] = etag  # also on the 204, which keeps the client's version
    patch_cache_control(response, private=True, no_cache=True)
    patch_vary_headers(response, ["HX-Request", "HX-Target"])
    return response


# The direction a column sorts in first: names and statuses A→Z, times newest or longest first.
FIRST_DIRECTION = {"name": "name", "status": "status", "created": "-created", "running": "-running"}


@dataclass(frozen=True)
class SortLink:
    url: str  # the list ordered by this column (the other direction if it is the order now)
    direction: str  # "ascending" | "descending" | "" (not the order now), as aria-sort says


def _sort_links(request: HttpRequest, sort: str) -> dict[str, SortLink]:
    links = {}
    for key in selectors.JOB_SORT_KEYS:
        if sort.lstrip("-") == key:
            wanted = key if sort.startswith("-") else f"-{key}"
            direction = "descending" if sort.startswith("-") else "ascending"
        else:
            wanted, direction = FIRST_DIRECTION[key], ""
        query = request.GET.copy()
        query.pop("page", None)
        query["sort"] = wanted
        links[key] = SortLink(url=f"?{query.urlencode()}", direction=direction)
    return links


def _job_create_form(request: HttpRequest, data=None, initial=None) -> JobCreateForm:
    workspace = request.workspace
    return JobCreateForm(
        data,
        workspace=workspace,
        resource_types=selectors.resource_types_for(workspace=workspace),
        quotas=selectors.quotas_for(workspace=workspace),
        instance_types=selectors.instance_types(),
        images=image_list(),
        initial=initial,
    )


@login_required
@require_http_methods(["GET", "POST"])
def job_create(request: HtmxHttpRequest) -> HttpResponse:
    """The create form; `?clone=<job id>` fills it from that job (404 unless the user may
    see the job), `?template=<id>` from a job template of the user's workspaces, to submit
    as a new one."""
    initial = None
    if request.method == "GET" and (source_id := request.GET.get("clone")):
        source = _get_job_for_user(request, source_id)
        initial = clone_initial(job=source, roles=list(selectors.role_list(job=source)))
    elif request.method == "GET" and (template_id := request.GET.get("template")):
        template = selectors.template_get_for_user(user=request.user, pk=template_id)
        initial = template_initial(selectors.template_version(template))
    data = request.POST if request.method == "POST" else None
    unsent = unsent_form(request) if request.method == "GET" and initial is None else None
    form = _job_create_form(request, unsent if unsent is not None else data, initial=initial)
    if unsent is not None and request.workspace is not None:
        if changed := _workspace_changed(request, unsent):
            form.other_errors.append(changed)
    if request.method == "POST" and request.workspace is not None:
        if changed := _workspace_changed(request, request.POST):
            form.other_errors.append(changed)
        elif form.is_valid():
            try:
                job = job_submit(
                    workspace=request.workspace, user=request.user, spec=form.to_spec()
                )
            except ValidationFailed as failed:
                form.add_spec_errors(failed.errors)
            except ApplicationError as error:
                form.other_errors.append(localized(error.message))
            else:
                messages.success(
                    request,
                    gettext("Job “%(name)s” submitted as %(job_id)s.")
                    % {"name": job.display_name, "job_id": job.job_id},
                )
                return redirect("jobs:detail", job_id=job.job_id)
    # A rejected form answers 200, as Django's own form views do: the page is the answer,
    # and browsers and htmx treat it as an ordinary page.
    return render(request, "jobs/create.html", {"form": form, "unsent": unsent is not None})


def _workspace_changed(request: HttpRequest, data) -> str | None:
    """Why a create form drawn for another workspace than the current one is not submitted:
    the workspace was switched since (in another tab), and the job would have gone, quietly,
    to a workspace the form did not name. None when the form names the current one (or none:
    a form from before the field)."""
    drawn_for = data.get("form_workspace", "")
    if not drawn_for or drawn_for == str(request.workspace.pk):
        return None
    was = workspace_for_user(user=request.user, workspace_id=drawn_for)
    return gettext(
        "This form was filled in for workspace %(was)s, but the current workspace is now "
        "%(now)s (switched in another tab or window). Check the form for %(now)s and create "
        "the job again."
    ) % {"was": was or gettext("another workspace"), "now": request.workspace}


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
    "pod-metrics": "jobs/detail.html#pod-metrics",
}


def _bid_poll_seconds() -> int:
    return max(int(settings.MARKET_STEP_INTERVAL), 2)


@login_required
@require_GET
def job_detail(request: HtmxHttpRequest, job_id: str) -> HttpResponse:
    """The job page; to the page's own polls (targets #job-live, #spot-bids and #pod-metrics)
    only that fragment, with 286 once the job has finished so htmx stops asking."""
    job = _get_job_for_user(request, job_id)
    waiting_show(jobs=[job])
    target = _htmx_target(request)
    context = {
        "job": job,
        "bid_poll_seconds": _bid_poll_seconds(),
        "metrics_poll_seconds": max(int(settings.POD_METRICS_SECONDS), 5),
        "metrics_every": settings.POD_METRICS_SECONDS,
        "retention_hours": settings.POD_WORK_RETENTION_HOURS,
    }
    full = target not in DETAIL_PARTIALS  # the whole page
    if full or target == "pod-metrics":
        context["metrics"] = job_metrics_panels(
            job=job, now=timezone.now(), zone=timezone.get_current_timezone()
        )
    if full or target == "job-live":
        context["live"] = job_live(job=job)
        # Stop, Delete and the priority: for who may manage it
        context["can_manage"] = selectors.job_can_manage(user=request.user, job=job)
        context["priority_editable"] = (
            job.status in PRIORITY_EDITABLE and job.resource_source == "quota"
        )
        context["priorities"] = range(1, 10)
    if (full or target == "spot-bids") and job.is_spot:
        context["bid_history"] = job_bid_history(job=job)
    if not full:
        status = HTMX_STOP_POLLING if job.is_finished else 200
        response = render(request, DETAIL_PARTIALS[target], context, status=status)
    else:
        context["roles"] = selectors.job_roles(job=job)
        context["template_name"] = request.GET.get("template_name")  # a refused save's
        response = render(request, "jobs/detail.html", context)
    patch_vary_headers(response, ["HX-Request", "HX-Target"])
    return response


def _next_url(request: HttpRequest, default: str) -> str:
    """Where a form asked to go back to (the list with its filters), if it is this site."""
    wanted = request.POST.get("next", "")
    if wanted and url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return wanted
    return default


@login_required
@require_POST
def job_stop_view(request: HtmxHttpRequest, job_id: str) -> HttpResponse:
    job = _get_job_to_manage(request, job_id, action="stop")
    if job.status == JobStatus.STOPPED:  # job_stop leaves it as it is: say so, as bulk stop does
        messages.info(
            request,
            gettext("Job %(job_id)s was already stopped: nothing changed.")
            % {"job_id": job.job_id},
        )
        return redirect(_next_url(request, reverse("jobs:detail", args=[job.job_id])))
    try:
        job_stop(job=job, by=request.user)
    except ApplicationError as error:
        messages.error(request, localized(error.message))
    else:
        messages.success(request, gettext("Job %(job_id)s stopped.") % {"job_id": job.job_id})
    return redirect(_next_url(request, reverse("jobs:detail", args=[job.job_id])))


@login_required
@require_POST
def job_delete_view(request: HtmxHttpRequest, job_id: str) -> HttpResponse:
    """Delete a finished job (the rule of `job_delete`), then back to the list."""
    job = _get_job_to_manage(request, job_id, action="delete")
    try:
        job_delete(job=job)
    except ApplicationError as error:
        messages.error(request, localized(error.message))
        return redirect(reverse("jobs:detail", args=[job.job_id]))
    messages.success(
        request,
        gettext("Job %(name)s (%(job_id)s) deleted.")
        % {"name": job.display_name, "job_id": job.job_id},
    )
    return redirect(_next_url(request, reverse("jobs:list")))


@login_required
@require_POST
def job_priority_view(request: HtmxHttpRequest, job_id: str) -> HttpResponse:
    """Change the priority of a queued quota job (the rule of `job_priority_update`)."""
    job = _get_job_to_manage(request, job_id, action="change")
    try:
        priority = int(request.POST.get("priority", ""))
    except ValueError:
        messages.error(request, gettext("Priority: choose a whole number from 1 to 9."))
    else:
        try:
            job_priority_update(job=job, priority=priority, by=request.user)
        except ApplicationError as error:
            messages.error(request, localized(error.message))
        else:
            messages.success(
                request,
                gettext("Priority of job %(job_id)s set to %(priority)s.")
                % {"job_id": job.job_id, "priority": priority},
            )
    return redirect(reverse("jobs:detail", args=[job.job_id]))


BULK_STOP_MAX = 200  # job ids taken from one request


def _named(jobs: list[Job]) -> str:
    return ", ".join(f"{job.display_name} ({job.job_id})" for job in jobs)


@login_required
@require_POST
def job_bulk_stop(request: HtmxHttpRequest) -> HttpResponse:
    """Stop the selected jobs, each by the same rule as its own Stop button; the ones the
    user may not manage, cannot see or that have already ended are reported, not fatal."""
    job_ids = list(dict.fromkeys(request.POST.getlist("job_ids")))[:BULK_STOP_MAX]
    back = _next_url(request, reverse("jobs:list"))
    if not job_ids:
        messages.info(request, gettext("No jobs selected: tick the jobs to stop first."))
        return redirect(back)
    found = selectors.jobs_get_for_user(user=request.user, job_ids=job_ids)
    jobs = [found[job_id] for job_id in job_ids if job_id in found]
    manageable = selectors.jobs_can_manage(user=request.user, jobs=jobs)
    stopped, refused, ended, failed = [], [], [], []
    for job in jobs:
        if job.pk not in manageable:
            refused.append(job)
            continue
        if job.status == JobStatus.STOPPED:  # job_stop leaves it as it is: say so
            ended.append(job)
            continue
        try:
            job_stop(job=job, by=request.user)
        except ApplicationError as error:
            if error.code == "JobAlreadyFinished":
                ended.append(job)
            else:
                failed.append(f"{job.display_name} ({job.job_id}): {localized(error.message)}")
        else:
            stopped.append(job)
    if stopped:
        message = ngettext(
            "Stopped %(count)s job: %(names)s.", "Stopped %(count)s jobs: %(names)s.", len(stopped)
        )
        messages.success(request, message % {"count": len(stopped), "names": _named(stopped)})
    if refused:
        message = ngettext(
            "Refused %(count)s job: %(names)s. Only the user who submitted a job, an owner of "
            "its workspace or a platform admin can stop it.",
            "Refused %(count)s jobs: %(names)s. Only the user who submitted a job, an owner of "
            "its workspace or a platform admin can stop it.",
            len(refused),
        )
        messages.error(request, message % {"count": len(refused), "names": _named(refused)})
    if ended:
        message = gettext("Already ended, not stopped: %(names)s.")
        messages.info(request, message % {"names": _named(ended)})
    if failed:
        message = gettext("Not stopped: %(problems)s.")
        messages.error(request, message % {"problems": "; ".join(failed)})
    if missing := len(job_ids) - len(jobs):
        message = ngettext("%(count)s job not found.", "%(count)s jobs not found.", missing)
        messages.error(request, message % {"count": missing})
    return redirect(back)


# --- job templates -----------------------------------------------------------------------------


@login_required
@require_POST
def template_save_view(request: HtmxHttpRequest, job_id: str) -> HttpResponse:
    """Save a job's settings as a template of its workspace (any member who sees the job;
    replacing one of the same name follows `template_save`'s rule), then to the list."""
    job = _get_job_for_user(request, job_id)
    spec = job_spec_of(job, list(selectors.role_list(job=job)))
    try:
        template = template_save(
            workspace=job.workspace,
            user=request.user,
            name=request.POST.get("name", ""),
            description=request.POST.get("description", "").strip(),
            spec=spec,
            replace=request.POST.get("replace") == "1",
        )
    except ApplicationError as error:
        # back to the form, open, with the name as typed: to tick Replace, or rename
        messages.error(request, localized(error.message))
        typed = urlencode({"template_name": request.POST.get("name", "")[:128]})
        return redirect(f"{reverse('jobs:detail', args=[job.job_id])}?{typed}#save-template")
    messages.success(
        request,
        gettext("Saved as template “%(name)s” (version %(version)s).")
        % {"name": template.name, "version": template.default_version},
    )
    return redirect("jobs:templates")


@login_required
@require_GET
def template_list_view(request: HtmxHttpRequest) -> HttpResponse:
    """The job templates of the user's workspaces (the current one first), each with Use
    (the create form filled from it) and, for who may manage it, Delete."""
    templates = list(
        selectors.templates_visible(user=request.user)
        .prefetch_related("versions")
        .order_by("workspace__name", "name")
    )
    current = request.workspace
    templates.sort(key=lambda t: current is None or t.workspace_id != current.pk)
    rows = [
        (
            t,
            next(v for v in t.versions.all() if v.version == t.default_version),
            selectors.template_can_manage(user=request.user, template=t),
        )
        for t in templates
    ]
    paginator = Paginator(rows, 50)
    page = paginator.get_page(request.GET.get("page"))
    return render(request, "jobs/templates.html", {"page": page})


@login_required
@require_POST
def template_delete_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    template = selectors.template_get_for_user(user=request.user, pk=pk)
    try:
        template_delete(template=template, by=request.user)
    except ApplicationError as error:
        raise PermissionDenied(localized(error.message)) from None
    messages.success(request, gettext("Template “%(name)s” deleted.") % {"name": template.name})
    return redirect("jobs:templates")
