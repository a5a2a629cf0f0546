"""manage.py simulate: replay a trace through the scheduling core, one run per policy, and
write the figures (JSON, CSV) and the HTML report. Needs no database and no Redis."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.simulator import (
    DEFAULTS,
    ClusterError,
    PolicyError,
    Settings,
    TraceError,
    check_policies,
    made_up_cluster,
    parse_policies,
    read_cluster_file,
    read_jobs,
    read_nodes,
    run_summary,
    simulate,
    write_csv,
)
from apps.simulator.progress import Bar
from apps.simulator.report import render
from apps.simulator.spot import SpotSettings, spot_pool
from apps.simulator.trace import IDLE_MODES


class Command(BaseCommand):
    help = "Replay a trace in virtual time through the scheduler's engine and compare policies."
    requires_system_checks: list[str] = []  # no database, no broker: nothing to check

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--trace", required=True, help="jobs: an openb pod list or own CSV")
        parser.add_argument("--nodes", help="node list (openb, spot-GPU or own CSV)")
        parser.add_argument(
            "--cluster", help="cluster file (TOML) for quotas, and nodes if no --nodes"
        )
        parser.add_argument("--mode", choices=("replay", "fill"), default="replay")
        parser.add_argument(
            "--policies", help="comma-separated; default by mode (docs/simulator.md)"
        )
        parser.add_argument("--seed", type=int, default=42)
        parser.add_argument("--quota-rule", choices=("hash", "qos"), default="hash")
        parser.add_argument("--quotas", type=int, default=1, help="equal quotas without --cluster")
        parser.add_argument(
            "--idle-mode",
            action="append",
            default=[],
            metavar="CLASS=MODE",
            help="idle mode of a QoS class (default LS=off, BE=acceptable, others off)",
        )
        parser.add_argument("--queue-strategy", choices=("StrictFIFO", "BestEffortFIFO"))
        parser.add_argument("--checkpoint-interval", type=_finite, default=1800.0)
        parser.add_argument("--min-run", type=_finite, default=60.0)
        parser.add_argument("--requeue-backoff", type=_finite, default=10.0)
        parser.add_argument("--tick", type=_finite, default=0.0, help="plan at most every N s")
        parser.add_argument(
            "--speedup", type=_finite, default=1.0, help="replay: compress arrivals"
        )
        parser.add_argument(
            "--fill-to", type=_finite, default=1.3, help="fill: GPUs asked ÷ capacity"
        )
        parser.add_argument(
            "--shuffle", action="store_true", help="fill: shuffle arrivals (seeded)"
        )
        parser.add_argument("--batch", type=int, default=256, help="fill: arrivals per plan")
        parser.add_argument(
            "--spot",
            metavar="CLASSES",
            help="replay: QoS classes (comma-separated, e.g. BE) whose jobs bid on the public "
            "pool of --spot-nodes instead of running on a quota",
        )
        parser.add_argument(
            "--spot-nodes", help="the public pool for --spot: a node list (e.g. the spot trace's)"
        )
        parser.add_argument(
            "--spot-step", type=_finite, default=60.0, help="seconds between market steps"
        )
        parser.add_argument(
            "--bid-range",
            default="0.3,1.0",
            metavar="LOW,HIGH",
            help="spot bids as shares of the original price, drawn per job from this range",
        )
        parser.add_argument(
            "--gpu-hour-price",
            default="10",
            help="original price of an instance: this many CNY per GPU-hour (+0.1 per vCPU-hour)",
        )
        parser.add_argument(
            "--no-gpu-sharing",
            dest="gpu_sharing",
            action="store_false",
            help="give each fractional-GPU pod a whole GPU instead of sharing one",
        )
        parser.add_argument(
            "--workload-hours",
            type=_finite,
            default=0.0,
            metavar="H",
            help="replay, fgd: the workload FGD keeps room for is the mix of the pods that "
            "arrived in the last H hours of the trace, as the live scheduler reads the jobs "
            "submitted lately (SCHEDULER_WORKLOAD_HOURS); 0 (default): the whole trace's mix",
        )
        parser.add_argument("--json", help="write the summary here")
        parser.add_argument("--csv-dir", help="write series.csv and jobs.csv here")
        parser.add_argument("--html", help="write the report here (default: beside --json)")
        parser.add_argument("--progress", action="store_true", default=None)
        parser.add_argument("--no-progress", dest="progress", action="store_false")

    def handle(self, *args: Any, **o: Any) -> None:
        try:
            settings, policies = (
                self._settings(o),
                parse_policies(o["policies"] or DEFAULTS[o["mode"]]),
            )
            check_policies(policies, settings.mode)
            traces = read_jobs(o["trace"])
            nodes = read_nodes(o["nodes"]) if o["nodes"] else None
            strategy = o["queue_strategy"] or "BestEffortFIFO"
            if o["cluster"]:
                cluster = read_cluster_file(o["cluster"], nodes=nodes)
            elif nodes is not None:
                classes = sorted({t.qos for t in traces})
                quotas: int | list[str] = classes if o["quota_rule"] == "qos" else o["quotas"]
                cluster = made_up_cluster(nodes, quotas=quotas, strategy=strategy)
            else:
                raise CommandError("give --nodes, or --cluster with dedicated pools")
        except (TraceError, ClusterError, PolicyError, ValueError) as e:
            raise CommandError(str(e)) from e
        if not traces:
            raise CommandError(f"{o['trace']}: no jobs")
        _check_outputs(o)
        show = sys.stderr.isatty() if o["progress"] is None else o["progress"]
        results = []
        for policy in policies:
            bar = Bar(f"{settings.mode} {policy.name}", self._raw) if show else None
            try:
                results.append(simulate(traces, cluster, policy, settings, progress=bar))
            except ClusterError as e:
                raise CommandError(str(e)) from e
            finally:
                if bar is not None:
                    bar.close()
        summary = run_summary(
            results=results,
            traces=traces,
            settings=settings,
            sources={"trace": o["trace"], "nodes": o["nodes"], "cluster": o["cluster"]},
            nodes=len(cluster.nodes),
            gpus=cluster.gpus,
        )
        self._print(summary)
        self._write(summary, results, o)

    def _raw(self, text: str) -> None:
        self.stderr.write(text, ending="")
        self.stderr.flush()

    def _settings(self, o: dict[str, Any]) -> Settings:
        idle = {"LS": "off", "BE": "acceptable"}
        for item in o["idle_mode"]:
            cls, sep, mode = item.partition("=")
            if not sep or mode not in IDLE_MODES:
                raise CommandError(f"--idle-mode {item}: expected CLASS=off|acceptable|only_idle")
            idle[cls] = mode
        for key in ("checkpoint_interval", "min_run", "requeue_backoff", "tick"):
            if o[key] < 0:
                raise CommandError(f"--{key.replace('_', '-')} must be ≥ 0")
        if o["speedup"] <= 0 or o["fill_to"] <= 0 or o["batch"] < 1:
            raise CommandError("--speedup and --fill-to must be > 0, --batch ≥ 1")
        if o["workload_hours"] < 0:
            raise CommandError("--workload-hours must be ≥ 0")
        if o["workload_hours"] and o["mode"] != "replay":
            raise CommandError(
                "--workload-hours is for --mode replay: fill mode's arrivals have no times"
            )
        if o["fill_to"] > MAX_FILL:
            raise CommandError(
                f"--fill-to must be at most {MAX_FILL:g} (times the cluster's GPUs: the trace "
                "is copied until its jobs ask for that much)"
            )
        return Settings(
            mode=o["mode"],
            seed=o["seed"],
            quota_rule=o["quota_rule"],
            idle_modes=idle,  # type: ignore[arg-type]
            checkpoint_interval=o["checkpoint_interval"],
            min_run_seconds=o["min_run"],
            requeue_backoff=o["requeue_backoff"],
            tick=o["tick"],
            speedup=o["speedup"],
            fill_to=o["fill_to"],
            shuffle=o["shuffle"],
            batch=o["batch"],
            spot=self._spot(o),
            gpu_sharing=o["gpu_sharing"],
            workload_hours=o["workload_hours"],
        )

    def _spot(self, o: dict[str, Any]) -> SpotSettings | None:
        if not o["spot"]:
            if o["spot_nodes"]:
                raise CommandError("--spot-nodes needs --spot CLASSES (which jobs bid)")
            return None
        if not o["spot_nodes"]:
            raise CommandError("--spot needs --spot-nodes (the public pool)")
        if o["mode"] != "replay":
            raise CommandError("--spot is for replay mode")
        if o["spot_step"] < 1:  # steps of a microsecond over a trace of weeks never end
            raise CommandError("--spot-step must be at least 1 s")
        try:
            low, high = (float(x) for x in o["bid_range"].split(","))
            price = Decimal(o["gpu_hour_price"])
        except (ValueError, InvalidOperation):
            raise CommandError("--bid-range LOW,HIGH and --gpu-hour-price take numbers") from None
        if not 0 < low <= high <= 1:
            raise CommandError("--bid-range: 0 < LOW ≤ HIGH ≤ 1 (shares of the original price)")
        if not price.is_finite() or price <= 0:
            raise CommandError("--gpu-hour-price must be > 0")
        pool = spot_pool(read_nodes(o["spot_nodes"]), gpu_hour=price)
        classes = frozenset(c.strip() for c in o["spot"].split(",") if c.strip())
        return SpotSettings(pool, classes, o["spot_step"], (low, high))

    def _print(self, summary: dict[str, Any]) -> None:
        self.stdout.write(
            f"{summary['mode']}: {summary['jobs']:,} jobs, {summary['nodes']:,} nodes, "
            f"{summary['capacity_gpus']:,} GPUs; {summary['fractional_pods']:,} "
            "fractional-GPU pods "
            + ("sharing GPUs" if summary["gpu_sharing"] else "given a whole GPU")
        )
        for p in summary["policies"]:
            line = f"  {p['policy']:<16} GPU allocation {p['gpu_allocation_ratio']:.2%}"
            if summary["mode"] == "fill":
                marks = ", ".join(
                    f"{float(k):.0%} arrived: {v:.2%}" if v is not None else f"{float(k):.0%}: –"
                    for k, v in p["allocation_at_arrived"].items()
                )
                line += f" ({marks}), {p['pods_unplaced']:,} pods unplaced"
            else:
                d = p["delay_seconds"]
                line += (
                    f", delay p50/p90/p99 {d['p50']}/{d['p90']}/{d['p99']} s, "
                    f"{p['preemptions']:,} preemptions, {p['lost_gpu_hours']:,.2f} GPU-h lost"
                )
            line += f", {p['wall_seconds']:.2f} s"
            self.stdout.write(line)
            if "spot" in p:
                sp, d = p["spot"], p["spot"]["delay_seconds"]
                self.stdout.write(
                    f"  {'':<16} spot: {sp['started']:,}/{sp['jobs']:,} jobs started, delay "
                    f"p50/p90/p99 {d['p50']}/{d['p90']}/{d['p99']} s, {sp['reclaims']:,} "
                    f"reclaims, {sp['lost_gpu_hours']:,.2f} GPU-h lost, ¥{sp['cost_cny']}"
                )

    def _write(self, summary: dict[str, Any], results: list, o: dict[str, Any]) -> None:
        try:
            self._write_files(summary, results, o)
        except OSError as e:  # the disk filled up, say, after the checks before the run
            raise CommandError(f"{e.filename}: {e.strerror}") from e

    def _write_files(self, summary: dict[str, Any], results: list, o: dict[str, Any]) -> None:
        if o["json"]:
            Path(o["json"]).write_text(json.dumps(summary, indent=2) + "\n")
            self.stdout.write(f"summary: {o['json']}")
        if o["csv_dir"]:
            paths = write_csv(results, o["csv_dir"])
            self.stdout.write(f"series: {', '.join(str(p) for p in paths)}")
        html = _html_path(o)
        Path(html).write_text(render(summary, results))
        self.stdout.write(f"report: {html}")


MAX_FILL = 10.0


def _finite(text: str) -> float:
    """A number option: inf and nan are refused (a replay sped up nan times never ends)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def _html_path(o: dict[str, Any]) -> str:
    return o["html"] or (
        str(Path(o["json"]).with_suffix(".html")) if o["json"] else "simulation-report.html"
    )


def _check_outputs(o: dict[str, Any]) -> None:
    """Refuse, before a run that may take minutes, outputs it could not write at the end."""
    files = [("--json", o["json"]), ("--html", _html_path(o))]
    for option, name in files:
        if not name:
            continue
        path = Path(name)
        folder = path.parent
        if path.is_dir():
            raise CommandError(f"{option} {name}: is a folder, not a file")
        if not folder.is_dir():
            raise CommandError(f"{option} {name}: no such folder {folder}")
        if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise CommandError(f"{option} {name}: not writable")
    if o["csv_dir"]:
        folder = Path(o["csv_dir"])
        if folder.exists() and not folder.is_dir():
            raise CommandError(f"--csv-dir {folder}: is a file, not a folder")
        existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
        if existing is not None and not os.access(existing, os.W_OK):
            raise CommandError(f"--csv-dir {folder}: not writable")
