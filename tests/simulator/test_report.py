"""The report's axes: round tick values, on linear and on log (delay) axes."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from apps.simulator.report import _short, log_ticks, ticks


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0, 94.71, [0, 20, 40, 60, 80]),  # allocation, %
        (0.0161, 130, [25, 50, 75, 100, 125]),  # share of capacity arrived, %
        (0, 1, [0, 0.2, 0.4, 0.6, 0.8, 1]),
        (0, 18_000, [0, 5_000, 10_000, 15_000]),
        (-3, 12, [-2.5, 0, 2.5, 5, 7.5, 10]),
        (5, 5, [5]),
    ],
)
def test_ticks_fall_on_round_values(lo, hi, expected):
    assert ticks(lo, hi) == expected


@given(
    st.floats(-1e6, 1e6, allow_nan=False),
    st.floats(1e-6, 1e6, allow_nan=False),
)
def test_ticks_are_few_evenly_spaced_round_multiples_within_the_range(lo, span):
    assume(span >= abs(lo) * 1e-6)  # a chart's range, not the last digits of a float
    hi = lo + span
    out = ticks(lo, hi)
    assert 3 <= len(out) <= 7
    assert all(lo - 1e-9 * span <= t <= hi + 1e-9 * span for t in out)
    step = out[1] - out[0]
    assert all(math.isclose(b - a, step, rel_tol=1e-6) for a, b in zip(out, out[1:], strict=False))
    mantissa = step / 10 ** math.floor(math.log10(step))
    # 10: a step of 0.1 measured between two ticks may come out as 0.0999999999
    assert any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 2.5, 5, 10))


def test_a_log_axis_ticks_at_powers_of_ten():
    """Delay charts plot log10(1 + seconds): ticks at 0, 1, 10, 100… s, none past the end."""
    at = log_ticks(0, math.log10(1 + 34_040))
    assert [_short(round(10**x - 1)) for x in at] == ["0", "1", "10", "100", "1k", "10k"]
    assert log_ticks(math.log10(1 + 50), math.log10(1 + 5_000)) == pytest.approx(
        [math.log10(101), math.log10(1001)]
    )
    assert log_ticks(0, 0.1) == [0.0]


@pytest.mark.parametrize(
    ("value", "label"),
    [(0, "0"), (5, "5"), (100, "100"), (1_000, "1k"), (2_500, "2.5k"), (10**6, "1M")],
)
def test_axis_labels_are_short(value, label):
    assert _short(value) == label
