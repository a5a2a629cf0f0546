"""Writes to jobs: submit, admit, stop, and `jobs_transition_bulk`, the one writer of a job's
status (its table is `apps.jobs.transitions`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from django.db import IntegrityError, connection, transaction
from django.db.models import Max, ProtectedError
from django.utils import timezone

from apps.core.db import db_datetime, id_chunks, rows_insert, rows_update
from apps.core.errors import ApplicationError, not_found
from apps.core.tasks import task_soon
from apps.core.words import say, say_n
from apps.jobs import transitions
from apps.jobs.execution import pods_stopping, pods_winding_down
from apps.jobs.models import (
    FINISHED_STATUSES,
    LIVE_POD_STATUSES,
    Accessibility,
    ElasticSpotSpec,
    Job,
    JobEvent,
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
from apps.jobs.selectors import template_can_manage
from apps.jobs.specs import JobSpec, job_spec_resolve, spec_to_json, template_spec_check

CHUNK = 2000  # ids per IN (...) list
SHARED_REASON_MIN = 100  # jobs sharing a status and reason that are written by one UPDATE

# The scheduler's tick, asked for by name (`task_soon`): the scheduler imports this app.
SCHEDULER_TICK_TASK = "apps.scheduler.tasks.scheduler_tick_task"
# Admission, asked for by name too (`task_soon`: one run queued at a time however many jobs
# are submitted meanwhile); beat's "admit-creating" runs the same task.
ADMIT_TASK = "apps.jobs.tasks.jobs_admit_creating_task"
ADMIT_BATCH = 500  # jobs admitted per transaction


@dataclass(frozen=True)
class Via:
    """A status the jobs pass through on their way, at the same moment: its history entry
    opens and closes at `now` (the market starts a spot job Bidding → EnvPreparing → Running
    in one step). Codes and messages as in `jobs_transition_bulk`."""

    status: str
    reason_code: str = ""
    reason_codes: Mapping[int, str] = field(default_factory=dict)
    reason_messages: Mapping[int, str] = field(default_factory=dict)


def job_transition(
    *, job: Job, status: str, now: datetime, reason_code: str = "", reason_message: str = ""
) -> None:
    """Move `job` to `status` (`jobs_transition_bulk` for one job)."""
    jobs_transition_bulk(
        jobs=[job], status=status, now=now, reason_code=reason_code, reason_message=reason_message
    )


def jobs_transition_bulk(
    *,
    jobs: list[Job],
    status: str,
    now: datetime,
    reason_code: str = "",
    reason_message: str = "",
    reason_messages: Mapping[int, str] | None = None,
    reason_codes: Mapping[int, str] | None = None,
    via: Via | None = None,
    started: bool = False,
) -> None:
    """The one writer of jobs' statuses. Move `jobs` (locked by the caller) to `status` as
    of `now`: close each one's open StatusHistory entry, open a new one (after `via`'s, if
    given), and write the job row with `status_changed_at`. A finished status also sets
    finished_at; `started` sets started_at where it is unset and clears the AIMaster
    backoff; both clear the waiting fields (pending reason, queue position and size).

    `reason_codes` and `reason_messages` map a job's pk to its own code and message;
    `reason_code` and `reason_message` are the defaults. Raises ApplicationError
    InvalidJobStatus (409), before writing anything, if the transition table refuses any
    job's step: the callers lock and filter their jobs by status, so a refusal is a bug or a
    race and their transaction must not go on.

    A fixed number of queries however many jobs: the market starts thousands at once."""
    if not jobs:
        return
    path = (via.status, status) if via else (status,)
    for current in {job.status for job in jobs}:
        try:
            transitions.transition_check(current, *path)
        except transitions.IllegalTransition as error:
            raise ApplicationError("InvalidJobStatus", str(error), status=409) from None
    codes, messages = reason_codes or {}, reason_messages or {}
    history: list[tuple[int, str, str, str, datetime, datetime | None]] = []
    for job in jobs:
        if via:
            history.append(
                (
                    job.pk,
                    via.status,
                    via.reason_codes.get(job.pk, via.reason_code),
                    via.reason_messages.get(job.pk, ""),
                    now,
                    now,
                )
            )
        history.append(
            (
                job.pk,
                status,
                codes.get(job.pk, reason_code),
                messages.get(job.pk, reason_message),
                now,
                None,
            )
        )
    ids = [job.pk for job in jobs]
    for chunk in id_chunks(ids, CHUNK):
        StatusTransition.objects.filter(job_id__in=chunk, ended_at__isnull=True).update(
            ended_at=now
        )
    rows_insert(
        StatusTransition,
        ["job_id", "status", "reason_code", "reason_message", "started_at", "ended_at"],
        history,
    )
    finished = status in transitions.FINISHED
    for job in jobs:
        job.status, job.status_changed_at = status, now
        job.reason_code = codes.get(job.pk, reason_code)
        job.reason_message = messages.get(job.pk, reason_message)
        if finished:
            job.finished_at = now
        if started:
            job.not_before = None
            if vars(job).get("started_at", now) is None:  # a deferred field stays deferred
                job.started_at = now
        if finished or started:
            job.pending_reason, job.queue_position, job.queue_size = "", None, None
            job.sub_status = ""
    _jobs_row_write(
        updates=[(job.pk, status, job.reason_code, job.reason_message) for job in jobs],
        now=now,
        finished=finished,
        started=started,
    )


def _jobs_row_write(
    *,
    updates: list[tuple[int, str, str, str]],
    now: datetime,
    finished: bool,
    started: bool,
) -> None:
    """Write jobs' (pk, status, reason code, reason message) as of `now`. A status and
    reason that many jobs share (the market starts thousands "All pods are running") is one
    UPDATE per CHUNK of them; the rest, each with a reason of its own or nearly (a reclaim's
    victims name their owner), go in one `rows_update`, and what a finished or started
    status sets alike (`started_at` where unset, the waiting fields cleared) in one UPDATE
    per CHUNK of them. Only `jobs_transition_bulk` calls this: it has checked the steps and
    written the history."""
    also = []
    if finished:
        also.append("finished_at = %(now)s")
    if started:
        also += ["started_at = COALESCE(started_at, %(now)s)", "not_before = NULL"]
    if finished or started:
        also += ["pending_reason = ''", "queue_position = NULL", "queue_size = NULL"]
        also += ["sub_status = ''"]
    when = db_datetime(now)
    extra = [when] * sum("%(now)s" in part for part in also)
    table = Job._meta.db_table
    sets = ["status = %s", "reason_code = %s", "reason_message = %s", "status_changed_at = %s"]
    shared_sql = f"UPDATE {table} SET {', '.join(sets + also)}".replace("%(now)s", "%s")
    groups: dict[tuple[str, str, str], list[int]] = {}
    for pk, status, code, message in updates:
        groups.setdefault((status, code, message), []).append(pk)
    own: list[tuple[int, str, str, str, datetime]] = []
    with connection.cursor() as cursor:
        for (status, code, message), pks in groups.items():
            if len(pks) < SHARED_REASON_MIN:
                own += [(pk, status, code, message, now) for pk in pks]
                continue
            for chunk in id_chunks(pks, CHUNK):
                cursor.execute(
                    f"{shared_sql} WHERE id IN ({', '.join(['%s'] * len(chunk))})",
                    [status, code, message, when, *extra, *chunk],
                )
        rows_update(Job, ["status", "reason_code", "reason_message", "status_changed_at"], own)
        if also:
            also_sql = f"UPDATE {table} SET {', '.join(also)}".replace("%(now)s", "%s")
            for chunk in id_chunks([pk for pk, *_ in own], CHUNK):
                cursor.execute(
                    f"{also_sql} WHERE id IN ({', '.join(['%s'] * len(chunk))})", [*extra, *chunk]
                )


def job_event(*, job: Job, kind: str, message: str, now: datetime, pod: Pod | None = None) -> None:
    JobEvent.objects.create(job=job, pod=pod, kind=kind, message=message, at=now)


@transaction.atomic
def job_submit(*, workspace, user, spec: JobSpec, now: datetime | None = None) -> Job:
    """Validate and store a job as Creating; it moves to Queuing or Bidding right after."""
    resolved = job_spec_resolve(spec, workspace=workspace)
    now = now or timezone.now()
    job = Job.objects.create(
        workspace=workspace,
        user=user,
        display_name=spec.display_name.strip(),
        job_type=spec.job_type,
        image=spec.image.strip(),
        user_command=spec.user_command,
        envs=dict(spec.envs),
        data_sources=list(spec.data_sources),
        code_source=dict(spec.code_source),
        priority=spec.priority,
        max_running_time_minutes=spec.max_running_time_minutes,
        success_policy=spec.success_policy,
        resource_type=spec.resource_type,
        resource_source=spec.resource_source,
        quota=resolved.quota,
        idle_mode=spec.idle_mode,
        vpc_id=spec.vpc_id.strip(),
        vswitch_id=spec.vswitch_id.strip(),
        security_group_id=spec.security_group_id.strip(),
        enable_aimaster=spec.enable_aimaster,
        max_restarts=spec.max_restarts,
        execution_mode=spec.execution_mode,
        enable_easyckpt=spec.enable_easyckpt,
        hang_seconds=spec.hang_seconds,
        termination_grace_seconds=spec.termination_grace_seconds,
        description=spec.description,
        accessibility=spec.accessibility,
        status=JobStatus.CREATING,
        created_at=now,
        submitted_at=now,
        status_changed_at=now,
    )
    roles = JobRole.objects.bulk_create(
        JobRole(
            job=job,
            role_type=r.spec.role_type,
            pod_count=r.spec.pod_count,
            image=r.spec.image.strip(),
            instance_type=r.instance_type,
            cpu=r.cpu,
            memory=r.memory,
            gpu=r.gpu,
            gpu_milli=r.gpu_milli,
            restart_policy=r.spec.restart_policy,
            spot_strategy="SpotWithPriceLimit"
            if spec.resource_source == ResourceSource.SPOT
            else "",
            spot_discount_limit=r.spec.spot_discount_limit,
            spot_price_limit=r.spec.spot_price_limit,
        )
        for r in resolved.roles
    )
    ElasticSpotSpec.objects.bulk_create(
        ElasticSpotSpec(
            role=role,
            position=j,
            instance_type=itype,
            spot_discount_limit=item.spot_discount_limit,
            spot_price_limit=item.spot_price_limit,
        )
        for role, r in zip(roles, resolved.roles, strict=True)
        for j, (item, itype) in enumerate(
            zip(r.spec.elastic_spot_specs, r.fallback_types, strict=True)
        )
    )
    JobTag.objects.bulk_create(JobTag(job=job, key=k, value=v) for k, v in spec.tags.items())
    StatusTransition.objects.create(job=job, status=JobStatus.CREATING, started_at=now)
    submitted = say("Submitted by {user}", user=user.get_username())
    job_event(job=job, kind="Submitted", message=submitted, now=now)
    for note in spec.notes:
        job_event(job=job, kind="FieldIgnored", message=note, now=now)

    task_soon(ADMIT_TASK)
    return job


@transaction.atomic
def job_admit(*, job_pk: int, now: datetime) -> bool:
    """Admit one job (`jobs_admit_creating` for a single job). False if already done."""
    jobs = list(_creating().filter(pk=job_pk))
    return _admit(jobs, now=now) > 0


def jobs_admit_creating(*, now: datetime) -> int:
    """Admit every job in Creating, oldest first, ADMIT_BATCH of them per transaction: a
    new job is admitted by whichever admission run comes first, be it the one its submit
    asked for, beat's sweep or a message queued long before it (stale ones included), so a
    backlog of them never holds it back. Rows another run holds are skipped (that run admits
    them: compare-and-set on the status, `skip_locked`); a run with nothing to admit is one
    query."""
    admitted = 0
    if not Job.objects.filter(status=JobStatus.CREATING).exists():
        return admitted
    while True:
        with transaction.atomic():
            jobs = list(_creating(skip_locked=True).order_by("submitted_at", "pk")[:ADMIT_BATCH])
            admitted += _admit(jobs, now=now)
        if len(jobs) < ADMIT_BATCH:
            return admitted


def _creating(*, skip_locked: bool = False):
    """Jobs in Creating, locked (not their quotas) until the transaction ends."""
    return (
        Job.objects.select_for_update(skip_locked=skip_locked, of=("self",))
        .select_related("quota")
        .filter(status=JobStatus.CREATING)
    )


def _admit(jobs: list[Job], *, now: datetime) -> int:
    """Creating → Bidding (spot) or Queuing (quota, pay-as-you-go) for `jobs`, locked by
    the caller, each with its event; then a tick is asked for. A fixed number of queries,
    however many jobs."""
    spot = [job for job in jobs if job.resource_source == ResourceSource.SPOT]
    queued = [job for job in jobs if job.resource_source != ResourceSource.SPOT]
    jobs_transition_bulk(
        jobs=spot,
        status=JobStatus.BIDDING,
        now=now,
        reason_code="JobBidding",
        reason_message=say("Waiting for spot instances at the bid limit"),
    )
    jobs_transition_bulk(
        jobs=queued,
        status=JobStatus.QUEUING,
        now=now,
        reason_code="JobEnqueued",
        reason_message=say("Waiting in the queue"),
    )
    events = [
        JobEvent(job=job, kind="Bidding", message=say("Entered the spot market"), at=now)
        for job in spot
    ]
    events += [
        JobEvent(
            job=job,
            kind="Enqueued",
            message=say("Queued on quota {quota}", quota=job.quota.name)
            if job.quota
            else say("Queued on the public pool"),
            at=now,
        )
        for job in queued
    ]
    JobEvent.objects.bulk_create(events)
    if jobs:
        _tick_soon()
    return len(jobs)


def _tick_soon() -> None:
    task_soon(SCHEDULER_TICK_TASK)


def _locked(job: Job) -> Job:
    """The job's row, locked for the change at hand; a job another request deleted since the
    caller read it is not found (404), as if it had been gone from the start."""
    locked = Job.objects.select_for_update().filter(pk=job.pk).first()
    if locked is None:
        raise not_found("Job", job.job_id)
    return locked


@transaction.atomic
def job_stop(*, job: Job, by, now: datetime | None = None) -> Job:
    """Stop a job. Pending jobs stop at once. Running pods are marked Stopped and their
    processes told to stop (SIGTERM, the grace period, SIGKILL); while any has not exited
    the job is Stopping, and Stopped once they all have (`job_stop_finish`). A Stopping or
    Stopped job is left as it is (stopping is asked for again: a retry, a second user);
    a Succeeded or Failed one is refused, 409 JobAlreadyFinished: it ended by itself."""
    now = now or timezone.now()
    job = _locked(job)
    if job.status in (JobStatus.STOPPING, JobStatus.STOPPED):
        return job
    if job.status in FINISHED_STATUSES:
        raise ApplicationError(
            "JobAlreadyFinished",
            say(
                "job {job} has already ended ({status}): there is nothing to stop",
                job=job.job_id,
                status=job.status,
            ),
            status=409,
        )
    stopped = (
        say("Stopped by {user}", user=by.get_username())
        if by is not None
        else say("Stopped by the system")
    )
    live = list(Pod.objects.filter(job=job, status__in=LIVE_POD_STATUSES))
    Pod.objects.filter(pk__in=[p.pk for p in live]).update(
        status=PodStatus.STOPPED, reason="JobStopped", message=stopped, finished_at=now
    )
    pods_stopping(job=job, pods=live, now=now, reason=stopped)
    exiting = pods_winding_down().filter(pk__in=[p.pk for p in live]).count()
    job_transition(
        job=job,
        status=JobStatus.STOPPING if exiting else JobStatus.STOPPED,
        now=now,
        reason_code="JobStoppedByUser",
        reason_message=stopped,
    )
    if exiting:
        told = say_n(
            exiting,
            "{message}: waiting for {count} pod to exit (SIGTERM, then SIGKILL after {grace}s)",
            "{message}: waiting for {count} pods to exit (SIGTERM, then SIGKILL after {grace}s)",
            message=stopped,
            grace=job.termination_grace_seconds,
        )
        job_event(job=job, kind="Stopping", message=told, now=now)
    else:
        job_event(job=job, kind="Stopped", message=stopped, now=now)
    _tick_soon()
    return job


def job_stop_finish(*, job: Job, now: datetime) -> bool:
    """A Stopping job (locked by the caller) whose pods have all exited is Stopped, with
    the reason its stop gave. Whether it moved."""
    if job.status != JobStatus.STOPPING or pods_winding_down().filter(job=job).exists():
        return False
    job_transition(
        job=job,
        status=JobStatus.STOPPED,
        now=now,
        reason_code=job.reason_code,
        reason_message=job.reason_message,
    )
    job_event(job=job, kind="Stopped", message=job.reason_message, now=now)
    return True


PRIORITY_EDITABLE = frozenset({JobStatus.CREATING, JobStatus.QUEUING, JobStatus.ENV_PREPARING})


@transaction.atomic
def job_delete(*, job: Job) -> None:
    """Delete a finished job with its roles, pods and history. Live jobs must stop first."""
    job = _locked(job)
    if job.status == JobStatus.STOPPING:
        raise ApplicationError(
            "JobNotFinished",
            say(
                "job {job_id} is Stopping: it can be deleted once its pods have exited and it "
                "is Stopped",
                job_id=job.job_id,
            ),
            status=409,
        )
    if not job.is_finished:
        raise ApplicationError(
            "JobNotFinished",
            say(
                "job {job_id} is {status}; only a Succeeded, Failed or Stopped job can be "
                "deleted (stop it first)",
                job_id=job.job_id,
                status=job.status,
            ),
            status=409,
        )
    try:
        job.delete()
    except ProtectedError:
        raise ApplicationError(
            "JobInUse",
            say("job {job_id} is still referenced (bills, say) and is kept", job_id=job.job_id),
            status=409,
        ) from None


@transaction.atomic
def job_priority_update(*, job: Job, priority: int, by, now: datetime | None = None) -> Job:
    """Change the priority of a quota job that has not started running."""
    now = now or timezone.now()
    job = _locked(job)
    if not 1 <= priority <= 9:
        raise ApplicationError(
            "InvalidParameter", say("Priority: must be from 1 to 9"), field="Priority"
        )
    if job.resource_source != ResourceSource.QUOTA:
        raise ApplicationError(
            "InvalidParameter",
            say("Priority: only jobs on a resource quota are ordered by priority"),
            field="Priority",
        )
    if job.status not in PRIORITY_EDITABLE:
        raise ApplicationError(
            "InvalidJobStatus",
            say(
                "the priority of a {status} job cannot change (only Creating, Queuing or "
                "EnvPreparing jobs)",
                status=job.status,
            ),
            status=409,
        )
    if job.priority != priority:
        old, job.priority = job.priority, priority
        job.save(update_fields=["priority"])
        job_event(
            job=job,
            kind="PriorityChanged",
            now=now,
            message=say(
                "Priority {old} → {new} by {user}", old=old, new=priority, user=by.get_username()
            ),
        )
    return job


@transaction.atomic
def job_accessibility_update(
    *, job: Job, accessibility: str, by, now: datetime | None = None
) -> Job:
    """Make a PRIVATE job PUBLIC (every member of its workspace sees it), in any status.
    Visibility is only widened, as DLC's UpdateJob documents: a job once shown to the
    workspace is not hidden from it again."""
    if accessibility not in Accessibility.values:
        raise ApplicationError(
            "InvalidParameter",
            say(
                "{field}: {message}",
                field="Accessibility",
                message=say("must be one of {choices}", choices=", ".join(Accessibility.values)),
            ),
            field="accessibility",
        )
    now = now or timezone.now()
    job = _locked(job)
    if job.accessibility == Accessibility.PUBLIC and accessibility == Accessibility.PRIVATE:
        raise ApplicationError(
            "InvalidParameter",
            say(
                "{field}: {message}",
                field="Accessibility",
                message=say(
                    "a PUBLIC job cannot be made PRIVATE: a job's visibility is only widened"
                ),
            ),
            field="accessibility",
        )
    if job.accessibility != accessibility:
        job.accessibility = accessibility
        job.save(update_fields=["accessibility"])
        job_event(
            job=job,
            kind="AccessibilityChanged",
            now=now,
            message=say(
                "Made {accessibility} by {user}",
                accessibility=accessibility,
                user=by.get_username(),
            ),
        )
    return job


def job_description_update(*, job: Job, description: str, by, now: datetime | None = None) -> Job:
    """Change a job's description, in any status."""
    now = now or timezone.now()
    job = _locked(job)
    if job.description != description:
        job.description = description
        job.save(update_fields=["description"])
        changed = say("Description changed by {user}", user=by.get_username())
        job_event(job=job, kind="DescriptionChanged", now=now, message=changed)
    return job


# --- job templates ---------------------------------------------------------------------------

MAX_TEMPLATE_NAME = 128  # JobTemplate.name's max_length
CONSTRAINT_KINDS = ("locked", "overridable", "required")


def _locked_template(template: JobTemplate) -> JobTemplate:
    """The template's row, locked; one another request deleted meanwhile is not found."""
    locked = JobTemplate.objects.select_for_update().filter(pk=template.pk).first()
    if locked is None:
        raise not_found("JobTemplate", str(template.pk))
    return locked


def _template_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise ApplicationError("InvalidParameter", say("give the template a name"), field="name")
    if len(name) > MAX_TEMPLATE_NAME:
        raise ApplicationError(
            "InvalidParameter",
            say(
                "a template name has at most {most} characters",
                most=MAX_TEMPLATE_NAME,
            ),
            field="name",
        )
    return name


def _ensure_can_manage(template: JobTemplate, by, action: str) -> None:
    if template_can_manage(user=by, template=template):
        return
    name = f"{template.name!r}"
    if action == "delete":
        refusal = say(
            "only the user who saved template {name}, an owner or administrator of its "
            "workspace or a platform admin can delete it",
            name=name,
        )
    else:
        refusal = say(
            "only the user who saved template {name}, an owner or administrator of its "
            "workspace or a platform admin can change it",
            name=name,
        )
    raise ApplicationError("Forbidden", refusal, status=403)


def _template_exists(name: str, *, replace_hint: bool = False) -> ApplicationError:
    message = (
        say(
            "this workspace already has a template named {name}: choose another name or replace it",
            name=f"{name!r}",
        )
        if replace_hint
        else say("this workspace already has a template named {name}", name=f"{name!r}")
    )
    return ApplicationError("TemplateExists", message, field="name", status=409)


@contextmanager
def _name_unique(workspace_id: int, name: str | None, taken: ApplicationError) -> Iterator[None]:
    """A transaction that gives a template the name `name`: when another request took the
    name between the check and the write (the database's unique constraint refuses the
    second), `taken`, as if the check had seen it."""
    try:
        with transaction.atomic():
            yield
    except IntegrityError:
        if name and JobTemplate.objects.filter(workspace_id=workspace_id, name=name).exists():
            raise taken from None
        raise


def template_create(
    *,
    workspace,
    user,
    name: str,
    spec: JobSpec,
    description: str = "",
    constraints: Mapping[str, str] | None = None,
    metadata: Mapping | None = None,
    given: Callable[[str], bool] = lambda path: True,
) -> JobTemplate:
    """A new template of the workspace, its version 1 holding `spec`, whose values (the
    fields `given` says it gives: all unless told) pass the create-job rules."""
    name = _template_name(name)
    template_spec_check(spec, workspace=workspace, given=given)
    with _name_unique(workspace.pk, name, _template_exists(name, replace_hint=True)):
        if JobTemplate.objects.filter(workspace=workspace, name=name).exists():
            raise _template_exists(name, replace_hint=True)
        template = JobTemplate.objects.create(
            workspace=workspace,
            user=user,
            name=name,
            description=description,
            metadata=dict(metadata or {}),
            modified_by=user,
        )
        JobTemplateVersion.objects.create(
            template=template,
            version=1,
            content=spec_to_json(spec),
            constraints=dict(constraints or {}),
            created_by=user,
        )
    return template


def template_update(
    *,
    template: JobTemplate,
    by,
    spec: JobSpec | None = None,
    constraints: Mapping[str, str] | None = None,
    set_as_default: bool = True,
    name: str | None = None,
    description: str | None = None,
    metadata: Mapping | None = None,
    given: Callable[[str], bool] = lambda path: True,
) -> JobTemplateVersion | None:
    """Change a template (its saver, a workspace admin, a platform admin): a new `spec`
    (checked as `template_create` checks it) makes a new version (the default one with
    `set_as_default`), returned; the name, description and metadata change in place."""
    _ensure_can_manage(template, by, "change")
    if spec is not None:
        template_spec_check(spec, workspace=template.workspace, given=given)
    created = None
    new_name = None if name is None else _template_name(name)
    taken = _template_exists(new_name or "")
    with _name_unique(template.workspace_id, new_name, taken):
        template = _locked_template(template)
        if new_name is not None and new_name != template.name:
            if JobTemplate.objects.filter(
                workspace_id=template.workspace_id, name=new_name
            ).exists():
                raise taken
            template.name = new_name
        if description is not None:
            template.description = description
        if metadata is not None:
            template.metadata = dict(metadata)
        if spec is not None:
            number = (template.versions.aggregate(top=Max("version"))["top"] or 0) + 1
            created = JobTemplateVersion.objects.create(
                template=template,
                version=number,
                content=spec_to_json(spec),
                constraints=dict(constraints or {}),
                created_by=by,
            )
            if set_as_default:
                template.default_version = number
        template.modified_by = by
        template.save()
    return created


def template_save(
    *, workspace, user, name: str, spec: JobSpec, description: str = "", replace: bool = False
) -> JobTemplate:
    """The console's Save as template: a new template `name`, or with `replace` a new
    default version of the workspace's template of that name."""
    name = _template_name(name)
    existing = JobTemplate.objects.filter(workspace=workspace, name=name).first()
    if existing is None or not replace:
        return template_create(
            workspace=workspace, user=user, name=name, spec=spec, description=description
        )
    template_update(template=existing, by=user, spec=spec, description=description or None)
    existing.refresh_from_db()
    return existing


@transaction.atomic
def template_default_set(*, template: JobTemplate, version: int, by) -> None:
    _ensure_can_manage(template, by, "change")
    template = _locked_template(template)
    if not template.versions.filter(version=version).exists():
        raise ApplicationError(
            "InvalidParameter",
            say(
                "template {name} has no version {version}",
                name=f"{template.name!r}",
                version=version,
            ),
            field="Version",
        )
    template.default_version = version
    template.modified_by = by
    template.save(update_fields=["default_version", "modified_by", "updated_at"])


def template_used(*, template: JobTemplate, now: datetime | None = None) -> None:
    """A job was created from the template."""
    JobTemplate.objects.filter(pk=template.pk).update(last_used_at=now or timezone.now())


def template_delete(*, template: JobTemplate, by) -> None:
    """Delete a template with its versions (its saver, a workspace admin or a platform
    admin); the jobs created from it are not touched."""
    _ensure_can_manage(template, by, "delete")
    template.delete()
