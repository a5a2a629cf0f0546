"""The price chart's geometry (apps/core/charts.py). Pure: no database, fixed times."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from apps.core.charts import (
    CHART_HEIGHT,
    CHART_WIDTH,
    PAD_BOTTOM,
    PAD_LEFT,
    PAD_RIGHT,
    PAD_TOP,
    PLOT_HEIGHT,
    Scale,
    chart_build,
    price_range,
)

UNTIL = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SINCE = UNTIL - timedelta(hours=6)
S0, S1 = SINCE.timestamp(), UNTIL.timestamp()


def test_its_scale_maps_the_window_and_the_price_range_to_the_plots_edges():
    scale = Scale(S0, S1, Decimal("0.1"), Decimal("0.9"))
    assert scale.x(S0) == PAD_LEFT and scale.x(S1) == CHART_WIDTH - PAD_RIGHT
    assert scale.y(Decimal("0.1")) == CHART_HEIGHT - PAD_BOTTOM  # SVG's y grows downwards
    assert scale.y(Decimal("0.9")) == PAD_TOP


def test_its_price_range_holds_the_prices_with_a_margin_never_below_zero():
    assert price_range([Decimal("0.2"), Decimal("0.7")]) == (Decimal("0.160"), Decimal("0.740"))
    low, high = price_range([Decimal("0.5"), Decimal("0.5")])
    assert low < Decimal("0.5") < high
    assert price_range([Decimal("0"), Decimal("0.01")])[0] == 0
    assert price_range([]) == (Decimal(0), Decimal("1.08"))


def test_its_ticks_increase_and_stay_inside_the_plot_and_the_range():
    history = [(S0 - 60, Decimal("0.30")), (S0 + 3600, Decimal("0.45")), (S1 - 600, Decimal("0.2"))]
    chart = chart_build([("Market price", "price", history)], since=SINCE, until=UNTIL)
    xs = [x for x, _ in chart.x_ticks]
    assert xs == sorted(xs) and xs[0] == PAD_LEFT and xs[-1] == chart.plot_right
    assert [text for _, text in chart.x_ticks][0] == "06-01 06:00"
    prices = [Decimal(text.removeprefix("¥")) for _, text in chart.y_ticks]
    assert prices == sorted(prices)
    assert prices[0] <= Decimal("0.2") and prices[-1] >= Decimal("0.45")
    ys = [y for y, _ in chart.y_ticks]
    assert ys == sorted(ys, reverse=True)  # higher prices drawn higher up
    assert all(PAD_TOP <= y <= chart.plot_bottom for y in ys)


def test_it_holds_each_price_until_the_next_and_starts_at_the_window():
    history = [(S0 - 60, Decimal("0.30")), (S0 + 3600, Decimal("0.45"))]
    chart = chart_build([("Market price", "price", history)], since=SINCE, until=UNTIL)
    (line,) = chart.lines
    points = [tuple(map(float, p.split(","))) for p in line.points.split()]
    assert len(points) == 4
    assert points[0][0] == PAD_LEFT and points[-1][0] == chart.plot_right
    assert points[0][1] == points[1][1] and points[2][1] == points[3][1]  # flat steps
    assert points[1][0] == points[2][0]  # the price changes in one vertical step
    assert line.last == Decimal("0.45") and line.colour and line.dash == ""


def test_an_empty_series_draws_no_line():
    chart = chart_build([("Market price", "price", [])], since=SINCE, until=UNTIL)
    assert chart.lines[0].points == "" and chart.lines[0].last is None and chart.empty
    assert chart.data["series"][0]["values"] == [None]


def test_it_imports_no_django():
    code = (
        "import sys; import apps.core.charts; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'celery')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_it_scales_to_the_moving_price_and_names_far_references():
    """A price moving ¥1.00–1.06 against an original of ¥10 fills the plot; the original is
    named as above the chart, the floor it sits on is drawn."""
    history = [(S0 - 60, Decimal("1.00")), (S0 + 3600, Decimal("1.06"))]
    chart = chart_build(
        [
            ("Market price", "price", history),
            ("Floor", "floor", [(S0, Decimal("1.00"))]),
            ("Original (pay-as-you-go)", "original", [(S0, Decimal("10"))]),
        ],
        since=SINCE,
        until=UNTIL,
    )
    price, floor, original = chart.lines
    low, high = (Decimal(t.removeprefix("¥")) for t in (chart.y_ticks[0][1], chart.y_ticks[-1][1]))
    assert Decimal("0.9") < low <= Decimal("1.00") and Decimal("1.06") <= high < Decimal("1.2")
    assert chart.data["y"] == [float(low), pytest.approx(float(high), abs=1e-4)]
    ys = [float(p.split(",")[1]) for p in price.points.split()]
    assert max(ys) - min(ys) > PLOT_HEIGHT * 0.6  # the move fills most of the plot
    assert floor.points and floor.off == ""
    assert original.points == "" and original.off == "above" and original.last == Decimal("10")


def test_with_no_price_yet_it_spans_the_references():
    chart = chart_build(
        [
            ("Market price", "price", []),
            ("Floor", "floor", [(S0, Decimal("1"))]),
            ("Original (pay-as-you-go)", "original", [(S0, Decimal("10"))]),
        ],
        since=SINCE,
        until=UNTIL,
    )
    assert all(line.off == "" for line in chart.lines[1:]) and chart.lines[2].points


def test_an_amount_chart_starts_at_zero_with_round_ticks():
    since = datetime(2026, 12, 1, tzinfo=UTC)
    until = since + timedelta(hours=6)
    series = [
        (
            "In Quota",
            "in_quota",
            [(since.timestamp(), Decimal(3)), (until.timestamp() - 60, Decimal(1))],
        ),
        ("min", "min", [(since.timestamp(), Decimal(4))]),
    ]
    chart = chart_build(series, since=since, until=until, references=(), y_text=str, from_zero=True)
    assert [Decimal(text) for _, text in chart.y_ticks] == [0, Decimal("1.5"), 3, Decimal("4.5"), 6]
    assert chart.data["y"] == [0.0, 6.0]
    assert all(line.off == "" for line in chart.lines)  # the min is on the chart


def test_ticks_of_a_few_minutes_have_their_seconds():
    since = datetime(2026, 3, 2, 6, 5, 30, tzinfo=UTC)
    chart = chart_build(
        [("Price", "price", [(since.timestamp(), Decimal("0.3"))])],
        since=since,
        until=since + timedelta(minutes=3),
    )
    labels = [text for _, text in chart.x_ticks]
    assert len(set(labels)) == 5, labels  # not 06:05, 06:06, 06:06, 06:07, 06:08
    assert labels[0] == "06:05:30"
