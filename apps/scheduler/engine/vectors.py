"""Room as (gpu, cpu, memory) triples: the arithmetic the planner does on it, and the words
its reasons are written in.

The planner works on plain tuples rather than `Resources`: they are cheaper to build and
compare, and the order (GPUs first) is the one in which best fit compares room.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

Vec = tuple[int, int, int]  # (gpu, cpu, memory)

_MANY = 1 << 40  # "unbounded" count of zero-sized pods a node can take


# --- arithmetic ------------------------------------------------------------------------


def fits(a: Sequence[int], b: Sequence[int]) -> bool:
    return a[0] <= b[0] and a[1] <= b[1] and a[2] <= b[2]


def add(a: Sequence[int], b: Sequence[int]) -> Vec:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def sub(a: Sequence[int], b: Sequence[int]) -> Vec:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def sum_of(vs: Iterable[Sequence[int]]) -> Vec:
    g = c = m = 0
    for v in vs:
        g, c, m = g + v[0], c + v[1], m + v[2]
    return (g, c, m)


def grow(total: list[int], v: Sequence[int]) -> None:
    """Add `v` to a running total in place."""
    total[0] += v[0]
    total[1] += v[1]
    total[2] += v[2]


def low(vs: Sequence[Vec]) -> Vec:
    """Component-wise minimum: a node that cannot hold this holds none of the pods."""
    return (min(v[0] for v in vs), min(v[1] for v in vs), min(v[2] for v in vs))


def how_many(room: Sequence[int], pod: Vec) -> int:
    """How many pods of this shape fit in the room."""
    n = _MANY
    for i in range(3):
        if pod[i] > 0:
            n = min(n, room[i] // pod[i])
        elif room[i] < 0:
            return 0
    return max(n, 0)


# --- words -----------------------------------------------------------------------------


def value(i: int, n: int) -> str:
    """Component i of a vector as a person reads it: '8', '2.5' (cores), '16 GiB'."""
    return (str(n), _cores(n), _mib(n))[i]


def amount(i: int, n: int) -> str:
    """Component i with its unit: '8 GPU', '2.5 CPU', '16 GiB' (a size says it is memory:
    the same in every language)."""
    return value(i, n) if i == 2 else f"{value(i, n)} {('GPU', 'CPU')[i]}"


def milli_value(i: int, n: int) -> str:
    """`value`, GPUs given in milli-GPUs: '8', '0.5'."""
    return _cores(n) if i == 0 else value(i, n)


def milli_amount(i: int, n: int) -> str:
    """`amount`, GPUs given in milli-GPUs: '8 GPU', '0.5 GPU'."""
    return milli_value(i, n) if i == 2 else f"{milli_value(i, n)} {('GPU', 'CPU')[i]}"


def milli_shape(asks: Sequence[Vec]) -> str:
    """`shape` of pods given in milli-GPUs: '3×0.4 GPU', '2×8 GPU + 1×0.5 GPU'."""
    counts = Counter(_main(p, milli=True) for p in sorted(asks, reverse=True))
    return " + ".join(f"{n}×{what}" for what, n in counts.items()) or "no pods"


def describe(v: Vec) -> str:
    parts = [amount(i, v[i]) for i in range(3) if v[i]]
    return ", ".join(parts) if parts else "nothing"


def shape(pods: Sequence[Vec]) -> str:
    """'4×8 GPU', or '4×8 GPU + 1×4 CPU' for a mixed gang."""
    return _shape(tuple(pods))


@lru_cache(maxsize=4096)  # waiting reasons repeat the same few shapes on every plan
def _shape(pods: tuple[Vec, ...]) -> str:
    counts = Counter(_main(p) for p in sorted(pods, reverse=True))
    return " + ".join(f"{n}×{what}" for what, n in counts.items()) or "no pods"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _cores(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores / 1000:g}"


def _mib(mib: int) -> str:
    if mib and mib % 1024 == 0:
        return f"{mib // 1024} GiB"
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib} MiB"


def _main(v: Vec, *, milli: bool = False) -> str:
    """The component a person sizes a pod by: GPUs if any, else CPU, else memory."""
    for i in range(3):
        if v[i]:
            return milli_amount(i, v[i]) if milli else amount(i, v[i])
    return "nothing"
