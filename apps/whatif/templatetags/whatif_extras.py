from __future__ import annotations

from django import template

register = template.Library()


@register.simple_tag
def figure(value, kind: str) -> str:
    """A summary figure: a ratio as a percentage, a number with thousands separators."""
    if value is None:
        return "—"
    if kind == "pct":
        return f"{value * 100:.2f}%"
    return f"{value:,.2f}".removesuffix(".00")


@register.simple_tag
def change(before, after, kind: str) -> str:
    """after − before, signed ("+1.20 pp", "−3"); "—" when either is missing."""
    if before is None or after is None:
        return "—"
    delta = (after - before) * (100 if kind == "pct" else 1)
    if abs(delta) < 0.005:
        return "±0"
    text = f"{abs(delta):,.2f}".removesuffix(".00")
    return ("+" if delta > 0 else "−") + text + (" pp" if kind == "pct" else "")
