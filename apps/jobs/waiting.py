"""Why a pending job waits and where it stands: one sentence, for the job pages and the API.

The reason is the scheduler's (stored on the job by each tick) or, for a bidding spot job,
the market's live one (`apps.market.selectors.waiting_show` puts it on the job first)."""

from __future__ import annotations

from apps.core.words import say
from apps.jobs.models import PENDING_STATUSES, Job, JobStatus, ResourceSource


def waiting_text(job: Job) -> str:
    """ "quota team-a: needs 8 GPUs, 4 free — position 2 of 3 in the queue of quota team-a";
    "" for a job that does not wait."""
    if job.status not in PENDING_STATUSES:
        return ""
    if job.pending_reason:
        text = job.pending_reason
    elif job.status == JobStatus.BIDDING or job.resource_source == ResourceSource.PUBLIC:
        text = say("waiting for the next market step")
    else:
        text = say("waiting for the next scheduling pass")
    if not job.queue_position:
        return text
    values = {"reason": text, "position": job.queue_position, "size": job.queue_size}
    if job.quota_id and job.queue_size:
        return say(
            "{reason} — position {position} of {size} in the queue of quota {quota}",
            quota=job.quota.name,
            **values,
        )
    if job.quota_id:
        return say(
            "{reason} — position {position} in the queue of quota {quota}",
            quota=job.quota.name,
            **values,
        )
    if job.queue_size:
        return say("{reason} — position {position} of {size} in the queue", **values)
    return say("{reason} — position {position} in the queue", **values)
