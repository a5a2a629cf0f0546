"""Replay on tiny hand-made traces whose answers are worked out by hand."""

from __future__ import annotations

import pytest

from apps.simulator import Policy, policy_summary
from tests.simulator.helpers import job, one_quota, outcome, run, two_teams


def test_it_queues_jobs_until_room_frees():
    cluster = one_quota(2)
    trace = [job("j1", 0), job("j2", 0), job("j3", 0), job("j4", 300)]
    result = run(trace, cluster, checkpoint_interval=0)
    assert [outcome(result, n).first_start for n in ("j1", "j2", "j3", "j4")] == [0, 0, 100, 300]
    assert outcome(result, "j3").finish == 200
    summary = policy_summary(result)
    # 2 of 2 GPUs for 100 s, 1 of 2 for 100 s, none for 100 s, over the 300 s of arrivals
    assert summary["gpu_allocation_ratio"] == pytest.approx(0.5)
    assert summary["delay_seconds"]["p50"] == 0
    assert summary["delay_seconds"]["p90"] == pytest.approx(70)  # between 0 and 100
    assert summary["jobs"] == {"submitted": 4, "started": 4, "finished": 4, "never_started": 0}


def test_it_follows_fragmentation_as_jobs_come_and_go():
    """The trace's mix: half 0.7-GPU pods, half 0.3. A 0.7 alone strands its GPU's 0.3 for
    the 0.7s (half the mix: 150 milli-GPUs); a 0.3 beside it strands nothing; when the 0.3
    leaves, the 0.3 of room is stranded again; when the 0.7 leaves, nothing is."""
    trace = [job("a", 0, milli=700, duration=200), job("b", 50, milli=300, duration=100)]
    result = run(trace, one_quota(2))
    s = result.series
    assert s.x == [0, 50, 150, 200]
    assert s.fragmented == pytest.approx([0.075, 0.0, 0.075, 0.0])
    # over the span of arrivals (0 to 50 s): 150 of 2,000 milli-GPUs
    assert policy_summary(result)["fragmented_gpus"] == pytest.approx(0.15)


def borrower_and_owner(owner_at: float):
    be = job("be", 0, gpu=2, duration=1000, qos="BE", quota="b", idle_mode="only_idle")
    ls = job("ls", owner_at, duration=100, quota="a")
    return [be, ls]


def test_it_preempts_a_borrower_and_counts_the_work_it_loses():
    result = run(borrower_and_owner(500), two_teams(2, a=1, b=1), checkpoint_interval=0)
    be, ls = outcome(result, "be"), outcome(result, "ls")
    assert ls.first_start == 500  # the owner starts the moment its victim has gone
    assert result.preemptions == 1 and be.preemptions == 1
    assert result.lost_gpu_seconds == pytest.approx(2 * 500)  # 2 GPUs since it started
    # requeued, it waits for the owner to leave at 600, then does all its work again
    assert be.first_start == 0 and be.finish == 600 + 1000
    assert policy_summary(result)["lost_gpu_hours"] == pytest.approx(1000 / 3600, abs=1e-4)


def test_it_resumes_a_victim_from_its_last_checkpoint():
    result = run(borrower_and_owner(500), two_teams(2, a=1, b=1), checkpoint_interval=200)
    be = outcome(result, "be")
    assert result.lost_gpu_seconds == pytest.approx(2 * (500 - 400))  # since the checkpoint at 400
    assert be.finish == 600 + (1000 - 400)


def test_it_waits_for_borrowers_to_reach_the_minimum_run_time():
    result = run(borrower_and_owner(30), two_teams(2, a=1, b=1), min_run_seconds=60)
    assert outcome(result, "ls").first_start == 60
    assert result.preemptions == 1


def test_it_gives_up_the_minimum_run_time_when_the_policy_says_so():
    policy = Policy("eager", min_run_seconds=0)
    result = run(borrower_and_owner(30), two_teams(2, a=1, b=1), policy, min_run_seconds=60)
    assert outcome(result, "ls").first_start == 30


def two_borrowers():
    b1 = job("b1", 0, duration=10_000, qos="BE", quota="b", idle_mode="only_idle")
    b2 = job("b2", 100, duration=10_000, qos="BE", quota="b", idle_mode="only_idle")
    return [b1, b2, job("owner", 200, quota="a")]


def test_it_preempts_the_borrower_with_least_lost_work():
    # at 200: b1 checkpointed at 150 (50 GPU-s to lose), b2 has not yet (100 GPU-s)
    result = run(two_borrowers(), two_teams(2, a=1, b=1), checkpoint_interval=150)
    assert outcome(result, "b1").preemptions == 1
    assert outcome(result, "b2").preemptions == 0
    assert result.lost_gpu_seconds == pytest.approx(50)


def test_it_preempts_the_newest_borrower_under_kueues_order():
    kueue = Policy("kueue", victim_order="kueue")
    result = run(two_borrowers(), two_teams(2, a=1, b=1), kueue, checkpoint_interval=150)
    assert outcome(result, "b2").preemptions == 1
    assert outcome(result, "b1").preemptions == 0
    assert result.lost_gpu_seconds == pytest.approx(100)


def test_it_plans_once_per_tick_when_a_tick_is_set():
    trace = [job("j1", 1), job("j2", 3), job("j3", 11)]
    result = run(trace, one_quota(4), tick=10)
    assert [outcome(result, n).first_start for n in ("j1", "j2", "j3")] == [10, 10, 20]
    assert result.plan_calls == 2


def test_it_compresses_arrivals_with_a_speedup():
    trace = [job("j1", 0, duration=100), job("j2", 100, duration=100)]
    result = run(trace, one_quota(1), speedup=2)
    assert outcome(result, "j2").submit == 50
    assert outcome(result, "j2").first_start == 100  # waits for j1, which still takes 100 s


def test_it_never_starts_a_job_larger_than_any_node():
    result = run([job("big", 0, gpu=8), job("ok", 0)], one_quota(4))
    assert outcome(result, "big").first_start is None
    assert policy_summary(result)["jobs"]["never_started"] == 1


@pytest.mark.parametrize(("hours", "same_gpu"), [(0, True), (1, False)])
def test_fgd_keeps_room_for_the_whole_trace_or_for_the_last_hours_arrivals(hours, same_gpu):
    """0.3 of a GPU beside 0.5 leaves 0.2. The whole trace is mostly whole-GPU pods, for
    which a GPU used in part is lost anyway: FGD packs the share beside the other. The last
    hour's arrivals are that share alone, which 0.2 cannot hold: FGD keeps it apart."""
    trace = [
        job("half", 0, milli=500, duration=10_000),
        job("third", 7_200, milli=300, duration=10_000),
        *(job(f"whole-{i}", 50_000 + i, duration=10) for i in range(8)),
    ]
    result = run(trace, one_quota(1, 1), Policy("fgd", placement="fgd"), workload_hours=hours)
    half, third = outcome(result, "half"), outcome(result, "third")
    assert half.first_start == 0 and third.first_start == 7_200
    assert (half.nodes == third.nodes) is same_gpu


def test_jobs_that_all_arrive_at_once_are_measured_until_the_run_ends():
    """One instant of arrivals has no span: the run's figure is its mean from then to the
    last event (it read 0, the cluster as the last job left it)."""
    trace = [job("a", 0, duration=100), job("b", 0, duration=300)]
    summary = policy_summary(run(trace, one_quota(4)))
    # 2 of 4 GPUs for 100 s, 1 of 4 for 200 s, over 300 s
    assert summary["gpu_allocation_ratio"] == pytest.approx((0.5 * 100 + 0.25 * 200) / 300)
    assert summary["unallocated_gpus"] == pytest.approx(4 - 4 * (100 / 300), abs=0.01)
