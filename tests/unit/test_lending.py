"""Who borrows from whom (engine/report.py): idle room used Not in Quota is put down to
unguaranteed capacity first, then to the lenders' free guarantees; each borrowing quota owes
each lender in proportion to what it borrows. Pure: sums in, figures out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from apps.scheduler.engine import Quota, Resources, lending, quota_report
from apps.scheduler.engine.vectors import sum_of
from tests.unit.test_scheduler_engine import machines, running, snapshot

G = 1000  # milli-GPUs per GPU


def q(qid: int, name: str, gpu: int, parent: int | None = None, pool: int = 1) -> Quota:
    return Quota(qid, name, parent, pool, Resources(cpu=0, memory=0, gpu=gpu))


def gpu(n: float) -> tuple[int, int, int]:
    return (round(n * G), 0, 0)


def loans_of(result) -> dict[tuple[int, int | None], int]:
    return {(loan.borrower, loan.lender): loan.amount[0] for loan in result.loans}


def test_borrowed_room_comes_from_unguaranteed_capacity_first_then_the_idle_guarantee():
    # 24 GPUs, team-a and team-b guarantee 8 each: 8 GPUs nobody guarantees.
    quotas = [q(1, "team-a", 8), q(2, "team-b", 8)]
    result = lending(
        quotas,
        used={2: gpu(8)},
        borrowed={(2, 1): gpu(12)},
        capacity={1: gpu(24)},
    )
    assert loans_of(result) == {(2, None): 8 * G, (2, 1): 4 * G}
    assert result.quotas[1].lent[0] == 4 * G and result.quotas[1].free[0] == 8 * G
    assert result.quotas[2].borrowed[0] == 12 * G and result.quotas[2].lent[0] == 0


def test_each_borrower_owes_each_lender_in_proportion_to_what_it_borrows():
    # All 24 GPUs guaranteed; team-a is idle and lends to team-b (6) and team-c (3).
    quotas = [q(1, "team-a", 12), q(2, "team-b", 6), q(3, "team-c", 6)]
    result = lending(
        quotas,
        used={2: gpu(6), 3: gpu(6)},
        borrowed={(2, 1): gpu(6), (3, 1): gpu(3)},
        capacity={1: gpu(24)},
    )
    assert loans_of(result) == {(2, 1): 6 * G, (3, 1): 3 * G}
    assert result.quotas[1].lent[0] == 9 * G


def test_a_parent_lends_its_own_part_before_its_children_theirs():
    # team (16) has a1 (8) and a2 (4) below it: 4 GPUs are the parent's own.
    quotas = [q(1, "team", 16), q(2, "a1", 8, parent=1), q(3, "a2", 4, parent=1), q(4, "b", 8)]
    result = lending(
        quotas,
        used={4: gpu(8)},
        borrowed={(4, 1): gpu(10)},
        capacity={1: gpu(24)},
    )
    # the parent's own 4 first, then 6 split 8:4 between its children
    assert loans_of(result) == {(4, 1): 4 * G, (4, 2): 4 * G, (4, 3): 2 * G}
    assert [result.quotas[i].lent[0] for i in (1, 2, 3)] == [10 * G, 4 * G, 2 * G]


def test_shared_gpus_count_as_their_milli_gpus():
    # a job on half a GPU of team-a's idle guarantee
    report = quota_report(
        snapshot(
            machines(1),
            [q(1, "team-a", 8), q(2, "team-b", 0)],
            [_shared_borrower(9, quota_id=2, node=1, milli=500)],
        )
    )
    assert report[2].borrowed[0] == 500 and report[1].lent[0] == 500


def test_in_quota_use_of_children_counts_toward_every_ancestor():
    quotas = [q(1, "team", 16), q(2, "a1", 8, parent=1)]
    run = [running(9, 2, (1, 4), idle="off", in_quota=True)]
    report = quota_report(snapshot(machines(1, 2), quotas, run))
    assert (report[1].used[0], report[2].used[0]) == (4 * G, 4 * G)
    assert (report[1].free[0], report[2].free[0]) == (12 * G, 4 * G)


def _shared_borrower(jid: int, *, quota_id: int, node: int, milli: int):
    from apps.scheduler.engine import RunningJob, RunningPod

    pod = RunningPod(jid * 100, node, Resources(cpu=1000, memory=1024), False, gpu_milli=milli)
    return RunningJob(jid, f"job-{jid}", quota_id, "only_idle", 1, 0.0, None, (pod,))


@st.composite
def cluster(draw):
    """A pool of 1–4 nodes of 8 GPUs, a quota tree within it, jobs using at most what it has."""
    nodes = draw(st.integers(1, 4))
    capacity = nodes * 8
    roots = draw(st.integers(1, 3))
    quotas: list[Quota] = []
    left = capacity
    for i in range(roots):
        size = draw(st.integers(0, left))
        left -= size
        quotas.append(q(i + 1, f"root-{i}", size))
        kids = draw(st.integers(0, 2))
        room = size
        for k in range(kids):
            child = draw(st.integers(0, room))
            room -= child
            quotas.append(q(10 * (i + 1) + k, f"kid-{i}-{k}", child, parent=i + 1))
    free_room = capacity
    used: dict[int, tuple[int, int, int]] = {}
    for quota in quotas:
        if quota.parent_id is None:
            continue
        take = draw(st.integers(0, quota.min.gpu))
        used[quota.id] = gpu(take)
        free_room -= take
    borrowed: dict[tuple[int, int], tuple[int, int, int]] = {}
    for quota in quotas:
        take = draw(st.integers(0, free_room))
        if take:
            borrowed[(quota.id, 1)] = gpu(take)
            free_room -= take
    return quotas, used, borrowed, capacity


@settings(max_examples=300, deadline=None)
@given(cluster())
def test_loans_add_up_to_what_is_borrowed_and_stay_within_each_lenders_free_guarantee(shape):
    quotas, used, borrowed, capacity = shape
    result = lending(quotas, used=used, borrowed=borrowed, capacity={1: gpu(capacity)})
    loans = result.loans
    total = sum(v[0] for v in borrowed.values())
    slack = len(loans) + 2 * len(quotas)  # rounded down, one milli at most per share
    assert total - slack <= sum(loan.amount[0] for loan in loans) <= total
    for (borrower, _), amount in borrowed.items():
        owed = sum(loan.amount[0] for loan in loans if loan.borrower == borrower)
        assert owed <= amount[0]
    for quota in quotas:
        report = result.quotas[quota.id]
        assert report.lent[0] <= report.free[0]
        assert report.free[0] == max(0, report.min[0] - report.used[0])
        own = sum(loan.amount[0] for loan in loans if loan.lender == quota.id)
        kids = sum_of(result.quotas[k.id].lent for k in quotas if k.parent_id == quota.id)
        assert own + kids[0] <= report.lent[0]


# --- use over time ---------------------------------------------------------------------------


def test_use_over_time_steps_up_and_down_with_the_spans_inside_the_window():
    from apps.scheduler.engine import use_over_time

    spans = [
        (0.0, 50.0, 4),  # began before the window, ends inside it
        (20.0, None, 2),  # still holding
        (30.0, 40.0, 1),
        (60.0, 200.0, 8),  # ends after the window
        (5.0, 8.0, 3),  # over before the window
    ]
    assert use_over_time(spans, since=10.0, until=100.0) == [
        (10.0, 4),
        (20.0, 6),
        (30.0, 7),
        (40.0, 6),
        (50.0, 2),
        (60.0, 10),
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 100), st.one_of(st.none(), st.integers(0, 100)), st.integers(0, 9)
        ),
        max_size=12,
    )
)
def test_use_over_time_is_what_holds_at_every_moment(raw):
    from apps.scheduler.engine import use_over_time

    spans = [(float(s), None if e is None else float(e), a) for s, e, a in raw]
    points = use_over_time(spans, since=20.0, until=80.0)
    assert points[0][0] == 20.0 and [t for t, _ in points] == sorted({t for t, _ in points})
    for t in range(20, 80):
        level = next(v for at, v in reversed(points) if at <= t)
        held = sum(a for s, e, a in spans if s <= t and (e is None or t < e))
        assert level == held, t
