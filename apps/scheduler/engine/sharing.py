"""GPU sharing: which GPU of a node each pod holds, in pools where some pod asks for part of
one (`PodRequest.gpu_milli`, 1..999 milli-GPUs).

A pool's room (room.py) counts whole GPUs: its GPU component is the number of GPUs with
nothing on them. In a pool where GPUs are shared, `Shares` keeps, beside it, every GPU by
its index on its node (0..gpu-1): the milli-GPUs shared pods use on it, and whether a
whole-GPU pod holds it, in `now` and in `fut` alike. A GPU a share sits on is not whole, so
opening one takes one GPU from the pool's count, and the last share leaving gives it back
(`_sync`). The rest of the engine keeps counting whole GPUs as before; a pool with no shared
pod has no `Shares` at all and costs nothing more.

Placement of a shared pod (best fit): the GPU with the least room that still holds the share
(`max(now, fut)` used, plus the share, at most 1000), on a node with the CPU and memory for
the pod; if none, a GPU with nothing on it on the node best fit picks for one whole GPU, so
fractions pack together and whole GPUs stay whole. Worst fit opens a free GPU first and
otherwise takes the partly used GPU with the most room; random placement picks any GPU that
fits. FGD (`Config.placement = "fgd"`, after Weng et al., "Beware of Fragmentation", USENIX
ATC'23) puts each GPU-asking pod where the pool's expected fragmentation grows least (below).
A whole-GPU pod goes where the pool's count says (best fit, as without sharing) and takes the
lowest GPUs free there; in a sharing pool every admitted pod is told its GPUs
(`Placement.gpus`), elsewhere the product names them itself.

Reclaim stays in whole GPUs: a reclaiming owner plans a shared pod as one whole GPU (so it
never counts on room a share could not use), and a victim's share frees a GPU only where it
is all that is on the GPU in `fut`. Both err towards preempting no one who cannot help.

Running pods name their GPUs (`RunningPod.gpus`) when the caller knows them; those that do
not are put on the lowest free GPUs (whole) or by best fit (a share).

FGD, as the paper's artifact computes it: a node's fragmentation for a pod shape is the GPU
room on it that such a pod could not use: all of it when the pod cannot run there at all
(too few GPUs, too little CPU, or it asks for no GPU); else, for a shared pod, the GPUs with
less room left than it asks; for a whole-GPU pod, the GPUs partly used. The expected
fragmentation weighs the most common shapes of a target workload (`target_workload`;
`Config.workload`, by default the pending pods) by how common they are. A placement scores
an integer 0–100 (`fgd_score`); ties go to the lowest GPU index on a node, and between
nodes to a fixed random order of them per `Config.seed`. Memory is not counted in the
fragmentation. Under FGD every pool keeps its GPUs one by one (plan.py).
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Sequence
from heapq import heapify, heappop, heappush

from apps.scheduler.engine.model import MILLI, RunningJob, RunningPod, SchedulerError
from apps.scheduler.engine.reclaim import Borrower, random_rank
from apps.scheduler.engine.room import _LOG_PER_NODE, _LOG_SLACK, Pool
from apps.scheduler.engine.vectors import Vec, fits, sum_of

Spot = tuple[int, tuple[int, ...]]  # a pod's node and the indexes of the GPUs it takes
POPULAR = 0.95  # FGD's target workload: the most common shapes, up to this share of the pods


class _Gpus:
    """One node's GPUs: milli-GPUs of shares and whole-GPU holds (0 or 1000) per GPU, in
    `now` and `fut`, and how many GPUs shares had open when the pool's count last heard."""

    __slots__ = ("sh_now", "sh_fut", "wh_now", "wh_fut", "opened")

    def __init__(self, size: int) -> None:
        self.sh_now = [0] * size
        self.sh_fut = [0] * size
        self.wh_now = [0] * size
        self.wh_fut = [0] * size
        self.opened = (0, 0)

    def copy(self) -> _Gpus:
        other = _Gpus(0)
        other.sh_now, other.sh_fut = self.sh_now[:], self.sh_fut[:]
        other.wh_now, other.wh_fut = self.wh_now[:], self.wh_fut[:]
        other.opened = self.opened
        return other

    def used(self, g: int) -> int:
        """Milli-GPUs taken on GPU g for admissions: the larger of now and fut."""
        a = self.sh_now[g] + self.wh_now[g]
        b = self.sh_fut[g] + self.wh_fut[g]
        return a if a > b else b

    def whole_free(self) -> list[int]:
        return [g for g in range(len(self.sh_now)) if self.used(g) == 0]


class Shares:
    """The GPUs of one sharing pool, index by index (module docstring)."""

    def __init__(
        self, pool: Pool, workload: Sequence[tuple[int, int, float]] = (), *, seed: int = 0
    ) -> None:
        self.pool = pool
        # FGD's ties between nodes: a fixed random order of them per seed
        self.ranks = {n: random_rank(seed, n) for n in pool.cap}
        self.nodes = {n: _Gpus(max(cap[0], 0)) for n, cap in pool.cap.items()}
        # GPUs partly used by shares, room left > 0, as (room, node, gpu), sorted
        self.partial: list[tuple[int, int, int]] = []
        self.partial_of: dict[int, list[tuple[int, int, int]]] = {}
        # per running pod: its node, GPU indexes, milli-GPUs (0: whole GPUs), leaving
        self.held: dict[int, tuple[int, tuple[int, ...], int, bool]] = {}
        self.failed: set[tuple[tuple[Vec, int], ...]] = set()
        self.reclaim_failed: set[tuple[tuple[tuple[Vec, int], ...], bool]] = set()
        self.journal: dict[int, _Gpus] | None = None
        self.workload: tuple[tuple[int, int, float], ...] = ()
        self.cpu_steps: list[int] = []
        self._frags: dict[tuple[tuple[int, ...], int], float] = {}
        self._sigs: dict[int, tuple[int, ...]] = {}  # `signature` per node, until it changes
        self._options: dict[tuple[tuple[int, ...], int, int, int, int], list[tuple[int, int]]]
        self._options = {}
        # FGD's choice per pod shape, kept between calls (`_fgd`); the nodes whose GPUs
        # changed, in order, for those to catch up with (beside the pool's `changes`)
        self._heaps: dict[tuple[Vec, int], _FgdHeap] = {}
        self.changed: list[int] = []
        self.aim(workload)

    def aim(self, workload: Sequence[tuple[int, int, float]]) -> None:
        """FGD's target workload: (milli-GPUs, CPU, weight), weights summing to 1."""
        workload = tuple(workload)
        if workload != self.workload:
            self.workload = workload
            self.cpu_steps = sorted({cpu for _, cpu, _ in workload})
            self._frags.clear()
            self._options.clear()
            self._heaps.clear()

    # -- running pods --

    def load(self, pods: Iterable[tuple[RunningPod, bool]]) -> None:
        """The pool's running pods (pod, leaving), before any plan: named GPUs first."""
        ordered = sorted(pods, key=lambda pl: (not pl[0].gpus, pl[0].pod_id))
        for pod, leaving in ordered:
            if pod.node_id in self.nodes:
                self.add(pod, leaving)

    def add(self, pod: RunningPod, leaving: bool) -> None:
        """A running pod holds its GPUs (their room in the pool is counted by the caller,
        but for the GPUs its share opens)."""
        n = pod.node_id
        node = self.nodes[n]
        self._save(n)
        size = len(node.sh_now)
        gpus = pod.gpus
        if any(not 0 <= g < size for g in gpus) or len(set(gpus)) != len(gpus):
            raise SchedulerError(f"running pod {pod.pod_id}: GPU indexes {gpus} not on its node")
        if pod.gpu_milli:
            if not gpus:
                gpus = (_choose(node, pod.gpu_milli, "best_fit", None, tolerant=True),)
            g = gpus[0]
            node.sh_now[g] += pod.gpu_milli
            if not leaving:
                node.sh_fut[g] += pod.gpu_milli
        elif pod.resources.gpu:
            if not gpus:
                free = node.whole_free()
                busy = sorted(
                    (g for g in range(size) if g not in free), key=lambda g: (node.used(g), g)
                )
                gpus = tuple(sorted((free + busy)[: pod.resources.gpu]))
            for g in gpus:
                node.wh_now[g] = MILLI
                if not leaving:
                    node.wh_fut[g] = MILLI
        self.held[pod.pod_id] = (n, gpus, pod.gpu_milli, leaving)
        self._sync(n)

    def remove(self, pod: RunningPod) -> None:
        """A running pod is gone (its room in the pool is given back by the caller)."""
        n, gpus, milli, leaving = self.held.pop(pod.pod_id)
        node = self.nodes[n]
        self._save(n)
        for g in gpus:
            if milli:
                node.sh_now[g] -= milli
                if not leaving:
                    node.sh_fut[g] -= milli
            else:
                node.wh_now[g] = 0
                if not leaving:
                    node.wh_fut[g] = 0
        self._sync(n)

    def leave(self, job: RunningJob) -> None:
        """A victim chosen in this plan: its GPUs count as free in `fut`."""
        for pod in job.pods:
            held = self.held.get(pod.pod_id)
            if held is None or held[3]:
                continue
            n, gpus, milli, _ = held
            node = self.nodes[n]
            self._save(n)
            for g in gpus:
                if milli:
                    node.sh_fut[g] -= milli
                else:
                    node.wh_fut[g] = 0
            self._sync(n)
        self.failed.clear()

    def whole_credit(self, job: RunningJob) -> dict[int, int]:
        """Per node, the GPUs the job's shares alone hold in `fut`: what preempting it
        frees in whole GPUs, beside its whole-GPU pods."""
        on: dict[tuple[int, int], int] = {}
        for pod in job.pods:
            held = self.held.get(pod.pod_id)
            if held is not None and held[2] and not held[3]:
                key = (held[0], held[1][0])
                on[key] = on.get(key, 0) + held[2]
        credit: dict[int, int] = {}
        for (n, g), milli in on.items():
            node = self.nodes[n]
            if node.sh_fut[g] == milli and node.wh_fut[g] == 0:
                credit[n] = credit.get(n, 0) + 1
        return credit

    # -- plans --

    def begin(self) -> None:
        self.journal = {}

    def rollback(self) -> None:
        """Back to the GPUs as they were before the plan (the pool restores its counts)."""
        saved, self.journal = self.journal or {}, None
        for n, node in saved.items():
            self.nodes[n] = node
            self._sigs.pop(n, None)
            self.changed.append(n)
            self._reindex(n)
        self.failed.clear()
        self.reclaim_failed.clear()

    def _save(self, n: int) -> None:
        """Node n's GPUs are about to change: keep them as they were for `rollback`."""
        self._sigs.pop(n, None)
        if len(self.changed) > _LOG_PER_NODE * len(self.nodes) + _LOG_SLACK:
            self.changed = []  # a reader that kept the old log starts over
        self.changed.append(n)
        if self.journal is not None and n not in self.journal:
            self.journal[n] = self.nodes[n].copy()

    def _sync(self, n: int) -> None:
        """Tell the pool's count how many GPUs shares now keep from being whole: in `now`,
        those with a share now or later (so that the pool's count, min(now, fut), is the
        GPUs free in both, the ones `names` gives); in `fut`, those with a share later."""
        node = self.nodes[n]
        sh_now, sh_fut, wh_now, wh_fut = node.sh_now, node.sh_fut, node.wh_now, node.wh_fut
        size = len(sh_now)
        now = sum(1 for g in range(size) if (sh_now[g] or sh_fut[g]) and not wh_now[g])
        fut = sum(1 for g in range(size) if sh_fut[g] and not wh_fut[g])
        was = node.opened
        if (now, fut) != was:
            node.opened = (now, fut)
            self.pool.adjust(n, was[0] - now, was[1] - fut)
        self._reindex(n)

    def _reindex(self, n: int) -> None:
        for entry in self.partial_of.pop(n, ()):
            del self.partial[bisect_left(self.partial, entry)]
        node = self.nodes[n]
        entries = []
        for g in range(len(node.sh_now)):
            if node.wh_now[g] or node.wh_fut[g] or not (node.sh_now[g] or node.sh_fut[g]):
                continue
            room = MILLI - node.used(g)
            if room > 0:
                entry = (room, n, g)
                insort(self.partial, entry)
                entries.append(entry)
        if entries:
            self.partial_of[n] = entries

    def reserve(self, spot: Spot, v: Vec, share: int) -> None:
        """Hold room for a reclaiming owner's pod in `fut`: a share on its GPU, a whole-GPU
        pod by count only (which GPUs it gets is decided when it is admitted)."""
        n, gpus = spot
        if not share:
            self.pool.reserve(n, v)
            return
        node = self.nodes[n]
        self._save(n)
        node.sh_fut[gpus[0]] += share
        self.pool.reserve(n, (0, v[1], v[2]))
        self._sync(n)

    def choose(
        self,
        pods: Sequence[Vec],
        shares: Sequence[int],
        candidates: Iterable[Borrower],
        *,
        young_ok: bool,
    ) -> tuple[list[Borrower], list[Spot]] | None:
        """Borrowers, in victim order, until the gang fits GPU by GPU on the `fut` room with
        theirs added, then pruned: the gang does not fit without any one of those kept. No
        victims at all when the `fut` room holds it already."""
        room = _FutRoom(self, pods, shares)
        spots = room.place(pods, shares)
        if spots is not None:
            return [], spots
        chosen: list[Borrower] = []
        for victim in candidates:
            if victim.claimed or (victim.young and not young_ok):
                continue
            if not room.free(victim.job, 1):
                continue
            chosen.append(victim)
            spots = room.place(pods, shares)
            if spots is not None:
                break
        if spots is None:
            return None
        for victim in reversed(list(chosen)):
            room.free(victim.job, -1)
            narrower = room.place(pods, shares)
            if narrower is not None:
                chosen.remove(victim)
                spots = narrower
            else:
                room.free(victim.job, 1)
        return chosen, spots

    # -- placement --

    def place(self, pods: Sequence[Vec], shares: Sequence[int]) -> list[Spot] | None:
        """Place a whole gang, GPU by GPU, and take its room; or take nothing, None."""
        if not pods:
            return []
        pool = self.pool
        key = tuple(sorted(zip(pods, shares, strict=True)))
        if key in self.failed:
            return None
        if not fits(sum_of(pods), pool.free):
            self.failed.add(key)
            return None
        spots: list[Spot] = [(0, ())] * len(pods)
        done: list[int] = []
        for i in largest_first(pods, shares):
            spot = self._spot(pods[i], shares[i])
            if spot is None:
                break
            self._take(spot, pods[i], shares[i], 1)
            spots[i] = spot
            done.append(i)
        else:
            return spots
        for i in reversed(done):
            self._take(spots[i], pods[i], shares[i], -1)
        self.failed.add(key)
        return None

    def _take(self, spot: Spot, v: Vec, share: int, sign: int) -> None:
        """Admit (sign 1) or give back (-1) a pod on its node and GPUs, in now and fut."""
        n, gpus = spot
        node = self.nodes[n]
        self._save(n)
        pool = self.pool
        if share:
            g = gpus[0]
            node.sh_now[g] += sign * share
            node.sh_fut[g] += sign * share
            room = (0, v[1], v[2])
        else:
            for g in gpus:
                node.wh_now[g] = node.wh_fut[g] = MILLI if sign > 0 else 0
            room = v
        if sign > 0:
            pool.take(n, room)
        else:
            pool.give_back(n, room)
        self._sync(n)

    def hold(self, n: int, v: Vec) -> tuple[int, ...]:
        """A whole-GPU pod the pool has placed on node n (and counted): it takes the lowest
        free GPUs there."""
        gpus = self.names(n, v)
        if gpus:
            node = self.nodes[n]
            self._save(n)
            for g in gpus:
                node.wh_now[g] = node.wh_fut[g] = MILLI
        return gpus

    def names(self, n: int, v: Vec) -> tuple[int, ...]:
        """The GPUs a whole-GPU pod the pool placed on node n takes: the lowest free."""
        return tuple(self.nodes[n].whole_free()[: v[0]])

    def _spot(self, v: Vec, share: int) -> Spot | None:
        pool = self.pool
        placement = pool.placement
        if placement == "fgd" and self.workload:
            return self._fgd(v, share)
        if not share:
            n = pool.best(v)
            return None if n is None else (n, self.names(n, v))
        _, c, m = v
        if placement == "worst_fit":
            n = pool.best((1, c, m))
            if n is not None:
                return n, (self.nodes[n].whole_free()[0],)
            return self._partial(share, c, m, most=True)
        if placement == "random" and pool.rng is not None:
            return self._random(share, c, m, pool.rng)
        spot = self._partial(share, c, m)
        if spot is not None:
            return spot
        n = pool.best((1, c, m))
        return None if n is None else (n, (self.nodes[n].whole_free()[0],))

    def _partial(self, share: int, c: int, m: int, *, most: bool = False) -> Spot | None:
        """A partly used GPU that holds the share, on a node with CPU and memory for the
        pod: the least room (or the most)."""
        eff = self.pool.eff
        partial = self.partial
        at = bisect_left(partial, (share, -1, -1))
        rows = reversed(range(at, len(partial))) if most else range(at, len(partial))
        for j in rows:
            _, n, g = partial[j]
            e = eff[n]
            if e[1] >= c and e[2] >= m and self._opens(n, g):
                return n, (g,)
        return None

    def _opens(self, n: int, g: int) -> bool:
        """Whether the pool's count has the whole GPU a share on GPU g would open: in `fut`
        when all of its shares are leaving (a reclaiming owner's reservation, held by count,
        may have taken it), in `now` and `fut` when it has none."""
        node = self.nodes[n]
        if node.sh_fut[g]:
            return True
        pool = self.pool
        return pool.fut[n][0] > 0 and (node.sh_now[g] > 0 or pool.now[n][0] > 0)

    def _random(self, share: int, c: int, m: int, rng: random.Random) -> Spot | None:
        eff = self.pool.eff
        options = [
            (n, g)
            for n, node in sorted(self.nodes.items())
            if eff[n][1] >= c and eff[n][2] >= m
            for g in range(len(node.sh_now))
            if _fits_gpu(node, g, share) and (node.used(g) or eff[n][0] > 0) and self._opens(n, g)
        ]
        if not options:
            return None
        n, g = rng.choice(options)
        return n, (g,)

    def room(self) -> tuple[int, int]:
        """Milli-GPUs free for admissions in the pool, and the most on one GPU."""
        whole = self.pool.free[0]
        partial = sum(r for r, n, _ in self.partial if self.pool.eff[n][1] >= 0)
        most = MILLI if whole else max((r for r, _, _ in self.partial), default=0)
        return whole * MILLI + partial, most

    # -- FGD --

    def _fgd(self, pod: Vec, share: int) -> Spot | None:
        """The node and GPU where the pod grows the expected fragmentation least, scored as
        the FGD artifact scores a node: an integer 0–100 (`fgd_score`), so that growths
        close to each other tie. On a node, a tie goes to the GPU with the lowest index;
        between nodes, to the first in a fixed random order of them (`seed`), as the
        artifact's scheduler breaks ties.

        Every node's best choice for this pod shape is kept in a heap between calls, and
        only the nodes whose room or GPUs changed since (the pool's `changes`, `changed`)
        are scored again: a queue of pods alike costs the nodes its placements touch, not
        every node for every pod."""
        key = (pod, share)
        pool = self.pool
        kept = self._heaps.get(key)
        if kept is None or kept.log is not pool.changes or kept.gpu_log is not self.changed:
            kept = self._heaps[key] = _FgdHeap(pool.changes, self.changed)
            touched: Iterable[int] = pool.cap
        else:
            touched = set(pool.changes[kept.seen :])
            touched.update(self.changed[kept.gpu_seen :])
        kept.seen, kept.gpu_seen = len(pool.changes), len(self.changed)
        heap, stamps = kept.heap, kept.stamps
        for n in touched:
            stamp = stamps[n] = stamps.get(n, 0) + 1
            entry = self._fgd_entry(n, pod, share)
            if entry is not None:
                heappush(heap, (*entry, stamp))
        while heap and heap[0][4] != stamps[heap[0][2]]:
            heappop(heap)
        if len(heap) > 2 * len(stamps) + 64:
            heap[:] = [e for e in heap if e[4] == stamps[e[2]]]
            heapify(heap)
        if not heap:
            return None
        _, _, n, used, _ = heap[0]
        if share:
            gpu = self._gpu(n, used)
            assert gpu is not None
            return n, (gpu,)
        return n, self.names(n, pod)

    def _fgd_entry(self, n: int, pod: Vec, share: int) -> tuple[int, int, int, int] | None:
        """Node n's best choice for the pod: (-score, the node's rank, n, milli-GPUs used on
        the GPU a share takes); None where the pod cannot go."""
        g, c, m = pod
        b, cpu, mem = self.pool.eff[n]
        if b < (0 if share else g) or cpu < c or mem < m or cpu < 0 or mem < 0:
            return None
        if share and not b and n not in self.partial_of:
            return None
        steps = self.cpu_steps
        sig = self.signature(n)
        before, after = bisect_right(steps, cpu), bisect_right(steps, cpu - c)
        choice: tuple[int, int, int] | None = None  # (-score, GPU index, used)
        for used, score in self._scores(sig, before, after, share, g, b):
            if choice is not None and -score > choice[0]:
                break  # the options come best score first
            k = 0
            if share:
                gpu = self._gpu(n, used)
                if gpu is None:
                    continue  # a reservation holds the GPUs so used
                k = gpu
            if choice is None or (-score, k) < choice[:2]:
                choice = (-score, k, used)
        if choice is None:
            return None
        return choice[0], self.ranks[n], n, choice[2]

    def _gpu(self, n: int, used: int) -> int | None:
        """The first GPU of node n with so much used that a share may take."""
        node = self.nodes[n]
        for k in range(len(node.sh_now)):
            if _shareable(node, k, used) and self._opens(n, k):
                return k
        return None

    def signature(self, n: int) -> tuple[int, ...]:
        """The node's GPUs as FGD sees them: milli-GPUs taken on each, sorted (kept until
        they change: `_save`)."""
        sig = self._sigs.get(n)
        if sig is None:
            node = self.nodes[n]
            sig = self._sigs[n] = tuple(sorted(node.used(k) for k in range(len(node.sh_now))))
        return sig

    def _scores(
        self, sig: tuple[int, ...], before: int, after: int, share: int, g: int, whole: int
    ) -> list[tuple[int, int]]:
        """For each way to put the pod on GPUs like these (a shared pod: on a GPU with so
        much used), its FGD score (`fgd_score` of how much the fragmentation grows), the
        node's CPU going from step `before` to `after`; best score first, then the fullest
        GPU. `whole`: GPUs the pool may still open there (a reservation may hold some of
        those the signature shows free)."""
        key = (sig, before, after, share, g if share else g * 1000 + whole)
        out = self._options.get(key)
        if out is None:
            now = self._frag(sig, before)
            options: list[tuple[int, int]] = []
            if share:
                for used in sorted({u for u in sig if u + share <= MILLI}, reverse=True):
                    if used == 0 and not whole:
                        continue
                    gpus = list(sig)
                    gpus[gpus.index(used)] += share
                    growth = self._frag(tuple(sorted(gpus)), after) - now
                    options.append((used, fgd_score(growth)))
            else:
                gpus, left = list(sig), g
                for k in range(len(gpus)):
                    if gpus[k] == 0 and left:
                        gpus[k], left = MILLI, left - 1
                options.append((0, fgd_score(self._frag(tuple(sorted(gpus)), after) - now)))
            out = self._options[key] = sorted(options, key=lambda o: (-o[1], -o[0]))
        return out

    def _frag(self, sig: tuple[int, ...], step: int) -> float:
        """Expected GPU room on a node with these GPUs, and CPU for the shapes below `step`,
        that the workload's pods cannot use."""
        frag = self._frags.get((sig, step))
        if frag is None:
            cpu = self.cpu_steps[step - 1] if step else -1  # the most CPU a shape may need
            frag = self._frags[(sig, step)] = fragmentation(sig, cpu, self.workload)
        return frag


class _FgdHeap:
    """Every node's best FGD choice for one pod shape (`Shares._fgd`): heap entries
    (-score, rank, node, used, stamp), current while the stamp is the node's latest, and how
    much of the pool's and the GPUs' change logs they have read."""

    __slots__ = ("heap", "stamps", "log", "gpu_log", "seen", "gpu_seen")

    def __init__(self, log: list[int], gpu_log: list[int]) -> None:
        self.heap: list[tuple[int, int, int, int, int]] = []
        self.stamps: dict[int, int] = {}
        self.log, self.gpu_log = log, gpu_log
        self.seen = self.gpu_seen = 0


class _FutRoom:
    """The `fut` room of a sharing pool, GPU by GPU, with victims' pods taken out, for a
    reclaiming owner to plan on: per node the milli-GPUs used on each GPU, the whole GPUs
    the pool's count still has free (`spare`: reservations hold some), CPU and memory.

    Only the nodes where some pod of the gang could go (`candidates`) are looked at when it
    is placed: those with the CPU and memory of its smallest pod and a GPU for it, found
    once, then among the nodes victims free. A node's row is made when first needed (the
    pool does not change while victims are chosen)."""

    def __init__(self, shares: Shares, pods: Sequence[Vec], cuts: Sequence[int]) -> None:
        self.shares = shares
        self.rows: dict[int, list] = {}
        self.cpu = min((p[1] for p in pods), default=0)
        self.memory = min((p[2] for p in pods), default=0)
        # whole GPUs free the smallest pod needs (a share on an empty GPU: one), and the
        # smallest share, which fits on a GPU with at most 1000 minus it used
        self.whole = min((1 if cut else p[0] for p, cut in zip(pods, cuts, strict=True)), default=0)
        self.share = min((cut for cut in cuts if cut), default=0)
        self.candidates: set[int] = set()
        fut = shares.pool.fut
        for n, node in shares.nodes.items():
            f = fut[n]
            if f[1] < self.cpu or f[2] < self.memory:
                continue
            # a share only fits beside others on a GPU where some are kept in `fut`
            if f[0] >= self.whole or (self.share and node.opened[1] and self._could(self._row(n))):
                self.candidates.add(n)

    def _row(self, n: int) -> list:
        row = self.rows.get(n)
        if row is None:
            node, fut = self.shares.nodes[n], self.shares.pool.fut[n]
            used = [a + b for a, b in zip(node.sh_fut, node.wh_fut, strict=True)]
            row = self.rows[n] = [used, fut[0], fut[1], fut[2]]
        return row

    def _could(self, row: list) -> bool:
        """Whether some pod of the gang might go on this node (never False where one can)."""
        used, spare, cpu, mem = row
        if cpu < self.cpu or mem < self.memory:
            return False
        if spare >= self.whole:
            return True
        most = MILLI - self.share
        return bool(self.share) and any(0 < u <= most for u in used)

    def free(self, job: RunningJob, sign: int) -> bool:
        """Take (sign 1) or put back (-1) a job's pods; False if it has none here."""
        held, nodes = self.shares.held, self.shares.nodes
        touched = False
        for pod in job.pods:
            h = held.get(pod.pod_id)
            if h is None or h[3] or h[0] not in nodes:
                continue
            touched = True
            n, gpus, milli, _ = h
            row = self._row(n)
            used = row[0]
            for g in gpus:
                before = used[g]
                used[g] -= sign * (milli or MILLI)
                if (before == 0) != (used[g] == 0):
                    row[1] += sign
            row[2] += sign * pod.resources.cpu
            row[3] += sign * pod.resources.memory
            if sign > 0 and n not in self.candidates and self._could(row):
                self.candidates.add(n)
        return touched

    def place(self, pods: Sequence[Vec], shares: Sequence[int]) -> list[Spot] | None:
        """Best fit of the gang on this room, GPU by GPU (the rule of `Shares._spot`),
        without changing it."""
        changed: dict[int, list] = {}
        rows = self.rows
        spots: list[Spot] = [(0, ())] * len(pods)
        for i in largest_first(pods, shares):
            g, c, m = pods[i]
            share = shares[i]
            best: tuple | None = None
            key: tuple[int, ...]
            for n in self.candidates:
                used, spare, cpu, mem = changed.get(n) or self._row(n)
                if cpu < c or mem < m:
                    continue
                if share:
                    for k in range(len(used)):
                        u = used[k]
                        if 0 < u and u + share <= MILLI:
                            key = (0, MILLI - u, n, k)
                        elif u == 0 and spare > 0:
                            key = (1, spare, cpu, mem, n, k)
                        else:
                            continue
                        if best is None or key < best[0]:
                            best = (key, n, k)
                elif spare >= g:
                    key = (spare, cpu, mem, n)
                    if best is None or key < best[0]:
                        best = (key, n, -1)
            if best is None:
                return None
            _, n, k = best
            if n not in changed:
                old = rows[n]
                changed[n] = [old[0][:], old[1], old[2], old[3]]
            row = changed[n]
            used = row[0]
            if share:
                if used[k] == 0:
                    row[1] -= 1
                used[k] += share
                spots[i] = (n, (k,))
            else:
                free = [j for j in range(len(used)) if used[j] == 0][:g]
                for j in free:
                    used[j] = MILLI
                row[1] -= g
                spots[i] = (n, tuple(free))
            row[2] -= c
            row[3] -= m
        return spots


def target_workload(pods: Iterable[tuple[int, int, int]]) -> tuple[tuple[int, int, float], ...]:
    """FGD's target workload from pods given as (milli-GPUs each asks for, its CPU, how
    many): one (milli-GPUs, CPU, weight) per shape, each pod weighing 1, the weights summing
    to 1. As the FGD artifact does (its popularity threshold, 95), only the most common
    shapes are kept, until they make up 95% of the pods: the rare ones, mostly gangs of
    whole GPUs, would otherwise steer every placement for the few pods that ask like them.
    Ties in popularity keep the larger shape (CPU, then GPUs)."""
    counts: dict[tuple[int, int], int] = {}
    for milli, cpu, count in pods:
        if count > 0:
            counts[(milli, cpu)] = counts.get((milli, cpu), 0) + count
    total = sum(counts.values())
    kept: list[tuple[tuple[int, int], int]] = []
    covered = 0
    for (milli, cpu), count in sorted(
        counts.items(), key=lambda kv: (kv[1], kv[0][1], kv[0][0]), reverse=True
    ):
        if covered >= POPULAR * total:
            break
        kept.append(((milli, cpu), count))
        covered += count
    return tuple((m, c, count / covered) for (m, c), count in sorted(kept))


def fragmentation(
    used: Sequence[int], cpu: int, workload: Sequence[tuple[int, int, float]]
) -> float:
    """FGD's expected fragmentation of one node: the milli-GPUs of its free GPU room that
    the pods of a target workload (`target_workload`) could not use, each shape weighed as
    the workload weighs it. `used`: the milli-GPUs taken on each of its GPUs; `cpu`: the
    CPU free there (a shape that needs more cannot run on it). Memory is not counted."""
    frees = [MILLI - u for u in used if u < MILLI]
    total = sum(frees)
    whole = frees.count(MILLI)
    most = max(frees, default=0)
    frag = 0.0
    for ask, need, weight in workload:
        if need > cpu or not ask:  # a CPU-only pod uses no GPU: all of it is lost
            lost = total
        elif ask >= MILLI:
            lost = total - MILLI * whole if whole >= ask // MILLI else total
        else:
            lost = sum(f for f in frees if f < ask) if most >= ask else total
        frag += weight * lost
    return frag


def fgd_score(growth: float) -> int:
    """The FGD artifact's node score for a placement that grows the expected fragmentation
    by `growth` milli-GPUs: 100 × sigmoid(−growth / 1000), rounded down (0–100)."""
    x = growth / 1000.0
    if x > 700:
        return 0
    return int(100.0 / (1.0 + math.exp(x)))


def _fits_gpu(node: _Gpus, g: int, share: int) -> bool:
    return not (node.wh_now[g] or node.wh_fut[g]) and node.used(g) + share <= MILLI


def _shareable(node: _Gpus, g: int, used: int) -> bool:
    return not (node.wh_now[g] or node.wh_fut[g]) and node.used(g) == used


def _choose(
    node: _Gpus, share: int, placement: str, rng: random.Random | None, *, tolerant: bool
) -> int:
    """The GPU of a node for a share: the least room that fits. `tolerant`: a running pod
    that fits nowhere goes on the least used GPU (the snapshot says it is there)."""
    size = len(node.sh_now)
    fitting = [g for g in range(size) if _fits_gpu(node, g, share)]
    if not fitting:
        if not tolerant or not size:
            raise SchedulerError("no GPU of the node can take the shared pod")
        return min(range(size), key=lambda g: (node.used(g), g))
    return min(fitting, key=lambda g: (-node.used(g), g))


def largest_first(pods: Sequence[Vec], shares: Sequence[int]) -> list[int]:
    """Whole GPUs first, then the largest shares, then CPU and memory."""
    return sorted(
        range(len(pods)),
        key=lambda i: (-pods[i][0], -shares[i], -pods[i][1], -pods[i][2], i),
    )
