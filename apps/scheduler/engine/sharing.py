"""GPU sharing: room GPU by GPU, for snapshots where some pod asks for part of a GPU.

A node's GPUs are indexed 0..gpu-1. A shared pod (`gpu_milli` 1..999) goes on one GPU that
has that many milli-GPUs left; a whole-GPU pod takes GPUs with nothing on them. No GPU ever
holds more than 1000 milli-GPUs.

`SharedPool` is `Pool` with milli-GPUs kept per GPU, in `now` and in `fut` alike (room.py);
the GPU component of its room vectors is the count of GPUs free in both, so best fit still
compares whole free GPUs first, and the buckets still index nodes by it. A shared pod goes
to the node best fit picks among those with a GPU that can take it (nodes left with no free
GPU first: fractions pack together), on the GPU there with the least room that fits.
Worst fit takes the GPU with the most room, random placement a random one.

FGD (`Config.placement = "fgd"`, after Weng et al., "Beware of Fragmentation", USENIX ATC'23)
puts each pod where the pool's expected fragmentation grows least. A node's fragmentation
for a pod shape is the GPU room on it that such a pod could not use: all of it when the pod
cannot run there at all (too few GPUs, or too little CPU); else, for a shared pod, the GPUs
with less room left than it asks; for a whole-GPU pod, the GPUs partly used. The expected
fragmentation weighs the shapes of a target workload (`Config.workload`, by default the
pending pods) by how common they are. Memory is not counted; ties go to best fit. It keeps
whole GPUs whole for whole-GPU pods, and packs fractions where they fit well.

`place_on_gpus` does the same placement on a map of room without indexes, for a reclaiming
owner planning on room its victims will leave (`choose_victims`: greedy in victim order,
then pruned). Unlike counted room (room.py), there is no exact search for small gangs and
no node-by-node victim choice here: best fit (or the configured rule) decides.

When no pod of a snapshot shares a GPU, the planner counts whole GPUs as it always has, and
`GpuIndexes` names the GPUs admitted pods take afterwards: the lowest free ones.
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

from apps.scheduler.engine.model import MILLI, Node, PlacementRule, RunningPod, SchedulerError
from apps.scheduler.engine.reclaim import Borrower
from apps.scheduler.engine.room import Pool
from apps.scheduler.engine.vectors import Vec, fits, grow, sum_of

Use = Sequence[tuple[int, int]]  # (GPU index, milli-GPUs) a pod holds
Spot = tuple[int, tuple[int, ...]]  # a pod's node and GPU indexes


class SharedPool(Pool):
    """Room on one pool's nodes, GPU by GPU (module docstring)."""

    def __init__(
        self,
        pool_id: int,
        nodes: list[Node],
        *,
        placement: PlacementRule = "best_fit",
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(pool_id, nodes, placement=placement, rng=rng)
        # milli-GPUs used per GPU, in now and fut, of the nodes touched (the others are empty)
        self.used_now: dict[int, list[int]] = {}
        self.used_fut: dict[int, list[int]] = {}
        self.touched: set[int] = set()
        self.part: dict[int, int] = {}  # most milli-GPUs left on one partly used GPU (eff)
        self.milli: dict[int, int] = {}  # milli-GPUs left on the node (eff), if it has room
        self.total_milli = 0
        self.shared_failed: set[tuple[tuple[Vec, int], ...]] = set()
        self.shared_reclaim_failed: set[tuple[tuple[tuple[Vec, int], ...], bool]] = set()
        # FGD: (milli-GPUs, CPU, weight) with weights summing to 1, and the CPU steps at
        # which a node can run more of its shapes
        self.workload: list[tuple[int, int, float]] = []
        self.cpu_steps: list[int] = []
        self._sigs: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._frags: dict[tuple[tuple[int, ...], int], float] = {}
        self._options: dict[tuple[tuple[int, ...], int, int, int, int], list[tuple[int, float]]]
        self._options = {}

    # -- room per GPU --

    def build(self) -> None:
        """As `Pool.build`, with the nodes nothing runs on read from their capacity."""
        touched = self.touched
        for n, cap in self.cap.items():
            if n in touched:
                e = self._eff(n)
                if self._is_freeing(n):
                    self.freeing.add(n)
            else:
                e = (cap[0] if cap[0] > 0 else 0, cap[1], cap[2])
                self.part[n] = 0
                left = MILLI * e[0] if e[1] >= 0 and e[2] >= 0 else 0
                self.milli[n] = left
                self.total_milli += left
            self.eff[n] = e
            if e[0] >= 0 and e[1] >= 0 and e[2] >= 0:
                self.buckets[e[0]].append((e[1], e[2], n))
                grow(self.free, e)
        for bucket in self.buckets:
            bucket.sort()

    def _touch(self, n: int) -> None:
        if n not in self.touched:
            self.touched.add(n)
            size = max(self.cap[n][0], 0)
            self.used_now[n], self.used_fut[n] = [0] * size, [0] * size

    def _eff(self, n: int) -> Vec:
        self._touch(n)
        whole = part = left = 0
        for a, b in zip(self.used_now[n], self.used_fut[n], strict=True):
            u = a if a > b else b
            if u == 0:
                whole += 1
            elif MILLI - u > part:
                part = MILLI - u
            if u < MILLI:
                left += MILLI - u
        now, fut = self.now[n], self.fut[n]
        e = (whole, min(now[1], fut[1]), min(now[2], fut[2]))
        self.part[n] = part
        left = left if e[1] >= 0 and e[2] >= 0 else 0
        self.total_milli += left - self.milli.get(n, 0)
        self.milli[n] = left
        return e

    def _is_freeing(self, n: int) -> bool:
        self._touch(n)
        now, fut = self.now[n], self.fut[n]
        if fut[1] > now[1] or fut[2] > now[2]:
            return True
        return any(b < a for a, b in zip(self.used_now[n], self.used_fut[n], strict=True))

    def _change(
        self, n: int, v: Vec, use: Use, sign: int, *, now: bool, fut: bool, undo: bool = False
    ) -> None:
        """Add (sign 1) or remove (-1) a pod's use of the node in `now` and/or `fut`."""
        self._touch(n)
        for view, used, on in ((self.now, self.used_now, now), (self.fut, self.used_fut, fut)):
            if not on:
                continue
            gpus = used[n]
            for g, milli in use:
                gpus[g] += sign * milli
            room = view[n]
            room[0] = gpus.count(0)
            room[1] -= sign * v[1]
            room[2] -= sign * v[2]
        self._update(n, grown_ok=True)
        if sign < 0 and not undo:
            self.shared_failed.clear()  # more room than before: old failures may now fit
            self.shared_reclaim_failed.clear()

    def occupy_pod(
        self, n: int, v: Vec, share: int, gpus: tuple[int, ...], *, leaving: bool
    ) -> tuple[int, ...]:
        """A running pod, before `build`; returns the GPUs it holds. Without indexes, a
        whole-GPU pod is put on the lowest free GPUs, a shared one by best fit."""
        self._touch(n)
        used = self.used_now[n]
        if gpus:
            size = len(used)
            for g in gpus:
                if not 0 <= g < size:
                    raise SchedulerError(f"node {n}: GPU index {g} out of range")
            if len(gpus) > 1 and len(set(gpus)) != len(gpus):
                raise SchedulerError(f"node {n}: GPU indexes {gpus} repeated")
        elif share:
            gpus = (_choose_gpu(used, share, "best_fit", None, tolerant=True),)
        else:
            free = [g for g in range(len(used)) if used[g] == 0]
            busy = sorted((g for g in range(len(used)) if used[g]), key=lambda g: (used[g], g))
            gpus = tuple(sorted((free + busy)[: v[0]]))
        milli = share or MILLI
        for g in gpus:
            used[g] += milli
        now = self.now[n]
        now[0], now[1], now[2] = used.count(0), now[1] - v[1], now[2] - v[2]
        if not leaving:
            used = self.used_fut[n]
            for g in gpus:
                used[g] += milli
            fut = self.fut[n]
            fut[0], fut[1], fut[2] = used.count(0), fut[1] - v[1], fut[2] - v[2]
        return gpus

    def release(self, n: int, v: Vec, gpu_use: Use = ()) -> None:
        self._change(n, v, gpu_use, -1, now=False, fut=True)

    def reserve_pod(self, n: int, v: Vec, share: int, gpus: tuple[int, ...]) -> None:
        self._change(n, v, [(g, share or MILLI) for g in gpus], 1, now=False, fut=True)

    def state(self) -> dict[int, tuple[list[int], int, int]]:
        """The `fut` room of every node, GPU by GPU: where a reclaiming owner plans."""
        return {
            n: (self._eff_gpus(n, fut=True), self.fut[n][1], self.fut[n][2])
            for n in sorted(self.cap)
        }

    def gpu_room(self) -> tuple[int, int]:
        """Milli-GPUs free for admissions in the pool, and the most on one GPU."""
        if any(self.buckets[1:]):
            return self.total_milli, MILLI
        most = max((self.part[n] for n in self.cap if self.milli[n]), default=0)
        return self.total_milli, most

    # -- placement --

    def _eff_gpus(self, n: int, *, fut: bool = False) -> list[int]:
        """Milli-GPUs used on each GPU of the node, in eff (or in `fut`)."""
        if n not in self.touched:
            return [0] * max(self.cap[n][0], 0)
        if fut:
            return list(self.used_fut[n])
        return [max(a, b) for a, b in zip(self.used_now[n], self.used_fut[n], strict=True)]

    def _hosts(self, n: int, share: int) -> bool:
        return self.eff[n][0] > 0 or self.part.get(n, 0) >= share

    def best_shared(self, pod: Vec, share: int) -> int | None:
        """The node for a shared pod: best fit (or the configured rule) among the nodes
        with a GPU that can take it."""
        _, c, m = pod
        buckets = self.buckets
        if self.placement == "random":
            nodes = sorted(n for n in self.fitting((0, c, m)) or {} if self._hosts(n, share))
            return self.rng.choice(nodes) if nodes and self.rng is not None else None
        if self.placement == "worst_fit":
            for b in range(len(buckets) - 1, -1, -1):
                bucket = buckets[b]
                for j in range(len(bucket) - 1, -1, -1):
                    entry = bucket[j]
                    if entry[0] < c:
                        break
                    if entry[1] >= m and (b or self.part.get(entry[2], 0) >= share):
                        return entry[2]
            return None
        for b in range(len(buckets)):
            bucket = buckets[b]
            for j in range(bisect_left(bucket, (c, m)), len(bucket)):
                entry = bucket[j]
                if entry[1] >= m and (b or self.part.get(entry[2], 0) >= share):
                    return entry[2]
        return None

    def place_pods(self, pods: Sequence[Vec], shares: Sequence[int]) -> list[Spot] | None:
        """Place a whole gang, GPU by GPU, and take its room; or take nothing, None."""
        if not pods:
            return []
        key = tuple(sorted(zip(pods, shares, strict=True)))
        if key in self.shared_failed:
            return None
        if not fits(sum_of(pods), self.free):
            self.shared_failed.add(key)
            return None
        spots: list[Spot | None] = [None] * len(pods)
        done: list[int] = []
        for i in largest_first(pods, shares):
            v, share = pods[i], shares[i]
            if self.placement == "fgd" and self.workload and (share or v[0]):
                spot = self._fgd(v, share)
                if spot is None:
                    break
                n, gpus = spot
            else:
                found = self.best_shared(v, share) if share else self.best(v)
                if found is None:
                    break
                n, gpus = found, self._gpus_on(found, v, share)
            self._change(n, v, [(g, share or MILLI) for g in gpus], 1, now=True, fut=True)
            spots[i] = (n, gpus)
            done.append(i)
        else:
            return [s for s in spots if s is not None]
        for i in reversed(done):
            spot = spots[i]
            assert spot is not None
            use = [(g, shares[i] or MILLI) for g in spot[1]]
            self._change(spot[0], pods[i], use, -1, now=True, fut=True, undo=True)
        self.shared_failed.add(key)
        return None

    def _gpus_on(self, n: int, v: Vec, share: int) -> tuple[int, ...]:
        eff = self._eff_gpus(n)
        if share:
            return (_choose_gpu(eff, share, self.placement, self.rng, tolerant=False),)
        return tuple(g for g in range(len(eff)) if eff[g] == 0)[: v[0]]

    # -- FGD --

    def _fgd(self, pod: Vec, share: int) -> Spot | None:
        """The node and GPUs where the pod grows the expected fragmentation least; among
        equals, the first in best-fit order (nodes with the same GPUs are tried once)."""
        g, c, m = pod
        best: tuple[float, int, int] | None = None  # (growth, node, used milli of the GPU)
        seen: set[tuple[tuple[int, ...], int, int]] = set()
        steps = self.cpu_steps
        for b in range(0 if share else g, len(self.buckets)):
            bucket = self.buckets[b]
            for j in range(bisect_left(bucket, (c, m)), len(bucket)):
                cpu, mem, n = bucket[j]
                if mem < m or (share and not b and self.part.get(n, 0) < share):
                    continue
                sig = self._sig(n)
                before, after = bisect_right(steps, cpu), bisect_right(steps, cpu - c)
                if (sig, before, after) in seen:
                    continue
                seen.add((sig, before, after))
                for used, growth in self._growth(sig, before, after, share, g):
                    if best is None or growth < best[0] - 1e-9:
                        best = (growth, n, used)
        if best is None:
            return None
        _, n, used = best
        eff = self._eff_gpus(n)
        if share:
            return n, (eff.index(used),)
        return n, tuple(k for k in range(len(eff)) if eff[k] == 0)[:g]

    def _sig(self, n: int) -> tuple[int, ...]:
        """The node's GPUs as FGD sees them: milli-GPUs used on each (eff), sorted."""
        cached = self._sigs.get(n)
        if cached is not None and cached[0] == self.version[n]:
            return cached[1]
        sig = tuple(sorted(self._eff_gpus(n)))
        self._sigs[n] = (self.version[n], sig)
        return sig

    def _growth(
        self, sig: tuple[int, ...], before: int, after: int, share: int, g: int
    ) -> list[tuple[int, float]]:
        """For each way to put the pod on GPUs like these (a shared pod: on a GPU with so
        much used), how much the fragmentation grows, the node's CPU going from step
        `before` to `after`; the fullest GPU first."""
        key = (sig, before, after, share, g)
        out = self._options.get(key)
        if out is None:
            now = self._frag(sig, before)
            out = []
            if share:
                for used in sorted({u for u in sig if u + share <= MILLI}, reverse=True):
                    gpus = list(sig)
                    gpus[gpus.index(used)] += share
                    out.append((used, self._frag(tuple(sorted(gpus)), after) - now))
            else:
                gpus, left = list(sig), g
                for k in range(len(gpus)):
                    if gpus[k] == 0 and left:
                        gpus[k], left = MILLI, left - 1
                out.append((0, self._frag(tuple(sorted(gpus)), after) - now))
            self._options[key] = out
        return out

    def _frag(self, sig: tuple[int, ...], step: int) -> float:
        """Expected GPU room on a node with these GPUs, and CPU for the shapes below `step`,
        that the workload's pods cannot use."""
        frag = self._frags.get((sig, step))
        if frag is None:
            frees = [MILLI - u for u in sig if u < MILLI]
            total = sum(frees)
            whole = frees.count(MILLI)
            most = max(frees, default=0)
            cpu = self.cpu_steps[step - 1] if step else -1  # the most CPU a shape may need
            frag = 0.0
            for ask, need, weight in self.workload:
                if need > cpu:
                    lost = total
                elif ask >= MILLI:
                    lost = total - MILLI * whole if whole >= ask // MILLI else total
                else:
                    lost = sum(f for f in frees if f < ask) if most >= ask else total
                frag += weight * lost
            self._frags[(sig, step)] = frag
        return frag


def _choose_gpu(
    used: list[int],
    share: int,
    placement: PlacementRule,
    rng: random.Random | None,
    *,
    tolerant: bool,
) -> int:
    """The GPU for a shared pod: the least room that fits (best fit), the most (worst fit),
    or a random one that fits. `tolerant`: a running pod that fits nowhere goes on the least
    used GPU (the snapshot says it is there)."""
    fitting = [g for g in range(len(used)) if used[g] + share <= MILLI]
    if not fitting:
        if not tolerant or not used:
            raise SchedulerError("no GPU can take the shared pod")
        return min(range(len(used)), key=lambda g: (used[g], g))
    if placement == "worst_fit":
        return min(fitting, key=lambda g: (used[g], g))
    if placement == "random" and rng is not None:
        return rng.choice(fitting)
    return min(fitting, key=lambda g: (-used[g], g))


def largest_first(pods: Sequence[Vec], shares: Sequence[int]) -> list[int]:
    """Whole GPUs first, then the largest shares, then CPU and memory."""
    return sorted(
        range(len(pods)),
        key=lambda i: (-pods[i][0], -shares[i], -pods[i][1], -pods[i][2], i),
    )


def place_on_gpus(
    pods: Sequence[Vec], shares: Sequence[int], room: dict[int, tuple[list[int], int, int]]
) -> list[Spot] | None:
    """Best fit of a gang onto a map of room GPU by GPU (same rule as `SharedPool`), without
    indexes. Does not change `room`."""
    free = {n: (list(gpus), c, m) for n, (gpus, c, m) in room.items() if c >= 0 and m >= 0}
    spots: list[Spot | None] = [None] * len(pods)
    for i in largest_first(pods, shares):
        g, c, m = pods[i]
        share = shares[i]
        best: tuple[int, tuple[int, ...]] | None = None
        best_key: tuple[int, int, int, int] | None = None
        for n, (gpus, fc, fm) in free.items():
            if fc < c or fm < m:
                continue
            whole = gpus.count(0)
            if share:
                fitting = [k for k in range(len(gpus)) if gpus[k] + share <= MILLI]
                if not fitting:
                    continue
                taken: tuple[int, ...] = (min(fitting, key=lambda k: (-gpus[k], k)),)
            elif whole >= g:
                taken = tuple(k for k in range(len(gpus)) if gpus[k] == 0)[:g]
            else:
                continue
            key = (whole, fc, fm, n)
            if best_key is None or key < best_key:
                best, best_key = (n, taken), key
        if best is None:
            return None
        n, taken = best
        gpus, fc, fm = free[n]
        for k in taken:
            gpus[k] += share or MILLI
        free[n] = (gpus, fc - c, fm - m)
        spots[i] = best
    return [s for s in spots if s is not None]


def choose_victims(
    pods: Sequence[Vec],
    shares: Sequence[int],
    pool: SharedPool,
    candidates: Iterable[Borrower],
    *,
    young_ok: bool,
) -> tuple[list[Borrower], list[Spot]] | None:
    """Borrowers, in victim order, until the gang fits on the room they leave (GPU by GPU),
    then pruned: the gang does not fit without any one of those kept."""
    base = pool.state()
    chosen: list[Borrower] = []
    room = {n: (list(gpus), c, m) for n, (gpus, c, m) in base.items()}
    spots = None
    for victim in candidates:
        freed = victim.freed.get(pool.id)
        if victim.claimed or (victim.young and not young_ok) or not freed:
            continue
        chosen.append(victim)
        _free(room, victim, pool.id, 1)
        spots = place_on_gpus(pods, shares, room)
        if spots is not None:
            break
    if spots is None:
        return None
    for victim in reversed(list(chosen)):
        _free(room, victim, pool.id, -1)
        narrower = place_on_gpus(pods, shares, room)
        if narrower is not None:
            chosen.remove(victim)
            spots = narrower
        else:
            _free(room, victim, pool.id, 1)
    return chosen, spots


def _free(
    room: dict[int, tuple[list[int], int, int]], victim: Borrower, pool_id: int, sign: int
) -> None:
    use = victim.gpu_use.get(pool_id, {})
    for n, v in victim.freed[pool_id].items():
        gpus, c, m = room[n]
        for g, milli in use.get(n, ()):
            gpus[g] -= sign * milli
        room[n] = (gpus, c + sign * v[1], m + sign * v[2])


class GpuIndexes:
    """Which GPUs whole-GPU pods take when the planner counted GPUs: the lowest free ones,
    after the GPUs running pods hold (theirs if they say, else the lowest free)."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.gpus = {n.id: n.capacity.gpu for n in nodes}
        self.running: dict[int, list[RunningPod]] = {}
        self.used: dict[int, list[bool]] = {}

    def add(self, pod: RunningPod) -> None:
        if pod.resources.gpu:
            self.running.setdefault(pod.node_id, []).append(pod)

    def take(self, n: int, count: int) -> tuple[int, ...]:
        used = self.used.get(n)
        if used is None:
            used = self.used[n] = [False] * max(self.gpus.get(n, 0), 0)
            pods = sorted(self.running.get(n, ()), key=lambda p: not p.gpus)
            for pod in pods:
                held = [g for g in pod.gpus if 0 <= g < len(used)]
                if not held:
                    held = [g for g in range(len(used)) if not used[g]][: pod.resources.gpu]
                for g in held:
                    used[g] = True
        free = [g for g in range(len(used)) if not used[g]][:count]
        for g in free:
            used[g] = True
        return tuple(free)
