"""The trace simulator: a trace replayed in virtual time through the same scheduling core the
live tick uses (`apps.scheduler.engine.plan`), one run per policy, side by side.

Pure, like the cores it drives: no Django but the management command that wraps it
(`manage.py simulate`, docs/simulator.md). The parts:

- `trace`: the jobs and nodes of a trace (the openb lists of Alibaba's GPU trace, or the
  simulator's own CSV);
- `cluster`: engine nodes and quotas, from a node list or a cluster file, and which quota
  each job belongs to;
- `policy`: the policies compared (victim order, placement, checkpoints, minimum run time);
- `sim`: the two modes, replay and fill, in virtual time;
- `summary`: the JSON figures and CSV series; `report`: the HTML report.
"""

from __future__ import annotations

from apps.simulator.cluster import Cluster, ClusterError, made_up_cluster, read_cluster_file
from apps.simulator.policy import (
    DEFAULTS,
    Policy,
    PolicyError,
    check_policies,
    parse_policies,
)
from apps.simulator.sim import Result, Settings, inflate, simulate
from apps.simulator.summary import policy_summary, run_summary, write_csv
from apps.simulator.trace import TraceError, TraceJob, TraceNode, read_jobs, read_nodes

__all__ = [
    "DEFAULTS",
    "Cluster",
    "ClusterError",
    "Policy",
    "PolicyError",
    "Result",
    "Settings",
    "TraceError",
    "TraceJob",
    "TraceNode",
    "check_policies",
    "inflate",
    "made_up_cluster",
    "parse_policies",
    "policy_summary",
    "read_cluster_file",
    "read_jobs",
    "read_nodes",
    "run_summary",
    "simulate",
    "write_csv",
]
