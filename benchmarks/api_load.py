"""Load on the API: signed GetJob and CreateJob against gunicorn, PostgreSQL from the env.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/paiweb_bench python benchmarks/api_load.py

It creates that database if it is missing, migrates it, applies examples/demo-cluster.toml
(the demo users, workspaces and AccessKeys), starts the embedded Redis (unless REDIS_URL is
set) and gunicorn on 127.0.0.1, creates one job to read, then runs each scenario for
--seconds with --clients client processes, each sending one request at a time on a
kept-alive connection (as the SDK's pooled session does), signed with ACS3-HMAC-SHA256
exactly as the SDK signs (apps/api/signature.py). It prints
requests/s, p50 and p95 latency and the error count per scenario, and the CPU each request
cost, by part: gunicorn, the PostgreSQL backends, Redis, the clients. Jobs it creates stay in
the database (a spot job per CreateJob, left Creating: no Celery worker runs); use a
database you can throw away. Goals on 2 cores: GetJob ≥ 300/s, CreateJob ≥ 200/s.

Everything listens on and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode, urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from apps.api import signature  # noqa: E402  (pure Python: no Django in the clients)

HOST = "127.0.0.1"
KEY_ID, SECRET = "LTAI5tDemoAlice000000001", "DemoSecretAlice000000000000001"  # demo-cluster.toml
CLUSTER_FILE = ROOT / "examples" / "demo-cluster.toml"
SPOT_JOB = {
    "DisplayName": "bench-spot-job",
    "JobType": "PyTorchJob",
    "JobSpecs": [
        {
            "Type": "Worker",
            "PodCount": 1,
            "EcsSpec": "ecs.g7.xlarge",
            "Image": "pytorch-training:1.12-cpu-py39-ubuntu20.04",
            "SpotSpec": {"SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": 0.4},
        }
    ],
    "UserVpc": {"VpcId": "vpc-bench", "SwitchId": "vsw-bench", "SecurityGroupId": "sg-bench"},
    "UserCommand": "echo 'Hello World' && sleep 30",
}


# --- the client side ---------------------------------------------------------------------------


def call(
    port: int,
    method: str,
    path: str,
    *,
    query=None,
    body: bytes = b"",
    action: str = "Bench",
    connection: http.client.HTTPConnection | None = None,
) -> tuple[int, bytes]:
    """One signed request, on `connection` if given (kept alive while the server allows,
    as the SDK's pooled session does) or on a fresh one."""
    query = query or {}
    headers = {
        "host": f"{HOST}:{port}",
        "x-acs-version": "2020-12-03",
        "x-acs-action": action,
        "x-acs-date": datetime.now(UTC).strftime(signature.TIMESTAMP_FORMAT),
        "x-acs-signature-nonce": uuid.uuid4().hex,
        "x-acs-content-sha256": signature.hashed_payload(body),
        "accept": "application/json",
    }
    if body:
        headers["content-type"] = "application/json; charset=utf-8"
    request = signature.SignedRequest(method, path, query, headers, body)
    headers["Authorization"] = signature.sign(request, access_key_id=KEY_ID, secret=SECRET)
    own = connection is None
    connection = connection or http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        connection.request(
            method,
            path + (f"?{urlencode(query)}" if query else ""),
            body=body or None,
            headers=headers,
        )
        response = connection.getresponse()
        data = response.read()
        if response.will_close:
            connection.close()  # http.client reconnects on the next request
        return response.status, data
    finally:
        if own:
            connection.close()


def _worker(args: tuple[int, str, str, bytes, float]) -> tuple[list[float], int, float]:
    port, method, path, body, deadline = args
    latencies, errors, cpu = [], 0, time.process_time()
    connection = http.client.HTTPConnection(HOST, port, timeout=30)
    while time.time() < deadline:
        started = time.perf_counter()
        try:
            status, _ = call(port, method, path, body=body, connection=connection)
        except (OSError, http.client.HTTPException):
            connection.close()
            status = 0
        latencies.append(time.perf_counter() - started)
        errors += status != 200
    connection.close()
    return latencies, errors, time.process_time() - cpu


def run_scenario(
    name: str,
    *,
    port: int,
    method: str,
    path: str,
    body: bytes,
    clients: int,
    seconds: float,
    warmup: float,
    server_pids,
) -> dict:
    with multiprocessing.get_context("fork").Pool(clients) as pool:
        # Unmeasured: every worker process and thread loads, connects and caches first.
        pool.map(_worker, [(port, method, path, body, time.time() + warmup)] * clients)
        deadline = time.time() + seconds
        before = {pid: cpu for p in server_pids().values() for pid, cpu in _cpu_seconds(p).items()}
        started = time.perf_counter()
        results = pool.map(_worker, [(port, method, path, body, deadline)] * clients)
        elapsed = time.perf_counter() - started
        # Per process, what it used meanwhile (a process that ended meanwhile is missed: the
        # web keeps its database connections, CONN_MAX_AGE).
        parts = {
            part: sum(cpu - before.get(pid, 0.0) for pid, cpu in _cpu_seconds(p).items())
            for part, p in server_pids().items()
        }
    latencies = sorted(latency for part, _, _ in results for latency in part)
    errors = sum(e for _, e, _ in results)
    client_cpu = sum(c for _, _, c in results)
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    return {
        "scenario": name,
        "requests": len(latencies),
        "errors": errors,
        "rps": len(latencies) / elapsed,
        "p50_ms": quantiles[49] * 1000,
        "p95_ms": quantiles[94] * 1000,
        "server_cpu_ms": 1000 * sum(parts.values()) / max(len(latencies), 1),
        "parts_cpu_ms": {p: 1000 * v / max(len(latencies), 1) for p, v in parts.items()},
        "client_cpu_ms": 1000 * client_cpu / max(len(latencies), 1),
    }


# --- CPU accounting: the machine may be shared, so also report what each request costs -----


def _cpu_seconds(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) each process has used so far; gone ones are left out."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        used[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return used


def _server_pids(gunicorn_pid: int, redis_pid: int | None, database: str) -> dict[str, list[int]]:
    """gunicorn's master and workers ("web"), the PostgreSQL backends serving the
    benchmark's database ("database") and the embedded Redis ("redis"), by part (Linux
    /proc; empty lists elsewhere)."""
    parts: dict[str, list[int]] = {
        "web": [gunicorn_pid],
        "database": [],
        "redis": [redis_pid] if redis_pid else [],
    }
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == gunicorn_pid:
            parts["web"].append(int(entry.name))
        elif cmdline.startswith("postgres: ") and f" {database} " in cmdline:
            parts["database"].append(int(entry.name))
    return parts


# --- the server side ---------------------------------------------------------------------------


def _check_local(database_url: str) -> None:
    parts = urlsplit(database_url)
    if parts.scheme not in ("postgres", "postgresql") or parts.hostname not in (HOST, "localhost"):
        sys.exit(
            "DATABASE_URL must be a PostgreSQL database on 127.0.0.1, e.g. "
            "postgres://postgres@127.0.0.1:5432/paiweb_bench"
        )


def _create_database(database_url: str) -> None:
    import psycopg

    parts = urlsplit(database_url)
    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')
            print(f"created database {name}")


def _manage(env: dict, *args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _wait_for(port: int, process: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"gunicorn exited with {process.returncode}")
        try:
            http.client.HTTPConnection(HOST, port, timeout=1).request("GET", "/health/")
            return
        except OSError:
            time.sleep(0.2)
    sys.exit("gunicorn did not answer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=3, help="unmeasured seconds first")
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument(
        "--threads",
        type=int,
        default=4,
        help="threads per worker (gthread, with keep-alive, as `make demo` "
        "runs it); 1 = sync workers, a connection per request",
    )
    parser.add_argument("--port", type=int, default=8799)
    options = parser.parse_args()

    database_url = os.environ.get("DATABASE_URL", "")
    _check_local(database_url)
    _create_database(database_url)
    var_dir = Path(tempfile.mkdtemp(prefix="paiweb-api-bench-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "paiweb.settings",
        "DEBUG": "false",
        "ALLOWED_HOSTS": HOST,
        "SECRET_KEY": os.environ.get("SECRET_KEY", "api-bench-" + "k" * 40),
        "PAIWEB_VAR_DIR": str(var_dir),
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    redis_process = None
    database = urlsplit(database_url).path.lstrip("/")
    if not env.get("REDIS_URL"):
        from paiweb import embedded_redis

        socket = var_dir / "redis.sock"
        redis_process = embedded_redis.start(socket)
        env["REDIS_URL"] = f"unix://{socket}"
    gunicorn = None
    try:
        _manage(env, "migrate", "--noinput")
        _manage(env, "apply_cluster", str(CLUSTER_FILE))
        redis_pid = redis_process.pid if redis_process else None
        gunicorn = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "paiweb.wsgi:application",
                "--bind",
                f"{HOST}:{options.port}",
                "--workers",
                str(options.workers),
                "--threads",
                str(options.threads),
                "--log-level",
                "warning",
                "--error-logfile",
                "-",
            ],
            cwd=ROOT,
            env=env,
        )
        _wait_for(options.port, gunicorn)
        status, raw = call(options.port, "GET", "/api/v1/workspaces", action="ListWorkspaces")
        assert status == 200, raw
        workspace = next(w for w in json.loads(raw)["Workspaces"] if w["WorkspaceName"] == "team-a")
        create_body = json.dumps({"WorkspaceId": workspace["WorkspaceId"], **SPOT_JOB}).encode()
        status, raw = call(options.port, "POST", "/api/v1/jobs", body=create_body)
        assert status == 200, raw
        job_id = json.loads(raw)["JobId"]

        kind = "sync" if options.threads == 1 else f"gthread ×{options.threads}"
        print(
            f"gunicorn: {options.workers} workers ({kind}) on {HOST}:{options.port}; "
            f"{options.clients} client processes; {options.seconds:g} s per scenario after "
            f"{options.warmup:g} s of warm-up; {os.cpu_count()} CPUs; load average "
            f"{os.getloadavg()[0]:.2f} before"
        )
        for name, method, path, body, goal in (
            ("GetJob", "GET", f"/api/v1/jobs/{job_id}", b"", 300),
            ("CreateJob", "POST", "/api/v1/jobs", create_body, 200),
        ):
            result = run_scenario(
                name,
                port=options.port,
                method=method,
                path=path,
                body=body,
                clients=options.clients,
                seconds=options.seconds,
                warmup=options.warmup,
                server_pids=lambda: _server_pids(gunicorn.pid, redis_pid, database),
            )
            verdict = "meets" if result["rps"] >= goal and not result["errors"] else "MISSES"
            print(
                f"{name:<10} {result['rps']:8.1f} req/s   p50 {result['p50_ms']:6.1f} ms   "
                f"p95 {result['p95_ms']:6.1f} ms   {result['requests']} requests, "
                f"{result['errors']} errors   ({verdict} the goal of {goal}/s; load average "
                f"{os.getloadavg()[0]:.2f})"
            )
            cpu = result["server_cpu_ms"] + result["client_cpu_ms"]
            parts = result["parts_cpu_ms"]
            redis = f"{parts['redis']:.2f}" if redis_pid else "not measured (REDIS_URL)"
            print(
                f"{'':<10} CPU per request {cpu:.2f} ms (web {parts['web']:.2f}, database "
                f"{parts['database']:.2f}, Redis {redis}; clients "
                f"{result['client_cpu_ms']:.2f}): "
                f"about {os.cpu_count() * 1000 / cpu:.0f} req/s with all "
                f"{os.cpu_count()} CPUs to ourselves"
            )
    finally:
        if gunicorn is not None:
            gunicorn.terminate()
            gunicorn.wait(timeout=30)
        if redis_process is not None:
            redis_process.terminate()
            redis_process.wait(timeout=10)
        shutil.rmtree(var_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
