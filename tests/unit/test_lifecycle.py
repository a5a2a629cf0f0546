"""Rules of a job's life shared by the scheduler, the market and the agent. Pure: no database."""

from __future__ import annotations

import subprocess
import sys
from typing import get_args

from hypothesis import given
from hypothesis import strategies as st

from apps.scheduler import lifecycle
from apps.scheduler.lifecycle import (
    Budget,
    Fail,
    Failed,
    PodState,
    Requeue,
    RestartInPlace,
    Succeeded,
    after_interruption,
    after_pod_failure,
    lost_gpu_seconds,
    success_outcome,
)

# --- lost work ---------------------------------------------------------------------------


def test_it_counts_lost_work_from_the_last_checkpoint():
    assert (
        lost_gpu_seconds(gpus=8, started_at=1000.0, last_checkpoint_at=1060.0, now=1100.0) == 8 * 40
    )


def test_it_counts_lost_work_from_the_start_without_a_checkpoint():
    assert (
        lost_gpu_seconds(gpus=2, started_at=1000.0, last_checkpoint_at=None, now=1100.0) == 2 * 100
    )


def test_it_counts_from_the_attempt_start_after_resuming_from_an_old_checkpoint():
    # The attempt resumed from the checkpoint at 500: nothing from before 1000 is lost now.
    assert lost_gpu_seconds(gpus=1, started_at=1000.0, last_checkpoint_at=500.0, now=1100.0) == 100


def test_it_loses_nothing_right_at_a_checkpoint():
    assert lost_gpu_seconds(gpus=4, started_at=1000.0, last_checkpoint_at=1100.0, now=1100.0) == 0


def test_it_never_counts_negative_work():
    assert (
        lost_gpu_seconds(gpus=4, started_at=1000.0, last_checkpoint_at=1200.0, now=1100.0) == 0
    )  # a checkpoint stamped after the interruption
    assert (
        lost_gpu_seconds(gpus=4, started_at=1200.0, last_checkpoint_at=None, now=1100.0) == 0
    )  # a start after it


def test_it_counts_nothing_for_a_job_without_gpus():
    assert lost_gpu_seconds(gpus=0, started_at=1000.0, last_checkpoint_at=None, now=1100.0) == 0


# --- properties --------------------------------------------------------------------------

times = st.floats(min_value=0, max_value=10**9, allow_nan=False)
counts = st.integers(min_value=0, max_value=64)


@given(gpus=counts, started=times, checkpoint=st.none() | times, now=times)
def test_lost_work_is_never_negative_nor_more_than_the_attempt_ran(gpus, started, checkpoint, now):
    lost = lost_gpu_seconds(gpus=gpus, started_at=started, last_checkpoint_at=checkpoint, now=now)
    assert 0 <= lost <= gpus * max(0.0, now - started)


@given(gpus=counts, started=times, gap=times)
def test_a_checkpoint_at_now_leaves_nothing_to_lose(gpus, started, gap):
    now = started + gap
    assert lost_gpu_seconds(gpus=gpus, started_at=started, last_checkpoint_at=now, now=now) == 0


@given(gpus=counts, started=times, checkpoint=st.none() | times, now=times, later=times)
def test_lost_work_only_grows_while_the_attempt_runs(gpus, started, checkpoint, now, later):
    def at(moment: float) -> float:
        return lost_gpu_seconds(
            gpus=gpus, started_at=started, last_checkpoint_at=checkpoint, now=moment
        )

    assert at(now) <= at(now + later)


@given(gpus=counts, started=times, older=times, ran=times)
def test_a_checkpoint_from_an_earlier_attempt_is_the_same_as_none(gpus, started, older, ran):
    old = started - older  # saved before this attempt started: it resumed from it
    now = started + ran
    assert lost_gpu_seconds(
        gpus=gpus, started_at=started, last_checkpoint_at=old, now=now
    ) == lost_gpu_seconds(gpus=gpus, started_at=started, last_checkpoint_at=None, now=now)


@st.composite
def attempts(draw) -> list[tuple[float, float, list[float]]]:
    """A job's life: attempts one after another, each (start, end, checkpoints saved in it);
    an attempt may save none and resume the next from an older one."""
    moment, life = 0.0, []
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        start = moment + draw(st.integers(min_value=0, max_value=600))
        end = start + draw(st.integers(min_value=0, max_value=3600))
        saved = sorted(
            draw(st.lists(st.integers(min_value=int(start), max_value=int(end)), max_size=3))
        )
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
        lost = lost_gpu_seconds(gpus=gpus, started_at=start, last_checkpoint_at=checkpoint, now=end)
        assert lost <= gpus * (end - start)
        total_lost += lost
    assert total_lost <= gpus * sum(end - start for start, end, _ in life)


# --- success policy ----------------------------------------------------------------------


def pod(role: str, index: int, status: str) -> PodState:
    return PodState(role=role, index=index, status=status, name=f"j-{role.lower()}-{index}-a1")


def test_it_succeeds_all_workers_once_every_pod_has():
    pods = [
        pod("Master", 0, "Succeeded"),
        pod("Worker", 0, "Succeeded"),
        pod("Worker", 1, "Running"),
    ]
    assert success_outcome(policy="AllWorkers", pods=pods) is None
    done = [*pods[:2], pod("Worker", 1, "Succeeded")]
    assert success_outcome(policy="AllWorkers", pods=done) == Succeeded("All pods succeeded")


def test_it_succeeds_chief_worker_once_the_master_has():
    pods = [pod("Worker", 0, "Running"), pod("Master", 0, "Succeeded"), pod("Worker", 1, "Pending")]
    assert success_outcome(policy="ChiefWorker", pods=pods) == Succeeded(
        "The chief pod j-master-0-a1 succeeded"
    )


def test_it_waits_for_the_chief_whatever_the_workers_do():
    pods = [
        pod("Chief", 0, "Running"),
        pod("Worker", 0, "Succeeded"),
        pod("Worker", 1, "Succeeded"),
    ]
    assert success_outcome(policy="ChiefWorker", pods=pods) is None


def test_it_takes_worker_0_as_the_chief_of_a_job_of_workers():
    pods = [pod("Worker", 1, "Succeeded"), pod("Worker", 0, "Running"), pod("PS", 0, "Running")]
    assert success_outcome(policy="ChiefWorker", pods=pods) is None
    pods = [pod("Worker", 1, "Running"), pod("Worker", 0, "Succeeded"), pod("PS", 0, "Running")]
    assert success_outcome(policy="ChiefWorker", pods=pods) == Succeeded(
        "The chief pod j-worker-0-a1 succeeded"
    )


def test_it_ranks_master_chief_launcher_head_worker_ps_evaluator_then_the_rest():
    roles = ["Custom", "Evaluator", "PS", "Worker", "Head", "Launcher", "Chief", "Master"]
    assert sorted(roles, key=lambda r: lifecycle.rank_key(r, 0)) == roles[::-1]
    assert lifecycle.rank_key("Worker", 1) < lifecycle.rank_key("Worker", 2)


def test_it_fails_the_attempt_when_the_chief_fails():
    failed = pod("Master", 0, "Failed")
    pods = [failed, pod("Worker", 0, "Running")]
    assert success_outcome(policy="ChiefWorker", pods=pods) == Failed(failed)
    assert success_outcome(policy="AllWorkers", pods=pods) == Failed(failed)


def test_it_fails_the_attempt_when_a_worker_fails_under_either_policy():
    failed = pod("Worker", 1, "Failed")
    pods = [pod("Master", 0, "Running"), pod("Worker", 0, "Succeeded"), failed]
    assert success_outcome(policy="ChiefWorker", pods=pods) == Failed(failed)
    assert success_outcome(policy="AllWorkers", pods=pods) == Failed(failed)


def test_it_keeps_an_attempt_without_pods_running():
    assert success_outcome(policy="AllWorkers", pods=[]) is None
    assert success_outcome(policy="ChiefWorker", pods=[]) is None


# --- AIMaster: examples ------------------------------------------------------------------

ON = Budget(aimaster=True, max_restarts=3, restart_times=0)
OFF = Budget(aimaster=False, max_restarts=3, restart_times=0)
SPENT = Budget(aimaster=True, max_restarts=3, restart_times=3)


def pod_failed(
    budget: Budget = ON,
    *,
    platform: bool = False,
    policy: str = "OnFailure",
    exit_code: int | None = 1,
    spot: bool = False,
    async_mode: bool = False,
    pod_node_ready: bool = True,
    nodes_ready: bool = True,
):
    return after_pod_failure(
        budget=budget,
        platform=platform,
        restart_policy=policy,
        exit_code=exit_code,
        spot=spot,
        async_mode=async_mode,
        pod_node_ready=pod_node_ready,
        nodes_ready=nodes_ready,
    )


def test_it_fails_a_failed_pod_without_aimaster():
    assert pod_failed(OFF) == Fail("no automatic fault tolerance")


def test_it_restarts_the_whole_job_in_place_under_sync():
    assert pod_failed(ON) == RestartInPlace(pods_only=False)


def test_it_restarts_only_the_failed_pod_under_async():
    assert pod_failed(ON, async_mode=True) == RestartInPlace(pods_only=True)


def test_it_places_the_whole_job_again_when_a_node_is_gone():
    assert pod_failed(ON, async_mode=True, pod_node_ready=False, nodes_ready=False) == Requeue(
        rebid=False, counted=True, backoff=True
    )
    assert pod_failed(ON, nodes_ready=False) == Requeue(rebid=False, counted=True, backoff=True)
    assert pod_failed(ON, nodes_ready=False, spot=True) == Requeue(
        rebid=True, counted=True, backoff=True
    )
    assert pod_failed(SPENT, nodes_ready=False) == Fail("restarts exhausted (3/3)")


def test_it_fails_a_failed_pod_whose_budget_is_spent():
    assert pod_failed(SPENT) == Fail("restarts exhausted (3/3)")


def test_it_judges_the_budget_before_the_restart_policy():
    assert pod_failed(SPENT, policy="Never") == Fail("restarts exhausted (3/3)")
    assert pod_failed(OFF, policy="Never") == Fail("no automatic fault tolerance")


def test_it_never_restarts_under_restart_policy_never():
    assert pod_failed(ON, policy="Never") == Fail("restart policy Never")


def test_it_restarts_under_exit_code_only_after_a_signal_or_a_vanished_process():
    assert pod_failed(ON, policy="ExitCode", exit_code=1) == Fail(
        "exit code 1 is permanent under restart policy ExitCode"
    )
    assert pod_failed(ON, policy="ExitCode", exit_code=127) == Fail(
        "exit code 127 is permanent under restart policy ExitCode"
    )
    assert pod_failed(ON, policy="ExitCode", exit_code=128) == RestartInPlace(pods_only=False)
    assert pod_failed(ON, policy="ExitCode", exit_code=137) == RestartInPlace(pods_only=False)
    assert pod_failed(ON, policy="ExitCode", exit_code=None) == RestartInPlace(pods_only=False)


def test_it_restarts_under_on_failure_and_always():
    assert pod_failed(ON, policy="OnFailure") == RestartInPlace(pods_only=False)
    assert pod_failed(ON, policy="Always") == RestartInPlace(pods_only=False)


def test_it_requeues_a_preempted_job_with_aimaster_without_spending_a_restart():
    assert after_interruption(budget=ON, kind="reclaim", spot=False) == Requeue(
        rebid=False, counted=False, backoff=True
    )


def test_it_fails_a_preempted_job_without_aimaster():
    assert after_interruption(budget=OFF, kind="reclaim", spot=False) == Fail(
        "no automatic fault tolerance"
    )


def test_it_sends_a_reclaimed_spot_job_back_to_bidding():
    assert after_interruption(budget=ON, kind="reclaim", spot=True) == Requeue(
        rebid=True, counted=False, backoff=True
    )
    assert after_interruption(budget=OFF, kind="reclaim", spot=True) == Fail(
        "no automatic fault tolerance"
    )


def test_a_preemption_is_never_terminal_for_a_job_with_aimaster_whatever_its_budget():
    # design: "Preempted" is never terminal for a job that has fault tolerance: it waits again
    assert after_interruption(budget=SPENT, kind="reclaim", spot=False) == Requeue(
        rebid=False, counted=False, backoff=True
    )
    assert after_interruption(budget=Budget(True, 0, 0), kind="reclaim", spot=True) == Requeue(
        rebid=True, counted=False, backoff=True
    )


def test_it_fails_a_job_whose_own_failure_finds_the_budget_spent():
    assert after_interruption(budget=SPENT, kind="failure", spot=False) == Fail(
        "restarts exhausted (3/3)"
    )
    assert after_interruption(budget=Budget(True, 0, 0), kind="failure", spot=True) == Fail(
        "restarts exhausted (0/0)"
    )
    assert after_interruption(budget=ON, kind="failure", spot=True) == Requeue(
        rebid=True, counted=True, backoff=True
    )


def test_it_requeues_a_platform_interruption_uncounted_whatever_aimaster_says():
    for budget in (ON, OFF, SPENT):
        assert after_interruption(budget=budget, kind="platform", spot=False) == Requeue(
            rebid=False, counted=False, backoff=False
        )
        assert after_interruption(budget=budget, kind="platform", spot=True) == Requeue(
            rebid=True, counted=False, backoff=False
        )
        assert pod_failed(budget, platform=True, policy="Never") == Requeue(
            rebid=False, counted=False, backoff=False
        )


def test_it_says_a_platform_interruption_spends_nothing():
    assert (
        lifecycle.platform_note(Budget(True, 3, 1))
        == "a platform interruption: AIMaster's budget 1/3 is not used"
    )
    assert (
        lifecycle.platform_note(OFF) == "a platform interruption: requeued although AIMaster is off"
    )


def test_its_names_are_the_models():
    from apps.jobs.models import JobRole, PodStatus, SuccessPolicy

    assert set(get_args(lifecycle.SuccessPolicy)) == set(SuccessPolicy.values)
    assert set(get_args(lifecycle.RestartPolicy)) == set(JobRole.RestartPolicy.values)
    assert set(JobRole.RoleType.values) <= set(lifecycle.ROLE_ORDER)
    assert {"Succeeded", "Failed"} <= set(PodStatus.values)


def test_it_imports_nothing_of_django_celery_or_the_apps():
    code = (
        "import sys; import apps.scheduler.lifecycle; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'celery')]; "
        "assert not [m for m in sys.modules if m.startswith('apps.') "
        "and m not in ('apps.scheduler', 'apps.scheduler.lifecycle', "
        "'apps.core', 'apps.core.words')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- AIMaster and the success policy: properties -----------------------------------------

budgets = st.builds(
    Budget,
    aimaster=st.booleans(),
    max_restarts=st.integers(0, 100),
    restart_times=st.integers(0, 100),
)
restart_policies = st.sampled_from(get_args(lifecycle.RestartPolicy))
exit_codes = st.none() | st.integers(0, 255)
policies = st.sampled_from(get_args(lifecycle.SuccessPolicy))
roles = st.sampled_from([*lifecycle.ROLE_ORDER, "Custom"])
statuses = st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Preempted", "Stopped"])


@given(
    budget=budgets,
    spot=st.booleans(),
    policy=restart_policies,
    code=exit_codes,
    async_mode=st.booleans(),
    pod_ready=st.booleans(),
    ready=st.booleans(),
)
def test_a_platform_interruption_never_spends_the_budget_nor_fails_the_job(
    budget,
    spot,
    policy,
    code,
    async_mode,
    pod_ready,
    ready,
):
    uncounted = Requeue(rebid=spot, counted=False, backoff=False)
    assert after_interruption(budget=budget, kind="platform", spot=spot) == uncounted
    assert (
        after_pod_failure(
            budget=budget,
            platform=True,
            restart_policy=policy,
            exit_code=code,
            spot=spot,
            async_mode=async_mode,
            pod_node_ready=pod_ready,
            nodes_ready=ready,
        )
        == uncounted
    )


@st.composite
def lives(draw) -> tuple[int, list[tuple[str, bool]]]:
    """A budget and a run of interruptions: (which kind, a platform one?)."""
    n = draw(st.integers(0, 8))
    kinds = st.sampled_from(["preempted", "reclaimed", "pod failed", "pod failed, node gone"])
    return n, draw(st.lists(st.tuples(kinds, st.booleans()), max_size=30))


def _decide(kind: str, budget: Budget, platform: bool):
    if kind in ("preempted", "reclaimed"):
        return after_interruption(
            budget=budget, kind="platform" if platform else "reclaim", spot=kind == "reclaimed"
        )
    return after_pod_failure(
        budget=budget,
        platform=platform,
        restart_policy="OnFailure",
        exit_code=1,
        spot=False,
        async_mode=False,
        pod_node_ready=True,
        nodes_ready=kind == "pod failed",
    )


@given(life=lives())
def test_a_budget_of_n_survives_exactly_n_failures_and_any_number_of_preemptions(life):
    """Whatever the mix of kinds, with platform interruptions, preemptions and reclaims
    anywhere in between (none of them counted, none of them terminal): the job survives its
    first n failures of its own and fails at the (n+1)-th, and only then."""
    n, interruptions = life
    budget, counted = Budget(aimaster=True, max_restarts=n, restart_times=0), 0
    for kind, platform in interruptions:
        decision = _decide(kind, budget, platform)
        if platform:
            assert decision == Requeue(rebid=kind == "reclaimed", counted=False, backoff=False)
            continue
        if kind in ("preempted", "reclaimed"):
            assert decision == Requeue(rebid=kind == "reclaimed", counted=False, backoff=True)
            continue
        counted += 1
        if counted == n + 1:
            assert decision == Fail(f"restarts exhausted ({n}/{n})")
            return
        assert not isinstance(decision, Fail)
        assert isinstance(decision, RestartInPlace) or decision.counted
        budget = Budget(aimaster=True, max_restarts=n, restart_times=budget.restart_times + 1)
    assert counted <= n


kinds = st.sampled_from(get_args(lifecycle.Interruption))


@given(budget=budgets, kind=kinds, spot=st.booleans())
def test_an_interruption_fails_a_job_exactly_when_aimaster_declines(budget, kind, spot):
    """A platform interruption never fails a job; a preemption or reclaim only without
    AIMaster; a failure of its own whenever AIMaster declines it (off, or spent). Only a
    failure spends a restart; only a platform interruption skips the backoff."""
    decision = after_interruption(budget=budget, kind=kind, spot=spot)
    declined = {
        "platform": None,
        "reclaim": None if budget.aimaster else "no automatic fault tolerance",
        "failure": lifecycle.aimaster_declines(budget),
    }[kind]
    assert isinstance(decision, Fail) == (declined is not None)
    if isinstance(decision, Fail):
        assert decision.reason == declined
    else:
        assert decision.rebid == spot
        assert decision.counted == (kind == "failure")
        assert decision.backoff == (kind != "platform")


@given(
    budget=budgets,
    policy=restart_policies,
    code=exit_codes,
    spot=st.booleans(),
    async_mode=st.booleans(),
    pod_ready=st.booleans(),
    ready=st.booleans(),
)
def test_a_failed_pod_fails_the_job_only_when_aimaster_or_its_restart_policy_declines(
    budget,
    policy,
    code,
    spot,
    async_mode,
    pod_ready,
    ready,
):
    decision = after_pod_failure(
        budget=budget,
        platform=False,
        restart_policy=policy,
        exit_code=code,
        spot=spot,
        async_mode=async_mode,
        pod_node_ready=pod_ready,
        nodes_ready=ready,
    )
    why = lifecycle.aimaster_declines(budget) or lifecycle.restart_policy_declines(policy, code)
    assert (decision == Fail(why)) if why else not isinstance(decision, Fail)
    if isinstance(decision, Requeue):
        assert decision.counted and not ready and decision.rebid == spot


def pod_states(min_size: int = 0, status=statuses):
    """An attempt's pods: distinct (role, index) pairs with any statuses."""
    return (
        st.lists(st.tuples(roles, st.integers(0, 7)), unique=True, min_size=min_size, max_size=12)
        .flatmap(
            lambda keys: st.tuples(
                *(st.builds(pod, st.just(r), st.just(i), status) for r, i in keys)
            )
        )
        .map(list)
    )


@given(policy=policies, pods=pod_states(), data=st.data())
def test_the_outcome_does_not_depend_on_the_order_of_the_pods(policy, pods, data):
    shuffled = data.draw(st.permutations(pods))
    assert success_outcome(policy=policy, pods=shuffled) == success_outcome(
        policy=policy, pods=pods
    )


@given(policy=policies, pods=pod_states(min_size=1, status=st.just("Succeeded")))
def test_a_job_whose_every_pod_succeeded_succeeds_under_every_policy(policy, pods):
    assert isinstance(success_outcome(policy=policy, pods=pods), Succeeded)


@given(policy=policies, pods=pod_states(min_size=1))
def test_a_failed_pod_fails_the_attempt_under_every_policy(policy, pods):
    outcome = success_outcome(policy=policy, pods=pods)
    failed = [p for p in pods if p.status == "Failed"]
    assert isinstance(outcome, Failed) == bool(failed)
    if failed:
        assert outcome.pod in failed


@given(pods=pod_states(min_size=1))
def test_chief_worker_follows_the_rank_0_pod_and_all_workers_every_pod(pods):
    if any(p.status == "Failed" for p in pods):
        return
    chief = min(pods, key=lambda p: lifecycle.rank_key(p.role, p.index))
    chief_worker = success_outcome(policy="ChiefWorker", pods=pods)
    assert chief_worker == (
        Succeeded(f"The chief pod {chief.name} succeeded") if chief.status == "Succeeded" else None
    )
    all_workers = success_outcome(policy="AllWorkers", pods=pods)
    assert all_workers == (
        Succeeded("All pods succeeded") if all(p.status == "Succeeded" for p in pods) else None
    )


# --- hang detection ----------------------------------------------------------------------


def test_a_job_is_hung_once_quiet_for_its_whole_interval():
    assert lifecycle.hang_message(quiet_since=100.0, interval=60, now=159.9) is None
    message = lifecycle.hang_message(quiet_since=100.0, interval=60, now=160.0)
    assert message == "no output from any pod for 60 s (hang detection: 60 s)"


def test_hang_detection_off_or_nothing_started_is_never_hung():
    assert lifecycle.hang_message(quiet_since=0.0, interval=None, now=1e9) is None
    assert lifecycle.hang_message(quiet_since=None, interval=10, now=1e9) is None


def test_a_hung_job_is_restarted_like_a_failed_pod_in_sync_mode():
    budget = Budget(aimaster=True, max_restarts=2, restart_times=0)
    in_place = lifecycle.after_hang(budget=budget, spot=False, nodes_ready=True)
    assert in_place == RestartInPlace(pods_only=False)
    assert isinstance(lifecycle.after_hang(budget=budget, spot=False, nodes_ready=False), Requeue)
    spent = Budget(aimaster=True, max_restarts=2, restart_times=2)
    assert lifecycle.after_hang(budget=spent, spot=False, nodes_ready=True) == Fail(
        "restarts exhausted (2/2)"
    )


def test_lost_work_under_a_hundredth_of_a_gpu_hour_is_not_written_as_none():
    from apps.jobs.models import gpu_hours_text

    assert gpu_hours_text(0) == "0.00"
    assert gpu_hours_text(10) == "0.0028"  # 10 GPU-seconds, not "0.00"
    assert gpu_hours_text(0.1) == "0.000028"
    assert gpu_hours_text(17) == "0.0047"
    assert gpu_hours_text(18) == "0.01"  # 0.005 rounds to a hundredth, not to none
    assert gpu_hours_text(19188) == "5.33"
    assert gpu_hours_text(3600 * 1234.5) == "1,234.50"


def test_a_resume_loads_the_highest_step_whose_file_is_left():
    assert lifecycle.resume_step([]) is None
    assert lifecycle.resume_step([(30, False)]) is None
    assert lifecycle.resume_step([(20, True), (30, False), (10, True)]) == 20


def test_a_resume_is_said_as_an_intent_until_its_load_says_what_it_loaded():
    """Before the pods run the platform names the step the load will try; after a load
    that passed over damaged files, the step it really resumed from."""
    assert lifecycle.resume_message(230) == "Resuming from checkpoint at step 230"
    assert lifecycle.resume_message(None) == "Resuming from the start (no checkpoint yet)"
    assert lifecycle.resume_message(220, passed_over=["a.pkl", "b.pkl"]) == (
        "Damaged checkpoints passed over: a.pkl, b.pkl; resumed from checkpoint at step 220"
    )
    assert lifecycle.resume_message(None, passed_over=["a.pkl"]) == (
        "Damaged checkpoints passed over: a.pkl; resumed from the start"
    )


def test_a_save_only_lowers_the_work_lost_and_a_resume_sets_it():
    revised = lifecycle.lost_work_revised
    assert revised(was=60, recounted=0, resumed=False) == 0  # saved on the way out
    assert revised(was=60, recounted=90, resumed=False) is None  # an older save: not gone on from
    assert revised(was=60, recounted=60, resumed=False) is None
    assert revised(was=60, recounted=100, resumed=True) == 100  # the load passed over the newer
    assert revised(was=60, recounted=20, resumed=True) == 20
    assert revised(was=60, recounted=60, resumed=True) is None
