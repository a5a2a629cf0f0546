"""Why a pending job waits and where it stands: one sentence, for the job pages and the API.

The reason is the scheduler's (stored on the job by each tick) or, for a bidding spot job,
the market's live one (`apps.market.selectors.waiting_show` puts it on the job first)."""

from __future__ import annotations

from apps.jobs.models import PENDING_STATUSES, Job, JobStatus, ResourceSource


def waiting_text(job: Job) -> str:
    """ "quota team-a: needs 8 GPUs, 4 free — position 2 of 3 in the queue of quota team-a";
    "" for a job that does not wait."""
    if job.status not in PENDING_STATUSES:
        return ""
    if job.pending_reason:
        text = job.pending_reason
    elif job.status == JobStatus.BIDDING or job.resource_source == ResourceSource.PUBLIC:
        text = "waiting for the next market step"
    else:
        text = "waiting for the next scheduling pass"
    if job.queue_position:
        text += f" — position {job.queue_position}"
        if job.queue_size:
            text += f" of {job.queue_size}"
        text += " in the queue"
        if job.quota_id:
            text += f" of quota {job.quota.name}"
    return text
