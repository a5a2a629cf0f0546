"""A network namespace per job and host: the job's pods on this host share it, and nothing
else is in it.

A new namespace has only a loopback interface, so its pods reach each other on 127.0.0.1
(MASTER_ADDR) and any port a framework opens, and nothing of the host: not PostgreSQL,
Redis, RabbitMQ, the web server, Flower, the agent, other jobs' pods, nor any abstract unix
socket (those are per namespace too). Filesystem sockets are out of reach because the
sandbox's mount tree has none of the host's /run, /var or /tmp.

Pure Python over iproute2's named namespaces (`ip netns`, /run/netns/<name>); the agent
(root) creates one when a job's first pod starts on this host and deletes it once the job's
last pod here has ended. A namespace lives on while a process is in it, so deleting the name
never cuts off a pod still running.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

RUN_DIR = Path("/run/netns")
PREFIX = "paiweb-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$")


class NetnsError(RuntimeError):
    """`ip netns` failed: the message is iproute2's."""


def name_for(job_id: str) -> str:
    name = f"{PREFIX}{job_id}"
    if not _NAME.match(name):
        raise NetnsError(f"not a usable namespace name: {name!r}")
    return name


def path(name: str) -> Path:
    return RUN_DIR / name


def _ip(*args: str) -> None:
    ip = shutil.which("ip")
    if ip is None:
        raise NetnsError("iproute2 (ip) is not installed")
    done = subprocess.run([ip, *args], capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: "
                         f"{done.stderr.decode(errors='replace').strip() or done.returncode}")


def ensure(name: str) -> Path:
    """The namespace `name` with its loopback up (created if missing; idempotent)."""
    if not path(name).exists():
        try:
            _ip("netns", "add", name)
        except NetnsError:
            if not path(name).exists():  # another thread made it meanwhile: fine
                raise
    _ip("-n", name, "link", "set", "lo", "up")
    return path(name)


def delete(name: str) -> None:
    if path(name).exists():
        try:
            _ip("netns", "delete", name)
        except NetnsError:
            if path(name).exists():
                raise


def in_use(name: str) -> bool:
    """Whether any process on this host is inside the namespace (its inode is theirs)."""
    try:
        target = os.stat(path(name))
    except FileNotFoundError:
        return False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            found = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (found.st_ino, found.st_dev) == (target.st_ino, target.st_dev):
            return True
    return False


def names(prefix: str = PREFIX) -> list[str]:
    try:
        return sorted(n for n in os.listdir(RUN_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def probe() -> str:
    """"" when this host can make namespaces for pods, else why not."""
    name = f"{PREFIX}probe-{os.getpid()}"
    try:
        ensure(name)
        delete(name)
    except (NetnsError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create network namespaces: {exc}"
    return ""
