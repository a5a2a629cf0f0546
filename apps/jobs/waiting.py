"""Why a pending job waits and where it stands: one sentence, for the job pages and the API;
and the job's SubStatus, the code of what its status leaves open.

The reason is the scheduler's (stored on the job by each tick) or, for a bidding spot job,
the market's live one (`apps.market.selectors.waiting_show` puts it on the job first)."""

from __future__ import annotations

from apps.core.words import say
from apps.jobs.models import (
    LIVE_POD_STATUSES,
    PENDING_STATUSES,
    Job,
    JobStatus,
    ResourceSource,
)

IN_QUOTA, NOT_IN_QUOTA, MIXED = "InQuota", "NotInQuota", "Mixed"


def quota_level(in_quota: int, not_in_quota: int) -> str:
    """Whether pods run In Quota, Not in Quota (idle resources) or Mixed; "" for no pod."""
    if in_quota and not_in_quota:
        return MIXED
    return IN_QUOTA if in_quota else NOT_IN_QUOTA if not_in_quota else ""


def sub_status(job: Job, *, in_quota: int | None = None, not_in_quota: int | None = None) -> str:
    """The job's SubStatus, as GetJob, ListJobs and the job pages show it:

    - Queuing, Bidding: why it waits, as a code beside the reason's words: the scheduler's
      (QuotaInsufficient, BlockedByQueueHead, RequeueBackoff, ResourceInsufficient,
      WaitingForReclaim, PreviousPodsExiting, …: `apps.scheduler.engine.Waiting.code`) or
      the market's (BidBelowMarketPrice, BidBelowAveragePrice, SpotStockShortage,
      StockShortage, AIMasterBackoff, …). The ticks store it with the reason
      (`Job.sub_status`); a bidding job's live one is put on the job by
      `apps.market.selectors.waiting_show`. "" until a tick has judged the job.
    - Running, for a quota job: whether its live pods of the current attempt run InQuota,
      NotInQuota (idle resources) or Mixed; the counts are read when not given.
    - Restarting: the restart's cause (PodFailed, JobHang, …), its reason code.
    - "" otherwise."""
    if job.status in (JobStatus.QUEUING, JobStatus.BIDDING):
        return job.sub_status
    if job.status == JobStatus.RESTARTING:
        return job.reason_code
    if job.status != JobStatus.RUNNING or job.resource_source != ResourceSource.QUOTA:
        return ""
    if in_quota is None or not_in_quota is None:
        live = job.pods.filter(attempt=job.attempt, status__in=LIVE_POD_STATUSES)
        in_quota = live.filter(in_quota=True).count()
        not_in_quota = live.filter(in_quota=False).count()
    return quota_level(in_quota, not_in_quota)


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
