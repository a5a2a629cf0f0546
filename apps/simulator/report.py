"""The HTML report: one self-contained page (inline SVG and CSS, nothing fetched) with the
summary table and the charts of every policy side by side."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from html import escape
from typing import Any

from apps.simulator.sim import Result
from apps.simulator.summary import job_delay

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
WIDTH, HEIGHT = 600, 250
PAD_L, PAD_R, PAD_T, PAD_B = 56, 12, 24, 36
MAX_POINTS = 600
FRAGMENTED = "fragmented, % of capacity"
FRAGMENTATION_NOTE = (
    "<p>Fragmented: the free GPU room that the trace's own mix of pods could not use, as the "
    "FGD paper measures it (a node's free GPUs a pod shape cannot use there, weighed by how "
    "common the shape is), as a share of the capacity.</p>"
)
Line = tuple[str, Sequence[float], Sequence[float]]  # label, xs, ys


def render(summary: dict[str, Any], results: Sequence[Result]) -> str:
    parts = [_head(summary), _table(summary)]
    if summary["mode"] == "fill":
        charts = [
            _chart(
                "GPU allocation as the trace arrives",
                [(r.policy.name, [x * 100 for x in r.series.x], _pct(r)) for r in results],
                x_label="GPUs asked for, % of capacity",
                y_label="allocated, %",
            ),
            _chart(
                "Fragmentation as the trace arrives",
                [(r.policy.name, [x * 100 for x in r.series.x], _frag(r)) for r in results],
                x_label="GPUs asked for, % of capacity",
                y_label=FRAGMENTED,
            ),
        ]
    else:
        hours = [[t / 3600 for t in r.series.x] for r in results]
        named = list(zip((r.policy.name for r in results), hours, results, strict=True))
        charts = [
            _chart(
                "GPU allocation over time",
                [(name, h, _pct(r)) for name, h, r in named],
                x_label="hours",
                y_label="allocated, %",
                steps=True,
            ),
            _chart(
                "Fragmentation over time",
                [(name, h, _frag(r)) for name, h, r in named],
                x_label="hours",
                y_label=FRAGMENTED,
                steps=True,
            ),
            _chart(
                "Preemptions so far",
                [(name, h, r.series.preemptions) for name, h, r in named],
                x_label="hours",
                y_label="preemptions",
                steps=True,
            ),
            _chart(
                "GPU-hours lost to preemption so far",
                [(name, h, [s / 3600 for s in r.series.lost_gpu_seconds]) for name, h, r in named],
                x_label="hours",
                y_label="GPU-hours",
                steps=True,
            ),
        ]
    parts.append(
        "<h2>Allocation</h2>"
        + FRAGMENTATION_NOTE
        + "<div class=charts>"
        + "".join(charts)
        + "</div>"
    )
    if summary["mode"] != "fill":
        parts.append(_delay_charts(results))
    if results and results[0].spot is not None:
        parts.append(_spot(summary, results[0]))
    parts.append(_bars(summary))
    parts.append("</main></body></html>\n")
    return "\n".join(parts)


def _pct(r: Result) -> list[float]:
    return [a * 100 for a in r.series.allocated]


def _frag(r: Result) -> list[float]:
    return [f * 100 for f in r.series.fragmented]


def _head(summary: dict[str, Any]) -> str:
    sources = ", ".join(f"{k}: {escape(str(v))}" for k, v in summary["sources"].items() if v)
    note = ""
    if not summary["gpu_sharing"] and summary["fractional_pods_rounded_up"]:
        note = (
            f"<p class=note>{summary['fractional_pods_rounded_up']:,} pods ask for part of a "
            "GPU; GPU sharing is off, so each is given a whole one. Allocation is "
            "measured in the milli-GPUs pods asked for.</p>"
        )
    elif summary["gpu_sharing"] and summary.get("fractional_pods"):
        note = (
            f"<p class=note>{summary['fractional_pods']:,} pods ask for part of a GPU and "
            "share GPUs with each other. Allocation is measured in the milli-GPUs pods "
            "asked for.</p>"
        )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>paiweb simulation: {escape(summary["mode"])}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; color: #222; margin: 0; }}
main {{ max-width: 1320px; margin: 0 auto; padding: 16px 24px; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin: 24px 0 4px; }}
table {{ border-collapse: collapse; margin: 8px 0; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 12px; }}
figure {{ margin: 0; }} figcaption {{ font-weight: 600; }}
.note {{ color: #7a4b00; background: #fff6e0; padding: 6px 10px; }}
svg text {{ font: 11px system-ui, sans-serif; fill: #444; }}
</style></head><body><main>
<h1>Simulation: {escape(summary["mode"])}, {summary["jobs"]:,} jobs on {summary["nodes"]:,} nodes
({summary["capacity_gpus"]:,} GPUs), seed {summary["seed"]}</h1>
<p>{sources}</p>
{note}"""


def _table(summary: dict[str, Any]) -> str:
    fill = summary["mode"] == "fill"
    cols = ["policy", "victims", "placement", "allocation", "unallocated GPUs", "fragmented GPUs"]
    if fill:
        cols += ["at 100% arrived", f"at {summary['settings']['fill_to']:.0%}", "unplaced pods"]
    else:
        cols += ["delay p50 s", "p90 s", "p99 s", "preemptions", "lost GPU-h"]
    cols += ["plan calls", "wall s"]
    rows = []
    for p in summary["policies"]:
        cells = [
            escape(p["policy"]),
            p["victim_order"],
            p["placement"],
            _percent(p["gpu_allocation_ratio"]),
            f"{p['unallocated_gpus']:,.1f}",
            f"{p['fragmented_gpus']:,.1f}",
        ]
        if fill:
            marks = list(p["allocation_at_arrived"].values())
            cells += [_percent(marks[0]), _percent(marks[-1]), f"{p['pods_unplaced']:,}"]
        else:
            d = p["delay_seconds"]
            cells += [_num(d["p50"]), _num(d["p90"]), _num(d["p99"])]
            cells += [f"{p['preemptions']:,}", f"{p['lost_gpu_hours']:,.2f}"]
        cells += [f"{p['plan_calls']:,}", f"{p['wall_seconds']:.2f}"]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    recorded = summary.get("recorded_delay_seconds")
    caption = ""
    if recorded and not fill:
        caption = (
            f"<p>The trace's own recorded delays: p50 {_num(recorded['p50'])} s, "
            f"p90 {_num(recorded['p90'])} s, p99 {_num(recorded['p99'])} s.</p>"
        )
    head = "".join(f"<th>{c}</th>" for c in cols)
    return f"<h2>Summary</h2><table><tr>{head}</tr>{''.join(rows)}</table>{caption}"


def _spot(summary: dict[str, Any], result: Result) -> str:
    """The spot jobs per policy, and the market prices over time (the same for every policy:
    the market does not depend on the quotas' policy)."""
    head = "".join(
        f"<th>{escape(h)}</th>"
        for h in ("policy", "started", "delay p50 s", "reclaims", "lost GPU-h", "cost ¥")
    )
    rows = []
    for p in summary["policies"]:
        sp = p["spot"]
        cells = (
            p["policy"],
            f"{sp['started']:,}/{sp['jobs']:,}",
            _num(sp["delay_seconds"]["p50"]),
            f"{sp['reclaims']:,}",
            _num(sp["lost_gpu_hours"]),
            sp["cost_cny"],
        )
        rows.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    assert result.spot is not None
    end = result.series.x[-1] if result.series.x else 0.0
    lines = []
    for name, points in sorted(result.spot.prices.items()):
        if len(points) < 2:
            continue  # never moved from the floor: nobody bid on it
        xs = [t / 3600 for t, _ in points] + [end / 3600]
        ys = [float(p) for _, p in points] + [float(points[-1][1])]
        lines.append((name, xs, ys))
    chart = (
        _chart("Spot price", lines, x_label="hours", y_label="¥ per instance-hour", steps=True)
        if lines
        else ""
    )
    return (
        f"<h2>Spot</h2><table><tr>{head}</tr>{''.join(rows)}</table><div class=charts>{chart}</div>"
    )


def _delay_charts(results: Sequence[Result]) -> str:
    """Queueing delay CDFs: all quota jobs, then per class and per quota (a line per
    policy), and the spot jobs' wait to start."""
    groups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        for j in r.jobs:
            d = job_delay(j)
            if d is None:
                continue
            if j.spot:
                groups["spot jobs"][r.policy.name].append(d)
                continue
            groups["all jobs"][r.policy.name].append(d)
            groups[f"class {j.qos or '-'}"][r.policy.name].append(d)
            groups[f"quota {j.quota}"][r.policy.name].append(d)
    charts = []
    for title in sorted(groups, key=lambda t: (t != "all jobs", t))[:17]:
        lines = [(name, *_cdf(values)) for name, values in groups[title].items()]
        charts.append(
            _chart(
                f"Queueing delay, {title}",
                [(n, [math.log10(1 + x) for x in xs], ys) for n, xs, ys in lines],
                x_label="delay, s (log scale)",
                y_label="jobs, %",
                log_x=True,
            )
        )
    return "<h2>Queueing delay</h2><div class=charts>" + "".join(charts) + "</div>"


def _cdf(values: list[float]) -> tuple[list[float], list[float]]:
    xs = sorted(values)
    n = len(xs)
    return xs, [100 * (i + 1) / n for i in range(n)]


def _bars(summary: dict[str, Any]) -> str:
    out = []
    for key, title, scale, digits in (
        ("gpu_allocation_ratio", "GPU allocation, %", 100, 2),
        ("preemptions", "Preemptions", 1, 0),
        ("lost_gpu_hours", "GPU-hours lost", 1, 2),
    ):
        values = [(p["policy"], (p.get(key) or 0) * scale) for p in summary["policies"]]
        out.append(_bar_chart(title, values, digits))
    return "<h2>Side by side</h2><div class=charts>" + "".join(out) + "</div>"


def _bar_chart(title: str, values: list[tuple[str, float]], digits: int) -> str:
    w, row = 420, 22
    h = PAD_T + row * len(values) + 8
    top = max((v for _, v in values), default=0) or 1
    bars = []
    for i, (name, v) in enumerate(values):
        y = PAD_T + i * row
        length = (w - 200) * v / top
        bars.append(
            f'<text x="4" y="{y + 15}">{escape(name)}</text>'
            f'<rect x="130" y="{y + 3}" width="{length:.1f}" height="{row - 6}" '
            f'fill="{COLORS[i % len(COLORS)]}"/>'
            f'<text x="{134 + length:.1f}" y="{y + 15}">{v:,.{digits}f}</text>'
        )
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">{"".join(bars)}</svg>'
        "</figure>"
    )


def _chart(
    title: str,
    lines: Sequence[Line],
    *,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    steps: bool = False,
) -> str:
    """A line chart; `steps`: each value holds until the next point (a step function)."""
    xs = [x for _, lx, _ in lines for x in lx]
    ys = [y for _, _, ly in lines for y in ly]
    if not xs:
        return f"<figure><figcaption>{escape(title)}</figcaption><p>no data</p></figure>"
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(0.0, min(ys)), max(ys)
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = y1 if y1 > y0 else y0 + 1
    iw, ih = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B

    def sx(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * iw

    def sy(y: float) -> float:
        return PAD_T + ih - (y - y0) / (y1 - y0) * ih

    parts = [
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{iw}" height="{ih}" fill="none" stroke="#ccc"/>'
    ]
    for yv in ticks(y0, y1):
        parts.append(
            f'<text x="{PAD_L - 4}" y="{sy(yv) + 4:.1f}" text-anchor="end">{yv:,.4g}</text>'
        )
    for xv in log_ticks(x0, x1) if log_x else ticks(x0, x1):
        xt = _short(round(10**xv - 1)) if log_x else f"{xv:,.4g}"
        parts.append(
            f'<text x="{sx(xv):.1f}" y="{PAD_T + ih + 14}" text-anchor="middle">{xt}</text>'
        )
    parts.append(
        f'<text x="{PAD_L + iw / 2}" y="{HEIGHT - 4}" text-anchor="middle">{escape(x_label)}</text>'
        f'<text x="12" y="{PAD_T + ih / 2}" transform="rotate(-90 12 {PAD_T + ih / 2})" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    for i, (label, lx, ly) in enumerate(lines):
        color = COLORS[i % len(COLORS)]
        thin = _thin(lx, ly)
        if steps:
            thin = [p for a, b in zip(thin, thin[1:], strict=False) for p in (a, (b[0], a[1]))]
            thin += [(lx[-1], ly[-1])]
        points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in thin)
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{points}"/>'
            f'<text x="{PAD_L + 8}" y="{PAD_T + 14 + 14 * i}" fill="{color}" '
            f'style="fill:{color}">{escape(label)}</text>'
        )
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f'<svg width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">'
        f"{''.join(parts)}</svg></figure>"
    )


def log_ticks(lo: float, hi: float) -> list[float]:
    """The values 0, 1, 10, 100… that fall in [lo, hi] on an axis of log10(1 + value)."""
    out = [0.0] if lo <= 0 <= hi else []
    k = 0
    while (at := math.log10(1 + 10**k)) <= hi:
        if at >= lo:
            out.append(at)
        k += 1
    return out


def _short(value: float) -> str:
    """An axis label: 0, 1, 100, 1k, 10k, 1M."""
    for unit, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= unit:
            return f"{value / unit:,.4g}{suffix}"
    return f"{value:,.4g}"


def ticks(lo: float, hi: float, about: int = 6) -> list[float]:
    """Round values for an axis from lo to hi: the multiples of a step of 1, 2, 2.5 or 5
    times a power of ten that fall in [lo, hi], `about` of them (at most one more)."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / about
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [float(f"{k * step:.15g}") for k in range(first, last + 1)]


def _thin(xs: Sequence[float], ys: Sequence[float]) -> list[tuple[float, float]]:
    """At most MAX_POINTS points, evenly picked, the last one kept."""
    n = len(xs)
    if n <= MAX_POINTS:
        return list(zip(xs, ys, strict=True))
    step = n / MAX_POINTS
    picked = [(xs[int(i * step)], ys[int(i * step)]) for i in range(MAX_POINTS)]
    picked.append((xs[-1], ys[-1]))
    return picked


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.2f}%"


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"
