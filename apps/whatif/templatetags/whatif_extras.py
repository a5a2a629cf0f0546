from __future__ import annotations

from django import template

from apps.jobs.templatetags.jobs_extras import duration

register = template.Library()


@register.simple_tag
def figure(value, kind: str) -> str:
    """A summary figure: a ratio as a percentage, seconds as a duration ("7h 04m"), a number
    with thousands separators."""
    if value is None:
        return "—"
    if kind == "dur":
        return duration(value)
    if kind == "pct":
        return f"{value * 100:.2f}%"
    return f"{value:,.2f}".removesuffix(".00")


@register.simple_tag
def change(before, after, kind: str) -> str:
    """after − before, signed ("+1.20 pp", "−3", "+2m 05s"); "—" when either is missing."""
    if before is None or after is None:
        return "—"
    delta = (after - before) * (100 if kind == "pct" else 1)
    if abs(delta) < (0.5 if kind == "dur" else 0.005):
        return "±0"
    if kind == "dur":
        return ("+" if delta > 0 else "−") + duration(abs(delta))
    text = f"{abs(delta):,.2f}".removesuffix(".00")
    return ("+" if delta > 0 else "−") + text + (" pp" if kind == "pct" else "")
