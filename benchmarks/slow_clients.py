"""Slow clients (slowloris) against gunicorn alone and behind nginx: do probes still answer?

    .venv/bin/python benchmarks/slow_clients.py [--clients 64] [--seconds 20] [--only nginx]

Starts the project's gunicorn the way docker-compose.yml's `web` service does (its command and
environment, with a local port, a SQLite file and a throwaway key), and nginx with
deploy/nginx/paiweb.conf.template (the file compose mounts; only ports and paths are
substituted). Then N slow clients connect, half sending their request head a byte a second,
half sending a POST body a byte a second, reconnecting whenever they are cut, while a probe
asks for /healthz twice a second (10 s timeout). Prints the probes' p50/p95/max latency and
failures, and how many slow connections were cut and after how long: first straight to
gunicorn, then through nginx (https, the proxy's port a browser uses).

tests/integration/test_reverse_proxy.py uses the same pieces (without reconnecting) and
asserts the figures. Needs nginx (`make nginx`) and PyYAML (the test extras).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
COMPOSE_FILE = BASE_DIR / "docker-compose.yml"
NGINX_TEMPLATE = BASE_DIR / "deploy" / "nginx" / "paiweb.conf.template"
PROBE_TIMEOUT = 10.0


# --- docker-compose.yml, read as compose reads it ------------------------------------------
def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's variable interpolation: ${VAR}, ${VAR:-default}, ${VAR-default},
    ${VAR:?error}, ${VAR?error} (nested in defaults too) and $$ for a literal $."""
    out, i = [], 0
    while i < len(value):
        if value.startswith("$$", i):
            out.append("$")
            i += 2
        elif value.startswith("${", i):
            end, depth = i + 2, 1
            while depth:
                if end >= len(value):
                    raise ValueError(f"unclosed ${{ in {value!r}")
                depth += {"{": 1, "}": -1}.get(value[end], 0)
                end += 1
            out.append(_expand(value[i + 2 : end - 1], env))
            i = end
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _expand(expression: str, env: dict[str, str]) -> str:
    name, operator, rest = re.match(
        r"([A-Za-z_][A-Za-z0-9_]*)(:?[-?])?(.*)", expression, re.S
    ).groups()
    value = env.get(name)
    missing = value is None or (operator is not None and operator.startswith(":") and not value)
    if operator is None:
        return value or ""
    if operator.endswith("-"):
        return interpolate(rest, env) if missing else value
    if missing:
        raise KeyError(f"{name}: {rest}")
    return value


def compose_service(name: str, env: dict[str, str]) -> dict:
    """Service `name` of docker-compose.yml with its variables interpolated from `env` (as
    compose does from the shell and .env): merge keys resolved, environment a dict of str."""
    import yaml

    service = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"][name]
    environment = {
        k: interpolate(str(v), env) for k, v in (service.get("environment") or {}).items()
    }
    command = service.get("command") or []
    command = [interpolate(str(part), env) for part in command]
    return {**service, "environment": environment, "command": command}


def compose_web_environment(secret_key: str) -> dict[str, str]:
    """What compose gives the web service with only SECRET_KEY set (.env.example's minimum)
    and the image's own ENV (Dockerfile)."""
    env = compose_service("web", {"SECRET_KEY": secret_key, "FLOWER_BASIC_AUTH": "x:y"})
    return {"DJANGO_SETTINGS_MODULE": "paiweb.settings", **env["environment"]}


def random_secret_key() -> str:
    return secrets.token_urlsafe(50)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, *, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f}s")


# --- the servers -------------------------------------------------------------------------
@dataclass
class Servers:
    """gunicorn as compose's web service runs it, and optionally nginx in front of it."""

    workdir: Path
    web_port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    https_port: int = field(default_factory=free_port)
    flower_port: int = field(default_factory=free_port)
    static_root: Path = BASE_DIR / "static"
    redis_url: str | None = None  # compose's (unreachable here) unless given: /healthz needs none
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def tls_dir(self) -> Path:
        return self.workdir / "tls"

    def web_env(self) -> dict[str, str]:
        env = compose_web_environment(random_secret_key())
        env.update(
            PATH=os.environ.get("PATH", ""),
            PAIWEB_VAR_DIR=str(self.workdir / "var"),
            DATABASE_URL=f"sqlite:///{self.workdir / 'var' / 'paiweb.sqlite3'}",
        )
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        return env  # no PYTEST_VERSION: DEBUG is whatever compose says

    def start_gunicorn(self, *, migrate: bool = False) -> subprocess.Popen:
        env = self.web_env()
        if migrate:  # /healthz needs no tables; logging in does
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
                cwd=BASE_DIR,
                env=env,
                check=True,
            )
        command = compose_service(
            "web", {"SECRET_KEY": env["SECRET_KEY"], "FLOWER_BASIC_AUTH": "x:y"}
        )["command"]
        assert command[0] == "gunicorn", command
        argv = [str(Path(sys.executable).parent / "gunicorn"), *command[1:]]
        argv = [f"--bind=127.0.0.1:{self.web_port}" if a.startswith("--bind") else a for a in argv]
        log = open(self.workdir / "gunicorn.log", "wb")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen(
            argv,
            cwd=BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        wait_for_port(self.web_port, process)
        return process

    def start_flower(self, *, basic_auth: str) -> subprocess.Popen:
        """Flower as compose's flower service runs it (its command, its environment with
        FLOWER_BASIC_AUTH), on a local port."""
        env = self.web_env()
        service = compose_service(
            "flower", {"SECRET_KEY": env["SECRET_KEY"], "FLOWER_BASIC_AUTH": basic_auth}
        )
        env["FLOWER_BASIC_AUTH"] = service["environment"]["FLOWER_BASIC_AUTH"]
        command = service["command"]
        assert command[0] == "celery", command
        argv = [str(Path(sys.executable).parent / "celery"), *command[1:]]
        argv = [
            f"--port={self.flower_port}"
            if a.startswith("--port")
            else "--address=127.0.0.1"
            if a.startswith("--address")
            else a
            for a in argv
        ]
        log = open(self.workdir / "flower.log", "wb")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen(
            argv,
            cwd=BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        wait_for_port(self.flower_port, process)
        return process

    def nginx_conf(self) -> str:
        """The compose template with this run's ports and paths, as the nginx image's
        entrypoint substitutes it (NGINX_ENVSUBST_FILTER=^PAIWEB_)."""
        values = {
            "PAIWEB_HTTP_PORT": str(self.http_port),
            "PAIWEB_HTTPS_PORT": str(self.https_port),
            "PAIWEB_PUBLIC_HTTPS_PORT": str(self.https_port),
            "PAIWEB_WEB_UPSTREAM": f"127.0.0.1:{self.web_port}",
            "PAIWEB_FLOWER_UPSTREAM": f"127.0.0.1:{self.flower_port}",
            "PAIWEB_TLS_DIR": str(self.tls_dir),
            "PAIWEB_STATIC_ROOT": str(self.static_root),
        }
        text = NGINX_TEMPLATE.read_text(encoding="utf-8")
        used = set(re.findall(r"\$\{(PAIWEB_[A-Z_]+)\}", text))
        assert used <= set(values), f"the template uses {used - set(values)}"
        return re.sub(r"\$\{(PAIWEB_[A-Z_]+)\}", lambda m: values[m.group(1)], text)

    def start_nginx(self, nginx: str) -> subprocess.Popen:
        from apps.core.management.commands.selfsigned_cert import selfsigned_cert

        self.tls_dir.mkdir(parents=True, exist_ok=True)
        cert, key = selfsigned_cert(
            names=["127.0.0.1", "localhost"], now=datetime.datetime.now(datetime.UTC)
        )
        (self.tls_dir / "cert.pem").write_bytes(cert)
        (self.tls_dir / "key.pem").write_bytes(key)
        (self.workdir / "paiweb.conf").write_text(self.nginx_conf(), encoding="utf-8")
        temp = self.workdir / "nginx-temp"
        temp.mkdir(exist_ok=True)
        user = "user root;\n" if os.geteuid() == 0 else ""
        main = f"""{user}daemon off;
worker_processes 1;
pid {self.workdir}/nginx.pid;
error_log {self.workdir}/nginx-error.log info;
events {{ worker_connections 4096; }}
http {{
    include /etc/nginx/mime.types;
    access_log {self.workdir}/nginx-access.log;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    include {self.workdir}/paiweb.conf;
}}
"""
        (self.workdir / "nginx.conf").write_text(main, encoding="utf-8")
        argv = [nginx, "-p", str(self.workdir), "-c", str(self.workdir / "nginx.conf")]
        check = subprocess.run([*argv, "-t"], capture_output=True, text=True)
        if check.returncode:
            raise RuntimeError(f"nginx -t: {check.stderr}")
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        self.processes.append(process)
        wait_for_port(self.https_port, process)
        return process

    def tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.tls_dir / "cert.pem"))

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def find_nginx() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )


# --- the clients -------------------------------------------------------------------------
@dataclass
class SlowClient:
    """One slowloris connection: its head (mode "head") or a POST body (mode "body") a byte
    every `interval` seconds; `stall_after` bytes and it sends nothing more. `cuts` holds the
    seconds each connection lasted before the server closed it; `open_at_end` counts those
    still open when told to stop."""

    port: int
    mode: str
    tls: ssl.SSLContext | None = None
    interval: float = 1.0
    stall_after: int | None = None
    reconnect: bool = False
    cuts: list[float] = field(default_factory=list)
    open_at_end: int = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                lasted = self._one(stop)
            except OSError:
                time.sleep(0.2)  # could not even connect: try again
                continue
            if lasted is None:
                self.open_at_end += 1
            else:
                self.cuts.append(lasted)
            if not self.reconnect:
                return

    def _one(self, stop: threading.Event) -> float | None:
        """Seconds until the server cut the connection; None if it was still open at the stop."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_hostname="127.0.0.1")
        started = time.monotonic()
        try:
            host = f"Host: 127.0.0.1:{self.port}\r\n"
            if self.mode == "head":
                sock.sendall(f"GET /healthz HTTP/1.1\r\n{host}".encode())
                trickle = b"X-Slow: " + b"a" * 100_000
            else:
                sock.sendall(
                    (
                        f"POST /api/v1/jobs HTTP/1.1\r\n{host}Content-Type: "
                        "application/json\r\nContent-Length: 100000\r\n\r\n"
                    ).encode()
                )
                trickle = b"{" + b" " * 100_000
            sock.settimeout(self.interval)
            sent = 0
            while True:
                if stop.is_set():
                    return None
                if self.stall_after is None or sent < self.stall_after:
                    sock.sendall(trickle[sent : sent + 1])
                    sent += 1
                try:
                    sock.recv(4096)  # an answer (a 408, a 400) or the end: cut either way
                    return time.monotonic() - started
                except TimeoutError:
                    continue  # still open: the next byte
        except OSError:
            return time.monotonic() - started  # reset or broken pipe: cut
        finally:
            sock.close()


@dataclass
class Probes:
    """GET /healthz every `every` seconds, each on a new connection, timing out at 10 s.
    `latencies` are the answered ones'; `elapsed` has every probe's, failed ones included."""

    port: int
    tls: ssl.SSLContext | None = None
    every: float = 0.5
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    elapsed: list[float] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                status = self._probe()
                if status == 200:
                    self.latencies.append(time.monotonic() - started)
                else:
                    self.failures.append(f"status {status}")
            except OSError as exc:
                self.failures.append(
                    f"{type(exc).__name__} after {time.monotonic() - started:.1f}s"
                )
            self.elapsed.append(time.monotonic() - started)
            stop.wait(max(0.0, self.every - (time.monotonic() - started)))

    def _probe(self) -> int:
        import http.client

        if self.tls is not None:
            connection = http.client.HTTPSConnection(
                "127.0.0.1", self.port, timeout=PROBE_TIMEOUT, context=self.tls
            )
        else:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=PROBE_TIMEOUT)
        try:
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            response.read()
            return response.status
        finally:
            connection.close()

    def summary(self) -> str:
        """Percentiles over every probe, a failed one counting as its time to fail."""
        values = sorted(self.elapsed)
        if not values:
            return "probes 0"
        p95 = values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]
        return (
            f"probes {len(values)}: p50 {statistics.median(values) * 1000:.0f} ms, "
            f"p95 {p95 * 1000:.0f} ms, max {values[-1] * 1000:.0f} ms, "
            f"failures {len(self.failures)}"
        )


def attack(
    *,
    port: int,
    tls: ssl.SSLContext | None,
    clients: int,
    seconds: float,
    reconnect: bool,
    stall_after: int | None = None,
    wait_for_cuts: float = 0.0,
) -> tuple[Probes, list[SlowClient]]:
    """`clients` slow connections (half "head", half "body", which stall after `stall_after`
    bytes) and the probes for `seconds`; then the slow clients get `wait_for_cuts` more
    seconds to be cut before they are stopped."""
    stop_clients, stop_probes = threading.Event(), threading.Event()
    slow = [
        SlowClient(
            port,
            "head" if i % 2 == 0 else "body",
            tls,
            reconnect=reconnect,
            stall_after=None if i % 2 == 0 else stall_after,
        )
        for i in range(clients)
    ]
    threads = [threading.Thread(target=c.run, args=(stop_clients,), daemon=True) for c in slow]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # let them connect and occupy what they can
    probes = Probes(port, tls)
    probe_thread = threading.Thread(target=probes.run, args=(stop_probes,), daemon=True)
    probe_thread.start()
    time.sleep(seconds)
    stop_probes.set()
    probe_thread.join(PROBE_TIMEOUT + 5)
    deadline = time.monotonic() + wait_for_cuts
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stop_clients.set()
    for thread in threads:
        thread.join(PROBE_TIMEOUT)
    return probes, slow


def cut_summary(slow: list[SlowClient]) -> str:
    """How many slow connections the server cut, and after how long, per mode."""
    parts = []
    for mode in ("head", "body"):
        clients = [client for client in slow if client.mode == mode]
        cuts = [cut for client in clients for cut in client.cuts]
        still_open = sum(client.open_at_end for client in clients)
        after = f" after median {statistics.median(cuts):.1f} s" if cuts else ""
        parts.append(f"{mode}: {len(cuts)} cut{after}, {still_open} open at the end")
    return "slow connections " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--only", choices=["direct", "nginx"])
    args = parser.parse_args()
    sys.path.insert(0, str(BASE_DIR))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paiweb.settings")
    nginx = find_nginx()
    with tempfile.TemporaryDirectory(prefix="pw-slow-") as tmp:
        servers = Servers(Path(tmp))
        try:
            servers.start_gunicorn()
            print(f"gunicorn as compose's web runs it, on 127.0.0.1:{servers.web_port}")
            if args.only != "nginx":
                probes, slow = attack(
                    port=servers.web_port,
                    tls=None,
                    clients=args.clients,
                    seconds=args.seconds,
                    reconnect=True,
                )
                print(
                    f"direct to gunicorn, {args.clients} slow clients, {args.seconds:g} s: "
                    f"{probes.summary()}; {cut_summary(slow)}"
                )
            if args.only != "direct":
                if nginx is None:
                    sys.exit("nginx is not installed: make nginx")
                servers.start_nginx(nginx)
                tls = servers.tls_context()
                probes, slow = attack(
                    port=servers.https_port,
                    tls=tls,
                    clients=args.clients,
                    seconds=args.seconds,
                    reconnect=True,
                )
                print(
                    f"through nginx (https), {args.clients} slow clients, {args.seconds:g} s: "
                    f"{probes.summary()}; {cut_summary(slow)}"
                )
        finally:
            servers.stop()


if __name__ == "__main__":
    main()
