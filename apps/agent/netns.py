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

import hashlib
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterable
from pathlib import Path

RUN_DIR = Path("/run/netns")
PREFIX = "paiweb-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$")


class NetnsError(RuntimeError):
    """`ip netns` failed: the message is iproute2's."""


def name_for(job_id: str, host: str = "") -> str:
    """The job's namespace on this host. `host` (the agent's address) keeps two hosts'
    namespaces apart where they share /run/netns (test hosts on one machine)."""
    name = f"{PREFIX}{job_id}{_host_suffix(host)}"
    if not _NAME.match(name):
        raise NetnsError(f"not a usable namespace name: {name!r}")
    return name


def job_of(name: str, host: str = "") -> str:
    """The job a namespace is named for on this host (`name_for`'s inverse), or ""."""
    suffix = _host_suffix(host)
    job_id = name.removeprefix(PREFIX).removesuffix(suffix)
    return job_id if job_id and f"{PREFIX}{job_id}{suffix}" == name else ""


def _host_suffix(host: str) -> str:
    return f"-{hashlib.sha1(host.encode()).hexdigest()[:8]}" if host else ""


def path(name: str) -> Path:
    return RUN_DIR / name


_TOOLS = {"ip": "iproute2 (ip)", "nft": "nftables (nft)"}


def _run(tool: str, *args: str, script: str = "") -> subprocess.CompletedProcess[bytes]:
    """Run `ip` or `nft` (`script` on its standard input), whatever it returns; NetnsError
    when it is not installed."""
    path = shutil.which(tool)
    if path is None:
        raise NetnsError(f"{_TOOLS[tool]} is not installed")
    return subprocess.run([path, *args], input=script.encode(), capture_output=True, timeout=15)


def _ip(*args: str) -> None:
    done = _run("ip", *args)
    if done.returncode != 0:
        raise NetnsError(
            f"ip {' '.join(args)}: "
            f"{done.stderr.decode(errors='replace').strip() or done.returncode}"
        )


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
    """ "" when this host can make namespaces for pods, else why not."""
    name = f"{PREFIX}probe-{os.getpid()}"
    try:
        ensure(name)
        delete(name)
    except (NetnsError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create network namespaces: {exc}"
    return ""


# --- between hosts: a routed link per job namespace ---------------------------------------
#
# With POD_CIDR set, each host owns a pod subnet and the job's namespace on a host gets one
# address in it (`job_address`): a veth pair links the namespace (eth0, the address/32, a
# default route to 169.254.1.1) to the host (`host_ifname`, 169.254.1.1/32, a route to the
# address). Hosts route each other's subnets via their addresses. nftables on the host
# (table inet paiweb) lets a job's namespace talk to the same job's addresses on the other
# hosts and to nothing else: not the host itself (input), not other jobs, not the outside.
# The link and the job's chains are named for the namespace, not the job's number: another
# installation on the host counts its jobs from 1 too.

GATEWAY = "169.254.1.1"
TABLE = "paiweb"
# Never reachable through egress: private, shared, link-local, loopback, multicast, reserved.
NOT_PUBLIC = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
)


def job_address(cidr: str, job_pk: int) -> str:
    """The job's address in a host's pod subnet (the same job has the same offset on every
    host, so each host can work out where the job's other pods are)."""
    network = ipaddress.ip_network(cidr)
    slots = network.num_addresses - 3  # no network, gateway-like .1, broadcast
    if slots < 1:
        raise NetnsError(f"POD_CIDR {cidr} is too small")
    return str(network.network_address + 2 + (job_pk % slots))


def host_ifname(name: str) -> str:
    """The host side of the namespace's link: `pwj` and 12 hex digits of the namespace's
    name (an interface name has at most 15 characters)."""
    return f"pwj{_link_key(name)}"


def _chains(name: str) -> tuple[str, str]:
    """The namespace's nftables chains: what leaves it (out) and what reaches it (in)."""
    key = _link_key(name)
    return f"job_{key}_out", f"job_{key}_in"


def _link_key(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()[:12]


def _nft(script: str) -> None:
    done = _run("nft", "-f", "-", script=script)
    if done.returncode != 0:
        raise NetnsError(f"nft: {done.stderr.decode(errors='replace').strip()}")


def host_prepare() -> None:
    """Forwarding on, and the base table: nothing from a pod's link reaches the host.
    Idempotent, and atomic (one nft batch): an agent's every start rewrites the two base
    chains rather than adding their rules again, and keeps the job chains and maps."""
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    t = f"inet {TABLE}"
    _nft(f"""
add table {t}
add map {t} pod_out {{ type ifname : verdict; }}
add map {t} pod_in {{ type ifname : verdict; }}
add chain {t} input {{ type filter hook input priority 0; policy accept; }}
add chain {t} forward {{ type filter hook forward priority 0; policy accept; }}
flush chain {t} input
flush chain {t} forward
add rule {t} input iifname "pwj*" drop
add rule {t} forward iifname vmap @pod_out
add rule {t} forward oifname vmap @pod_in
add rule {t} forward iifname "pwj*" drop
add rule {t} forward oifname "pwj*" drop
""")


def routes_sync(peers: Iterable[tuple[str, str]]) -> None:
    """Route each other host's pod subnet via that host's address."""
    for cidr, via in peers:
        _ip("route", "replace", cidr, "via", via)


def egress_prepare(cidr: str) -> None:
    """Masquerade the pod subnet's traffic to public addresses behind the host's address
    (to another host's pods it keeps its source: their rules admit only the job's own).
    One rule for every pod subnet on this host (a set: another installation's stays), and
    idempotent like `host_prepare`."""
    t = f"ip {TABLE}_nat"
    _nft(f"""
add table {t}
add set {t} pod_subnets {{ type ipv4_addr; flags interval; }}
add chain {t} postrouting {{ type nat hook postrouting priority 100; policy accept; }}
flush chain {t} postrouting
add rule {t} postrouting ip saddr @pod_subnets ip daddr != {{ {", ".join(NOT_PUBLIC)} }} \
oifname != "pwj*" masquerade
add element {t} pod_subnets {{ {cidr} }}
""")


def connect(name: str, *, address: str, peers: Iterable[str], egress: bool = False) -> None:
    """Link the job's namespace to this host and admit only `peers` (the job's addresses
    on the other hosts), and with `egress` public addresses too. Idempotent: a namespace
    linked already is left as it is (by its eth0: one linked by an earlier version of the
    agent, whose link had another name, too)."""
    ifname = host_ifname(name)
    if _has_link(ifname) or _linked_inside(name):
        return
    _ip("link", "add", ifname, "type", "veth", "peer", "name", "eth0", "netns", name)
    _ip("-n", name, "addr", "add", f"{address}/32", "dev", "eth0")
    _ip("-n", name, "link", "set", "eth0", "up")
    _ip("-n", name, "route", "add", GATEWAY, "dev", "eth0", "scope", "link")
    _ip("-n", name, "route", "add", "default", "via", GATEWAY, "dev", "eth0")
    _ip("addr", "add", f"{GATEWAY}/32", "dev", ifname)
    _ip("link", "set", ifname, "up")
    _ip("route", "replace", f"{address}/32", "dev", ifname)
    allowed = sorted(set(peers) - {address})
    _forget_elements(ifname)  # a leftover of an earlier namespace of the job
    out_chain, in_chain = _chains(name)
    out, into = f"inet {TABLE} {out_chain}", f"inet {TABLE} {in_chain}"
    rules = [f"add chain {out}", f"add chain {into}", f"flush chain {out}", f"flush chain {into}"]
    if allowed:
        peers_set = "{ " + ", ".join(allowed) + " }"
        rules += [
            f"add rule {out} ip saddr {address} ip daddr {peers_set} accept",
            f"add rule {into} ip saddr {peers_set} ip daddr {address} accept",
        ]
    if egress:
        private = "{ " + ", ".join(NOT_PUBLIC) + " }"
        rules += [
            f"add rule {out} ip saddr {address} ip daddr != {private} accept",
            f"add rule {into} ip daddr {address} ct state established,related accept",
        ]
    rules += [
        f"add rule {out} drop",
        f"add rule {into} drop",
        f'add element inet {TABLE} pod_out {{ "{ifname}" : jump {out_chain} }}',
        f'add element inet {TABLE} pod_in {{ "{ifname}" : jump {in_chain} }}',
    ]
    _nft("\n".join(rules) + "\n")


def sweep_rules() -> list[str]:
    """Drop what links no longer on this host left in the table: their entries in the
    verdict maps, and the job chains no entry jumps to any more (a namespace deleted by an
    agent that was killed before it unlinked it, or by an earlier version of the agent).
    Entries of links the host still has, any installation's, stay. The names dropped."""
    try:
        done = _run("nft", "-j", "list", "table", "inet", TABLE)
    except NetnsError:
        return []  # no nftables: no table to sweep
    if done.returncode != 0:
        return []  # no table yet: nothing to sweep
    items = json.loads(done.stdout).get("nftables", [])
    targets: dict[str, set[str]] = {}  # chain -> interfaces whose entries jump to it
    chains: list[str] = []
    for item in items:
        if "chain" in item and _JOB_CHAIN.match(item["chain"]["name"]):
            chains.append(item["chain"]["name"])
        for ifname, verdict in item.get("map", {}).get("elem", []) or []:
            target = verdict.get("jump", {}).get("target") if isinstance(verdict, dict) else None
            if isinstance(ifname, str) and target:
                targets.setdefault(target, set()).add(ifname)
    dropped: list[str] = []
    for ifname in sorted({i for found in targets.values() for i in found}):
        if not _has_link(ifname):
            _forget_elements(ifname)
            dropped.append(ifname)
    for chain in chains:
        if not (targets.get(chain, set()) - set(dropped)):
            try:
                _nft(f"delete chain inet {TABLE} {chain}\n")
                dropped.append(chain)
            except NetnsError:
                pass  # taken up meanwhile by a link made since
    return dropped


_JOB_CHAIN = re.compile(r"^job(_[0-9a-f]{12}_|\d+_)(in|out)$")  # this version's, and older


def _has_link(ifname: str) -> bool:
    """Whether this network namespace has the interface (asked of the kernel: /sys/class/net
    shows the namespace sysfs was mounted in, not always the caller's)."""
    try:
        socket.if_nametoindex(ifname)
    except OSError:
        return False
    return True


def _linked_inside(name: str) -> bool:
    """Whether the namespace has its end of a link (eth0)."""
    return _run("ip", "-n", name, "link", "show", "dev", "eth0").returncode == 0


def _forget_elements(ifname: str) -> None:
    """Take the interface out of both verdict maps (each on its own: one may be missing)."""
    for table_map in ("pod_out", "pod_in"):
        try:
            _nft(f'delete element inet {TABLE} {table_map} {{ "{ifname}" }}\n')
        except NetnsError:
            pass


def disconnect(name: str) -> None:
    """Forget the namespace's link and rules here (the link goes with the namespace too,
    a few milliseconds after it: the kernel tears a deleted namespace down in the
    background, so the link may vanish between the check and its deletion)."""
    ifname = host_ifname(name)
    if _has_link(ifname):
        try:
            _ip("link", "delete", ifname)
        except NetnsError:
            if _has_link(ifname):
                raise
    _forget_elements(ifname)
    for chain in _chains(name):
        try:
            _nft(f"delete chain inet {TABLE} {chain}\n")
        except NetnsError:
            pass
