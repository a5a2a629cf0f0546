"""Writes the API needs that the jobs app does not offer yet: delete a finished job and
change a queued quota job's priority. (They belong beside job_submit and job_stop in
apps/jobs/services.py; they live here until that file's owner takes them in.)"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import ProtectedError
from django.utils import timezone

from apps.core.errors import ApplicationError
from apps.jobs.models import Job, JobStatus, ResourceSource
from apps.jobs.services import job_event

PRIORITY_EDITABLE = frozenset({JobStatus.CREATING, JobStatus.QUEUING, JobStatus.ENV_PREPARING})


@transaction.atomic
def job_delete(*, job: Job) -> None:
    """Delete a finished job with its roles, pods and history. Live jobs must stop first."""
    job = Job.objects.select_for_update().get(pk=job.pk)
    if not job.is_finished:
        raise ApplicationError(
            "JobNotFinished",
            f"job {job.job_id} is {job.status}; only a Succeeded, Failed or Stopped job can be "
            "deleted (stop it first)",
            status=409,
        )
    try:
        job.delete()
    except ProtectedError:
        raise ApplicationError(
            "JobInUse", f"job {job.job_id} is still referenced (bills, say) and is kept", status=409
        ) from None


@transaction.atomic
def job_priority_update(*, job: Job, priority: int, by, now: datetime | None = None) -> Job:
    """Change the priority of a quota job that has not started running."""
    now = now or timezone.now()
    job = Job.objects.select_for_update().get(pk=job.pk)
    if not 1 <= priority <= 9:
        raise ApplicationError(
            "InvalidParameter", "Priority: must be from 1 to 9", field="Priority"
        )
    if job.resource_source != ResourceSource.QUOTA:
        raise ApplicationError(
            "InvalidParameter",
            "Priority: only jobs on a resource quota are ordered by priority",
            field="Priority",
        )
    if job.status not in PRIORITY_EDITABLE:
        raise ApplicationError(
            "InvalidJobStatus",
            f"the priority of a {job.status} job cannot change (only Creating, Queuing or "
            "EnvPreparing jobs)",
            status=409,
        )
    if job.priority != priority:
        old, job.priority = job.priority, priority
        job.save(update_fields=["priority"])
        job_event(job=job, kind="PriorityChanged", now=now,
                  message=f"Priority {old} → {priority} by {by.get_username()}")
    return job
