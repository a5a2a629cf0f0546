"""Write the sample trace beside this file: sample_pods.csv and sample_nodes.csv.

A small made-up cluster (20 nodes, 128 GPUs) and a day of 600 jobs in the simulator's own
CSV format (docs/simulator.md): mostly one-pod jobs, some gangs, some asking for part of a
GPU, latency-sensitive (LS) and best-effort (BE) classes, arriving in bursts so that the
cluster fills up and borrowers get preempted. Deterministic: the same seed writes the same
files.

    python examples/traces/make_sample.py [--seed 7] [--jobs 600]
"""

from __future__ import annotations

import argparse
import csv
import math
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODES = [("gpu8-", 12, 96, 768, 8, "A100"), ("gpu4-", 8, 48, 384, 4, "V100")]
DAY = 24 * 3600


def jobs(rng: random.Random, n: int) -> list[dict[str, object]]:
    out = []
    for i in range(n):
        # two busy hours a day: arrivals bunch up there
        hour = rng.choice([9, 10, 14, 15]) if rng.random() < 0.6 else rng.uniform(0, 24)
        submit = int(hour * 3600 + rng.uniform(0, 3600)) % DAY
        r = rng.random()
        if r < 0.3:
            gpu, pods = rng.choice(["0.25", "0.5"]), 1
        elif r < 0.8:
            gpu, pods = "1", 1
        elif r < 0.95:
            gpu, pods = rng.choice(["2", "4"]), 1
        else:
            gpu, pods = "8", rng.choice([2, 4])
        qos = "BE" if rng.random() < 0.45 else "LS"
        gpus = max(1, math.ceil(float(gpu)))
        out.append(
            {
                "name": f"job-{i:04d}",
                "submit_time": submit,
                "duration": int(min(12 * 3600, rng.lognormvariate(8.2, 1.0))),
                "pods": pods,
                "gpu": gpu,
                "cpu": 6 * gpus,
                "memory_gib": 48 * gpus,
                "qos": qos,
                "priority": 1 if qos == "BE" else rng.choice([1, 1, 5]),
            }
        )
    return sorted(out, key=lambda j: (j["submit_time"], j["name"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=600)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = jobs(rng, args.jobs)
    with (HERE / "sample_pods.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with (HERE / "sample_nodes.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "cpu", "memory_gib", "gpu", "model", "count"])
        for prefix, count, cpu, mem, gpu, model in NODES:
            w.writerow([prefix, cpu, mem, gpu, model, count])
    print(f"wrote {len(rows)} jobs and {sum(n[1] for n in NODES)} nodes to {HERE}")


if __name__ == "__main__":
    main()
