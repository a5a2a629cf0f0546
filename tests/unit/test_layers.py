"""The apps form layers: each imports only the apps below it, so no two apps import each other
and `core` imports none (docs/architecture.md, "Layers"). Every import counts, at the top of
a module or inside a function: a function-level import is no way around the order."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

APPS = Path(__file__).resolve().parents[2] / "apps"

# Bottom to top: an app may import the apps before it in this list, never one after it.
LAYERS = (
    "core",  # errors, HTTP, Redis, db helpers, throttle, the pure market core (pricing)
    "workspaces",  # users' workspaces, members, access keys
    "cluster",  # instance types, pools, nodes, quotas, the market's parameters
    "jobs",  # a job and its pods: spec, submission, status writes, execution hand-off
    "scheduler",  # quota jobs: the engine and its tick; the quota page
    "simulator",  # the engine replayed on traces
    "market",  # public and spot jobs: prices, bids, reclaim
    "billing",  # per-minute bills
    "agent",  # node agents: pods as processes, logs, checkpoints
    "console",  # the job pages: a job's whole path
    "whatif",  # the simulator on the cluster's own jobs and a changed cluster file
    "api",  # the PAI-DLC OpenAPI
    "ops",  # the platform as a whole: cluster file, demo, health, fault harness
)


def _imports(root: Path = APPS) -> dict[tuple[str, str], list[str]]:
    """(importing app, imported app) → the places, over every module of every app."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if len(relative.parts) < 2 or "migrations" in relative.parts:
            continue
        source = relative.parts[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] == "apps" and len(parts) > 1 and parts[1] != source:
                    edges[(source, parts[1])].append(f"apps/{relative}:{node.lineno}")
                    break
    return edges


EDGES = _imports()


def test_every_app_has_a_layer():
    present = {p.name for p in APPS.iterdir() if (p / "__init__.py").exists()}
    assert present <= set(LAYERS), present - set(LAYERS)


@pytest.mark.parametrize("app", LAYERS)
def test_it_imports_only_the_apps_below_it(app):
    below = set(LAYERS[: LAYERS.index(app)])
    upward = {
        imported: places
        for (source, imported), places in EDGES.items()
        if source == app and imported not in below
    }
    assert not upward, f"{app} imports apps above it: {upward}"


def test_core_imports_no_app():
    assert not [edge for edge in EDGES if edge[0] == "core"]


def test_no_two_apps_import_each_other():
    assert not [(a, b) for (a, b) in EDGES if (b, a) in EDGES]


def test_it_sees_an_import_inside_a_function(tmp_path):
    """The check can fail: an upward import hidden in a function is found."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "views.py").write_text(
        "from apps.core.errors import ApplicationError\n\n\n"
        "def page():\n    from apps.market.selectors import waiting_reasons\n"
    )
    assert _imports(tmp_path) == {
        ("jobs", "core"): ["apps/jobs/views.py:1"],
        ("jobs", "market"): ["apps/jobs/views.py:5"],
    }
