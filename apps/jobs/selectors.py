"""Reads of jobs, for the console and the API alike: the job list, one job with its roles,
pods, status history and events, and the choices the create-job form offers in a workspace."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypedDict

from django.contrib.auth import get_user_model
from django.db.models import (
    Case,
    Count,
    DateTimeField,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Lower
from django.http import Http404
from django.utils import timezone

from apps.cluster.models import InstanceType, Node, Quota, ResourceType
from apps.cluster.selectors import instance_type_list
from apps.core import pricing
from apps.core.db import ReusedSql
from apps.core.errors import ApplicationError
from apps.core.words import say
from apps.jobs.models import (
    LIVE_POD_STATUSES,
    Accessibility,
    ElasticSpotSpec,
    Job,
    JobEvent,
    JobRestart,
    JobRole,
    JobStatus,
    JobTag,
    JobTemplate,
    JobTemplateVersion,
    Pod,
    PodStatus,
    ResourceSource,
    StatusTransition,
)
from apps.jobs.specs import spot_price_range_per_minute
from apps.workspaces.models import Workspace
from apps.workspaces.selectors import MANAGING_ROLES, workspace_list, workspace_role

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

# `job_list(workspace=ALL_WORKSPACES)`: the jobs of every workspace the user belongs to.
ALL_WORKSPACES: Any = object()


class JobFilters(TypedDict, total=False):
    """The job list's filters; every one given must hold. The console's form sends the first
    five, the API's ListJobs (apps/api/views.py: list_jobs) the rest and `quota`."""

    status: str
    payment_type: str  # PrePaid (quota) | PostPaid (public or spot)
    quota: str  # quota name
    idle_mode: str
    q: str  # display name or job id
    statuses: Collection[str]  # any of these
    resource_sources: Collection[str]  # any of these ResourceSource values
    borrowing: bool  # the current attempt has (True) or has no (False) pod outside its quota
    quota_contains: str  # part of the quota's name, any case
    display_name_contains: str
    job_id: str  # the job id, any case
    job_type: str
    username_contains: str  # part of the submitter's username, any case
    submitter: AbstractBaseUser  # the submitter
    created_from: datetime  # created at or after
    created_until: datetime  # created at or before
    job_ids: Collection[str]  # any of these job ids
    quotas: Collection[str]  # any of these quota names
    user_command_contains: str  # part of the command, any case
    reason_contains: str  # part of the reason (status or waiting), any case
    image_contains: str  # part of a role's image, any case
    description_contains: str
    accessibility: str  # PUBLIC or PRIVATE
    tags: Mapping[str, str]  # every one of these tags, key and value


def job_list(
    *, user, workspace: Workspace | None, filters: JobFilters | None = None
) -> QuerySet[Job]:
    """Jobs of `workspace` (none unless `user` belongs to it; none for None), or of every
    workspace `user` belongs to for `ALL_WORKSPACES`; newest first, with pod counts.

    `pods_total` is what the roles ask for; `pods_running` counts running pods of the
    current attempt only, so history pods never inflate it; `pods_in_quota` and
    `pods_not_in_quota` its live pods (Pending or Running) In and Not in Quota.
    """
    live = Q(pods__attempt=F("attempt"), pods__status__in=LIVE_POD_STATUSES)
    if workspace is ALL_WORKSPACES:
        jobs = jobs_visible(user=user)
    elif workspace is not None and workspace_list(user=user).filter(pk=workspace.pk).exists():
        jobs = jobs_visible(user=user).filter(workspace=workspace)
    else:
        return Job.objects.none()
    planned = (
        JobRole.objects.filter(job=OuterRef("pk"))
        .values("job")
        .annotate(total=Sum("pod_count"))
        .values("total")
    )
    jobs = (
        jobs.select_related("workspace", "quota", "user")
        .annotate(
            pods_total=Subquery(planned, output_field=IntegerField()),
            pods_running=Count(
                "pods",
                filter=Q(pods__status=PodStatus.RUNNING, pods__attempt=F("attempt")),
            ),
            pods_in_quota=Count("pods", filter=live & Q(pods__in_quota=True)),
            pods_not_in_quota=Count("pods", filter=live & Q(pods__in_quota=False)),
        )
        .order_by("-created_at", "-id")  # Meta.ordering does not apply to GROUP BY queries
    )
    return _filter_jobs(jobs, filters or {})


def _filter_jobs(jobs: QuerySet[Job], filters: JobFilters) -> QuerySet[Job]:
    if status := filters.get("status"):
        jobs = jobs.filter(status=status)
    if filters.get("payment_type") == "PrePaid":
        jobs = jobs.filter(resource_source=ResourceSource.QUOTA)
    elif filters.get("payment_type") == "PostPaid":
        jobs = jobs.exclude(resource_source=ResourceSource.QUOTA)
    if quota := filters.get("quota"):
        jobs = jobs.filter(quota__name=quota)
    if idle_mode := filters.get("idle_mode"):
        jobs = jobs.filter(idle_mode=idle_mode)
    if q := (filters.get("q") or "").strip():
        # the console's search: a name's part, a job id's start, or a tag ("team" or
        # "team=vision": key and value exactly, as the Tags filter takes them)
        key, has_value, value = q.partition("=")
        tagged = JobTag.objects.filter(job=OuterRef("pk"), key=key.strip())
        if has_value:
            tagged = tagged.filter(value=value.strip())
        jobs = jobs.filter(Q(display_name__icontains=q) | Q(job_id__istartswith=q) | Exists(tagged))
    if (statuses := filters.get("statuses")) is not None:
        jobs = jobs.filter(status__in=list(statuses))
    if (sources := filters.get("resource_sources")) is not None:
        jobs = jobs.filter(resource_source__in=list(sources))
    if (borrowing := filters.get("borrowing")) is not None:
        outside = Exists(
            Pod.objects.filter(job=OuterRef("pk"), attempt=OuterRef("attempt"), in_quota=False)
        )
        jobs = jobs.filter(outside) if borrowing else jobs.exclude(outside)
    if name := filters.get("quota_contains"):
        jobs = jobs.filter(quota__name__icontains=name)
    if display_name := filters.get("display_name_contains"):
        jobs = jobs.filter(display_name__icontains=display_name)
    if job_id := filters.get("job_id"):
        jobs = jobs.filter(job_id__iexact=job_id)
    if job_type := filters.get("job_type"):
        jobs = jobs.filter(job_type=job_type)
    if username := filters.get("username_contains"):
        jobs = jobs.filter(user__username__icontains=username)
    if (submitter := filters.get("submitter")) is not None:
        jobs = jobs.filter(user=submitter)
    if (start := filters.get("created_from")) is not None:
        jobs = jobs.filter(created_at__gte=start)
    if (end := filters.get("created_until")) is not None:
        jobs = jobs.filter(created_at__lte=end)
    if (job_ids := filters.get("job_ids")) is not None:
        jobs = jobs.filter(job_id__in=list(job_ids))
    if (quotas := filters.get("quotas")) is not None:
        jobs = jobs.filter(quota__name__in=list(quotas))
    if command := filters.get("user_command_contains"):
        jobs = jobs.filter(user_command__icontains=command)
    if reason := filters.get("reason_contains"):
        jobs = jobs.filter(
            Q(reason_message__icontains=reason)
            | Q(reason_code__icontains=reason)
            | Q(pending_reason__icontains=reason)
        )
    if image := filters.get("image_contains"):
        jobs = jobs.filter(
            Exists(JobRole.objects.filter(job=OuterRef("pk"), image__icontains=image))
        )
    if description := filters.get("description_contains"):
        jobs = jobs.filter(description__icontains=description)
    if accessibility := filters.get("accessibility"):
        jobs = jobs.filter(accessibility=accessibility)
    for key, value in filters.get("tags", {}).items():
        jobs = jobs.filter(Exists(JobTag.objects.filter(job=OuterRef("pk"), key=key, value=value)))
    return jobs


# The job list's orders, by the name the console's URL gives them (`?sort=-running`).
JOB_SORT_DEFAULT = "-created"
JOB_SORT_KEYS = ("name", "status", "created", "running")
JOB_SORTS = frozenset(JOB_SORT_KEYS) | {f"-{key}" for key in JOB_SORT_KEYS}
_STATUS_ORDER = Case(
    *(When(status=status, then=Value(n)) for n, status in enumerate(JobStatus.values)),
    default=Value(len(JobStatus.values)),
    output_field=IntegerField(),
)


def job_list_rows(
    *,
    user,
    workspace: Workspace | None,
    filters: JobFilters | None = None,
    sort: str = JOB_SORT_DEFAULT,
    now: datetime | None = None,
) -> QuerySet[Job]:
    """`job_list` with what the console's job list shows of each job, in the order `sort`
    names (one of `JOB_SORTS`; anything else is the default, newest first):

    - `gpus_total`: the GPUs the job asks for (each role's GPUs per pod × its pods; a
      share of a GPU counts its part, 0.5);
    - of the current attempt's pods: `pods_live` (Pending or Running; of them
      `pods_in_quota` and `pods_not_in_quota`, from `job_list`); and how the others ended
      (`pods_succeeded`, `pods_failed`, `pods_stopped`, `pods_preempted`);
    - `running_time`: the time the job has spent Running across its attempts (its status
      history), up to `now` for a job Running now; None if it never ran.
    """
    now = now or timezone.now()
    gpus = (
        JobRole.objects.filter(job=OuterRef("pk"))
        .values("job")
        .annotate(total=Sum((F("gpu") * 1000 + F("gpu_milli")) * F("pod_count")) / 1000.0)
        .values("total")
    )
    span = ExpressionWrapper(
        Coalesce(F("ended_at"), Value(now, output_field=DateTimeField())) - F("started_at"),
        output_field=DurationField(),
    )
    running = (
        StatusTransition.objects.filter(job=OuterRef("pk"), status=JobStatus.RUNNING)
        .values("job")
        .annotate(total=Sum(span))
        .values("total")
    )
    current = Q(pods__attempt=F("attempt"))
    live = current & Q(pods__status__in=LIVE_POD_STATUSES)

    def pods(condition: Q) -> Count:
        return Count("pods", filter=condition)

    jobs = job_list(user=user, workspace=workspace, filters=filters).annotate(
        gpus_total=Subquery(gpus, output_field=FloatField()),
        running_time=Subquery(running, output_field=DurationField()),
        pods_live=pods(live),
        pods_succeeded=pods(current & Q(pods__status=PodStatus.SUCCEEDED)),
        pods_failed=pods(current & Q(pods__status=PodStatus.FAILED)),
        pods_stopped=pods(current & Q(pods__status=PodStatus.STOPPED)),
        pods_preempted=pods(current & Q(pods__status=PodStatus.PREEMPTED)),
    )
    sort = sort if sort in JOB_SORTS else JOB_SORT_DEFAULT
    key, descending = sort.lstrip("-"), sort.startswith("-")
    field = {
        "name": Lower("display_name"),
        "status": _STATUS_ORDER,
        "created": F("created_at"),
        "running": F("running_time"),
    }[key]
    order = field.desc(nulls_last=True) if descending else field.asc(nulls_first=True)
    return jobs.order_by(order, "-created_at", "-id")


def jobs_visible(*, user) -> QuerySet[Job]:
    """The jobs `user` may see: those of its workspaces, a PRIVATE one only to whoever may
    manage it (`job_can_manage`: its submitter, the workspace's owners and administrators,
    platform admins). Every page and call that shows a job starts from here.

    The workspaces are `workspace_list`'s (every one for a superuser), read through one join
    to the user's membership of each job's workspace (at most one: `one_membership_per_user`)
    rather than subqueries: the same rows, half the SQL to build for each job read."""
    if not user.is_authenticated:
        return Job.objects.none()
    if user.is_superuser:
        return Job.objects.all()
    member = Q(workspace__membership__user=user)
    if user.is_staff:
        return Job.objects.filter(member)
    may_see = (
        Q(accessibility=Accessibility.PUBLIC)
        | Q(user=user)
        | Q(workspace__membership__role__in=MANAGING_ROLES)  # the same membership row
    )
    return Job.objects.filter(member & may_see)


def _visible_job(shape: tuple[bool, bool], *, user_id: int, job_id: str) -> QuerySet[Job]:
    """`jobs_visible` for a user who is (or is not) a superuser and staff: its SQL depends on
    the user through these two and the id only (`ReusedSql` builds it once per pair)."""
    is_superuser, is_staff = shape
    user = get_user_model()(pk=user_id, is_superuser=is_superuser, is_staff=is_staff)
    jobs = jobs_visible(user=user).select_related("workspace", "quota", "user")
    return jobs.filter(job_id=job_id).order_by()  # job_id is unique


_visible_job_sql = ReusedSql(_visible_job, user_id=int, job_id=str)


def job_get_for_user(*, user, job_id: str) -> Job:
    """The job if `user` may see it (`jobs_visible`); Http404 otherwise (never 403: no
    leaks)."""
    if not user.is_authenticated:
        raise Http404("No such job")
    jobs = _visible_job_sql((user.is_superuser, user.is_staff), user_id=user.pk, job_id=job_id)
    if not jobs:
        raise Http404("No such job")
    return jobs[0]


def jobs_get_for_user(*, user, job_ids: Collection[str]) -> dict[str, Job]:
    """The jobs among `job_ids` that `user` may see, by job id (one query); any other id is
    left out, as `job_get_for_user` answers 404 for it."""
    jobs = (
        jobs_visible(user=user)
        .filter(job_id__in=list(job_ids))
        .select_related("workspace", "quota", "user")
    )
    return {job.job_id: job for job in jobs}


def job_can_manage(*, user, job: Job) -> bool:
    """May `user` stop, delete or change (priority…) `job`? Platform admins (staff,
    superusers) and the workspace's owners and administrators may, for every job; the
    submitter may while still a member; every other member only views it."""
    if not user.is_authenticated:
        return False
    if user.is_staff or user.is_superuser:
        return True
    return _role_may_manage(workspace_role(user=user, workspace_id=job.workspace_id), user, job)


def _role_may_manage(role: str | None, user, job: Job | JobTemplate) -> bool:
    return role in MANAGING_ROLES or (role is not None and job.user_id == user.pk)


# --- job templates ---------------------------------------------------------------------------


def templates_visible(*, user) -> QuerySet[JobTemplate]:
    """The job templates of `user`'s workspaces: every member sees them."""
    return JobTemplate.objects.filter(workspace__in=workspace_list(user=user)).select_related(
        "workspace", "user"
    )


def template_get_for_user(*, user, pk) -> JobTemplate:
    """The template if `user` may see it; Http404 otherwise (never 403: no leaks)."""
    try:
        key = int(pk)
    except (TypeError, ValueError):
        key = 0
    template = None
    if 0 < key < 2**63:  # what a bigint key holds; beyond it the database would refuse
        template = templates_visible(user=user).filter(pk=key).first()
    if template is None:
        raise Http404("No such template")
    return template


def template_version(template: JobTemplate, version: int | None = None) -> JobTemplateVersion:
    """The template's version `version`, or its default one (None); Http404 if there is none
    (version 0 included: versions count from 1)."""
    wanted = template.default_version if version is None else version
    found = template.versions.filter(version=wanted).first()
    if found is None:
        raise Http404("No such template version")
    return found


def template_can_manage(*, user, template: JobTemplate) -> bool:
    """May `user` replace or delete `template`? As for jobs (`job_can_manage`): platform
    admins, the workspace's owners and administrators, and its creator while a member."""
    if not user.is_authenticated:
        return False
    if user.is_staff or user.is_superuser:
        return True
    role = workspace_role(user=user, workspace_id=template.workspace_id)
    return _role_may_manage(role, user, template)


def jobs_can_manage(*, user, jobs: Collection[Job]) -> set[int]:
    """The pks of `jobs` that `user` may manage, by `job_can_manage`'s rule, with one role
    lookup per workspace instead of one per job (the job list's Stop buttons)."""
    if not user.is_authenticated:
        return set()
    if user.is_staff or user.is_superuser:
        return {job.pk for job in jobs}
    roles: dict[int, str | None] = {}
    allowed = set()
    for job in jobs:
        if job.workspace_id not in roles:
            roles[job.workspace_id] = workspace_role(user=user, workspace_id=job.workspace_id)
        if _role_may_manage(roles[job.workspace_id], user, job):
            allowed.add(job.pk)
    return allowed


def job_ensure_can_manage(*, user, job: Job, action: str = "change") -> None:
    """ApplicationError (403) unless `job_can_manage`: the check every write on a job that a
    person asks for makes, in the console and in the API, with the same code and message."""
    if not job_can_manage(user=user, job=job):
        raise ApplicationError("Forbidden.NotJobManager", _refusal(job, action), status=403)


def _refusal(job: Job, action: str) -> str:
    values = {"job_id": job.job_id, "name": job.workspace.name}
    if action == "stop":
        return say(
            "You cannot stop job {job_id}: only the user who submitted it, an owner of "
            "workspace {name} or a platform admin can.",
            **values,
        )
    if action == "delete":
        return say(
            "You cannot delete job {job_id}: only the user who submitted it, an owner of "
            "workspace {name} or a platform admin can.",
            **values,
        )
    if action == "change the priority of":
        return say(
            "You cannot change the priority of job {job_id}: only the user who submitted it, "
            "an owner of workspace {name} or a platform admin can.",
            **values,
        )
    return say(
        "You cannot change job {job_id}: only the user who submitted it, an owner of "
        "workspace {name} or a platform admin can.",
        **values,
    )


# --- one job's parts: roles, pods, status history, events ------------------------------------


def jobs_with_roles(*, jobs: QuerySet[Job]) -> QuerySet[Job]:
    """`jobs` with `job.roles.all()` (and each role's instance type) and `job.tags.all()`
    read in two more queries, whatever the number of jobs."""
    return jobs.prefetch_related(Prefetch("roles", queryset=_roles_with_types()), "tags")


def _roles_with_types() -> QuerySet[JobRole]:
    """Roles with their instance type and their ElasticSpotSpecs (each with its type)."""
    fallbacks = ElasticSpotSpec.objects.select_related("instance_type")
    return JobRole.objects.select_related("instance_type").prefetch_related(
        Prefetch("elastic_spot_specs", queryset=fallbacks)
    )


@dataclass(frozen=True)
class JobParts:
    roles: list[JobRole]  # in order, each with its instance type
    pods: list[Pod]  # of every attempt, newest attempt first, each with its role and node
    status_history: list[StatusTransition]  # oldest first
    restarts: list[JobRestart]  # oldest first, each with its `budget` (`job_restarts`)


_roles_sql = ReusedSql(
    lambda shape, job_id: JobRole.objects.select_related("instance_type").filter(job_id=job_id),
    job_id=int,
)
_elastic_spot_specs_sql = ReusedSql(
    lambda shape, job_id: (
        ElasticSpotSpec.objects.select_related("instance_type")
        .filter(role__job_id=job_id)
        .order_by("role_id", "position")
    ),
    job_id=int,
)
_pods_sql = ReusedSql(
    lambda shape, job_id: Pod.objects.filter(job_id=job_id).select_related("node", "instance_type"),
    job_id=int,
)
_status_history_sql = ReusedSql(
    lambda shape, job_id: StatusTransition.objects.filter(job_id=job_id), job_id=int
)
_tags_sql = ReusedSql(lambda shape, job_id: JobTag.objects.filter(job_id=job_id), job_id=int)


def _prefetched(obj: Any, name: str, items: list) -> None:
    """`obj.<name>.all()` answers `items` without a query, as prefetch_related leaves it."""
    queryset = getattr(obj, name).all()
    queryset._result_cache = items
    queryset._prefetch_done = True
    obj.__dict__.setdefault("_prefetched_objects_cache", {})[name] = queryset


def role_list(*, job: Job) -> list[JobRole]:
    """The job's roles in order, each with its instance type and ElasticSpotSpecs
    (`role.elastic_spot_specs.all()` answers without a query): two queries."""
    roles = _roles_sql(job_id=job.pk)
    fallbacks: dict[int, list[ElasticSpotSpec]] = {role.pk: [] for role in roles}
    for spec in _elastic_spot_specs_sql(job_id=job.pk):
        fallbacks[spec.role_id].append(spec)
    for role in roles:
        _prefetched(role, "elastic_spot_specs", fallbacks[role.pk])
    return roles


def job_parts(*, job: Job) -> JobParts:
    """The job's roles (with their ElasticSpotSpecs), its pods (the current attempt's and the
    ones they replaced), its status history, its restarts and its tags (`job.tags.all()`
    answers without a query afterwards): six queries, however many pods, each compiled once
    per process (`ReusedSql`) as GetJob makes them all."""
    roles = role_list(job=job)
    by_id = {role.pk: role for role in roles}
    pods = _pods_sql(job_id=job.pk)
    for pod in pods:
        pod.role = by_id[pod.role_id]  # the roles just read, with their instance types
    _prefetched(job, "tags", _tags_sql(job_id=job.pk))
    return JobParts(
        roles=roles,
        pods=pods,
        status_history=_status_history_sql(job_id=job.pk),
        restarts=list(job_restarts(job=job)),
    )


def job_pod(*, job: Job, pod_id: str) -> Pod | None:
    """The pod of `job` called `pod_id`, with its role; None for any other id, including
    a pod of another job."""
    return job.pods.select_related("role").filter(pod_id=pod_id).first()


def pod_slot(*, pod: Pod) -> QuerySet[Pod]:
    """Every attempt of `pod`'s slot (its job, role and index): the pod, the pods it
    replaced and any that replaced it, each with its role."""
    return Pod.objects.select_related("role").filter(
        job_id=pod.job_id, role_id=pod.role_id, index=pod.index
    )


def job_events(
    *, job: Job, since: datetime, until: datetime, pod: Pod | None = None
) -> QuerySet[JobEvent]:
    """The job's events at `since` or later and at `until` or earlier (only `pod`'s, when
    given), oldest first, each with its pod."""
    events = job.events.filter(at__gte=since, at__lte=until)
    if pod is not None:
        events = events.filter(pod=pod)
    return events.select_related("pod").order_by("at", "pk")


@dataclass(frozen=True)
class RoleBid:
    role: JobRole
    per_hour: Decimal | None  # the bid as CNY per instance-hour
    # the role's ElasticSpotSpecs in order, each with its bid per instance-hour
    fallbacks: tuple[tuple[ElasticSpotSpec, Decimal | None], ...] = ()


def job_roles(*, job: Job) -> list[RoleBid]:
    return [
        RoleBid(
            role=role,
            per_hour=role_bid_per_hour(role),
            fallbacks=tuple(
                (item, role_bid_per_hour(item)) for item in role.elastic_spot_specs.all()
            ),
        )
        for role in role_list(job=job)
    ]


def role_bid_per_hour(role: JobRole | ElasticSpotSpec) -> Decimal | None:
    """A role's bid limit per instance-hour on its own type, or one of its ElasticSpotSpecs'
    on that one's, as the market judges it (`pricing.bid_limit_per_hour`); None without an
    instance type or a bid."""
    if role.instance_type is None:
        return None
    try:
        return pricing.bid_limit_per_hour(
            role.instance_type.price_per_hour,
            discount=role.spot_discount_limit,
            price_limit_per_minute=role.spot_price_limit,
        )
    except pricing.MarketError:
        return None


def job_restarts(*, job: Job) -> list[JobRestart]:
    """The job's interruptions in order, each with its `budget`: how many of AIMaster's
    restarts were spent up to and including it (a counted restart's place in the budget;
    a platform interruption's row spends none). Restart n starts attempt n, so a job on its
    first attempt has none: no query."""
    if job.attempt == 0:
        return []
    restarts = list(job.restarts.order_by("number"))
    spent = 0
    for restart in restarts:
        spent += restart.counted
        restart.budget = spent
    return restarts


# --- the create-job form's choices --------------------------------------------------------


def resource_types_for(*, workspace) -> list[str]:
    """Resource types a job of `workspace` can use: its quotas' types plus whatever the
    public pool sells (an instance type with public capacity). Always at least ECS."""
    types = set(workspace.quotas.values_list("resource_type", flat=True)) if workspace else set()
    types |= set(
        InstanceType.objects.filter(public_capacity__gt=0).values_list("resource_type", flat=True)
    )
    return [t for t in ResourceType.values if t in types] or [ResourceType.ECS]


def quotas_for(*, workspace) -> list[Quota]:
    if workspace is None:
        return []
    return list(workspace.quotas.order_by("resource_type", "name"))


def instance_types() -> list[InstanceType]:
    return list(instance_type_list().order_by("resource_type", "price_per_hour", "name"))


@dataclass
class PriceInfo:
    """One instance type's prices as the create form shows them, with the bid in ¥/h."""

    instance_type: InstanceType
    discount: Decimal | None = None
    price_limit: Decimal | None = None  # CNY per instance-minute, as the API takes it

    @cached_property
    def range_per_minute(self) -> tuple[Decimal, Decimal]:
        """The valid SpotPriceLimits: from the market's floor to the original price."""
        return spot_price_range_per_minute(self.instance_type)

    @property
    def low_per_minute(self) -> Decimal:
        return self.range_per_minute[0]

    @property
    def high_per_minute(self) -> Decimal:
        return self.range_per_minute[1]

    @property
    def low_per_hour(self) -> Decimal:
        return pricing.per_minute_to_hour(self.low_per_minute)  # the market's floor

    @property
    def high_per_hour(self) -> Decimal:
        return self.instance_type.price_per_hour

    @property
    def discount_per_hour(self) -> Decimal | None:
        if self.discount is None:
            return None
        return pricing.bid_limit_per_hour(
            self.instance_type.price_per_hour, discount=self.discount, price_limit_per_minute=None
        )

    @property
    def price_limit_per_hour(self) -> Decimal | None:
        if self.price_limit is None:
            return None
        return pricing.bid_limit_per_hour(
            self.instance_type.price_per_hour,
            discount=None,
            price_limit_per_minute=self.price_limit,
        )

    @property
    def price_limit_in_range(self) -> bool:
        low, high = self.range_per_minute
        return self.price_limit is None or low <= self.price_limit <= high


def busy_node_names() -> frozenset[str]:
    """The nodes with a Pending or Running pod: not to be reshaped or moved to another pool
    until drained (`apps.cluster.clusterfile.node_reshape_problem`)."""
    return frozenset(
        Node.objects.filter(pods__status__in=LIVE_POD_STATUSES).values_list("name", flat=True)
    )
