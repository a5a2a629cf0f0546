"""benchmarks/simulator_goals.py, the script that measures the docs' scheduling-quality
figures, on a tiny trace in the openb format: its tables come out, and the FGD figures are
the simulator's own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from apps.simulator import (
    Settings,
    made_up_cluster,
    parse_policies,
    policy_summary,
    read_jobs,
    read_nodes,
)
from apps.simulator import simulate as run

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "simulator_goals.py"


def load(monkeypatch):
    """The script as a module its worker processes (spawned) can import by name."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("simulator_goals", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "simulator_goals", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def traces(tmp_path):
    nodes = ["sn,cpu_milli,memory_mib,gpu,model"]
    nodes += [f"openb-node-{i:04d},32000,131072,{2 if i % 2 else 4},V100" for i in range(9)]
    (tmp_path / "openb_node_list_gpu_node.csv").write_text("\n".join(nodes) + "\n")
    pods = [
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time"
    ]
    for i in range(60):
        qos = "BE" if i % 3 else "LS"
        gpu, milli = (1, 500) if i % 4 == 0 else (1 + i % 2, 1000)
        start = i * 40_000
        pods.append(
            f"openb-pod-{i:04d},{6000 + i % 5 * 5000},8192,{gpu},{milli},,{qos},Succeeded,"
            f"{start},{start + 900_000},{start}"
        )
    (tmp_path / "openb_pod_list_default.csv").write_text("\n".join(pods) + "\n")
    return tmp_path


def test_it_prints_both_tables(traces, monkeypatch, capsys):
    goals = load(monkeypatch)
    argv = [str(SCRIPT), "--traces", str(traces), "--fgd-seeds", "1-2"]
    argv += ["--victim-checkpoints", "61", "--victim-ticks", "30,31", "--jobs", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    goals.main()
    out = capsys.readouterr().out
    assert "FGD, fill to 130%, shuffled, 2 seeds" in out
    assert "FGD artifact: 95.39%" in out
    rows = [line for line in out.splitlines() if line.strip().startswith("1,000")]
    # one row per third and tick
    assert [tuple(row.split()[3:5]) for row in rows] == [
        (k, t) for k in ("0", "1", "2") for t in ("30", "31")
    ]
    assert rows[0].split()[6:9] != rows[1].split()[6:9]  # the tick is the run's own
    assert "30% or more less lost:" in out and "of 6 runs" in out
    assert "delay equal or better (ours ≤ kueue): p90 in " in out
    assert "Victim order, ours vs kueue, best_fit" in out  # the product's placement
    # the per-seed figures are the simulator's own for that seed
    jobs = read_jobs(traces / "openb_pod_list_default.csv")
    nodes = read_nodes(traces / "openb_node_list_gpu_node.csv")
    direct = run(
        jobs,
        made_up_cluster(nodes),
        parse_policies("fgd")[0],
        Settings(mode="fill", seed=2, shuffle=True),
    )
    shown = out.split("per seed: ")[1].split()[:2]
    assert shown[1] == f"{policy_summary(direct)['gpu_allocation_ratio'] * 100:.2f}"


def test_both_orders_take_the_placement_asked_for(traces, monkeypatch, capsys):
    goals = load(monkeypatch)
    tables = {}
    for placement in ("best_fit", "fgd"):
        argv = [str(SCRIPT), "--traces", str(traces), "--fgd-seeds", "0"]
        argv += ["--victim-checkpoints", "61", "--victim-placement", placement, "--jobs", "1"]
        monkeypatch.setattr(sys, "argv", argv)
        goals.main()
        out = capsys.readouterr().out
        assert f"Victim order, ours vs kueue, {placement} " in out
        tables[placement] = [line for line in out.splitlines() if line.strip().startswith("1,000")]
    assert tables["best_fit"] != tables["fgd"]
    argv += ["--victim-workload-hours", "168"]
    monkeypatch.setattr(sys, "argv", argv)
    goals.main()
    out = capsys.readouterr().out
    assert "Victim order, ours vs kueue, fgd against the last 168 h of arrivals " in out
    window = [line for line in out.splitlines() if line.strip().startswith("1,000")]
    assert window != tables["fgd"]  # another workload, other placements


def test_it_refuses_a_folder_without_the_traces(tmp_path, monkeypatch, capsys):
    goals = load(monkeypatch)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--traces", str(tmp_path)])
    with pytest.raises(SystemExit) as stop:
        goals.main()
    assert stop.value.code == 2
    assert "no openb_pod_list_default.csv there" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option",
    [
        "--fgd-seeds=abc",
        "--victim-speedups=-5",
        "--jobs=x",
        "--victim-placement=tight",
        "--victim-workload-hours=a week",
    ],
)
def test_it_refuses_bad_options(traces, option, monkeypatch, capsys):
    goals = load(monkeypatch)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--traces", str(traces), option])
    with pytest.raises(SystemExit) as stop:
        goals.main()
    assert stop.value.code == 2
    assert f"argument {option.split('=')[0]}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--victim-workload-hours=24"], "--victim-workload-hours needs --victim-placement fgd"),
        (
            ["--victim-placement=fgd", "--victim-workload-hours=inf"],
            "--victim-workload-hours: a finite number ≥ 0",
        ),
    ],
)
def test_it_refuses_a_workload_window_it_could_not_use(traces, options, says, monkeypatch, capsys):
    goals = load(monkeypatch)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--traces", str(traces), *options])
    with pytest.raises(SystemExit) as stop:
        goals.main()
    assert stop.value.code == 2
    assert says in capsys.readouterr().err
