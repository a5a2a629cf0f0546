"""manage.py simulate end to end on the sample trace in examples/traces: no database."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "traces"
ARGS = [
    "--trace",
    str(SAMPLE / "sample_pods.csv"),
    "--nodes",
    str(SAMPLE / "sample_nodes.csv"),
]


def simulate(*args: str) -> str:
    out = StringIO()
    call_command("simulate", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_it_replays_the_sample_and_writes_every_output(tmp_path):
    out = simulate(
        *ARGS,
        "--cluster",
        str(SAMPLE / "sample-cluster.toml"),
        "--json",
        str(tmp_path / "out.json"),
        "--csv-dir",
        str(tmp_path / "csv"),
    )
    summary = json.loads((tmp_path / "out.json").read_text())
    assert summary["mode"] == "replay" and summary["jobs"] == 600
    assert summary["gpu_sharing"] is True and summary["fractional_pods"] > 0
    assert summary["fractional_pods_rounded_up"] == 0
    names = [p["policy"] for p in summary["policies"]]
    assert names == ["ours", "kueue", "random-victims"]
    for p in summary["policies"]:
        assert 0 < p["gpu_allocation_ratio"] <= 1
        assert set(p["delay_seconds"]) >= {"p50", "p90", "p99"}
        assert {"preemptions", "lost_gpu_hours", "unallocated_gpus", "wall_seconds"} <= set(p)
        assert 0 <= p["fragmented_gpus"] <= p["unallocated_gpus"] + 1e-6
        assert set(p["delay_seconds_by_quota"]) <= {"team-a", "team-b", "research"}
    assert any(p["preemptions"] for p in summary["policies"])  # the sample is busy enough
    for p in summary["policies"]:
        assert f"{p['policy']}" in out and f"{p['gpu_allocation_ratio']:.2%}" in out
    assert f"report: {tmp_path / 'out.html'}" in out
    html = (tmp_path / "out.html").read_text()
    assert html.count("<svg") >= 6 and "Queueing delay" in html
    assert "<figcaption>Fragmentation over time</figcaption>" in html
    assert not re.search(r"""(src|href)=["']?https?:""", html)  # nothing fetched
    bars = html[html.index("<figcaption>Preemptions</figcaption>") :].split("</figure>")[0]
    for p in summary["policies"]:  # a count, not 12.00
        assert f">{p['preemptions']:,}</text>" in bars
    with (tmp_path / "csv" / "series.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["policy"] for r in rows} == set(names)
    assert all(0 <= float(r["gpu_allocation_ratio"]) <= 1 for r in rows)
    assert all(0 <= float(r["fragmented_gpus"]) <= summary["capacity_gpus"] for r in rows)
    assert any(float(r["fragmented_gpus"]) > 0 for r in rows)
    with (tmp_path / "csv" / "jobs.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 3 * 600


def test_it_fills_the_sample_and_prints_the_allocation(tmp_path):
    out = simulate(*ARGS, "--mode", "fill", "--json", str(tmp_path / "fill.json"))
    summary = json.loads((tmp_path / "fill.json").read_text())
    for p in summary["policies"]:
        at = p["allocation_at_arrived"]
        assert set(at) == {"1", "1.3"} and 0 < at["1"] <= at["1.3"] <= 1
        assert f"130% arrived: {at['1.3']:.2%}" in out
        assert p["pods_placed"] + p["pods_unplaced"] == p["pods_arrived"]
    html = (tmp_path / "fill.html").read_text()
    assert "<figcaption>Fragmentation as the trace arrives</figcaption>" in html


def test_it_gives_the_same_figures_for_the_same_seed(tmp_path):
    def figures(name: str) -> list[dict]:
        simulate(
            *ARGS,
            "--policies",
            "random-victims,random-fit",
            "--seed",
            "9",
            "--json",
            str(tmp_path / name),
        )
        policies = json.loads((tmp_path / name).read_text())["policies"]
        for p in policies:
            p.pop("wall_seconds"), p.pop("cpu_seconds")
        return policies

    assert figures("a.json") == figures("b.json")


def test_it_says_what_is_missing():
    with pytest.raises(CommandError, match="give --nodes"):
        simulate("--trace", str(SAMPLE / "sample_pods.csv"))
    with pytest.raises(CommandError, match="unknown policy"):
        simulate(*ARGS, "--policies", "fastest")


def test_it_runs_as_a_command_without_a_database(tmp_path):
    """As from a fresh clone: no SECRET_KEY, no DEBUG, no database, no broker."""
    env = {
        "PATH": "/usr/bin:/bin",
        "PAIWEB_VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",  # any use of it would fail
        "REDIS_URL": "redis://127.0.0.1:1/0",
    }
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "simulate",
            *ARGS,
            "--mode",
            "fill",
            "--html",
            str(tmp_path / "r.html"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "GPU allocation" in done.stdout and (tmp_path / "r.html").exists()


def test_it_shows_progress_on_stderr_when_asked(tmp_path):
    err = StringIO()
    call_command(
        "simulate",
        *ARGS,
        "--policies",
        "ours",
        "--progress",
        "--html",
        str(tmp_path / "r.html"),
        stdout=StringIO(),
        stderr=err,
    )
    assert "replay ours [" in err.getvalue() and "100%" in err.getvalue()


@pytest.mark.parametrize("sharing", [True, False])
def test_it_fills_an_openb_trace_sharing_gpus_or_rounding_up(tmp_path, sharing):
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
        "p0,4000,8192,1,500,,LS,Running,0,100,0\n"
        "p1,4000,8192,1,500,,BE,Running,1,100,1\n"
        "p2,4000,8192,2,1000,,LS,Running,2,100,2\n"
    )
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,3,T4\n")
    out = simulate(
        "--trace",
        str(pods),
        "--nodes",
        str(nodes),
        "--mode",
        "fill",
        "--fill-to",
        "1.0",
        "--policies",
        "ours",
        "--json",
        str(tmp_path / "o.json"),
        *([] if sharing else ["--no-gpu-sharing"]),
    )
    summary = json.loads((tmp_path / "o.json").read_text())
    assert summary["fractional_pods"] == 2 and summary["gpu_sharing"] is sharing
    (ours,) = summary["policies"]
    if sharing:  # the two half-GPU pods share one GPU; the 2-GPU pod takes the other two
        assert summary["fractional_pods_rounded_up"] == 0
        assert ours["allocation_at_arrived"] == {"1": 1.0}
        assert ours["gpu_occupied_ratio"] == 1.0 and ours["pods_unplaced"] == 0
        assert "2 fractional-GPU pods sharing GPUs" in out
    else:  # the two half-GPU pods take two GPUs; the 2-GPU pod finds one
        assert summary["fractional_pods_rounded_up"] == 2
        assert ours["allocation_at_arrived"] == {"1": pytest.approx(1 / 3, abs=1e-6)}
        assert ours["gpu_occupied_ratio"] == pytest.approx(2 / 3, abs=1e-6)
        assert ours["pods_unplaced"] == 1
        assert "2 fractional-GPU pods given a whole GPU" in out


def test_it_sends_a_class_to_the_spot_market(tmp_path):
    out = simulate(
        *ARGS,
        "--policies",
        "ours",
        "--spot",
        "BE",
        "--spot-nodes",
        str(SAMPLE / "sample_nodes.csv"),
        "--bid-range",
        "0.4,0.9",
        "--json",
        str(tmp_path / "out.json"),
    )
    spot = json.loads((tmp_path / "out.json").read_text())["policies"][0]["spot"]
    assert spot["jobs"] > 0 and spot["started"] > 0 and Decimal(spot["cost_cny"]) > 0
    assert set(spot["prices"]) == {"A100.8g96c", "V100.4g48c"}
    assert re.search(r"spot: [\d,]+/[\d,]+ jobs started", out)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--spot", "BE"], "--spot needs --spot-nodes"),
        (["--spot-nodes", "x.csv"], "--spot-nodes needs --spot"),
        (["--spot", "BE", "--spot-nodes", "x.csv", "--mode", "fill"], "--spot is for replay"),
        (["--spot", "BE", "--spot-nodes", "x.csv", "--bid-range", "0.9,0.2"], "--bid-range"),
        (["--spot", "BE", "--spot-nodes", "x.csv", "--gpu-hour-price", "-1"], "--gpu-hour"),
    ],
)
def test_it_refuses_spot_options_that_do_not_go_together(extra, message):
    with pytest.raises(CommandError, match=message):
        simulate(*ARGS, *extra)


def test_it_refuses_outputs_it_could_not_write_before_it_runs(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(
        "apps.simulator.management.commands.simulate.simulate",
        lambda *a, **k: ran.append(a),
    )
    missing = tmp_path / "no" / "out.json"
    with pytest.raises(CommandError, match=f"--json {missing}: no such folder {missing.parent}"):
        simulate(*ARGS, "--json", str(missing))
    with pytest.raises(CommandError, match="--html .*: no such folder"):
        simulate(*ARGS, "--html", str(tmp_path / "no" / "r.html"))
    with pytest.raises(CommandError, match="--html .*: no such folder"):  # beside --json
        simulate(*ARGS, "--json", str(tmp_path / "x.json"), "--html", str(missing))
    with pytest.raises(CommandError, match=f"--json {tmp_path}: is a folder, not a file"):
        simulate(*ARGS, "--json", str(tmp_path))
    (tmp_path / "file").write_text("")
    with pytest.raises(CommandError, match="--csv-dir .*file: is a file, not a folder"):
        simulate(*ARGS, "--html", str(tmp_path / "r.html"), "--csv-dir", str(tmp_path / "file"))
    assert not ran  # refused before any run
    assert not list(tmp_path.glob("*.html"))


def test_a_csv_folder_that_does_not_exist_yet_is_made(tmp_path):
    simulate(*ARGS, "--html", str(tmp_path / "r.html"), "--csv-dir", str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b" / "jobs.csv").exists()


def test_an_output_lost_during_the_run_is_an_error_naming_it(tmp_path, monkeypatch):
    from apps.simulator.management.commands import simulate as command

    real = command.simulate
    out = tmp_path / "out"
    out.mkdir()

    def run_then_lose_the_folder(*args, **kwargs):
        result = real(*args, **kwargs)
        shutil.rmtree(out, ignore_errors=True)
        return result

    monkeypatch.setattr(command, "simulate", run_then_lose_the_folder)
    with pytest.raises(CommandError, match=f"{out / 'r.json'}: No such file or directory"):
        simulate(*ARGS, "--json", str(out / "r.json"))


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--speedup", "nan"], "--speedup: not a finite number: 'nan'"),  # it never ended
        (["--tick", "inf"], "--tick: not a finite number: 'inf'"),
        (["--checkpoint-interval=-inf"], "--checkpoint-interval: not a finite number"),
        (["--min-run", "nan"], "--min-run: not a finite number"),
        (["--spot-step", "abc"], "--spot-step: not a number: 'abc'"),
        (["--mode", "fill", "--fill-to", "11"], "--fill-to must be at most 10"),  # memory
        (["--spot", "BE", "--spot-nodes", "x.csv", "--spot-step", "1e-6"], "at least 1 s"),
        (["--workload-hours", "-1"], "--workload-hours must be ≥ 0"),
        (["--workload-hours", "inf"], "--workload-hours: not a finite number"),
        (["--mode", "fill", "--workload-hours", "24"], "--workload-hours is for --mode replay"),
    ],
)
def test_it_refuses_numbers_a_run_cannot_use(extra, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        simulate(*ARGS, *extra)


def test_fgd_can_keep_room_for_the_last_hours_arrivals_as_the_live_tick_does(tmp_path):
    def run(*extra: str) -> dict:
        simulate(*ARGS, "--json", str(tmp_path / "r.json"), *extra)
        return json.loads((tmp_path / "r.json").read_text())

    both = run("--policies", "fgd,fgd+workload_hours=24+name=fgd-day")
    whole, day = both["policies"]
    assert (whole["workload_hours"], day["workload_hours"]) == (None, 24)
    # another workload, other placements: the sample's jobs wait differently
    assert whole["delay_seconds"] != day["delay_seconds"]
    # the run's default for every policy: the same figures as the policy's own key
    flag = run("--policies", "fgd", "--workload-hours", "24")
    assert flag["settings"]["workload_hours"] == 24
    assert flag["policies"][0]["delay_seconds"] == day["delay_seconds"]


def test_a_workload_window_needs_arrival_times():
    with pytest.raises(
        CommandError, match=r"fgd\+workload_hours=24: workload_hours is for replay mode"
    ):
        simulate(*ARGS, "--mode", "fill", "--policies", "fgd+workload_hours=24")
    with pytest.raises(CommandError, match="is not a number of hours"):
        simulate(*ARGS, "--policies", "fgd+workload_hours=week")
