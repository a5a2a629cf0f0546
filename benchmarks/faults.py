"""The soak: a real paiweb under kill -9 for a long while, and the figures that must be zero.

    python benchmarks/faults.py [--jobs 300] [--kills 60] [--window 900] [--seed 1]
        [--sqlite | --database NAME] [--redis-url URL] [--victims worker,beat,agent,web,redis,shim]
        [--freeze 0.3] [--sdk] [--admin 2] [--env PORT=8133 ...]

It runs `apps.ops.faults.run`: `manage.py demo` (web, worker, beat, node agent, Flower, an
embedded Redis) on a fresh PostgreSQL database on PAIWEB_FAULTS_PG (default
postgresql://postgres@127.0.0.1:5432, dropped afterwards), --jobs jobs of every kind, --kills
SIGKILLs of the worker, beat, agent and web at random moments over --window seconds, then
the invariants (see that module). Pods run for real: run it as root with bubblewrap, as the
agent's tests do. Prints jobs, kills, invariant violations (0), jobs failed by the platform
(0) and the recovery time p50/p99; exits 1 if a figure that must be zero is not.

--sqlite runs on the embedded defaults (SQLite in the demo's directory) instead; --database
uses (re-creates, then drops) that PostgreSQL database; --redis-url a real Redis database
(flushed first) instead of the embedded one. --victims adds "redis" (the embedded Redis) and
"shim" (a running pod's shim); --freeze is the share of blows that are a SIGSTOP of 2–20 s
rather than a SIGKILL; --sdk submits jobs through the SDK and the console form while the
web dies (sending unanswered ones again: an answered job must exist; the duplicates a retry
made are counted);
--admin N kills `apply_cluster` and an admin's drain part-way N times each.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paiweb.settings")
os.environ.setdefault("DEBUG", "true")  # a development run: no SECRET_KEY needed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--kills", type=int, default=60)
    parser.add_argument("--window", type=float, default=900.0, help="seconds of kills")
    parser.add_argument("--settle", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sqlite", action="store_true", help="the embedded defaults")
    parser.add_argument("--database", default=None, help="this PostgreSQL database")
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--victims", default="worker,beat,agent,web")
    parser.add_argument("--freeze", type=float, default=0.0)
    parser.add_argument("--sdk", action="store_true")
    parser.add_argument("--admin", type=int, default=0)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the demo")
    args = parser.parse_args()

    import django

    django.setup()
    from apps.ops.faults import run

    report = run(
        jobs=args.jobs,
        kills=args.kills,
        window=args.window,
        settle=args.settle,
        seed=args.seed,
        tell=lambda line: print(line, flush=True),
        server=None
        if args.sqlite
        else os.environ.get("PAIWEB_FAULTS_PG", "postgresql://postgres@127.0.0.1:5432"),
        database=args.database,
        redis_url=args.redis_url,
        victims=tuple(args.victims.split(",")),
        freeze=args.freeze,
        sdk=args.sdk,
        admin=args.admin,
        env=dict(item.split("=", 1) for item in args.env),
    )
    print(report.figures())
    for problem in report.problems + report.platform_failed:
        print(f"  - {problem}")
    return 1 if report.problems or report.platform_failed else 0


if __name__ == "__main__":
    sys.exit(main())
