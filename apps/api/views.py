"""The OpenAPI endpoints: thin views that authenticate, read, call one service, serialize.

`endpoint(GET=…, POST=…)` turns handlers into one csrf-exempt view per path. A handler takes
a `Call` (the request and the AccessKey that signed it) and returns the body without its
RequestId; anything it raises becomes `{"RequestId", "Code", "Message"}` with the status the
error carries, so bad input is never a 500.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig, TooManyFieldsSent
from django.db import transaction
from django.db.models import F, OrderBy, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from apps.agent.logs import log_window, pod_log_path
from apps.agent.metrics import METRIC_TYPES, parse_time_step
from apps.agent.selectors import job_metrics, pod_addresses
from apps.api import parsing, serializers
from apps.api.auth import authenticate
from apps.api.errors import (
    dlc_field,
    error_response,
    from_validation,
    invalid_parameter,
    missing_parameter,
    new_request_id,
)
from apps.billing.selectors import job_bill_lines, job_usage
from apps.cluster.models import InstanceType
from apps.cluster.selectors import instance_type_list, market_params, quota_list
from apps.core.errors import ApplicationError, ValidationFailed, not_found
from apps.core.pricing import hour_to_per_minute
from apps.core.words import say
from apps.jobs.models import (
    Accessibility,
    Job,
    JobTemplate,
    JobTemplateVersion,
    JobType,
    Pod,
    ResourceSource,
    job_status_named,
)
from apps.jobs.selectors import (
    ALL_WORKSPACES,
    JobFilters,
    job_ensure_can_manage,
    job_events,
    job_get_for_user,
    job_list,
    job_parts,
    job_pod,
    jobs_with_roles,
    pod_slot,
    template_get_for_user,
    template_version,
    templates_visible,
)
from apps.jobs.services import (
    CONSTRAINT_KINDS,
    job_accessibility_update,
    job_delete,
    job_description_update,
    job_priority_update,
    job_stop,
    job_submit,
    template_create,
    template_default_set,
    template_delete,
    template_update,
    template_used,
)
from apps.jobs.specs import (
    MAX_DESCRIPTION,
    JobSpec,
    spec_from_json,
    spot_price_range_per_minute,
    tags_problems,
)
from apps.market.selectors import (
    TypeUsage,
    market_states,
    market_usage,
    price_histories,
    waiting_show,
)
from apps.workspaces.models import AccessKey, Workspace
from apps.workspaces.selectors import (
    WorkspaceAdmins,
    workspace_admins,
    workspace_default,
    workspace_for_user,
    workspace_list,
)

logger = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
MAX_PAGE_NUMBER = 1_000_000  # keeps the row offset far inside a bigint
DEFAULT_LIST_WINDOW = timedelta(days=7)  # StartTime's default: 7 days before now, as DLC
MAX_EVENTS = 2000
INTERNAL_ERROR = ApplicationError(
    "InternalError", say("The request processing has failed due to some unknown error."), status=500
)


@dataclass(frozen=True)
class Call:
    request: HttpRequest
    key: AccessKey
    now: datetime

    @property
    def user(self):
        return self.key.user

    @property
    def query(self):
        return self.request.GET


Handler = Callable[..., dict[str, Any]]


def endpoint(**handlers: Handler):
    """One view for one path; `handlers` maps HTTP methods to handler functions."""

    @csrf_exempt
    def view(request: HttpRequest, **kwargs: str) -> JsonResponse:
        request_id = new_request_id()
        try:
            handler = handlers.get(request.method or "")
            if handler is None:
                raise _unknown_action()
            _refuse_long_query(request)
            _refuse_nul(request, kwargs)
            now = timezone.now()
            call = Call(request=request, key=authenticate(request, now=now), now=now)
            body = handler(call, **kwargs)
        except Exception as error:
            return _error_answer(request, error, request_id)
        return JsonResponse(
            {"RequestId": request_id, **body}, headers={"x-acs-request-id": request_id}
        )

    return view


def _api_error(error: Exception) -> ApplicationError | None:
    """What a handler raised as the API's error; None for a bug."""
    if isinstance(error, ValidationFailed):
        return from_validation(error)
    if isinstance(error, ApplicationError):
        return error
    if isinstance(error, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return ApplicationError(
            "InvalidParameter",
            say("The request body is larger than {limit} bytes.", limit=limit),
            status=413,
        )
    if isinstance(error, TooManyFieldsSent):
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        return ApplicationError(
            "InvalidParameter",
            say("The request has more than {limit} query parameters.", limit=limit),
        )
    return None


def _error_answer(request: HttpRequest, error: Exception, request_id: str) -> JsonResponse:
    """The JSON error for what a handler raised. A bug, or a failure while the error itself
    is written, is the InternalError, logged with the RequestId: JSON the SDK reads, never
    the server's own page."""
    try:
        known = _api_error(error)
        if known is not None:
            return error_response(known, request_id=request_id)
    except Exception as failure:
        error = failure
    logger.error(
        "API request %s %s failed (RequestId %s)",
        request.method,
        request.path,
        request_id,
        exc_info=error,
    )
    return error_response(INTERNAL_ERROR, request_id=request_id)


def _unknown_action() -> ApplicationError:
    return ApplicationError(
        "InvalidAction.NotFound",
        say("Specified api is not found, please check your url and method."),
        status=404,
    )


@csrf_exempt
def unknown_action(request: HttpRequest, path: str = "") -> JsonResponse:
    return error_response(_unknown_action(), request_id=new_request_id())


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 400 for a request it will not serve (a Host header not in ALLOWED_HOSTS, …):
    on the API's paths an error body the SDK reads, elsewhere Django's own page."""
    if not request.path.startswith("/api/"):
        return defaults.bad_request(request, exception)
    if isinstance(exception, DisallowedHost):
        host = request.META.get("HTTP_HOST", "")[:64]
        error = invalid_parameter(
            "Host", say("{host} is not a name this server answers to", host=f"{host!r}")
        )
    else:
        error = ApplicationError("InvalidParameter", say("The request is not valid."))
    return error_response(error, request_id=new_request_id())


# The longest query string served: nginx's request line buffer (deploy/nginx, 16k) less room
# for the method, path and protocol. gunicorn reads longer lines (--limit-request-line=0), so
# a longer one is this JSON answer, which the SDK reads, not a server's HTML page.
MAX_QUERY_BYTES = 15 * 1024


def _refuse_long_query(request: HttpRequest) -> None:
    if len(request.META.get("QUERY_STRING", "")) > MAX_QUERY_BYTES:
        raise ApplicationError(
            "InvalidParameter",
            say("The query string is longer than {limit} bytes.", limit=f"{MAX_QUERY_BYTES:,}"),
            status=414,
        )


# The paths' parameters by the names the SDKs give them.
PATH_PARAMETERS = {
    "job_id": "JobId",
    "pod_id": "PodId",
    "template_id": "TemplateId",
    "workspace_id": "WorkspaceId",
}


def _refuse_nul(request: HttpRequest, kwargs: dict[str, str]) -> None:
    """PostgreSQL cannot compare text holding NUL: refuse it before any query sees it."""
    path = [(PATH_PARAMETERS.get(name, name), value) for name, value in kwargs.items()]
    for name, value in [*request.GET.items(), *path]:
        if "\x00" in value:
            raise invalid_parameter(name, say("must not contain NUL characters"))


def _json_body(call: Call) -> dict[str, Any]:
    return parsing.json_body(call.request.body)


def _workspace(call: Call, workspace_id: str) -> Workspace:
    """The caller's workspace; 404 for any other id, numeric or not (never 403)."""
    workspace = None
    if parsing.is_workspace_id(workspace_id):
        workspace = workspace_for_user(user=call.user, workspace_id=workspace_id)
    if workspace is None:
        raise not_found("Workspace", workspace_id)
    return workspace


def _paging(call: Call, *, default_size: int = DEFAULT_PAGE_SIZE) -> tuple[int, int]:
    """PageNumber (from 1) and PageSize, as every paged call reads them."""
    number = parsing.query_int(call.query, "PageNumber", default=1, maximum=MAX_PAGE_NUMBER)
    size = parsing.query_int(call.query, "PageSize", default=default_size, maximum=MAX_PAGE_SIZE)
    return number, size


def _page(call: Call, items: QuerySet, *, default_size: int = DEFAULT_PAGE_SIZE) -> QuerySet:
    number, size = _paging(call, default_size=default_size)
    return items[(number - 1) * size : number * size]


def _order(
    call: Call, fields: dict[str, str], *, default: str, ascending: bool = False
) -> list[OrderBy]:
    """SortBy (one of `fields`, else `default`) and Order (asc|desc; desc unless told).
    What has no value of the field (a job not finished, for GmtFinishTime) comes last in
    either order, on every database (PostgreSQL puts NULL first in a descending order,
    SQLite in an ascending one)."""
    field = parsing.query_choice(call.query, "SortBy", fields) or fields[default]
    order = parsing.query_choice(call.query, "Order", {"asc": True, "desc": False})
    up = ascending if order is None else order
    last = True if field in NULLABLE_SORT_FIELDS else None  # leaves an index's order usable
    return [
        F(name).asc(nulls_last=last) if up else F(name).desc(nulls_last=last)
        for name in (field, "pk")
    ]


NULLABLE_SORT_FIELDS = frozenset({"finished_at"})


# --- jobs --------------------------------------------------------------------------------


def _visible_workspaces(call: Call) -> QuerySet[Workspace]:
    return workspace_list(user=call.user)


def _job(call: Call, job_id: str) -> Job:
    """The job, if it is in one of the caller's workspaces; 404 otherwise (never 403)."""
    try:
        return job_get_for_user(user=call.user, job_id=job_id)
    except Http404:
        raise not_found("Job", job_id) from None


def create_job(call: Call) -> dict[str, Any]:
    body = _json_body(call)
    template = None
    if "TemplateId" in body or "TemplateVersion" in body:
        template, body = _from_template(call, body)
    workspace = _workspace(call, parsing.workspace_id_of(body))
    spec = parsing.job_spec_from_create_job(body)
    job = job_submit(workspace=workspace, user=call.user, spec=spec, now=call.now)
    if template is not None:
        template_used(template=template, now=call.now)
    return {"JobId": job.job_id}


def _from_template(call: Call, body: dict[str, Any]) -> tuple[JobTemplate, dict[str, Any]]:
    """CreateJob with TemplateId (and TemplateVersion, else the default one): the
    template's Content with the body's own fields over it, field by field, as its
    Constraints allow (a locked field may not be given, a required one must be)."""
    problems = parsing.Problems()
    template_id = problems.text(body, "TemplateId", "TemplateId")
    version_number = problems.integer(body, "TemplateVersion", "TemplateVersion")
    problems.raise_if_any()
    if not template_id:
        raise missing_parameter("TemplateId")
    template = _template(call, template_id)
    version = _template_version(template, version_number)
    # what the caller gives; an empty value (the SDK sends "JobSpecs": [] unless told) is
    # the template's
    own = {
        k: v
        for k, v in body.items()
        if k not in ("TemplateId", "TemplateVersion") and v not in (None, "", [], {})
    }
    for field, kind in version.constraints.items():
        name = _constraint_field(field)
        if kind == "locked" and name in own:
            raise invalid_parameter(
                name,
                say(
                    "is locked by template {name}",
                    name=f"{template.name!r}",
                ),
            )
        if kind == "required" and name not in own:
            raise invalid_parameter(
                name,
                say(
                    "is required by template {name}",
                    name=f"{template.name!r}",
                ),
            )
    content = serializers.create_job_body(spec_from_json(version.content))
    content.setdefault("WorkspaceId", template.workspace.workspace_id)
    return template, {**content, **own}


def get_job(call: Call, job_id: str) -> dict[str, Any]:
    job = _job(call, job_id)
    parsing.query_bool(call.query, "NeedDetail")  # read, not applied: every field either way
    parts = job_parts(job=job)
    waiting_show(jobs=[job], now=call.now)
    return serializers.job_detail(
        job,
        roles=parts.roles,
        pods=parts.pods,
        history=parts.status_history,
        restarts=parts.restarts,
        addresses=pod_addresses(pods=parts.pods),
    )


PAYMENT_TYPES = {
    "PrePaid": ResourceSource.QUOTA,
    "PostPaid": ResourceSource.PUBLIC,
    "Spot": ResourceSource.SPOT,
}
JOB_SORT = {
    "GmtCreateTime": "created_at",
    "GmtFinishTime": "finished_at",
    "DisplayName": "display_name",
    "JobType": "job_type",
    "Status": "status",
}
# JobTypes ListJobs filters on, by name in any case: paiweb's and the others the SDK
# documents (OneFlowJob, ElasticBatchJob: accepted, never run here).
LISTED_JOB_TYPES = {t: t for t in (*JobType.values, "OneFlowJob", "ElasticBatchJob")}
LISTED_ACCESSIBILITY = {a: a for a in Accessibility.values}  # in any case, as JobType


def list_jobs(call: Call) -> dict[str, Any]:
    workspace = ALL_WORKSPACES
    if workspace_id := call.query.get("WorkspaceId"):
        workspace = _workspace(call, workspace_id)
    jobs = job_list(user=call.user, workspace=workspace, filters=_job_filters(call))
    total = jobs.count()
    page = _page(call, jobs.order_by(*_order(call, JOB_SORT, default="GmtCreateTime")))
    shown = list(jobs_with_roles(jobs=page))
    waiting_show(jobs=shown, now=call.now)
    items = [serializers.job_item(job, roles=list(job.roles.all())) for job in shown]
    return {"Jobs": items, "TotalCount": total}


def _job_filters(call: Call) -> JobFilters:
    """ListJobs' query as the job list's filters, checked in the order DLC names them."""
    query = call.query
    filters: JobFilters = {}
    if names := [s.strip() for s in query.get("Status", "").split(",") if s.strip()]:
        statuses = [job_status_named(name) for name in names]
        if None in statuses:
            raise invalid_parameter(
                "Status",
                say(
                    "{unknown} is not a job status",
                    unknown=f"{names[statuses.index(None)]!r}",
                ),
            )
        filters["statuses"] = [s for s in statuses if s is not None]
    if source := parsing.query_choice(query, "PaymentType", PAYMENT_TYPES):
        filters["resource_sources"] = [source]
    if oversold := query.get("OversoldInfo"):
        filters.update(_oversold_filters(oversold, filters.get("resource_sources")))
    if name := query.get("ResourceQuotaName"):
        filters["quota_contains"] = name
    if resource_id := query.get("ResourceId"):
        filters["quota"] = resource_id
    if display_name := query.get("DisplayName"):
        filters["display_name_contains"] = display_name
    if job_id := query.get("JobId"):
        filters["job_id"] = job_id
    if job_type := parsing.query_choice(query, "JobType", LISTED_JOB_TYPES):
        filters["job_type"] = job_type
    if username := query.get("Username"):
        filters["username_contains"] = username
    if parsing.query_bool(query, "ShowOwn"):
        filters["submitter"] = call.user
    if (job_ids := _listed(query, "JobIds")) and "job_id" not in filters:
        filters["job_ids"] = job_ids  # JobId, when given, wins (as the SDK documents)
    if accessibility := parsing.query_choice(query, "Accessibility", LISTED_ACCESSIBILITY):
        filters["accessibility"] = accessibility
    if quotas := _listed(query, "ResourceIds"):
        filters["quotas"] = quotas
    if tags := query.get("Tags", "").strip():
        filters["tags"] = _tags_filter(tags)
    for param, key in (
        ("UserCommandSearch", "user_command_contains"),
        ("ReasonSearch", "reason_contains"),
        ("ImageSearch", "image_contains"),
        ("Description", "description_contains"),
    ):
        if value := query.get(param, "").strip():
            filters[key] = value  # type: ignore[literal-required]
    if unsupported := sorted(set(query) & LIST_JOBS_UNSUPPORTED):
        raise invalid_parameter(
            unsupported[0], say("not supported here (docs/api.md lists what ListJobs takes)")
        )
    if {"job_id", "job_ids"} & filters.keys():  # named jobs are found however old
        start, end = parsing.query_time_range(query)
    else:
        start, end = parsing.query_time_window(query, now=call.now, span=DEFAULT_LIST_WINDOW)
    if start is not None:
        filters["created_from"] = start
    if end is not None:
        filters["created_until"] = end
    return filters


def _tags_filter(text: str) -> dict[str, str]:
    """ListJobs' Tags: a JSON object of key → value, as the SDK sends it; the jobs listed
    carry every one of them."""
    try:
        tags = parsing.json_text(text, "Tags")
    except ValueError:
        example = '{"team": "vision"}'
        raise invalid_parameter(
            "Tags", say("must be a JSON object of key → value: {example}", example=example)
        ) from None
    if problems := tags_problems(tags):
        raise invalid_parameter("Tags", problems[0])
    return tags


# ListJobs parameters the SDK models and paiweb has no meaning for: refused, never ignored.
LIST_JOBS_UNSUPPORTED = frozenset(
    {
        "NumericRangeField",
        "NumericRangeMax",
        "NumericRangeMin",
        "TimeRangeField",
        "TemplateId",
        "PipelineId",
        "UserIdForFilter",
        "EnableAssignNode",
        "DisplayNameSearchMode",
        "FromAllWorkspaces",
        "Caller",
        "BusinessUserId",
    }
)


def _listed(query, name: str) -> list[str] | None:
    """A comma-separated list parameter (`JobIds=dlc1,dlc2`); None when absent or empty."""
    values = [v.strip() for v in query.get(name, "").split(",") if v.strip()]
    return values or None


def _oversold_filters(value: str, sources: list[str] | None) -> JobFilters:
    """DLC's OversoldInfo: quota jobs of the idle mode, and for AcceptQuotaOverSold-true/-false
    whether the job actually runs on idle resources now. `sources` is PaymentType's, if any."""
    mode, _, used = value.strip().partition("-")
    mode = next((m for m in serializers.IDLE_MODE if m.lower() == mode.lower()), mode)
    if (
        mode not in serializers.IDLE_MODE
        or (used and mode != "AcceptQuotaOverSold")
        or (used and used.lower() not in ("true", "false"))
    ):
        raise invalid_parameter(
            "OversoldInfo",
            say(
                "must be ForbiddenQuotaOverSold, ForceQuotaOverSold, AcceptQuotaOverSold, "
                "AcceptQuotaOverSold-true or AcceptQuotaOverSold-false",
            ),
        )
    # Idle modes are for quota jobs: beside PaymentType PostPaid or Spot nothing matches.
    quota_jobs = [ResourceSource.QUOTA] if sources in (None, [ResourceSource.QUOTA]) else []
    filters: JobFilters = {"resource_sources": quota_jobs, "idle_mode": serializers.IDLE_MODE[mode]}
    if used:
        filters["borrowing"] = used.lower() == "true"
    return filters


def update_job(call: Call, job_id: str) -> dict[str, Any]:
    job = _job(call, job_id)
    body = _json_body(call)
    for name in ("UserCommand", "JobSpecs"):
        if body.get(name) is not None:
            raise invalid_parameter(
                name,
                say(
                    "cannot be changed; UpdateJob changes Priority, Description and Accessibility",
                ),
            )
    problems = parsing.Problems()
    problems.track(body, "")
    priority = problems.integer(body, "Priority", "Priority")
    description = problems.text(
        body, "Description", "Description", default=None, max_length=MAX_DESCRIPTION
    )
    accessibility = problems.text(body, "Accessibility", "Accessibility", default=None)
    for path in problems.unread():
        problems.add(
            path,
            say("not supported here: UpdateJob changes Priority, Description and Accessibility"),
        )
    problems.raise_if_any()
    if priority is None and description is None and accessibility is None:
        raise ApplicationError(
            "MissingParameter",
            say("Nothing to change: UpdateJob changes Priority, Description and Accessibility."),
            field="Priority",
        )
    only_priority = description is None and accessibility is None
    job_ensure_can_manage(
        user=call.user, job=job, action="change the priority of" if only_priority else "change"
    )
    with transaction.atomic():
        if priority is not None:
            job_priority_update(job=job, priority=priority, by=call.user, now=call.now)
        if description is not None:
            job_description_update(job=job, description=description, by=call.user, now=call.now)
        if accessibility is not None:
            job_accessibility_update(
                job=job, accessibility=accessibility, by=call.user, now=call.now
            )
    return {"JobId": job.job_id}


def delete_job(call: Call, job_id: str) -> dict[str, Any]:
    job = _job(call, job_id)
    job_ensure_can_manage(user=call.user, job=job, action="delete")
    job_delete(job=job)
    return {"JobId": job_id}


def stop_job(call: Call, job_id: str) -> dict[str, Any]:
    job = _job(call, job_id)
    job_ensure_can_manage(user=call.user, job=job, action="stop")
    job_stop(job=job, by=call.user, now=call.now)
    return {"JobId": job.job_id}


def _events(call: Call, job: Job, pod: Pod | None = None) -> list[str]:
    start, end = parsing.query_time_window(call.query, now=call.now, span=DEFAULT_LIST_WINDOW)
    limit = parsing.query_int(call.query, "MaxEventsNum", default=MAX_EVENTS, maximum=MAX_EVENTS)
    events = job_events(job=job, since=start, until=end, pod=pod)
    newest = list(events.reverse()[:limit])  # the newest MaxEventsNum, oldest first
    return [serializers.event_line(e) for e in reversed(newest)]


def get_job_events(call: Call, job_id: str) -> dict[str, Any]:
    job = _job(call, job_id)
    return {"JobId": job.job_id, "Events": _events(call, job)}


def get_job_cost(call: Call, job_id: str) -> dict[str, Any]:
    """paiweb's own call: what the job has cost so far and its bill lines, per UTC day and
    pod (a prepaid quota job costs nothing here: its quota is paid for; its use is shown)."""
    job = _job(call, job_id)
    number, size = _paging(call)
    total, lines = job_bill_lines(job=job, number=number, size=size)
    return {
        "JobId": job.job_id,
        **serializers.job_cost(job_usage(job=job, now=call.now)),
        "TotalCount": total,
        "PageNumber": number,
        "PageSize": size,
        "Lines": [serializers.bill_line(line) for line in lines],
    }


def _pod(call: Call, job: Job, pod_id: str) -> Pod:
    """The pod `PodId` names, or, with a `PodUid` of another attempt of its slot (a history
    pod: DLC gives every attempt of a pod one PodId and tells them apart by PodUid), that
    attempt."""
    pod = job_pod(job=job, pod_id=pod_id)
    if pod is None:
        raise not_found("Pod", pod_id)
    uid = call.query.get("PodUid")
    if not uid or uid == serializers.pod_uid(pod):
        return pod
    attempt = next((p for p in pod_slot(pod=pod) if serializers.pod_uid(p) == uid), None)
    if attempt is None:
        raise ApplicationError(
            "EntityNotExist.Pod",
            say(
                "The pod {pod} has no attempt with PodUid {uid}.",
                pod=repr(pod_id[:64]),
                uid=repr(uid[:64]),
            ),
            status=404,
        )
    return attempt


def get_pod_events(call: Call, job_id: str, pod_id: str) -> dict[str, Any]:
    job = _job(call, job_id)
    pod = _pod(call, job, pod_id)
    return {
        "JobId": job.job_id,
        "PodId": pod.pod_id,
        "PodUid": serializers.pod_uid(pod),
        "Events": _events(call, job, pod),
    }


def get_pod_logs(call: Call, job_id: str, pod_id: str) -> dict[str, Any]:
    """The last MaxLines lines (default 2000) of the pod's output, as the agent wrote it,
    among those written between StartTime (default 7 days ago, as DLC) and EndTime (default
    now), by the log's time marks: a line counts from when it began."""
    job = _job(call, job_id)
    pod = _pod(call, job, pod_id)
    pod.job = job
    lines = parsing.query_int(call.query, "MaxLines", default=2000, maximum=100_000)
    parsing.query_bool(call.query, "DownloadToFile")  # read, not applied, as GetJob's NeedDetail
    start, end = parsing.query_time_window(call.query, now=call.now, span=DEFAULT_LIST_WINDOW)
    found = log_window(
        pod_log_path(pod),
        since=start.timestamp(),
        until=end.timestamp(),
        lines=lines,
    )
    return {
        "JobId": job.job_id,
        "PodId": pod.pod_id,
        "PodUid": serializers.pod_uid(pod),
        "Logs": found,
    }


DEFAULT_METRICS_WINDOW = timedelta(hours=1)  # GetJobMetrics without StartTime, as PAI
DEFAULT_TIME_STEP = "5m"  # as PAI
MAX_METRIC_POINTS = 11_000  # per pod and call


def get_job_metrics(call: Call, job_id: str) -> dict[str, Any]:
    """One metric of every pod of the job over [StartTime, EndTime] (default: the last hour),
    averaged per TimeStep (default 5m), each point at its step's start; pods and steps
    without a figure are left out (docs/api.md, "GetJobMetrics")."""
    job = _job(call, job_id)
    if not call.query.get("MetricType"):
        raise missing_parameter("MetricType")
    metric = parsing.query_choice(call.query, "MetricType", {m.name: m for m in METRIC_TYPES})
    start, end = parsing.query_time_range(call.query)
    end = end or call.now
    start = start or end - DEFAULT_METRICS_WINDOW
    parsing.time_order(start, end)  # a StartTime after now, without EndTime
    raw_step = call.query.get("TimeStep") or DEFAULT_TIME_STEP
    try:
        step = parse_time_step(raw_step)
    except ValueError:
        raise invalid_parameter(
            "TimeStep",
            say(
                "{raw} is not a time step such as 5m, 30s, 1h or 300 (seconds)",
                raw=f"{raw_step[:32]!r}",
            ),
        ) from None
    if (end - start).total_seconds() / step > MAX_METRIC_POINTS:
        raise invalid_parameter(
            "TimeStep",
            say(
                "too small for the time range: at most {limit} points per pod",
                limit=f"{MAX_METRIC_POINTS:,}",
            ),
        )
    series = job_metrics(job=job, metric=metric, start=start, end=end, step=step)
    return {
        "JobId": job.job_id,
        "PodMetrics": [
            {
                "PodId": s.pod_id,
                "Metrics": [{"Time": round(at * 1000), "Value": value} for at, value in s.points],
            }
            for s in series
        ],
    }


# --- instance types and the spot market -----------------------------------------------------

NO_USAGE = TypeUsage()
ECS_SORT = {"CPU": "cpu", "GPU": "gpu", "Memory": "memory", "GmtCreateTime": "pk"}


def list_ecs_specs(call: Call) -> dict[str, Any]:
    query = call.query
    accelerator = parsing.query_choice(query, "AcceleratorType", {"CPU": False, "GPU": True})
    names = [n.strip() for n in query.get("InstanceTypes", "").split(",") if n.strip()]
    resource_type = parsing.query_choice(
        query, "ResourceType", {"ECS": "ECS", "Lingjun": "Lingjun"}
    )
    types = instance_type_list(gpu=accelerator, names=names, resource_type=resource_type or "")
    total = types.count()
    page = list(_page(call, types.order_by(*_order(call, ECS_SORT, default="GmtCreateTime"))))
    usage = market_usage()
    prices = market_states(types=page)
    floor_ratio = market_params().floor_ratio
    specs = [
        serializers.ecs_spec(
            t,
            spot_in_use=usage.get(t.pk, NO_USAGE).spot_used,
            payg_in_use=usage.get(t.pk, NO_USAGE).payg_used,
            market_price=getattr(prices.get(t.pk), "price_per_hour", None),
            floor_ratio=floor_ratio,
        )
        for t in page
    ]
    return {"EcsSpecs": specs, "TotalCount": total}


def price_history(
    itype: InstanceType, *, start: datetime, end: datetime
) -> list[tuple[datetime, Decimal]]:
    """The market's prices of `itype` over [start, end] in CNY per instance-minute, oldest
    first; the first is the price in force at `start` (set at or before it)."""
    history = price_histories(type_ids=[itype.pk], since=start, until=end).get(itype.pk, [])
    return [(datetime.fromtimestamp(at, UTC), hour_to_per_minute(price)) for at, price in history]


def spot_prices(call: Call) -> dict[str, Any]:
    """paiweb's spot price endpoint: the SpotPriceLimit range now and the price history."""
    name = call.query.get("InstanceType", "").strip()
    if not name:
        raise missing_parameter("InstanceType")
    itype = instance_type_list(names=[name]).first()
    if itype is None:
        raise invalid_parameter(
            "InstanceType",
            say(
                "unknown instance type {name}",
                name=f"{name!r}",
            ),
        )
    if not itype.spot_enabled or itype.public_capacity == 0:
        raise invalid_parameter("InstanceType", say("{name} is not sold as spot", name=name))
    start, end = parsing.query_time_range(call.query)
    end = end or call.now
    start = start or end - timedelta(days=1)
    parsing.time_order(start, end)  # a StartTime after now, without EndTime
    low, high = spot_price_range_per_minute(itype)
    points = price_history(itype, start=start, end=end)
    state = market_states(types=[itype]).get(itype.pk)
    return serializers.compact(
        {
            "InstanceType": itype.name,
            "ResourceType": itype.resource_type,
            "Unit": "CNY/instance-minute",
            "MinPrice": float(low),
            "MaxPrice": float(high),
            "Price": float(hour_to_per_minute(state.price_per_hour)) if state else None,
            "StartTime": serializers.iso(start),
            "EndTime": serializers.iso(end),
            "Prices": [{"Time": serializers.iso(t), "Price": float(p)} for t, p in points],
        }
    )


# --- workspaces and quotas (AIWorkspace 2021-02-04) -------------------------------------------

# The statuses AIWorkspace documents for ListWorkspaces' Status filter.
WORKSPACE_STATUSES = ("ENABLED", "INITIALIZING", "FAILURE", "DISABLED", "FROZEN", "UPDATING")
WORKSPACE_SORT = {
    "GmtCreateTime": "created_at",
    "GmtModifiedTime": "created_at",
    "WorkspaceName": "name",
}


def _workspace_items(
    call: Call, workspaces: list[Workspace], admins: dict[int, WorkspaceAdmins]
) -> list[dict[str, Any]]:
    default = workspace_default(user=call.user)
    items = []
    for w in workspaces:
        owner = admins[w.pk].owner
        creator = str(owner.user_id) if owner else None
        items.append(
            serializers.workspace_item(
                w, admins=admins[w.pk].usernames, is_default=w == default, creator=creator
            )
        )
    return items


def list_workspaces(call: Call) -> dict[str, Any]:
    query = call.query
    workspaces = _visible_workspaces(call)
    if name := query.get("WorkspaceName"):
        workspaces = workspaces.filter(Q(name__icontains=name) | Q(display_name__icontains=name))
    if ids := [i.strip() for i in query.get("WorkspaceIds", "").split(",") if i.strip()]:
        if bad := [i for i in ids if not parsing.is_workspace_id(i)]:
            raise invalid_parameter(
                "WorkspaceIds",
                say(
                    "{bad} is not a workspace id (numeric text)",
                    bad=f"{bad[0][:64]!r}",
                ),
            )
        workspaces = workspaces.filter(pk__in=[int(i) for i in ids])
    status = parsing.query_choice(query, "Status", {s: s for s in WORKSPACE_STATUSES})
    if status not in (None, "ENABLED"):  # every workspace here is ENABLED
        workspaces = workspaces.none()
    total = workspaces.count()
    ordered = workspaces.order_by(
        *_order(call, WORKSPACE_SORT, default="GmtCreateTime", ascending=True)
    )
    page = list(_page(call, ordered, default_size=20))
    items = _workspace_items(call, page, workspace_admins(workspaces=page))
    return {"Workspaces": items, "TotalCount": total}


def get_workspace(call: Call, workspace_id: str) -> dict[str, Any]:
    workspace = _workspace(call, workspace_id)
    admins = workspace_admins(workspaces=[workspace])
    [item] = _workspace_items(call, [workspace], admins)
    if (owner := admins[workspace.pk].owner) is not None:
        item["Owner"] = {
            "UserId": str(owner.user_id),
            "UserName": owner.user.get_username(),
            "DisplayName": owner.user.get_full_name() or owner.user.get_username(),
        }
    return item


def list_quotas(call: Call) -> dict[str, Any]:
    """The quotas that serve the caller's workspaces (WorkspaceId: that one of them)."""
    workspace = None
    if workspace_id := call.query.get("WorkspaceId"):
        workspace = _workspace(call, workspace_id)
    quotas = quota_list(user=call.user, name=call.query.get("Name", ""), workspace=workspace)
    items = [
        serializers.quota_item(q.quota, workspace_ids=[w.workspace_id for w in q.workspaces])
        for q in quotas
    ]
    return {"Quotas": items, "TotalCount": len(items)}


# --- the views, one per path ----------------------------------------------------------------

# --- job templates -----------------------------------------------------------------------------

TEMPLATE_SORT = {
    "GmtCreateTime": "created_at",
    "GmtModifyTime": "updated_at",
    "TemplateName": "name",
}


def _template(call: Call, template_id: str) -> JobTemplate:
    """The template, if it is in one of the caller's workspaces; 404 otherwise."""
    if not parsing.is_key(template_id):
        raise not_found("JobTemplate", template_id)
    try:
        return template_get_for_user(user=call.user, pk=template_id)
    except Http404:
        raise not_found("JobTemplate", template_id) from None


def _template_version(template: JobTemplate, number: int | None) -> JobTemplateVersion:
    try:
        return template_version(template, number)
    except Http404:
        raise invalid_parameter(
            "TemplateVersion",
            say(
                "template {name} has no version {number}",
                name=f"{template.name!r}",
                number=number,
            ),
        ) from None


def _constraint_field(path: str) -> str:
    """A Constraints key: a top-level CreateJob field, as "$.Field" or "Field"."""
    return path.removeprefix("$.")


@dataclass(frozen=True)
class _Content:
    """A template's Content as a spec, and the CreateJob fields it gives."""

    spec: JobSpec
    body: dict[str, Any]

    def gives(self, path: str) -> bool:
        """Whether the Content sets the DLC field of spec path `path` (not to null or
        empty: the SDK sends unset arrays as [])."""
        value: Any = self.body
        for name, index in _DLC_STEP.findall(dlc_field(path)):
            if not isinstance(value, dict):
                return False
            value = value.get(name)
            if index:
                if not isinstance(value, list) or len(value) <= int(index):
                    return False
                value = value[int(index)]
        return value not in (None, "", [], {})


_DLC_STEP = re.compile(r"(\w+)(?:\[(\d+)\])?")


def _template_content(problems: parsing.Problems, body: dict) -> _Content | None:
    """Content: a CreateJob body (an object, or its JSON text) read as CreateJob reads it."""
    raw = problems.get(body, "Content")
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            raw = parsing.json_text(raw, "Content")
        except ValueError:
            problems.add("Content", "must be a CreateJob body in JSON")
            return None
    if not isinstance(raw, dict):
        problems.add("Content", "must be a JSON object: a CreateJob body")
        return None
    raw = {k: v for k, v in raw.items() if k != "WorkspaceId"}  # the template's workspace
    return _Content(spec=parsing.job_spec_from_create_job(raw, within="Content"), body=raw)


def _constraints(problems: parsing.Problems, body: dict) -> dict[str, str] | None:
    raw = problems.mapping(body, "Constraints", "Constraints")
    if not raw:
        return None if body.get("Constraints") is None else {}
    for field, kind in raw.items():
        name = _constraint_field(str(field))
        if kind not in CONSTRAINT_KINDS:
            problems.add(f"Constraints.{field}", f"must be one of {', '.join(CONSTRAINT_KINDS)}")
        elif not name.isidentifier() or name in ("TemplateId", "TemplateVersion"):
            problems.add(
                f"Constraints.{field}",
                "name a top-level CreateJob field ($.UserCommand, $.JobSpecs…); deeper "
                "paths are not supported here",
            )
    return {str(k): str(v) for k, v in raw.items()}


@contextmanager
def _template_errors_as_dlc() -> Iterator[None]:
    """The template services name the template's name `name` (the console's field), a
    version `Version` and the spec's fields by spec path; the API names them TemplateName,
    Version and Content.<field>, before the message."""
    try:
        yield
    except ValidationFailed as error:
        raise from_validation(error, within="Content") from None
    except ApplicationError as error:
        field = TEMPLATE_FIELDS.get(error.field or "")
        if field is None:
            raise
        raise ApplicationError(
            error.code,
            say("{field}: {message}", field=field, message=error.message),
            field=field,
            status=error.status,
        ) from None


TEMPLATE_FIELDS = {"name": "TemplateName", "Version": "Version"}


def _refuse_unread(problems: parsing.Problems, action: str, fields: str) -> None:
    """A field the call does not take is refused, never ignored (a misspelt Description
    would otherwise change nothing without a word)."""
    for path in problems.unread():
        problems.add(
            path, say("not supported here: {action} takes {fields}", action=action, fields=fields)
        )


def create_job_template(call: Call) -> dict[str, Any]:
    body = _json_body(call)
    problems = parsing.Problems()
    problems.track(body, "")
    name = problems.text(body, "TemplateName", "TemplateName")
    description = problems.text(body, "Description", "Description", max_length=MAX_DESCRIPTION)
    metadata = problems.mapping(body, "Metadata", "Metadata")
    constraints = _constraints(problems, body)
    problems.get(body, "WorkspaceId")  # read below (`workspace_id_of`)
    problems.get(body, "Content")  # read below, once the workspace is known
    _refuse_unread(
        problems,
        "CreateJobTemplate",
        "TemplateName, WorkspaceId, Content, Description, Metadata and Constraints",
    )
    problems.raise_if_any()
    workspace = _workspace(call, parsing.workspace_id_of(body))
    if body.get("Content") is None:
        raise missing_parameter("Content")
    content = _template_content(problems, body)
    problems.raise_if_any()
    assert content is not None
    with _template_errors_as_dlc():
        template = template_create(
            workspace=workspace,
            user=call.user,
            name=name,
            spec=content.spec,
            description=description,
            constraints=constraints,
            metadata=metadata,
            given=content.gives,
        )
    return {**serializers.template_item(template), "Version": 1}


def get_job_template(call: Call, template_id: str) -> dict[str, Any]:
    template = _template(call, template_id)
    wanted = call.query.get("Version", "")
    versions = list(template.versions.select_related("created_by"))
    if wanted.lower() != "all":
        number = parsing.query_int(call.query, "Version", default=template.default_version)
        versions = [v for v in versions if v.version == number]
        if not versions:
            raise invalid_parameter(
                "Version",
                say(
                    "template has no version {number}",
                    number=number,
                ),
            )
    return {
        **serializers.template_item(template),
        "Versions": [serializers.template_version_item(v) for v in versions],
    }


def list_job_templates(call: Call) -> dict[str, Any]:
    query = call.query
    workspace_id = query.get("WorkspaceId", "")
    if not workspace_id:
        raise missing_parameter("WorkspaceId")
    templates = templates_visible(user=call.user).filter(workspace=_workspace(call, workspace_id))
    if name := query.get("TemplateName"):
        templates = templates.filter(name__icontains=name)
    if description := query.get("Description"):
        templates = templates.filter(description__icontains=description)
    if template_id := query.get("TemplateId"):
        ok = parsing.is_key(template_id)
        templates = templates.filter(pk=int(template_id)) if ok else templates.none()
    if user_id := query.get("UserId"):
        ok = parsing.is_key(user_id)
        templates = templates.filter(user_id=int(user_id)) if ok else templates.none()
    total = templates.count()
    number, size = _paging(call)
    ordered = templates.order_by(*_order(call, TEMPLATE_SORT, default="GmtCreateTime"))
    page = ordered[(number - 1) * size : number * size]
    return {
        "JobTemplates": [serializers.template_item(t) for t in page],
        "TotalCount": total,
        "PageNumber": number,
        "PageSize": size,
    }


def update_job_template(call: Call, template_id: str) -> dict[str, Any]:
    template = _template(call, template_id)
    body = _json_body(call)
    problems = parsing.Problems()
    problems.track(body, "")
    name = problems.text(body, "TemplateName", "TemplateName", default=None)
    description = problems.text(
        body, "Description", "Description", default=None, max_length=MAX_DESCRIPTION
    )
    metadata = problems.mapping(body, "Metadata", "Metadata") if "Metadata" in body else None
    set_as_default = problems.boolean(body, "SetAsDefault", "SetAsDefault")
    constraints = _constraints(problems, body)
    for field in ("version", "Version"):
        if problems.get(body, field) is not None:
            problems.add(field, "is not used here: Content makes a new version")
    problems.get(body, "Content")  # read below, once the rest is well formed
    _refuse_unread(
        problems,
        "UpdateJobTemplate",
        "TemplateName, Content, Constraints, SetAsDefault, Description and Metadata",
    )
    problems.raise_if_any()
    content = _template_content(problems, body)
    problems.raise_if_any()
    if constraints is not None and content is None:
        raise invalid_parameter("Constraints", say("can only be given with Content"))
    with _template_errors_as_dlc():
        created = template_update(
            template=template,
            by=call.user,
            spec=content.spec if content else None,
            given=content.gives if content else lambda path: True,
            constraints=constraints,
            set_as_default=set_as_default,
            name=name,
            description=description,
            metadata=metadata,
        )
    template.refresh_from_db()
    return {
        "TemplateId": str(template.pk),
        "Version": created.version if created else template.default_version,
        "VersionCreated": created is not None,
        "DefaultVersion": template.default_version,
        "GmtModifyTime": serializers.iso(template.updated_at),
    }


def delete_job_template(call: Call, template_id: str) -> dict[str, Any]:
    template = _template(call, template_id)
    template_delete(template=template, by=call.user)
    return {"TemplateId": template_id}


def set_job_template_default_version(call: Call, template_id: str) -> dict[str, Any]:
    template = _template(call, template_id)
    body = _json_body(call)
    problems = parsing.Problems()
    problems.track(body, "")
    version = problems.integer(body, "Version", "Version")
    _refuse_unread(problems, "SetJobTemplateDefaultVersion", "Version")
    problems.raise_if_any()
    if version is None:
        raise missing_parameter("Version")
    with _template_errors_as_dlc():
        template_default_set(template=template, version=version, by=call.user)
    template.refresh_from_db()
    return {
        "DefaultVersion": template.default_version,
        "GmtModifyTime": serializers.iso(template.updated_at),
    }


jobs_view = endpoint(GET=list_jobs, POST=create_job)
job_templates_view = endpoint(GET=list_job_templates, POST=create_job_template)
job_template_view = endpoint(
    GET=get_job_template, PUT=update_job_template, DELETE=delete_job_template
)
job_template_default_view = endpoint(PUT=set_job_template_default_version)
job_view = endpoint(GET=get_job, PUT=update_job, DELETE=delete_job)
job_stop_view = endpoint(POST=stop_job)
job_events_view = endpoint(GET=get_job_events)
job_cost_view = endpoint(GET=get_job_cost)
job_metrics_view = endpoint(GET=get_job_metrics)
pod_events_view = endpoint(GET=get_pod_events)
pod_logs_view = endpoint(GET=get_pod_logs)
ecs_specs_view = endpoint(GET=list_ecs_specs)
spot_prices_view = endpoint(GET=spot_prices)
workspaces_view = endpoint(GET=list_workspaces)
workspace_view = endpoint(GET=get_workspace)
quotas_view = endpoint(GET=list_quotas)
