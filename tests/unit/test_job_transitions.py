"""The job-status transition table and its check (`apps.jobs.transitions`). Pure: no database."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apps.jobs import transitions as t
from apps.jobs.models import ACTIVE_STATUSES, FINISHED_STATUSES, PENDING_STATUSES, JobStatus
from apps.jobs.transitions import IllegalTransition, transition_allowed, transition_check

# The table as it stood in apps/jobs/services.py before it moved: written out again here so
# that a change to the rule is a change to this test too.
EXPECTED = {
    "Creating": {"Queuing", "Bidding", "Stopped", "Failed"},
    "Queuing": {"EnvPreparing", "Running", "Stopped", "Failed"},
    "Bidding": {"EnvPreparing", "Running", "Stopped", "Failed"},
    "EnvPreparing": {
        "Running",
        "Stopping",
        "Stopped",
        "Failed",
        "Queuing",
        "Bidding",
        "Restarting",
        "Succeeded",
    },
    "Running": {"Succeeded", "Failed", "Stopping", "Stopped", "Queuing", "Bidding", "Restarting"},
    "Restarting": {
        "Queuing",
        "Bidding",
        "EnvPreparing",
        "Running",
        "Stopping",
        "Stopped",
        "Failed",
    },
    "Stopping": {"Stopped", "Failed", "Succeeded"},
}
STATUSES = [s.value for s in JobStatus]
PAIRS = list(itertools.product(STATUSES, STATUSES))


@pytest.mark.parametrize(("current", "target"), PAIRS)
def test_it_allows_exactly_the_steps_in_the_table(current, target):
    expected = target in EXPECTED.get(current, set())
    assert transition_allowed(current, target) is expected
    if expected:
        transition_check(current, target)
    else:
        with pytest.raises(IllegalTransition, match=f"a {current} job cannot become {target}"):
            transition_check(current, target)


def test_it_names_only_real_statuses_and_agrees_with_the_models():
    named = set(t.ALLOWED) | set().union(*t.ALLOWED.values())
    assert named <= set(STATUSES)
    assert t.FINISHED == FINISHED_STATUSES
    # every status a job can hold without being finished has a way on
    assert set(t.ALLOWED) == (PENDING_STATUSES | ACTIVE_STATUSES)


def test_it_lets_nothing_follow_a_finished_status():
    for finished, target in itertools.product(sorted(t.FINISHED), STATUSES):
        assert not transition_allowed(finished, target)


def test_it_never_produces_sanity_checking_or_returns_to_creating():
    for current in STATUSES:
        assert not transition_allowed(current, JobStatus.SANITY_CHECKING)
        assert not transition_allowed(current, JobStatus.CREATING)


def test_it_checks_each_step_of_a_path():
    transition_check("Bidding", "EnvPreparing", "Running")  # the market's start at once
    with pytest.raises(IllegalTransition) as refused:
        transition_check("Bidding", "EnvPreparing", "Creating")
    assert (refused.value.current, refused.value.target) == ("EnvPreparing", "Creating")
    with pytest.raises(IllegalTransition, match="a Stopped job cannot become EnvPreparing"):
        transition_check("Stopped", "EnvPreparing", "Running")


def test_it_treats_an_unknown_status_as_having_no_way_on():
    assert not transition_allowed("Reserving", "Running")
    assert not transition_allowed("Running", "Reserving")


def test_it_imports_no_django():
    code = (
        "import sys; import apps.jobs.transitions; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'celery')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@st.composite
def walks(draw) -> list[str]:
    """A job's life: from Creating, any allowed steps, stopping anywhere."""
    path, current = [], t.CREATING
    for _ in range(draw(st.integers(0, 30))):
        following = sorted(t.ALLOWED.get(current, ()))
        if not following:
            break
        current = draw(st.sampled_from(following))
        path.append(current)
    return path


@given(walks())
def test_any_allowed_life_ends_finished_or_is_still_active(path):
    transition_check(t.CREATING, *path)
    end = path[-1] if path else t.CREATING
    if end in t.FINISHED:
        assert path.index(end) == len(path) - 1  # nothing after the first finished status
    else:
        assert end in t.ALLOWED  # still pending or active, with a way on
        assert t.ALLOWED[end] & t.FINISHED  # and a way to end from where it stands


@given(st.sampled_from(sorted(t.FINISHED)), st.lists(st.sampled_from(STATUSES), min_size=1))
def test_no_path_leaves_a_finished_status(finished, path):
    with pytest.raises(IllegalTransition):
        transition_check(finished, *path)
