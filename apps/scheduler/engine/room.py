"""Room on a pool's nodes during one planning pass, and gang placement on it.

Room on a node is tracked twice: `now` (capacity minus running pods and this plan's
admissions) and `fut` (the same, but counting pods of jobs already being stopped, and of the
victims chosen in this plan, as gone, and room held for reclaiming owners as taken).
Admissions must fit both; a reclaiming owner plans on `fut`.

Placement is gang (all pods or none) and best fit: each pod, largest first, goes to the
node that leaves the least free room, GPUs compared first, then CPU, memory, node id. When
best fit fails on a small problem (≤ 6 pods, ≤ 8 nodes that could take a pod) an exact
search runs before giving up, so a small gang that fits somehow is always found.
(`Config.placement` may pick worst fit or a random node instead, to compare policies; FGD
counts whole GPUs as best fit does, and differs only where GPUs are shared: sharing.py.)
"""

from __future__ import annotations

import random
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from apps.scheduler.engine.model import Node, PlacementRule, vec
from apps.scheduler.engine.vectors import _MANY, Vec, fits, grow, how_many, low, sum_of

if TYPE_CHECKING:
    from apps.scheduler.engine.sharing import Shares

_EXACT_PODS = 6
_EXACT_NODES = 8
_EXACT_BUDGET = 50_000
# The change log starts over past this length: its readers then rebuild what they derive,
# which costs about as much as reading this many changes.
_LOG_PER_NODE = 8
_LOG_SLACK = 4096


class Pool:
    """Room on one pool's schedulable nodes during one planning pass.

    Admissions must fit `now` and `fut` (module docstring), so they look at
    `eff = min(now, fut)`, indexed as one list per free-GPU count of (free cpu, free memory,
    node id), kept sorted: best fit is then a bisect in at most a few lists rather than a
    scan of every node. Within one pass room only shrinks (or is handed back by a rollback),
    so a gang shape that failed once fails again: `failed` remembers those. `fut` is indexed
    the same way (`fut_buckets`) for reclaiming owners, who plan on it (`place_future`), and
    every change of a node's room is logged (`changes`) so that what is derived from the
    room (that index, `slots`, the reclaimer's heaps) is brought up to date, when next
    asked, from the nodes that changed.
    """

    def __init__(
        self,
        pool_id: int,
        nodes: list[Node],
        *,
        placement: PlacementRule = "best_fit",
        rng: random.Random | None = None,
    ) -> None:
        self.id = pool_id
        self.placement = placement  # Config.placement; best fit unless compared
        self.rng = rng
        self.cap = {n.id: vec(n.capacity) for n in nodes}
        # the least of every node's capacity: what fits it fits every node
        caps = self.cap.values()
        self.smallest: Vec = (
            (min(v[0] for v in caps), min(v[1] for v in caps), min(v[2] for v in caps))
            if caps
            else (0, 0, 0)
        )
        self.now = {n: list(v) for n, v in self.cap.items()}
        self.fut = {n: list(v) for n, v in self.cap.items()}
        self.eff: dict[int, Vec] = {}
        width = max((v[0] for v in self.cap.values()), default=0) + 1
        self.buckets: list[list[tuple[int, int, int]]] = [[] for _ in range(max(width, 1))]
        self.free = [0, 0, 0]  # sum of indexed eff
        self.freeing: set[int] = set()  # nodes where fut exceeds now somewhere
        self.failed: set[tuple[Vec, ...]] = set()
        self.reclaim_failed: set[tuple[tuple[Vec, ...], bool]] = set()
        # Gang shapes `place_future` found no room for, with `fut_grown` at the time: fut
        # only shrinks in a pass but where victims are claimed, so those fail again until it
        # grows (a queue of owners waiting for the same room tries it once per growth).
        self.future_failed: dict[tuple[Vec, ...], int] = {}
        self.fut_grown = 0
        self.version = dict.fromkeys(self.cap, 0)  # bumped whenever a node's room changes
        self.changes: list[int] = []  # nodes in the order their room changed, for readers
        # `fut` indexed like `eff`, and how many pods of each shape asked for so far it holds
        # (`slots`)
        self.fut_buckets = [_Chunked() for _ in self.buckets]
        self.fut_indexed: dict[int, Vec] = {}  # fut as the index holds it
        self.fut_seen = 0  # how much of `changes` the index has read
        self.slot_counts: dict[Vec, _SlotCount] = {}
        # Between plans (ClusterState): room as the running jobs leave it, and during a plan
        # the nodes whose room the plan changed, to put back afterwards.
        self.base: dict[int, tuple[Vec, Vec]] = {}
        self.journal: set[int] | None = None
        # In a pool where some pod shares a GPU: every GPU by its index (sharing.py)
        self.shares: Shares | None = None

    def occupy(self, node_id: int, v: Vec, *, leaving: bool) -> None:
        """A running pod, before `build`. A leaving pod holds `now` but not `fut`."""
        now = self.now[node_id]
        now[0], now[1], now[2] = now[0] - v[0], now[1] - v[1], now[2] - v[2]
        if not leaving:
            fut = self.fut[node_id]
            fut[0], fut[1], fut[2] = fut[0] - v[0], fut[1] - v[1], fut[2] - v[2]

    def build(self) -> None:
        fut_rows: list[list[tuple[int, int, int]]] = [[] for _ in self.buckets]
        for n in self.cap:
            now, fut = self.now[n], self.fut[n]
            self.base[n] = ((now[0], now[1], now[2]), (fut[0], fut[1], fut[2]))
            e = (min(now[0], fut[0]), min(now[1], fut[1]), min(now[2], fut[2]))
            self.eff[n] = e
            if not fits(fut, now):
                self.freeing.add(n)
            if e[0] >= 0 and e[1] >= 0 and e[2] >= 0:
                self.buckets[e[0]].append((e[1], e[2], n))
                grow(self.free, e)
            f = self.fut_indexed[n] = (fut[0], fut[1], fut[2])
            if f[0] >= 0 and f[1] >= 0 and f[2] >= 0:
                fut_rows[f[0]].append((f[1], f[2], n))
        for bucket in self.buckets:
            bucket.sort()
        self.fut_buckets = [_Chunked(rows) for rows in fut_rows]
        self.fut_seen = len(self.changes)
        self.slot_counts.clear()

    def _update(self, n: int, *, grown_ok: bool = False) -> None:
        self.version[n] += 1
        if self.journal is not None:
            self.journal.add(n)
        if len(self.changes) > _LOG_PER_NODE * len(self.cap) + _LOG_SLACK:
            self._sync_fut()
            self.changes = []  # a reader that kept the old log starts over
            self.fut_seen = 0
        self.changes.append(n)
        now, fut = self.now[n], self.fut[n]
        new = (min(now[0], fut[0]), min(now[1], fut[1]), min(now[2], fut[2]))
        if fits(fut, now):
            self.freeing.discard(n)
        else:
            self.freeing.add(n)
        old = self.eff[n]
        if new == old:
            return
        if old[0] >= 0 and old[1] >= 0 and old[2] >= 0:
            bucket = self.buckets[old[0]]
            del bucket[bisect_left(bucket, (old[1], old[2], n))]
            grow(self.free, (-old[0], -old[1], -old[2]))
        if new[0] >= 0 and new[1] >= 0 and new[2] >= 0:
            insort(self.buckets[new[0]], (new[1], new[2], n))
            grow(self.free, new)
        self.eff[n] = new
        if not grown_ok and not fits(new, old):
            self.failed.clear()  # more room than before: old failures may now fit

    def move(self, n: int, v: Vec, leaving: bool) -> None:
        """Between plans: a running pod arrives (v negative) or leaves (v positive)."""
        assert self.journal is None, "the room of running jobs changes between plans"
        grow(self.now[n], v)
        if not leaving:
            grow(self.fut[n], v)
        now, fut = self.now[n], self.fut[n]
        self.base[n] = ((now[0], now[1], now[2]), (fut[0], fut[1], fut[2]))
        self._update(n, grown_ok=True)

    def adjust(self, n: int, d_now: int, d_fut: int) -> None:
        """Whole GPUs that shares open (negative) or leave whole again (positive) on a
        node, in `now` and `fut` (sharing.py): before `build`, between plans, or in one."""
        self.now[n][0] += d_now
        self.fut[n][0] += d_fut
        if n not in self.eff:
            return  # not built yet: `build` reads it
        if self.journal is None:
            now, fut = self.now[n], self.fut[n]
            self.base[n] = ((now[0], now[1], now[2]), (fut[0], fut[1], fut[2]))
        if d_fut > 0:
            self.fut_grown += 1
        self._update(n, grown_ok=d_now <= 0 and d_fut <= 0)

    def rollback(self) -> None:
        """Undo what a plan did to the room: back to `base` on every node it touched."""
        touched, self.journal = self.journal or set(), None
        for n in touched:
            now, fut = self.base[n]
            self.now[n][:] = now
            self.fut[n][:] = fut
            self._update(n, grown_ok=True)
        self.failed.clear()
        self.reclaim_failed.clear()
        self.future_failed.clear()
        self.rng = None

    def _sync_fut(self) -> None:
        """Bring the fut index up to date with the nodes changed since it last looked."""
        log = self.changes
        if self.fut_seen == len(log):
            return
        fut, indexed = self.fut, self.fut_indexed
        for n in set(log[self.fut_seen :]):
            f = fut[n]
            new = (f[0], f[1], f[2])
            if new != indexed[n]:
                self._index_fut(n, new)
        self.fut_seen = len(log)

    def _index_fut(self, n: int, new: Vec) -> None:
        old = self.fut_indexed[n]
        if old[0] >= 0 and old[1] >= 0 and old[2] >= 0:
            self.fut_buckets[old[0]].remove((old[1], old[2], n))
        if new[0] >= 0 and new[1] >= 0 and new[2] >= 0:
            self.fut_buckets[new[0]].add((new[1], new[2], n))
        self.fut_indexed[n] = new

    def take(self, n: int, v: Vec) -> None:
        """Admit a pod on the node."""
        grow(self.now[n], (-v[0], -v[1], -v[2]))
        grow(self.fut[n], (-v[0], -v[1], -v[2]))
        self._update(n)

    def give_back(self, n: int, v: Vec) -> None:
        """Undo `take` (a gang that did not fit after all)."""
        grow(self.now[n], v)
        grow(self.fut[n], v)
        self.fut_grown += 1
        self._update(n, grown_ok=True)

    def reserve(self, n: int, v: Vec) -> None:
        """Hold room that will be free once the victims are gone."""
        grow(self.fut[n], (-v[0], -v[1], -v[2]))
        self._update(n)

    def release(self, n: int, v: Vec) -> None:
        """A victim's pod: its room will be free."""
        grow(self.fut[n], v)
        self.fut_grown += 1
        self._update(n)

    def best(self, pod: Vec) -> int | None:
        """The node best fit leaves with the least room, or None."""
        if self.placement == "worst_fit" or self.placement == "random":
            return self._other_fit(pod)
        g, c, m = pod
        buckets = self.buckets
        for b in range(max(g, 0), len(buckets)):
            bucket = buckets[b]
            if not bucket:
                continue
            for j in range(bisect_left(bucket, (c, m)), len(bucket)):
                entry = bucket[j]
                if entry[1] >= m:
                    return entry[2]
        return None

    def _other_fit(self, pod: Vec) -> int | None:
        """Worst fit (the node left with the most room) or a random node that fits."""
        g, c, m = pod
        if self.placement == "random":
            nodes = sorted(self.fitting(pod) or {})
            return self.rng.choice(nodes) if nodes and self.rng is not None else None
        for b in range(len(self.buckets) - 1, max(g, 0) - 1, -1):
            bucket = self.buckets[b]
            for j in range(len(bucket) - 1, -1, -1):
                entry = bucket[j]
                if entry[0] < c:
                    break
                if entry[1] >= m:
                    return entry[2]
        return None

    def place(self, pods: Sequence[Vec]) -> list[int] | None:
        """Place a whole gang and take its room, or take nothing and return None."""
        if not pods:
            return []
        key = tuple(sorted(pods))
        if key in self.failed:
            return None
        if not fits(sum_of(pods), self.free):
            self.failed.add(key)
            return None
        nodes = [0] * len(pods)
        done: list[int] = []
        for i in _largest_first(pods):
            n = self.best(pods[i])
            if n is None:
                break
            self.take(n, pods[i])
            nodes[i] = n
            done.append(i)
        else:
            return nodes
        for i in reversed(done):
            self.give_back(nodes[i], pods[i])
        exact = self._exact(pods)
        if exact is None:
            self.failed.add(key)
            return None
        for i, n in enumerate(exact):
            self.take(n, pods[i])
        return exact

    def _exact(self, pods: Sequence[Vec]) -> list[int] | None:
        if len(pods) > _EXACT_PODS:
            return None
        room = self.fitting(low(pods), limit=_EXACT_NODES)
        return _search(pods, room) if room is not None else None

    def fitting(self, lo: Vec, limit: int | None = None) -> dict[int, Vec] | None:
        """Nodes whose eff room holds `lo`; None when there are more than `limit`."""
        out: dict[int, Vec] = {}
        for b in range(max(lo[0], 0), len(self.buckets)):
            bucket = self.buckets[b]
            for j in range(bisect_left(bucket, (lo[1], lo[2])), len(bucket)):
                c, m, n = bucket[j]
                if m >= lo[2]:
                    out[n] = (b, c, m)
                    if limit is not None and len(out) > limit:
                        return None
        return out

    def future_room(self, lo: Vec) -> dict[int, Vec]:
        """Nodes whose fut room holds `lo`, with that room: where a reclaimer can plan."""
        return self.future_fitting(lo, {}) or {}

    def future_fitting(
        self, lo: Vec, overlay: dict[int, Vec], limit: int | None = None
    ) -> dict[int, Vec] | None:
        """Nodes whose room holds `lo`, room being `overlay` where given and fut elsewhere;
        None when there are more than `limit`."""
        out = {n: v for n, v in overlay.items() if fits(lo, v)}
        if limit is not None and len(out) > limit:
            return None
        self._sync_fut()
        buckets = self.fut_buckets
        for b in range(max(lo[0], 0), len(buckets)):
            for c, m, n in buckets[b].from_key(lo[1], lo[2]):
                if m >= lo[2] and n not in overlay:
                    out[n] = (b, c, m)
                    if limit is not None and len(out) > limit:
                        return None
        return out

    def slots(self, pod: Vec) -> int:
        """How many pods of this shape the fut room holds, node by node, in all (kept per
        shape, brought up to date from the change log when asked)."""
        kept = self.slot_counts.get(pod)
        if kept is None or kept.log is not self.changes:
            per_node = {n: holds(f, pod) for n, f in self.fut.items()}
            kept = self.slot_counts[pod] = _SlotCount(per_node, self.changes)
            return kept.total
        fut, per_node = self.fut, kept.per_node
        for n in set(self.changes[kept.seen :]):
            count = holds(fut[n], pod)
            kept.total += count - per_node[n]
            per_node[n] = count
        kept.seen = len(self.changes)
        return kept.total

    def place_future(
        self, pods: Sequence[Vec], overlay: dict[int, Vec] | None = None
    ) -> list[int] | None:
        """`place_on(pods, room)` where room is `overlay` on the nodes it names and fut on
        every other, without building that map: the fut index answers for the rest."""
        if overlay is None:
            shape = tuple(sorted(pods))
            if self.future_failed.get(shape) == self.fut_grown:
                return None
            placed = self.place_future(pods, {})
            if placed is None:
                self.future_failed[shape] = self.fut_grown
            return placed
        local = {n: list(v) for n, v in overlay.items()}
        self._sync_fut()
        buckets = self.fut_buckets
        nodes = [0] * len(pods)
        for i in _largest_first(pods):
            g, c, m = pods[i]
            best, best_key = _best_in(local, g, c, m)
            top = len(buckets) if best_key is None else min(best_key[0] + 1, len(buckets))
            for b in range(max(g, 0), top):
                entry = _first_fit(buckets[b], c, m, local)
                if entry is not None:
                    key = (b, entry[0], entry[1], entry[2])
                    if best_key is None or key < best_key:
                        best, best_key = entry[2], key
                    break
            if best is None or best_key is None:
                if len(pods) > _EXACT_PODS:
                    return None
                room = self.future_fitting(low(pods), overlay or {}, limit=_EXACT_NODES)
                return _search(pods, room) if room is not None else None
            local[best] = [best_key[0] - g, best_key[1] - c, best_key[2] - m]
            nodes[i] = best
        return nodes

    def max_free(self, i: int) -> int:
        """The most GPUs (i=0) or CPU (i=1) free on one node."""
        if i == 0:
            return next((b for b in range(len(self.buckets) - 1, -1, -1) if self.buckets[b]), 0)
        return max((bucket[-1][0] for bucket in self.buckets if bucket), default=0)


def holds(room: Sequence[int], pod: Vec) -> int:
    """`how_many(room, pod)`, quicker for a pod that asks for some of everything."""
    g, c, m = pod
    if g > 0 and c > 0 and m > 0:  # compared by hand: a call of min() costs more, this is hot
        n = room[0] // g
        k = room[1] // c
        if k < n:
            n = k
        k = room[2] // m
        if k < n:
            n = k
        return 0 if n < 0 else _MANY if n > _MANY else n
    return how_many(room, pod)


def _first_fit(
    bucket: _Chunked, c: int, m: int, skip: dict[int, list[int]]
) -> tuple[int, int, int] | None:
    """The smallest entry of a bucket holding (c, m) whose node is not in `skip`."""
    for entry in bucket.from_key(c, m):
        if entry[1] >= m and entry[2] not in skip:
            return entry
    return None


class _SlotCount:
    """`Pool.slots` of one shape: its total, each node's part, and how much of the pool's
    change log it has read."""

    __slots__ = ("total", "per_node", "log", "seen")

    def __init__(self, per_node: dict[int, int], log: list[int]) -> None:
        self.total = sum(per_node.values())
        self.per_node = per_node
        self.log = log
        self.seen = len(log)


class _Chunked:
    """A sorted list of (cpu, memory, node) held in chunks: adding or removing an entry
    moves one chunk, not the whole list, however many nodes a pool has. Each entry is
    kept as one integer in the same order (`_packed`: one comparison instead of a tuple's
    three), read back as a tuple."""

    __slots__ = ("chunks", "maxes")
    _LOAD = 256

    def __init__(self, rows: Iterable[tuple[int, int, int]] = ()) -> None:
        ordered = sorted(_packed(*row) for row in rows)
        size = self._LOAD
        self.chunks = [ordered[i : i + size] for i in range(0, len(ordered), size)]
        self.maxes = [chunk[-1] for chunk in self.chunks]

    def add(self, row: tuple[int, int, int]) -> None:
        key = _packed(*row)
        chunks, maxes = self.chunks, self.maxes
        if not chunks:
            chunks.append([key])
            maxes.append(key)
            return
        i = min(bisect_left(maxes, key), len(maxes) - 1)
        chunk = chunks[i]
        insort(chunk, key)
        maxes[i] = chunk[-1]
        if len(chunk) > 2 * self._LOAD:
            half = len(chunk) // 2
            chunks[i : i + 1] = [chunk[:half], chunk[half:]]
            maxes[i : i + 1] = [chunk[half - 1], chunk[-1]]

    def remove(self, row: tuple[int, int, int]) -> None:
        key = _packed(*row)
        i = bisect_left(self.maxes, key)
        chunk = self.chunks[i]
        del chunk[bisect_left(chunk, key)]
        if chunk:
            self.maxes[i] = chunk[-1]
        else:
            del self.chunks[i]
            del self.maxes[i]

    def from_key(self, cpu: int, memory: int) -> Iterator[tuple[int, int, int]]:
        """The entries from the first one not below (cpu, memory), in order."""
        chunks = self.chunks
        # entries are never negative: a negative bound asks for no more than 0
        key = 0 if cpu < 0 else _packed(cpu, max(memory, 0), 0)
        i = bisect_left(self.maxes, key)
        if i == len(chunks):
            return
        chunk = chunks[i]
        for j in range(bisect_left(chunk, key), len(chunk)):
            x = chunk[j]
            yield x >> _CPU_AT, (x >> _MEMORY_AT) & _FIELD, x & _FIELD
        for k in range(i + 1, len(chunks)):
            for x in chunks[k]:
                yield x >> _CPU_AT, (x >> _MEMORY_AT) & _FIELD, x & _FIELD


# (cpu, memory, node), none negative and memory and node below 2**64, as one integer that
# sorts as the tuple does
_MEMORY_AT = 64
_CPU_AT = 128
_FIELD = (1 << 64) - 1


def _packed(cpu: int, memory: int, node: int) -> int:
    return (cpu << _CPU_AT) | (memory << _MEMORY_AT) | node


def _largest_first(pods: Sequence[Vec]) -> list[int]:
    return sorted(range(len(pods)), key=lambda i: (-pods[i][0], -pods[i][1], -pods[i][2], i))


def _best_in(
    room: dict[int, list[int]], g: int, c: int, m: int
) -> tuple[int | None, tuple[int, int, int, int] | None]:
    """The node of a room map best fit picks for a pod (g, c, m), with its sort key."""
    best, best_key = None, None
    for n, r in room.items():
        if r[0] >= g and r[1] >= c and r[2] >= m:
            key = (r[0], r[1], r[2], n)
            if best_key is None or key < best_key:
                best, best_key = n, key
    return best, best_key


def place_on(pods: Sequence[Vec], room: dict[int, Vec]) -> list[int] | None:
    """Best fit of a gang onto a room map (same rule as `Pool.place`), without indexes."""
    free = {n: list(v) for n, v in room.items() if v[0] >= 0 and v[1] >= 0 and v[2] >= 0}
    nodes = [0] * len(pods)
    for i in _largest_first(pods):
        g, c, m = pods[i]
        best, _ = _best_in(free, g, c, m)
        if best is None:
            return _search(pods, room) if len(pods) <= _EXACT_PODS else None
        r = free[best]
        r[0], r[1], r[2] = r[0] - g, r[1] - c, r[2] - m
        nodes[i] = best
    return nodes


def _search(pods: Sequence[Vec], room: dict[int, Vec]) -> list[int] | None:
    """Exhaustive gang placement for small cases; None when none exists (or too big)."""
    if not pods:
        return []
    lo = low(pods)
    nodes = sorted((n for n, v in room.items() if fits(lo, v)), key=lambda n: (*room[n], n))
    if len(pods) > _EXACT_PODS or len(nodes) > _EXACT_NODES:
        return None
    order = _largest_first(pods)
    free = [list(room[n]) for n in nodes]
    slot = [0] * len(pods)
    budget = [_EXACT_BUDGET]

    def fill(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        g, c, m = pods[i]
        # Alike pods take nodes in non-decreasing order: each multiset is tried once.
        start = slot[order[k - 1]] if k and pods[order[k - 1]] == pods[i] else 0
        for j in range(start, len(nodes)):
            r = free[j]
            if r[0] >= g and r[1] >= c and r[2] >= m:
                budget[0] -= 1
                if budget[0] < 0:
                    return False
                r[0], r[1], r[2] = r[0] - g, r[1] - c, r[2] - m
                slot[i] = j
                if fill(k + 1):
                    return True
                r[0], r[1], r[2] = r[0] + g, r[1] + c, r[2] + m
        return False

    return [nodes[slot[i]] for i in range(len(pods))] if fill(0) else None
