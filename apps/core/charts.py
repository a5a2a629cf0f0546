"""Charts as geometry: step-function series in, SVG user-space lines and ticks out.

Pure (no Django, no database): the selectors read the price history (the market) or a
quota's use over time (the scheduler) and call `chart_build`; `templates/market/_chart.html`
draws a price chart as inline SVG, which works without JavaScript, and
`static/js/market-chart.js` upgrades it to uPlot from `Chart.data`.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from decimal import Decimal

Points = list[tuple[float, Decimal]]  # [(epoch seconds, ¥/h)], sorted, a step function
Series = tuple[str, str, Points]  # (label, LINE_STYLES kind, points)

CHART_WIDTH, CHART_HEIGHT = 720, 240
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 64, 12, 12, 28
PLOT_WIDTH = CHART_WIDTH - PAD_LEFT - PAD_RIGHT
PLOT_HEIGHT = CHART_HEIGHT - PAD_TOP - PAD_BOTTOM
MAX_CHART_POINTS = 1500
REFERENCE_KINDS = ("floor", "original")  # fixed lines the y axis need not reach
LINE_STYLES = {  # css name → (colour, dash)
    "price": ("#2563eb", ""),
    "floor": ("#16a34a", "6 4"),
    "original": ("#dc2626", "6 4"),
    "average": ("#9333ea", "2 3"),
    "bid": ("#ea580c", ""),
    "in_quota": ("#2563eb", ""),  # a quota's use over time (scheduler/selectors.py)
    "borrowed": ("#ea580c", ""),
    "min": ("#dc2626", "6 4"),
    # one per pod on a job's metric charts (metric_chart), in turn
    "series-0": ("#2563eb", ""),
    "series-1": ("#ea580c", ""),
    "series-2": ("#16a34a", ""),
    "series-3": ("#9333ea", ""),
    "series-4": ("#dc2626", ""),
    "series-5": ("#0891b2", ""),
    "series-6": ("#ca8a04", ""),
    "series-7": ("#db2777", ""),
    "series-8": ("#65a30d", ""),
    "series-9": ("#4b5563", ""),
}
SERIES_KINDS = tuple(k for k in LINE_STYLES if k.startswith("series-"))
Samples = list[tuple[float, float]]  # [(epoch seconds, value)], sorted, sampled (not steps)


@dataclass(frozen=True)
class ChartLine:
    label: str
    kind: str  # a LINE_STYLES key
    points: str  # SVG polyline points
    last: Decimal | None
    off: str = ""  # a reference line beyond the scaled axis: "above" or "below"

    @property
    def colour(self) -> str:
        return LINE_STYLES[self.kind][0]

    @property
    def dash(self) -> str:
        return LINE_STYLES[self.kind][1]


@dataclass(frozen=True)
class Chart:
    """A price chart: lines in SVG user space plus the same data for uPlot (`data`)."""

    since: datetime
    until: datetime
    lines: list[ChartLine]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]
    data: dict = field(default_factory=dict)
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT

    @property
    def plot_bottom(self) -> int:
        return self.height - PAD_BOTTOM

    @property
    def plot_right(self) -> int:
        return self.width - PAD_RIGHT

    @property
    def empty(self) -> bool:
        return not any(line.points for line in self.lines)


@dataclass(frozen=True)
class Scale:
    """Data to SVG user space: time `start`–`end` left to right across the plot, price
    `low`–`high` bottom to top (SVG's y grows downwards)."""

    start: float
    end: float
    low: Decimal
    high: Decimal

    def x(self, at: float) -> float:
        return PAD_LEFT + PLOT_WIDTH * (at - self.start) / ((self.end - self.start) or 1)

    def y(self, price: Decimal) -> float:
        return PAD_TOP + PLOT_HEIGHT * float((self.high - price) / ((self.high - self.low) or 1))


def price_range(values: Sequence[Decimal]) -> tuple[Decimal, Decimal]:
    """The prices the y axis spans: the values with an 8% margin each side (10% of the
    price, at least ¥0.01, when they are all equal), never below zero; 0–1 with none."""
    low, high = (min(values), max(values)) if values else (Decimal(0), Decimal(1))
    margin = (high - low) * Decimal("0.08") or max(high * Decimal("0.1"), Decimal("0.01"))
    return max(low - margin, Decimal(0)), high + margin


def chart_build(
    series: Sequence[Series],
    *,
    since: datetime,
    until: datetime,
    zone: tzinfo = UTC,
    references: Sequence[str] = REFERENCE_KINDS,
    y_text: Callable[[Decimal], str] = lambda v: f"¥{v:.4f}",
    from_zero: bool = False,
) -> Chart:
    """The chart of step-function series over [since, until], each clipped to the window.

    The y axis is scaled to the moving lines (price, bid, average), so a price that moves by
    a few fen is seen moving; the floor and the original price (the `references` kinds) are
    reference lines, drawn where they fall inside that scale and otherwise named in the
    legend as above or below it. Only with no moving line to show does the axis span the
    references. With `from_zero` the axis starts at zero (amounts rather than prices). Time
    ticks are written in `zone` (the reader's), 24-hour; values with `y_text`."""
    start, end = since.timestamp(), until.timestamp()
    clipped = [(label, kind, _clip(h, start, end)) for label, kind, h in series]
    moving = [p for _, kind, h in clipped if kind not in references for _, p in h]
    low, high = price_range(moving or [p for _, _, h in clipped for _, p in h])
    if from_zero:  # amounts: from zero to a round top, so that the ticks are round too
        low, high = Decimal(0), _round_top(max(moving or [Decimal(0)]))
    scale = Scale(start, end, low, high)
    lines = []
    for label, kind, h in clipped:
        off = ""
        if kind in references and h:
            value = h[-1][1]
            off = "above" if value > high else "below" if value < low else ""
        points = "" if off else _step_points(h, end, scale)
        lines.append(ChartLine(label, kind, points, h[-1][1] if h else None, off))
    y_ticks = [
        (scale.y(low + (high - low) * i / 4), y_text(low + (high - low) * i / 4)) for i in range(5)
    ]
    # ticks a minute apart or closer need their seconds, or they read 06:06, 06:06, 06:07
    form = "%m-%d %H:%M" if (end - start) / 4 >= 60 else "%H:%M:%S"
    x_ticks = [
        (
            scale.x(start + (end - start) * i / 4),
            datetime.fromtimestamp(start + (end - start) * i / 4, zone).strftime(form),
        )
        for i in range(5)
    ]
    return Chart(
        since=since,
        until=until,
        lines=lines,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        data={**_uplot_data(clipped, end), "y": [float(low), float(high)]},
    )


_STEPS = (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8)


def _round_top(value: Decimal) -> Decimal:
    """The least of 4 × (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 × a power of ten) above `value`
    (with 5% room), for four round ticks above zero; 1 for nothing."""
    if value <= 0:
        return Decimal(1)
    want = value * Decimal("1.05") / 4
    scale = Decimal(10) ** (want.adjusted())
    for step in _STEPS + (10,):
        if Decimal(str(step)) * scale >= want:
            return Decimal(str(step)) * scale * 4
    return Decimal(40) * scale


def _clip(history: Points, start: float, end: float) -> Points:
    """The part of a step function inside [start, end]; the price in force at `start` is
    moved to `start`. Thinned by stride to at most MAX_CHART_POINTS points."""
    index = max(bisect.bisect_right(history, start, key=lambda p: p[0]) - 1, 0)
    points = [(max(at, start), price) for at, price in history[index:] if at <= end]
    if len(points) > MAX_CHART_POINTS:
        stride = -(-len(points) // MAX_CHART_POINTS)
        points = points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])
    return points


def _step_points(history: Points, end: float, scale: Scale) -> str:
    """SVG polyline points of a step function: each price held until the next (or `end`)."""
    coords: list[str] = []
    for i, (at, price) in enumerate(history):
        until = history[i + 1][0] if i + 1 < len(history) else end
        coords.append(f"{scale.x(at):.1f},{scale.y(price):.1f}")
        coords.append(f"{scale.x(until):.1f},{scale.y(price):.1f}")
    return " ".join(coords)


def _uplot_data(series: Sequence[Series], end: float) -> dict:
    """Series on one shared time axis (uPlot's shape), each a step function."""
    times = sorted({at for _, _, h in series for at, _ in h} | {end})
    out: dict = {"t": times, "series": []}
    for label, kind, history in series:
        keys = [at for at, _ in history]
        values = []
        for at in times:
            index = bisect.bisect_right(keys, at) - 1
            values.append(float(history[index][1]) if index >= 0 else None)
        out["series"].append(
            {
                "label": label,
                "kind": kind,
                "colour": LINE_STYLES[kind][0],
                "dash": LINE_STYLES[kind][1],
                "values": values,
            }
        )
    return out


def metric_chart(
    series: Sequence[tuple[str, Samples]],
    *,
    since: datetime,
    until: datetime,
    gap: float,
    zone: tzinfo = UTC,
    y_text: Callable[[float], str] = lambda v: f"{v:g}",
    binary: bool = False,
) -> Chart:
    """Sampled series (a job's pods' figures) over [since, until], from zero up: each a
    line through its points, broken where two points are more than `gap` seconds apart (no
    sample there: absent, not zero). `ChartLine.points` is SVG path data ("M x,y L x,y …").
    `binary`: amounts of bytes, whose ticks are round in KiB, MiB, GiB… (never below 1 KiB
    at the top, so that a chart of nothing does not tick 0 B, 0 B, 1 B…)."""
    start, end = since.timestamp(), until.timestamp()
    clipped = [
        (label, [(t, v) for t, v in points if start <= t <= end]) for label, points in series
    ]
    most = Decimal(str(max((v for _, h in clipped for _, v in h), default=0.0)))
    if binary:
        unit = Decimal(1024)
        while most >= unit * 1024:
            unit *= 1024
        top = _round_top(most / unit) * unit
    else:
        top = _round_top(most)
    scale = Scale(start, end, Decimal(0), top)
    lines = []
    for i, (label, points) in enumerate(clipped):
        path, before = [], None
        for j, (t, v) in enumerate(points):
            joined = before is not None and t - before <= gap
            x, y = scale.x(t), scale.y(_dec(v))
            alone = not joined and (j + 1 == len(points) or points[j + 1][0] - t > gap)
            if alone:  # a sample with no neighbour: a short dash, not an invisible move
                path.append(f"M{x - 2:.1f},{y:.1f} h4")
            else:
                path.append(f"{'L' if joined else 'M'}{x:.1f},{y:.1f}")
            before = t
        kind = SERIES_KINDS[i % len(SERIES_KINDS)]
        last = _dec(points[-1][1]) if points else None
        lines.append(ChartLine(label, kind, " ".join(path), last))
    y_ticks = [(scale.y(top * i / 4), y_text(float(top * i / 4))) for i in range(5)]
    x_ticks = [
        (
            scale.x(start + (end - start) * i / 4),
            datetime.fromtimestamp(start + (end - start) * i / 4, zone).strftime("%H:%M:%S"),
        )
        for i in range(5)
    ]
    return Chart(since=since, until=until, lines=lines, y_ticks=y_ticks, x_ticks=x_ticks)


def _dec(value: float) -> Decimal:
    return Decimal(repr(float(value)))
