"""The scheduling-quality figures of docs/simulator.md ("Results on the openb trace"), from
one command, on the public openb traces (alibaba/clusterdata, cluster-trace-gpu-v2023):

    python benchmarks/simulator_goals.py --traces DIR [--fgd-seeds 1-40] \
        [--victim-speedups 1000] [--victim-checkpoints 61,127,181,307] \
        [--victim-ticks 30] [--victim-placement best_fit] [--victim-workload-hours 0] \
        [--jobs 2]

DIR holds openb_pod_list_default.csv and openb_node_list_gpu_node.csv. Two parts (give
`--fgd-seeds 0` or `--victim-speedups 0` to skip one):

- FGD: fill to 130% of the GPUs, arrivals shuffled, one run of `fgd` per seed: the mean
  GPU allocation, its spread and standard error, beside the FGD artifact's mean of 10 seeds
  (ATC'23: 95.39%, 286 GPUs left).
- Victim order: replays on each third of the node list (the data rows numbered K mod 3,
  counting from 1: K = 0, 1, 2), four quotas by hash, BE pods borrowing Only Idle, a plan
  every 30 s (or every --victim-ticks seconds, each a run of its own), at each speedup and
  checkpoint interval: GPU-hours lost and delays under least lost work (`ours`) against
  Kueue's order (`kueue`); the goal is 30% fewer GPU-hours at equal or better delay.
  A replay's delay percentiles move by several percent, either way, when the plan's tick
  moves by a second (the bursts start on other instants); several ticks show how much of
  a difference is the order and how much the phase. The last lines count the runs that
  meet each part of the goal. Both orders place pods by best fit, the product's rule, or
  by --victim-placement (e.g. fgd); with fgd, --victim-workload-hours H takes FGD's workload
  from the last H hours' arrivals, as the live scheduler does (0: the whole trace's mix).

Runs are independent and go to --jobs processes; each replay at 1,000× takes about 10 s here.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps.simulator import (  # noqa: E402
    Settings,
    made_up_cluster,
    parse_policies,
    policy_summary,
    read_jobs,
    read_nodes,
    simulate,
)

PODS = "openb_pod_list_default.csv"
NODES = "openb_node_list_gpu_node.csv"
ARTIFACT_FGD = 0.9539  # FGD's artifact, mean of 10 seeds at 130% arrived
THIRDS = (0, 1, 2)


def _numbers(text: str) -> list[int]:
    """An option's list of whole numbers: "1-40" or "61,127" or "0" (none)."""
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        try:
            out += range(int(low), int(high or low) + 1)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected whole numbers ≥ 0, as 5, 1-40 or 61,127"
            ) from None
    return [n for n in out if n > 0]


def fgd_run(traces: str, seed: int) -> dict[str, Any]:
    jobs, nodes = read_jobs(Path(traces) / PODS), read_nodes(Path(traces) / NODES)
    settings = Settings(mode="fill", seed=seed, shuffle=True)
    result = simulate(jobs, made_up_cluster(nodes), parse_policies("fgd")[0], settings)
    return {"seed": seed, **policy_summary(result)}


def victim_run(
    traces: str, third: int, speedup: int, interval: int, tick: int, policy: str
) -> dict[str, Any]:
    jobs, nodes = read_jobs(Path(traces) / PODS), read_nodes(Path(traces) / NODES)
    settings = Settings(
        mode="replay",
        seed=42,
        idle_modes={"LS": "off", "BE": "only_idle"},
        checkpoint_interval=float(interval),
        tick=float(tick),
        speedup=float(speedup),
    )
    # the data rows numbered K mod 3 from 1, as `awk 'NR==1 || (NR-1)%3==K'` keeps them
    cluster = made_up_cluster(nodes[(third - 1) % 3 :: 3], quotas=4)
    result = simulate(jobs, cluster, parse_policies(policy)[0], settings)
    return {
        "third": third,
        "speedup": speedup,
        "interval": interval,
        "tick": tick,
        **policy_summary(result),
    }


def fgd_table(runs: list[dict[str, Any]]) -> None:
    ratios = [r["gpu_allocation_ratio"] * 100 for r in sorted(runs, key=lambda r: r["seed"])]
    left = statistics.mean(r["unallocated_gpus"] for r in runs)
    print(f"\nFGD, fill to 130%, shuffled, {len(runs)} seeds")
    print("  per seed: " + " ".join(f"{x:.2f}" for x in ratios))
    mean = statistics.mean(ratios)
    if len(ratios) > 1:
        sd = statistics.stdev(ratios)
        print(
            f"  mean {mean:.3f}% ({left:.0f} GPUs left unallocated)   SD per seed {sd:.3f}   "
            f"SE of the mean {sd / math.sqrt(len(ratios)):.3f}   "
            f"SE of a 10-seed mean {sd / math.sqrt(10):.3f}"
        )
        for start in range(0, len(ratios) - 9, 10):
            window = statistics.mean(ratios[start : start + 10])
            print(f"  seeds {start + 1}–{start + 10}: {window:.3f}%")
    else:
        print(f"  {mean:.3f}% ({left:.0f} GPUs left unallocated)")
    artifact = ARTIFACT_FGD * 100
    print(f"  FGD artifact: {artifact:.2f}% (286 GPUs left); difference {mean - artifact:+.3f}")


def victim_table(runs: list[dict[str, Any]]) -> None:
    by: dict[tuple[int, int, int, int], dict[str, dict]] = {}
    for r in runs:
        by.setdefault((r["speedup"], r["interval"], r["third"], r["tick"]), {})[r["policy"]] = r
    placement = runs[0]["placement"] if runs else ""
    hours = runs[0]["workload_hours"] if runs else None
    if hours:
        placement += f" against the last {hours:g} h of arrivals"
    print(f"\nVictim order, ours vs kueue, {placement} (delay changes: ours ÷ kueue − 1)")
    print(
        "  speedup  saves every  K  tick   GPU-h lost ours / kueue   less lost   "
        "delay p50 / p90 / p99        LS p90 ours / kueue   BE p90      mean delay"
    )
    less_lost, p90, mean, ls = [], [], [], []
    for (speedup, interval, third, tick), pair in sorted(by.items()):
        ours, kueue = pair["ours"], pair["kueue"]
        less = (
            1 - ours["lost_gpu_hours"] / kueue["lost_gpu_hours"] if kueue["lost_gpu_hours"] else 0
        )
        less_lost.append(less)
        d_o, d_k = ours["delay_seconds"], kueue["delay_seconds"]
        p90.append(d_o.get("p90", 0) - d_k.get("p90", 0))
        mean.append(d_o.get("mean", 0) - d_k.get("mean", 0))
        ls_o, ls_k = (p["delay_seconds_by_class"].get("LS", {}) for p in (ours, kueue))
        be_o, be_k = (p["delay_seconds_by_class"].get("BE", {}) for p in (ours, kueue))
        ls.append(ls_o.get("p90", 0) - ls_k.get("p90", 0))
        delays = " / ".join(_change(k, d_o, d_k) for k in ("p50", "p90", "p99"))
        print(
            f"  {speedup:>7,}  {interval:>9} s  {third}  {tick:>3} s  "
            f"{ours['lost_gpu_hours']:6.2f} / {kueue['lost_gpu_hours']:6.2f}          "
            f"{less * 100:4.0f}%      {delays:<26}   "
            f"{ls_o.get('p90', 0):5.0f} / {ls_k.get('p90', 0):5.0f} s       "
            f"{_change('p90', be_o, be_k):>7}    "
            f"{_change('mean', d_o, d_k)}"
        )
    n = len(by)
    print(f"  30% or more less lost: {sum(x >= 0.3 for x in less_lost)} of {n} runs")
    if n:
        print(
            f"  delay equal or better (ours ≤ kueue): p90 in {sum(x <= 0 for x in p90)}, "
            f"mean in {sum(x <= 0 for x in mean)}, LS p90 in {sum(x <= 0 for x in ls)} "
            f"of {n} runs"
        )


def _change(key: str, ours: dict[str, float], kueue: dict[str, float]) -> str:
    """ours ÷ kueue − 1 as a percentage; — where a figure is missing or kueue's is zero."""
    if key not in ours or not kueue.get(key):
        return "—"
    return f"{(ours[key] / kueue[key] - 1) * 100:+.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", required=True, help=f"folder with {PODS} and {NODES}")
    parser.add_argument("--fgd-seeds", default="1-10", type=_numbers, help="e.g. 1-40; 0: skip")
    parser.add_argument(
        "--victim-speedups", default="1000", type=_numbers, help="e.g. 1000,2000; 0: skip"
    )
    parser.add_argument("--victim-checkpoints", default="61,127,181,307", type=_numbers)
    parser.add_argument(
        "--victim-ticks", default="30", type=_numbers, help="plan intervals, e.g. 25,29,30,31,35"
    )
    parser.add_argument(
        "--victim-placement",
        default="best_fit",
        choices=("best_fit", "fgd", "worst_fit", "random"),
        help="both orders' placement",
    )
    parser.add_argument(
        "--victim-workload-hours",
        type=float,
        default=0.0,
        metavar="H",
        help="with --victim-placement fgd: its workload from the last H hours' arrivals",
    )
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    args = parser.parse_args()
    hours = args.victim_workload_hours
    if hours and args.victim_placement != "fgd":
        parser.error("--victim-workload-hours needs --victim-placement fgd")
    if not (math.isfinite(hours) and hours >= 0):
        parser.error("--victim-workload-hours: a finite number ≥ 0")
    window = f"+workload_hours={hours:g}" if hours else ""
    for name in (PODS, NODES):
        if not (Path(args.traces) / name).is_file():
            parser.error(f"--traces {args.traces}: no {name} there")
    seeds = args.fgd_seeds
    victim = [
        (third, speedup, interval, tick, policy)
        for speedup in args.victim_speedups
        for interval in args.victim_checkpoints
        for tick in args.victim_ticks
        for third in THIRDS
        for policy in (
            f"ours+placement={args.victim_placement}{window}+name=ours",
            f"kueue+placement={args.victim_placement}{window}+name=kueue",
        )
    ]
    started = time.perf_counter()
    # spawn, not fork: a process with threads (a test's, a progress bar's) may deadlock a
    # forked child
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, args.jobs), mp_context=spawn) as pool:
        fgd = [pool.submit(fgd_run, args.traces, seed) for seed in seeds]
        vo = [pool.submit(victim_run, args.traces, *task) for task in victim]
        total, done = len(fgd) + len(vo), 0
        for future in [*fgd, *vo]:
            future.result()
            done += 1
            print(
                f"\r  {done}/{total} runs, {time.perf_counter() - started:,.0f} s",
                end="",
                flush=True,
            )
    print()
    if fgd:
        fgd_table([f.result() for f in fgd])
    if vo:
        victim_table([f.result() for f in vo])
    print(f"\n{time.perf_counter() - started:,.0f} s wall, {args.jobs} processes")


if __name__ == "__main__":
    main()
