"""How far an agent vouches for its pods: the rule (`pods_vouched_until`, what a heartbeat
records: `pods_watched_recorded`) and what the agent's watch rounds report
(`supervisor.pods_watched_at`). Played without a database or processes: the pods are
stand-ins, and reporting an exit is `_finish`'s answer."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from apps.agent import services, supervisor
from apps.jobs.execution import pods_vouched_until, pods_watched_recorded

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def test_a_running_pod_is_vouched_for_up_to_the_earlier_of_the_heartbeat_and_the_round():
    assert pods_vouched_until(heartbeat=at(10), watched=at(7)) == at(7)
    assert pods_vouched_until(heartbeat=at(10), watched=at(12)) == at(10)  # clocks apart
    assert pods_vouched_until(heartbeat=at(10), watched=None) == at(10)  # an agent from before
    assert pods_vouched_until(heartbeat=None, watched=None) is None


def test_a_heartbeat_records_the_round_an_agent_reports():
    beat, round_ = at(0), at(-1)  # the record before

    def recorded(reported, *, rounds=True, heartbeat=beat, watched=round_):
        return pods_watched_recorded(
            reported=reported, reports_rounds=rounds, heartbeat=heartbeat, watched=watched
        )

    assert recorded(at(9)) == at(9)
    # Started again, no round yet: nothing new, as far as the record before vouched.
    assert recorded(None) == at(-1)
    assert recorded(None, watched=None) == at(0)  # the agent before it did not report rounds
    assert recorded(None, heartbeat=None, watched=None) is None  # never heard of before
    # An agent from before: its heartbeat alone, whatever was recorded.
    assert recorded(None, rounds=False) is None
    assert recorded(at(9), rounds=False) is None


class Process:
    def __init__(self, *, ended: float | None = None, ending: float | None = None) -> None:
        self.ended, self.ending = ended, ending

    def result(self):
        return None if self.ended is None else SimpleNamespace(code=0, at=self.ended)

    def ending_since(self) -> float | None:
        return self.ending


@pytest.fixture
def agent(monkeypatch):
    """An agent of stand-in pods: `agent.pod(id, ...)` runs one; an id in `agent.failing`
    has its exit report refused (the database is down)."""
    monkeypatch.setattr(supervisor, "_running", {})
    monkeypatch.setattr(supervisor, "_starts_began", {})
    monkeypatch.setattr(supervisor, "_watched", {"at": None, "adopted": True})
    failing: set[str] = set()

    def finish(entry) -> bool:
        if entry.launch.pod_id in failing:
            return False
        supervisor._running.pop(entry.launch.pod_id)
        return True

    monkeypatch.setattr(supervisor, "_finish", finish)
    monkeypatch.setattr(supervisor, "_check", lambda *args: None)
    monkeypatch.setattr(supervisor, "_sample_metrics", lambda live: None)
    monkeypatch.setattr(services, "pods_watch", lambda *, pod_pks: {})

    def pod(pod_id: str, **process) -> Process:
        launch = SimpleNamespace(pod_id=pod_id, pod_pk=len(supervisor._running) + 1)
        entry = SimpleNamespace(launch=launch, process=Process(**process), exit=None)
        supervisor._running[pod_id] = entry
        return entry.process

    return SimpleNamespace(pod=pod, failing=failing)


def a_round() -> tuple[float, float]:
    """One watch round; the times just before and after it."""
    before = time.time()
    supervisor.watch_once()
    return before, time.time()


def test_a_complete_round_vouches_from_its_start(agent):
    agent.pod("runs")
    agent.pod("ended", ended=time.time() - 5)
    before, after = a_round()
    assert before <= supervisor.pods_watched_at() <= after
    assert supervisor.running_pods() == ["runs"]
    assert supervisor.pods_watched_at() is not None
    before, after = a_round()  # an agent with no pod left vouches on too
    assert before <= supervisor.pods_watched_at() <= after


def test_a_round_that_could_not_report_an_exit_vouches_for_nothing_new(agent):
    a_round()
    first = supervisor.pods_watched_at()
    agent.pod("ended", ended=time.time())
    agent.failing.add("ended")
    a_round()
    assert supervisor.pods_watched_at() == first
    agent.failing.clear()  # the database is back: the exit is reported, the round complete
    before, _ = a_round()
    assert supervisor.pods_watched_at() >= before and not supervisor.running_pods()


def test_a_pod_whose_shim_says_it_ended_bounds_the_round_until_its_exit_is_read(agent):
    ending = time.time() - 0.5
    process = agent.pod("ending", ending=ending)  # exit.json is being written
    a_round()
    assert supervisor.pods_watched_at() == ending
    process.ended = ending + 0.01  # written: the next round reports it
    before, _ = a_round()
    assert supervisor.pods_watched_at() >= before and not supervisor.running_pods()


def test_a_round_vouches_no_further_than_a_start_under_way(agent):
    began = time.time() - 2
    supervisor._starts_began["starting"] = began  # its process may be running already
    a_round()
    assert supervisor.pods_watched_at() == began


def test_a_restarted_agent_vouches_for_nothing_until_it_has_re_adopted_its_pods(agent, monkeypatch):
    supervisor._watched["adopted"] = False
    a_round()
    assert supervisor.pods_watched_at() is None
    monkeypatch.setattr(
        services,
        "agent_work",
        lambda **kwargs: services.AgentWork(queued=(), claimed={"left": "running"}),
    )
    monkeypatch.setattr(supervisor, "state_root", lambda: supervisor.Path("/nonexistent"))

    def fails(pod_id, claim):
        raise OSError("the state directory cannot be read")

    monkeypatch.setattr(supervisor, "_adopt", fails)
    supervisor.reconcile_once(starts=False)
    a_round()
    assert supervisor.pods_watched_at() is None  # the pod left behind is not looked at yet
    monkeypatch.setattr(supervisor, "_adopt", lambda pod_id, claim: agent.pod(pod_id))
    supervisor.reconcile_once(starts=False)
    before, after = a_round()
    assert before <= supervisor.pods_watched_at() <= after
    assert supervisor.running_pods() == ["left"]
