"""`manage.py demo`: the whole console on one machine, supervised by one command.

It starts the embedded Redis (unless REDIS_URL is set), the web server (gunicorn), a Celery
worker, the node agent that runs pods as processes (`manage.py agent --nodes all`: on one
machine one agent serves every node), Celery beat and Flower, and shows each one's output
with its name in front. Ctrl-C (SIGINT) or SIGTERM stops them all, Redis last: SIGTERM, a
grace period, then SIGKILL. Running pods are not the demo's children but their shims' (see
apps/agent/shim.py): they keep running, and the next demo's agent re-adopts them. If a child
dies while starting up, the demo says which and stops the rest, exiting 1; once the
console is up, a child that dies is started again alone,
after a backoff (1 s, doubling to 30 s, for the agent to a sixth of NODE_LOST_AFTER; reset
once it has run a minute), and the demo says so. Its banner says that it runs with demo
secrets (the per-installation generated key, the published passwords and AccessKeys of the
demo cluster file), with DEBUG on (settings.py turns it on for `manage.py demo` unless
DEBUG is set; the children are told DEBUG=true), and Flower's login (FLOWER_BASIC_AUTH,
else the demo admin's).

Each child runs in its own session so that a Ctrl-C in the terminal reaches only this
supervisor, which then stops the children in order (a worker's warm shutdown still needs
Redis). On Linux the children also get SIGTERM if the supervisor itself is killed.
"""

from __future__ import annotations

import argparse
import os
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.agent.runner import isolation_status
from paiweb import embedded_redis
from paiweb.secret_key import INSTALLATION_SECRET_FILE, given

STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL
RESTART_BACKOFF_MAX = 30.0  # seconds between restarts of a child that keeps exiting
RESTART_STABLE = 60.0  # a child that ran this long before exiting restarts at once again
AGENT_STOP_TIMEOUT = 25.0  # with AGENT_STOP_PODS_ON_EXIT the agent first stops its pods
READY_TIMEOUT = 60.0  # how long to wait for the web server and Flower to accept connections
MAX_UNIX_SOCKET_PATH = 100  # the kernel's limit is 107 bytes
COLOURS = ("36", "33", "35", "32", "34", "31")  # ANSI cyan, yellow, magenta, green, blue, red
DEMO_USERS = ("alice", "bob", "charlie", "admin")
# Flower can revoke tasks and shows the broker's URL: never without a login, in the demo the
# demo admin's unless FLOWER_BASIC_AUTH (user:password, Flower's own variable) says otherwise.
DEMO_FLOWER_BASIC_AUTH = "admin:admin-demo-pw"


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    colour: str
    stop_timeout: float = STOP_TIMEOUT
    partial: bytes = b""
    reading: bool = True
    argv: tuple[str, ...] = ()
    started_at: float = 0.0
    restarts: int = 0  # in a row, each soon after the last: the backoff grows with them
    backoff_max: float = RESTART_BACKOFF_MAX  # the longest wait before it starts again
    restart_at: float | None = None  # it exited; start it again then


def restart_backoff_max(name: str) -> float:
    """The longest wait before a child that keeps exiting is started again. The agent's is a
    sixth of NODE_LOST_AFTER (5 s of the default 30): with its start-up and the heartbeat
    interval before it died, an agent in a crash loop still reports well within
    NODE_LOST_AFTER, so its nodes are not declared Lost and the pods it re-adopts keep
    running (on a Lost node it would stop them: docs/execution.md)."""
    if name == "agent":
        return max(1.0, min(RESTART_BACKOFF_MAX, settings.NODE_LOST_AFTER / 6))
    return RESTART_BACKOFF_MAX


def _die_with_parent() -> None:
    """Runs in the child before exec: ask Linux to SIGTERM it if the supervisor dies."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the supervisor's own shutdown still stops its children


def _port_in_use(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def demo_logins(cluster_file: Path) -> list[tuple[str, str, str]]:
    """(username, password, what they are) for each user the cluster file declares."""
    try:
        users = tomllib.loads(cluster_file.read_text(encoding="utf-8")).get("users", {})
    except (OSError, tomllib.TOMLDecodeError):
        users = {}
    if not isinstance(users, dict) or not users:
        return [(name, "(see the cluster file)", "") for name in DEMO_USERS]
    logins = []
    for name, user in users.items():
        user = user if isinstance(user, dict) else {}
        if "password" in user:
            password = str(user["password"])
        elif "password_env" in user:
            password = f"(${user['password_env']})"
        else:
            password = "(unchanged)"
        roles = [f"{role} of {ws}" for ws, role in dict(user.get("memberships") or {}).items()]
        if user.get("is_superuser"):
            roles.insert(0, "superuser")
        logins.append((str(name), password, ", ".join(roles)))
    return logins


def _sandbox_line(sandbox: str) -> str:
    isolation = isolation_status(sandbox)
    if isolation.complete:
        return "pods are isolated (SANDBOX=strict)"
    return (
        f"PODS ARE NOT ISOLATED (SANDBOX={sandbox}): {'; '.join(isolation.missing)}. "
        "Run the demo as root for isolation."
    )


def demo_secrets_notice(cluster_file: str) -> list[str]:
    """The banner's warning: which secrets are demo ones, and that this is no production."""
    key_file = Path(settings.VAR_DIR) / INSTALLATION_SECRET_FILE
    generated = f"generated for this installation, kept in {key_file}"
    secret_key = "from the environment" if given("SECRET_KEY") else generated
    from_env = given("ACCESS_KEY_ENCRYPTION_SECRET")
    encryption = "from the environment" if from_env else "derived from SECRET_KEY"
    return [
        "  secrets   DEMO SECRETS: this demo is not for production",
        f"            SECRET_KEY: {secret_key}",
        f"            AccessKey encryption: {encryption}",
        f"            the passwords above and the SDK AccessKeys are published in {cluster_file};",
        "            anywhere real: DEBUG=false, your own SECRET_KEY and your own cluster file",
    ]


class Supervisor:
    """Starts children with piped output, relays their lines, and stops them."""

    def __init__(self, *, env: dict[str, str], write, colour: bool) -> None:
        self.env = env
        self.write = write
        self.colour = colour
        self.children: list[Child] = []
        self.selector = selectors.DefaultSelector()
        self.width = 6
        self.stop_requested = False  # set by a signal; checked by the loops, never raised
        self.force = False  # a second signal: stop waiting for graceful shutdowns

    def on_signal(self, signum: int, frame) -> None:
        self.force = self.stop_requested
        self.stop_requested = True

    def tell(self, message: str) -> None:
        self.write(self._prefix("demo", "1") + message)

    def _prefix(self, name: str, colour: str) -> str:
        label = f"{name:<{self.width}} | "
        return f"\033[{colour}m{label}\033[0m" if self.colour else label

    def start(self, name: str, argv: list[str], *, stop_timeout: float = STOP_TIMEOUT) -> Child:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=settings.BASE_DIR,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        assert process.stdout is not None
        os.set_blocking(process.stdout.fileno(), False)
        colour = COLOURS[len(self.children) % len(COLOURS)]
        child = Child(
            name,
            process,
            colour,
            stop_timeout=stop_timeout,
            argv=tuple(argv),
            started_at=time.monotonic(),
            backoff_max=restart_backoff_max(name),
        )
        self.children.append(child)
        self.selector.register(process.stdout, selectors.EVENT_READ, child)
        self.tell(f"started {name} (pid {process.pid}): {shlex.join(argv)}")
        return child

    def watch(self) -> None:
        """A child that exits is started again after a backoff (1 s, doubling to its
        `backoff_max`; back to 1 s once it has run RESTART_STABLE seconds) while the
        others keep running: a crashed beat, worker or agent never stops the demo."""
        now = time.monotonic()
        for i, child in enumerate(self.children):
            if child.restart_at is None and child.process.poll() is not None:
                self._drain(child)
                if now - child.started_at >= RESTART_STABLE:
                    child.restarts = 0
                delay = min(child.backoff_max, 2.0**child.restarts)
                child.restarts += 1
                child.restart_at = now + delay
                self.tell(
                    f"{child.name} exited with code {child.process.returncode}: "
                    f"restarting it in {delay:g}s (restart {child.restarts} in a row); "
                    "the others keep running"
                )
            elif child.restart_at is not None and now >= child.restart_at:
                self.children[i] = self._respawn(child)

    def _respawn(self, old: Child) -> Child:
        fresh = self.start(old.name, list(old.argv), stop_timeout=old.stop_timeout)
        self.children.remove(fresh)  # start() appended it; it takes the old one's place
        fresh.colour, fresh.restarts = old.colour, old.restarts
        return fresh

    def pump(self, timeout: float) -> None:
        """Relay whatever output arrives within `timeout` seconds, line by line."""
        if not self.selector.get_map():
            time.sleep(timeout)
            return
        for key, _ in self.selector.select(timeout):
            child: Child = key.data
            try:
                chunk = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                self._close(child)
                continue
            *lines, child.partial = (child.partial + chunk).split(b"\n")
            for line in lines:
                self._relay(child, line)

    def _relay(self, child: Child, line: bytes) -> None:
        text = line.decode(errors="replace").rstrip("\r")
        self.write(self._prefix(child.name, child.colour) + text)

    def _close(self, child: Child) -> None:
        if child.partial:
            self._relay(child, child.partial)
            child.partial = b""
        if child.reading:
            self.selector.unregister(child.process.stdout)
            child.process.stdout.close()
            child.reading = False

    def first_exited(self) -> Child | None:
        return next((c for c in self.children if c.process.poll() is not None), None)

    def wait_for(self, check, *, timeout: float, what: str) -> None:
        """Relay output until check() is true; fail if a child exits or time runs out."""
        deadline = time.monotonic() + timeout
        while not check():
            if self.stop_requested:
                raise StopRequested
            if (dead := self.first_exited()) is not None:
                raise ChildExited(dead)
            if time.monotonic() > deadline:
                raise CommandError(f"{what} did not come up within {timeout:.0f}s")
            self.pump(0.1)

    def stop(self, children: list[Child], *, timeout: float | None = None) -> None:
        """SIGTERM, relay output while they shut down, SIGKILL whoever is left."""
        if timeout is None:
            timeout = max((c.stop_timeout for c in children), default=STOP_TIMEOUT)
        for child in children:
            if child.process.poll() is None:
                self.tell(f"stopping {child.name} (pid {child.process.pid})")
                _signal(child.process, signal.SIGTERM, group=False)
        deadline = time.monotonic() + timeout
        while any(c.process.poll() is None for c in children) and time.monotonic() < deadline:
            if self.force:
                break
            self.pump(0.1)
        for child in children:
            if child.process.poll() is None:
                why = "asked twice" if self.force else f"not stopped within {timeout:.0f}s"
                self.tell(f"killing {child.name} ({why})")
            # Also sweeps up what it left behind in its process group (e.g. pool processes).
            _signal(child.process, signal.SIGKILL, group=True)
            child.process.wait()
            self._drain(child)

    def _drain(self, child: Child) -> None:
        while child.reading:
            try:
                chunk = os.read(child.process.stdout.fileno(), 65536)
            except BlockingIOError:
                self._close(child)  # a grandchild still holds the pipe: stop listening
                break
            if not chunk:
                self._close(child)
                break
            *lines, child.partial = (child.partial + chunk).split(b"\n")
            for line in lines:
                self._relay(child, line)

    def stop_all(self, *, last: Child | None, timeout: float | None = None) -> None:
        """Stop everything in reverse start order, with `last` (Redis) after the rest."""
        others = [c for c in reversed(self.children) if c is not last]
        self.stop(others, timeout=timeout)
        if last is not None:
            self.stop([last], timeout=timeout)


def _signal(process: subprocess.Popen[bytes], signum: int, *, group: bool) -> None:
    try:
        if group:
            os.killpg(process.pid, signum)  # each child leads its own session and group
        else:
            process.send_signal(signum)
    except (ProcessLookupError, PermissionError):
        pass


class ChildExited(Exception):
    def __init__(self, child: Child) -> None:
        super().__init__(child.name)
        self.child = child


class StopRequested(Exception):
    pass


class Command(BaseCommand):
    help = (
        "Run the demo: embedded Redis (unless REDIS_URL is set), gunicorn, a Celery worker, "
        "the node agent, Celery beat and Flower. A child that dies is restarted alone, with a "
        "backoff. Ctrl-C stops everything."
    )
    requires_system_checks = []  # checked by the children; the supervisor needs no models

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8000))
        parser.add_argument(
            "--flower-port", type=int, default=int(os.environ.get("FLOWER_PORT") or 5555)
        )
        parser.add_argument(
            "--queues",
            default=os.environ.get("WORKER_QUEUES") or "celery",
            help="comma-separated queues the worker consumes (default: celery)",
        )
        parser.add_argument("--concurrency", type=int, default=2)
        parser.add_argument(
            "--agent",
            action=argparse.BooleanOptionalAction,
            default="apps.agent" in settings.INSTALLED_APPS,
            help="run the node agent, so pods run as real processes (EXECUTION_BACKEND=agent)",
        )
        parser.add_argument("--log-level", default="info", help="worker, agent and beat")
        parser.add_argument(
            "--cluster-file",
            default=os.environ.get("CLUSTER_FILE") or "examples/demo-cluster.toml",
            help="where the demo logins are listed (only read for the banner)",
        )

    def handle(self, *args, **options) -> None:
        host, port, flower_port = options["host"], options["port"], options["flower_port"]
        listeners = (("web", port, "PORT"), ("Flower", flower_port, "FLOWER_PORT"))
        for what, number, variable in listeners:
            if _port_in_use(host, number):
                raise CommandError(
                    f"{host}:{number} is already in use (another demo?), so {what} cannot "
                    f"listen there. Stop that process or choose another port: {variable}=…"
                )
        redis_url = os.environ.get("REDIS_URL", "")
        if redis_url:
            _check_redis(redis_url)
        else:
            socket_path = Path(settings.EMBEDDED_REDIS_SOCKET)
            _check_embedded_socket(socket_path)
            redis_url = f"unix://{socket_path}"
        flower_url = f"http://{host}:{flower_port}"
        backend = os.environ.get("EXECUTION_BACKEND") or ("agent" if options["agent"] else "none")
        options["agent"] = options["agent"] and backend == "agent"
        env = {
            **os.environ,
            "REDIS_URL": redis_url,
            "FLOWER_URL": os.environ.get("FLOWER_URL") or flower_url,
            "EXECUTION_BACKEND": backend,
            # Unset, DEBUG is on for the demo (settings.py): its children are told so.
            "DEBUG": "true" if settings.DEBUG else "false",
            "FLOWER_BASIC_AUTH": os.environ.get("FLOWER_BASIC_AUTH") or DEMO_FLOWER_BASIC_AUTH,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "paiweb.settings"),
            "PYTHONUNBUFFERED": "1",
        }
        isolation = isolation_status(env.get("SANDBOX") or settings.SANDBOX)
        if options["agent"] and not isolation.can_run and "SANDBOX" not in os.environ:
            # A developer's machine without root: run pods anyway, and say so loudly below.
            env["SANDBOX"] = "insecure"
            isolation = isolation_status("insecure")
        colour = self.stdout.isatty() and "NO_COLOR" not in os.environ
        supervisor = Supervisor(env=env, write=self._write, colour=colour)

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, supervisor.on_signal)

        redis_child = None
        try:
            if not os.environ.get("REDIS_URL"):
                redis_child = supervisor.start("redis", embedded_redis.server_argv(socket_path))
                supervisor.wait_for(
                    lambda: embedded_redis.is_answering(socket_path),
                    timeout=15,
                    what="the embedded Redis",
                )
            for name, argv in self._children(options, host, port, flower_port):
                if supervisor.stop_requested:
                    raise StopRequested
                timeout = AGENT_STOP_TIMEOUT if name == "agent" else STOP_TIMEOUT
                supervisor.start(name, argv, stop_timeout=timeout)
            supervisor.wait_for(
                lambda: _port_in_use(host, port) and _port_in_use(host, flower_port),
                timeout=READY_TIMEOUT,
                what="the web server or Flower",
            )
            self._banner(supervisor, options, host, port, flower_url, redis_url)
            while not supervisor.stop_requested:
                supervisor.watch()
                supervisor.pump(0.2)
            raise StopRequested
        except StopRequested:
            supervisor.tell("stopping (Ctrl-C again to kill at once)")
            supervisor.stop_all(last=redis_child)
            supervisor.tell("all stopped")
        except ChildExited as exc:
            code = exc.child.process.returncode
            supervisor.tell(f"{exc.child.name} exited with code {code}: stopping the others")
            supervisor.stop_all(last=redis_child)
            raise CommandError(f"{exc.child.name} exited unexpectedly (code {code})") from None
        except BaseException:
            supervisor.stop_all(last=redis_child, timeout=5)
            raise

    def _write(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _children(self, options, host: str, port: int, flower_port: int):
        python = sys.executable
        schedule = Path(settings.VAR_DIR) / "celerybeat-schedule"
        yield (
            "worker",
            [
                python,
                "-m",
                "celery",
                "-A",
                "paiweb",
                "worker",
                "-l",
                options["log_level"],
                "-Q",
                options["queues"],
                "--concurrency",
                str(options["concurrency"]),
            ],
        )
        if options["agent"]:
            yield (
                "agent",
                [
                    python,
                    str(Path(settings.BASE_DIR) / "manage.py"),
                    "agent",
                    "--nodes",
                    "all",
                    "--log-level",
                    options["log_level"],
                ],
            )
        yield (
            "beat",
            [
                python,
                "-m",
                "celery",
                "-A",
                "paiweb",
                "beat",
                "-l",
                options["log_level"],
                "-s",
                str(schedule),
            ],
        )
        yield (
            "flower",
            [
                python,
                "-m",
                "celery",
                "-A",
                "paiweb",
                "flower",
                f"--port={flower_port}",
                f"--address={host}",
            ],
        )
        yield (
            "web",
            [
                python,
                "-m",
                "gunicorn",
                "paiweb.wsgi:application",
                "--bind",
                f"{host}:{port}",
                "--workers",
                "2",
                "--threads",
                "4",
                "--graceful-timeout",
                "5",
                # as compose's web: the API refuses a query over 15 KiB in JSON, where
                # gunicorn's own 4 KiB limit answered with an HTML page the SDKs cannot read
                "--limit-request-line",
                "0",
                "--access-logfile",
                "-",
                "--error-logfile",
                "-",
                "--no-control-socket",  # gunicorn opens one in ~/.gunicorn by default
            ],
        )

    def _banner(self, supervisor, options, host, port, flower_url, redis_url) -> None:
        base = f"http://{host}:{port}"
        cluster_file = Path(settings.BASE_DIR) / options["cluster_file"]
        embedded = "" if os.environ.get("REDIS_URL") else " (embedded)"
        lines = [
            "",
            "paiweb demo is running",
            f"  console   {base}/",
            f"  admin     {base}/admin/",
            f"  health    {base}/health/",
            f"  flower    {flower_url}/  (login {_flower_login(supervisor.env)})",
            f"  redis     {_without_password(redis_url)}{embedded}",
            f"  database  {_without_password(settings.DATABASE_URL)}",
            "  pods      "
            + ("run as processes by the agent" if options["agent"] else "not run as processes")
            + f" (EXECUTION_BACKEND={supervisor.env['EXECUTION_BACKEND']})",
            "  debug     " + _debug_line(),
            "  sandbox   " + _sandbox_line(supervisor.env.get("SANDBOX") or settings.SANDBOX),
            f"  logins    (from {options['cluster_file']}; SDK access keys are there too)",
        ]
        for username, password, roles in demo_logins(cluster_file):
            lines.append(f"            {username:<9} {password:<18} {roles}".rstrip())
        lines += demo_secrets_notice(options["cluster_file"])
        lines += ["Press Ctrl-C to stop everything.", ""]
        for line in lines:
            supervisor.tell(line)


def _flower_login(env: dict[str, str]) -> str:
    """Flower's basic-auth login as `user / password` (the first, if several are given)."""
    user, _, password = env["FLOWER_BASIC_AUTH"].split(",")[0].partition(":")
    return f"{user} / {password}"


def _debug_line() -> str:
    if not settings.DEBUG:
        return "DEBUG=false (from the environment)"
    why = "from the environment" if os.environ.get("DEBUG", "").strip() else "the demo's default"
    return (
        f"DEBUG=true ({why}): error pages show tracebacks and settings; "
        "never run this in production"
    )


def _check_embedded_socket(socket_path: Path) -> None:
    if len(str(socket_path)) > MAX_UNIX_SOCKET_PATH:
        raise CommandError(
            f"{socket_path} is too long for a unix socket; "
            "set PAIWEB_VAR_DIR to a shorter directory"
        )
    if embedded_redis.is_answering(socket_path):
        raise CommandError(
            f"a Redis already answers on {socket_path}: is another demo running? Stop it first"
        )
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    socket_path.unlink(missing_ok=True)


def _check_redis(url: str) -> None:
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3).ping()
    except (redis.exceptions.RedisError, OSError) as exc:
        raise CommandError(f"REDIS_URL={_without_password(url)} does not answer: {exc}") from None
