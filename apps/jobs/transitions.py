"""Which job status may follow which: the one table, and the check every status write makes.

No Django: the services (`apps.jobs.services.jobs_transition_bulk`, the only writer of a
job's status), the simulator and the pure cores all ask here. Statuses are the DLC names as
plain strings (`apps.jobs.models.JobStatus` members are equal to them).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

CREATING = "Creating"
QUEUING = "Queuing"
BIDDING = "Bidding"
ENV_PREPARING = "EnvPreparing"
RUNNING = "Running"
RESTARTING = "Restarting"
STOPPING = "Stopping"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
STOPPED = "Stopped"

FINISHED = frozenset({SUCCEEDED, FAILED, STOPPED})

# A step outside this table is a bug or a race. Finished statuses have no entry: nothing
# follows them. SanityChecking is accepted by the enum and never produced, so it is neither
# a source nor a target.
ALLOWED: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        CREATING: frozenset({QUEUING, BIDDING, STOPPED, FAILED}),
        QUEUING: frozenset({ENV_PREPARING, RUNNING, STOPPED, FAILED}),
        BIDDING: frozenset({ENV_PREPARING, RUNNING, STOPPED, FAILED}),
        ENV_PREPARING: frozenset(
            {
                RUNNING,
                STOPPING,
                STOPPED,
                FAILED,
                QUEUING,
                BIDDING,
                RESTARTING,
                SUCCEEDED,
            }
        ),
        RUNNING: frozenset({SUCCEEDED, FAILED, STOPPING, STOPPED, QUEUING, BIDDING, RESTARTING}),
        RESTARTING: frozenset(
            {QUEUING, BIDDING, ENV_PREPARING, RUNNING, STOPPING, STOPPED, FAILED}
        ),
        STOPPING: frozenset({STOPPED, FAILED, SUCCEEDED}),
    }
)


class IllegalTransition(Exception):
    """A step the table does not allow."""

    def __init__(self, current: str, target: str) -> None:
        super().__init__(f"a {current} job cannot become {target}")
        self.current = current
        self.target = target


def transition_allowed(current: str, target: str) -> bool:
    """May a job in `current` become `target`?"""
    return target in ALLOWED.get(current, ())


def transition_check(current: str, *path: str) -> None:
    """Raise IllegalTransition for the first step of current → path[0] → path[1] → … that
    the table does not allow (the market starts a job Bidding → EnvPreparing → Running at
    once)."""
    for target in path:
        if not transition_allowed(current, target):
            raise IllegalTransition(current, target)
        current = target
