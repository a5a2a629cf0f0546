"""Small display filters for the jobs pages: durations, money, resources, status badges."""

from __future__ import annotations

from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal

from django import template
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy

from apps.core.i18n import localized
from apps.jobs.models import (
    PENDING_STATUSES,
    JobStatus,
    PodStatus,
    ResourceSource,
    gpu_hours_text,
    gpu_text,
)
from apps.jobs.waiting import sub_status, waiting_text

register = template.Library()

# Status → badge colour family. Anything unknown is neutral.
BADGE_KINDS = {
    "Creating": "pending",
    "Queuing": "pending",
    "Bidding": "bidding",
    "EnvPreparing": "starting",
    "SanityChecking": "starting",
    "Running": "running",
    "Restarting": "warning",
    "Stopping": "warning",
    "Succeeded": "succeeded",
    "Failed": "failed",
    "Stopped": "stopped",
    "Pending": "pending",
    "Preempted": "warning",
}


# What a job's or a pod's status is called on the page, in the reader's language; the code
# (what the API returns) stays in the badge's title when the two differ.
STATUS_LABELS = {**dict(JobStatus.choices), **dict(PodStatus.choices)}


# A running quota job's SubStatus (`apps.jobs.waiting.quota_level`) in the reader's words; the
# other SubStatus values are waiting and restart codes, shown as they are.
QUOTA_LEVEL_LABELS = {
    "InQuota": gettext_lazy("In Quota"),
    "NotInQuota": gettext_lazy("Not in Quota"),
    "Mixed": gettext_lazy("In Quota and Not in Quota"),
}


@register.filter
def sub_status_label(code: str) -> str:
    """`{{ sub|sub_status_label }}`: a SubStatus as the page says it, its code in a title
    when the two differ."""
    label = QUOTA_LEVEL_LABELS.get(str(code))
    if label is None or str(label) == str(code):
        return format_html("{}", code)
    return format_html('<span title="{}">{}</span>', code, label)


@register.filter
def status_badge(status: str) -> str:
    """`{{ job.status|status_badge }}` → a coloured badge."""
    code = str(status)
    kind = BADGE_KINDS.get(code, "neutral")
    label = str(STATUS_LABELS.get(code, code))
    if label == code:
        return format_html('<span class="badge badge-{}">{}</span>', kind, code)
    return format_html('<span class="badge badge-{}" title="{}">{}</span>', kind, code, label)


@register.filter
def status_label(status) -> str:
    """`{{ status|status_label }}`: a job's or pod's status in the reader's language."""
    return str(STATUS_LABELS.get(str(status), status))


@register.filter
def is_pending(job) -> bool:
    """`{% if job|is_pending %}`: the job waits (Creating, Queuing or Bidding)."""
    return getattr(job, "status", None) in PENDING_STATUSES


@register.filter
def waiting(job) -> str:
    """`{{ job|waiting }}`: why a pending job waits and where it stands (`waiting_text`), in
    the reader's language."""
    return localized(waiting_text(job))


@register.filter
def said(message) -> str:
    """`{{ event.message|said }}`: a message the platform stored in English (a reason, an
    event, a restart's cause) in the reader's language (apps/core/words.py)."""
    return localized(str(message)) if message else ""


@register.filter
def gpu_hours(seconds) -> str:
    """GPU-seconds as GPU-hours: `{{ restart.lost_gpu_seconds|gpu_hours }}` → 0.53 GPU-hours."""
    if seconds is None or seconds == "":
        return "—"
    return gettext("%(hours)s GPU-hours") % {"hours": gpu_hours_text(float(seconds))}


@register.filter
def duration(seconds) -> str:
    """Seconds as a short human duration: 45s, 3m 05s, 2h 03m, 4d 2h; '—' when unknown."""
    if seconds is None or seconds == "":
        return "—"
    total = int(float(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return gettext("%(days)sd %(hours)sh") % {"days": days, "hours": hours}
    if hours:
        return gettext("%(hours)sh %(minutes)sm") % {"hours": hours, "minutes": f"{minutes:02d}"}
    if minutes:
        return gettext("%(minutes)sm %(seconds)ss") % {"minutes": minutes, "seconds": f"{secs:02d}"}
    return gettext("%(seconds)ss") % {"seconds": secs}


@register.filter
def cny(value, places: int = 2) -> str:
    """A CNY amount: `{{ price|cny }}` → ¥0.80, `{{ price|cny:6 }}` → ¥0.013333."""
    if value is None or value == "":
        return "—"
    quantum = Decimal(1).scaleb(-int(places))
    return f"¥{Decimal(str(value)).quantize(quantum, rounding=ROUND_HALF_UP)}"


@register.filter
def resource_source_label(value: str) -> str:
    """A resource source code ("quota", "public", "spot", as a template's settings hold it)
    in the reader's words, as a job's get_resource_source_display gives them."""
    return ResourceSource(value).label if value in ResourceSource.values else value


@register.filter
def spec_role_gpus(role: dict) -> str:
    """GPUs per pod of a role in a template's content: "2", "0.5"."""
    return gpu_text(role.get("gpu") or 0, role.get("gpu_milli") or 0)


@register.filter
def gpus_total(value) -> str:
    """A job's GPUs in all (`job_list_page`'s `gpus_total`) as `gpu_text` writes GPUs: "0.5",
    "2.5", "2"."""
    return gpu_text(0, round(float(value or 0) * 1000))


@register.filter
def cores(millicores) -> str:
    if millicores is None:
        return "—"
    return f"{millicores / 1000:g}"


@register.filter
def gib(mib) -> str:
    if mib is None:
        return "—"
    return f"{mib / 1024:g} GiB"


@register.filter
def percent(ratio) -> str:
    """A share in whole percent; one strictly between none and all never reads as either
    ("<1%", ">99%"): a bid below the market for a minute of a day read "0% of that time"
    beside "reclaimed 1 time"."""
    if ratio is None:
        return "—"
    value = Decimal(str(ratio))
    if 0 < value < Decimal("0.01"):
        return "<1%"
    if Decimal("0.99") < value < 1:
        return ">99%"
    return f"{value * 100:.0f}%"


@register.filter
def saving(ratio) -> str:
    """A saving (0.8986: the price 89.86% below the original) as every page says it: whole
    percent rounded down, "89%", never more than it is (rounded, it read "90% off", the
    most the market ever takes off; at its floor the saving is exactly that)."""
    if ratio is None:
        return "—"
    return f"{(Decimal(str(ratio)) * 100).to_integral_value(rounding=ROUND_FLOOR)}%"


@register.filter
def binary_size(value) -> str:
    """Bytes in binary units: `{{ job.disk_bytes|binary_size }}` → 512 B, 12.3 MiB, 1.5 GiB."""
    if value is None or value == "":
        return "—"
    size = float(value)
    if size < 1024:
        return f"{int(size)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:,.1f} {unit}"


@register.filter
def when(moment, form: str = "full"):
    """A time as every table writes it, in the reader's zone (TimezoneMiddleware), 24-hour:
    `{{ event.at|when }}` → 2026-12-01 19:10:10, `|when:"time"` → 19:10:10; the exact time
    with its zone on hover, the instant in `datetime`."""
    if not moment:
        return "—"
    from django.utils import timezone
    from django.utils.html import format_html

    local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    shown = local.strftime("%H:%M:%S" if form == "time" else "%Y-%m-%d %H:%M:%S")
    exact = f"{local:%Y-%m-%d %H:%M:%S} {local.tzname() or ''}".strip()
    return format_html('<time datetime="{}" title="{}">{}</time>', moment.isoformat(), exact, shown)


@register.filter
def ago(moment) -> str:
    """How long ago: `{{ job.disk_measured_at|ago }}` → just now, 2 min ago, 3 h ago, 4 d ago."""
    if not moment:
        return "—"
    from django.utils import timezone

    seconds = max((timezone.now() - moment).total_seconds(), 0)
    if seconds < 60:
        return gettext("just now")
    if seconds < 3600:
        return gettext("%(minutes)s min ago") % {"minutes": int(seconds // 60)}
    if seconds < 86400:
        return gettext("%(hours)s h ago") % {"hours": int(seconds // 3600)}
    return gettext("%(days)s d ago") % {"days": int(seconds // 86400)}


@register.filter
def basename(path) -> str:
    """The last part of a path (a checkpoint's file name; the full path goes in a title)."""
    text = str(path or "")
    return text.rstrip("/").rsplit("/", 1)[-1] or text


@register.filter(name="sub_status")
def sub_status_filter(job) -> str:
    """The job's SubStatus (`apps.jobs.waiting.sub_status`); a listed job brings its pod
    counts (`job_list`), the job page's reads them."""
    return sub_status(
        job,
        in_quota=getattr(job, "pods_in_quota", None),
        not_in_quota=getattr(job, "pods_not_in_quota", None),
    )
