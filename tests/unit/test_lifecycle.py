"""Rules of a job's life shared by the scheduler, the market and the agent. Pure: no database."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from apps.scheduler.lifecycle import lost_gpu_seconds

# --- lost work ---------------------------------------------------------------------------


def test_it_counts_lost_work_from_the_last_checkpoint():
    assert lost_gpu_seconds(gpus=8, started_at=1000.0, last_checkpoint_at=1060.0,
                            now=1100.0) == 8 * 40


def test_it_counts_lost_work_from_the_start_without_a_checkpoint():
    assert lost_gpu_seconds(gpus=2, started_at=1000.0, last_checkpoint_at=None,
                            now=1100.0) == 2 * 100


def test_it_counts_from_the_attempt_start_after_resuming_from_an_old_checkpoint():
    # The attempt resumed from the checkpoint at 500: nothing from before 1000 is lost now.
    assert lost_gpu_seconds(gpus=1, started_at=1000.0, last_checkpoint_at=500.0,
                            now=1100.0) == 100


def test_it_loses_nothing_right_at_a_checkpoint():
    assert lost_gpu_seconds(gpus=4, started_at=1000.0, last_checkpoint_at=1100.0,
                            now=1100.0) == 0


def test_it_never_counts_negative_work():
    assert lost_gpu_seconds(gpus=4, started_at=1000.0, last_checkpoint_at=1200.0,
                            now=1100.0) == 0  # a checkpoint stamped after the interruption
    assert lost_gpu_seconds(gpus=4, started_at=1200.0, last_checkpoint_at=None,
                            now=1100.0) == 0  # a start after it


def test_it_counts_nothing_for_a_job_without_gpus():
    assert lost_gpu_seconds(gpus=0, started_at=1000.0, last_checkpoint_at=None,
                            now=1100.0) == 0


# --- properties --------------------------------------------------------------------------

times = st.floats(min_value=0, max_value=10**9, allow_nan=False)
counts = st.integers(min_value=0, max_value=64)


@given(gpus=counts, started=times, checkpoint=st.none() | times, now=times)
def test_lost_work_is_never_negative_nor_more_than_the_attempt_ran(gpus, started, checkpoint,
                                                                   now):
    lost = lost_gpu_seconds(gpus=gpus, started_at=started, last_checkpoint_at=checkpoint,
                            now=now)
    assert 0 <= lost <= gpus * max(0.0, now - started)


@given(gpus=counts, started=times, gap=times)
def test_a_checkpoint_at_now_leaves_nothing_to_lose(gpus, started, gap):
    now = started + gap
    assert lost_gpu_seconds(gpus=gpus, started_at=started, last_checkpoint_at=now,
                            now=now) == 0


@given(gpus=counts, started=times, checkpoint=st.none() | times, now=times, later=times)
def test_lost_work_only_grows_while_the_attempt_runs(gpus, started, checkpoint, now, later):
    def at(moment: float) -> float:
        return lost_gpu_seconds(gpus=gpus, started_at=started, last_checkpoint_at=checkpoint,
                                now=moment)

    assert at(now) <= at(now + later)


@given(gpus=counts, started=times, older=times, ran=times)
def test_a_checkpoint_from_an_earlier_attempt_is_the_same_as_none(gpus, started, older, ran):
    old = started - older  # saved before this attempt started: it resumed from it
    now = started + ran
    assert lost_gpu_seconds(gpus=gpus, started_at=started, last_checkpoint_at=old,
                            now=now) == lost_gpu_seconds(gpus=gpus, started_at=started,
                                                         last_checkpoint_at=None, now=now)


@st.composite
def attempts(draw) -> list[tuple[float, float, list[float]]]:
    """A job's life: attempts one after another, each (start, end, checkpoints saved in it);
    an attempt may save none and resume the next from an older one."""
    moment, life = 0.0, []
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        start = moment + draw(st.integers(min_value=0, max_value=600))
        end = start + draw(st.integers(min_value=0, max_value=3600))
        saved = sorted(draw(st.lists(st.integers(min_value=int(start), max_value=int(end)),
                                     max_size=3)))
        life.append((start, end, [float(s) for s in saved]))
        moment = end
    return life


@given(gpus=counts, life=attempts())
def test_interruptions_never_lose_more_than_the_job_ran_across_attempts(gpus, life):
    """Each interruption loses at most what its own attempt ran, and all of them together
    at most what the job ran: no GPU-second is lost twice."""
    checkpoint: float | None = None
    total_lost = 0.0
    for start, end, saved in life:
        if saved:
            checkpoint = saved[-1]
        lost = lost_gpu_seconds(gpus=gpus, started_at=start, last_checkpoint_at=checkpoint,
                                now=end)
        assert lost <= gpus * (end - start)
        total_lost += lost
    assert total_lost <= gpus * sum(end - start for start, end, _ in life)
