"""Fill mode (the FGD paper's method) on tiny traces with known answers."""

from __future__ import annotations

import pytest

from apps.simulator import Policy, PolicyError, Settings, inflate, policy_summary
from tests.simulator.helpers import job, one_quota, outcome, run


def test_it_reports_the_allocation_reached_as_the_trace_arrives():
    trace = [job("a", 0, gpu=2), job("b", 1, gpu=2), job("c", 2, gpu=2)]
    result = run(trace, one_quota(4), mode="fill", fill_to=1.3)
    summary = policy_summary(result)
    assert summary["allocation_at_arrived"] == {"1": 1.0, "1.3": 1.0}
    assert summary["pods_unplaced"] == 1 and outcome(result, "c").dropped
    assert summary["arrived_ratio"] == pytest.approx(1.5)
    assert summary["unallocated_gpus"] == 0


def test_it_puts_fractional_pods_on_shared_gpus():
    trace = [job(f"half{i}", i, milli=500) for i in range(4)]
    result = run(trace, one_quota(2), mode="fill", fill_to=1.0)
    summary = policy_summary(result)
    assert summary["gpu_allocation_ratio"] == pytest.approx(1.0)  # 4 × 500 of 2,000 milli
    assert summary["gpu_occupied_ratio"] == pytest.approx(1.0)
    assert summary["unallocated_gpus"] == pytest.approx(0.0)
    assert summary["pods_placed"] == 4


def test_it_measures_fractional_pods_by_what_they_asked_for_without_sharing():
    trace = [job(f"half{i}", i, milli=500) for i in range(4)]
    result = run(trace, one_quota(2), mode="fill", fill_to=1.0, gpu_sharing=False)
    summary = policy_summary(result)
    assert summary["gpu_allocation_ratio"] == pytest.approx(0.5)  # 2 × 500 of 2,000 milli
    assert summary["gpu_occupied_ratio"] == pytest.approx(1.0)  # each holds a whole GPU
    assert summary["unallocated_gpus"] == pytest.approx(1.0)
    assert summary["pods_placed"] == 2


def test_it_keeps_whole_gpus_free_of_fractions_for_whole_gpu_pods():
    # best fit puts the 0.75 beside the 0.25 on one GPU, leaving the other whole
    trace = [job("q0", 0, milli=250), job("q1", 1, milli=750), job("whole", 2, gpu=1)]
    result = run(trace, one_quota(2), mode="fill", fill_to=0.1)
    assert not any(j.dropped for j in result.jobs)
    assert policy_summary(result)["gpu_allocation_ratio"] == pytest.approx(1.0)


def test_it_measures_fragmentation_as_fgd_does():
    """Pods of 0.7 GPU on one node of 2: the first leaves 0.3 GPU no such pod can use, the
    second 0.3 more; the copies find no room and change nothing."""
    trace = [job("a", 0, milli=700), job("b", 1, milli=700)]
    result = run(trace, one_quota(2), mode="fill", fill_to=1.3, batch=1)
    assert [j.dropped for j in result.jobs] == [False, False, True, True]
    assert result.series.fragmented == pytest.approx([0.15, 0.3, 0.3, 0.3])
    summary = policy_summary(result)
    assert summary["fragmented_gpus"] == pytest.approx(0.6)
    assert summary["unallocated_gpus"] == pytest.approx(0.6)


def test_it_counts_as_fragmented_only_room_the_trace_cannot_use():
    """Halves pack two to a GPU: nothing left is out of a half's reach."""
    trace = [job("a", 0, milli=500), job("b", 1, milli=500), job("c", 2, milli=500)]
    result = run(trace, one_quota(2), mode="fill", fill_to=0.75, batch=1)
    assert result.series.fragmented == pytest.approx([0.0, 0.0, 0.0])
    assert policy_summary(result)["unallocated_gpus"] == pytest.approx(0.5)


def test_it_inflates_the_trace_with_seeded_copies():
    settings = Settings(mode="fill", fill_to=1.3, seed=3)
    arrivals = inflate([job("a", 0), job("b", 0, gpu=2)], gpus=4, settings=settings)
    assert [j.name for j in arrivals[:2]] == ["a", "b"]
    assert sum(j.gpu_milli for j in arrivals) >= 1.3 * 4000
    assert sum(j.gpu_milli for j in arrivals[:-1]) < 1.3 * 4000  # stops as soon as it is there
    assert inflate([job("a", 0), job("b", 0, gpu=2)], gpus=4, settings=settings) == arrivals


def test_it_places_by_best_fit_unless_told_otherwise():
    trace = [job("small", 0), job("large", 1, gpu=4)]
    # 5 of 6 GPUs asked for: past fill_to 0.8, so no copies are added
    best = run(trace, one_quota(2, 4), mode="fill", fill_to=0.8)
    worst = run(
        trace, one_quota(2, 4), Policy("wf", placement="worst_fit"), mode="fill", fill_to=0.8
    )
    # best fit leaves the 4-GPU node whole for the large job; worst fit breaks it up
    assert len(best.jobs) == 2
    assert policy_summary(best)["gpu_allocation_ratio"] == pytest.approx(5 / 6, abs=1e-6)
    assert policy_summary(worst)["gpu_allocation_ratio"] == pytest.approx(1 / 6, abs=1e-6)
    assert outcome(worst, "large").dropped


def test_it_fills_with_fgd_placement_against_the_traces_own_mix():
    trace = [job(f"s{i}", i, milli=300) for i in range(6)] + [job("pair", 9, gpu=2)]
    result = run(trace, one_quota(2, 2), Policy("fgd", placement="fgd"), mode="fill", fill_to=0.9)
    summary = policy_summary(result)
    # six 0.3 shares pack onto two GPUs (three each), leaving a pair whole for the 2-GPU pod
    assert summary["pods_placed"] == 7
    assert summary["gpu_occupied_ratio"] == pytest.approx(1.0)


def test_a_workload_window_needs_arrival_times():
    trace = [job("s", 0, milli=300)]
    with pytest.raises(ValueError, match="fill mode's arrivals have no times"):
        run(trace, one_quota(2), Policy("fgd", placement="fgd"), mode="fill", workload_hours=24)
    policy = Policy("live", placement="fgd", workload_hours=24)
    with pytest.raises(PolicyError, match="live: workload_hours is for replay mode"):
        run(trace, one_quota(2), policy, mode="fill")
