"""A job namespace's link to its host (POD_CIDR), on a scratch host of its own: a network
namespace made for the test, so nothing of this machine's links or nftables is touched.

Two installations on one host each count their jobs from 1, so their namespaces' links and
nftables chains are named for the namespace, never for the job's number: linking one
installation's job 5 must not find, reuse or delete the other's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from apps.agent import netns

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("ip"),
    reason="links and nftables need root, iproute2 and nftables (CI has them)",
)

# Run on the scratch host (`nsenter --net`, as the multi-host tests run their agents): link
# two namespaces, the first twice (a second pod of its job), report what the host has, unlink
# the first, report again.
ON_THE_HOST = """
import json, subprocess, sys
sys.path.insert(0, {root!r})
from apps.agent import netns

first, second = {first!r}, {second!r}

def seen():
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    rules = subprocess.run(
        ["nft", "list", "table", "inet", netns.TABLE], capture_output=True, text=True
    ).stdout
    out = {{}}
    for name, address in ((first, "10.240.0.5"), (second, "10.240.0.5")):
        inside = subprocess.run(
            ["ip", "-n", name, "-o", "addr", "show", "dev", "eth0"],
            capture_output=True, text=True,
        ).stdout if netns.path(name).exists() else ""
        out[name] = {{
            "link": f" {{netns.host_ifname(name)}}@" in links,
            "chains": [c for c in netns._chains(name) if f"chain {{c}} " in rules],
            "mapped": rules.count(netns.host_ifname(name)),
            "address": address in inside,
        }}
    return out

netns.host_prepare()
report = {{}}
for name in (first, second):
    netns.ensure(name)
    # the same job number's address in two installations' subnets that happen to be alike
    netns.connect(name, address="10.240.0.5", peers=["10.241.0.5"])
netns.connect(first, address="10.240.0.5", peers=["10.241.0.5"])  # its second pod: as it is
report["linked"] = seen()
netns.delete(first)
netns.disconnect(first)
report["unlinked"] = seen()
print(json.dumps(report))
"""


@pytest.fixture
def host():
    """A scratch network namespace playing a host, and the two job namespaces it links."""
    tag = uuid.uuid4().hex[:6]
    scratch = f"pwtl-{tag}"
    # the same job number in two installations: their job ids (and so namespaces) differ
    first, second = netns.name_for(f"dlc{tag}a1"), netns.name_for(f"dlc{tag}b2")
    subprocess.run(["ip", "netns", "add", scratch], check=True, capture_output=True)
    try:
        yield scratch, first, second
    finally:
        for name in (first, second, scratch):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def on_the_host(scratch: str, script: str) -> subprocess.CompletedProcess:
    """Run a Python script in the scratch host's network namespace (`nsenter --net`, as the
    multi-host tests run their agents)."""
    return subprocess.run(
        ["nsenter", f"--net=/run/netns/{scratch}", "--", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_two_installations_jobs_get_links_and_chains_of_their_own(host):
    scratch, first, second = host
    done = on_the_host(scratch, ON_THE_HOST.format(root=str(ROOT), first=first, second=second))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)

    linked = report["linked"]
    assert netns.host_ifname(first) != netns.host_ifname(second)
    for name in (first, second):
        assert linked[name]["link"], f"{name} has no link on the host"
        assert linked[name]["address"], f"{name} has no address inside"
        assert len(linked[name]["chains"]) == 2, f"{name}'s chains: {linked[name]['chains']}"
        assert linked[name]["mapped"] == 2, "each link is in both verdict maps"

    unlinked = report["unlinked"]
    assert unlinked[first] == {"link": False, "chains": [], "mapped": 0, "address": False}
    assert unlinked[second] == linked[second], "unlinking one namespace touched the other's"


def test_a_link_name_fits_an_interface_name_and_is_the_namespaces_own():
    names = {netns.name_for(f"dlc{i:014x}", host) for i in range(200) for host in ("", "h")}
    links = {netns.host_ifname(name) for name in names}
    assert len(links) == len(names)
    assert all(len(link) <= 15 and link.startswith("pwj") for link in links)
    assert netns.host_ifname(netns.name_for("dlc1")) == netns.host_ifname(netns.name_for("dlc1"))


# Run on a scratch host: the agent's start, three times (restarts), with a job linked
# between them; two installations' pod subnets with egress.
RESTARTS = """
import subprocess, sys
sys.path.insert(0, {root!r})
from apps.agent import netns

netns.host_prepare()
netns.egress_prepare("10.240.0.0/24")
netns.ensure({job!r})
netns.connect({job!r}, address="10.240.0.5", peers=[], egress=True)
for cidr in ("10.240.0.0/24", "10.240.0.0/24", "10.241.0.0/24"):
    netns.host_prepare()
    netns.egress_prepare(cidr)
print(subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True).stdout)
"""


def test_an_agent_starting_again_rewrites_the_base_rules_and_keeps_the_jobs(host):
    scratch, job, _ = host
    done = on_the_host(scratch, RESTARTS.format(root=str(ROOT), job=job))
    assert done.returncode == 0, done.stderr
    rules = done.stdout
    assert rules.count('iifname "pwj*" drop') == 2, rules  # input's and forward's, once each
    assert rules.count('oifname "pwj*" drop') == 1, rules
    assert rules.count("iifname vmap @pod_out") == 1, rules
    assert rules.count("masquerade") == 1, rules  # one rule for every pod subnet
    assert "10.240.0.0/24" in rules and "10.241.0.0/24" in rules  # both installations'
    assert rules.count(netns.host_ifname(job)) == 2, "the linked job is still in both maps"
    assert all(f"chain {c} " in rules for c in netns._chains(job))


# Run on a scratch host: a namespace linked by an agent of before the link names changed
# (`pwj<job number>`), then connected again by this one (a second pod of the running job
# after an upgrade).
UPGRADED = """
import subprocess, sys
sys.path.insert(0, {root!r})
from apps.agent import netns

netns.host_prepare()
netns.ensure({job!r})
for argv in (
    ["ip", "link", "add", "pwj5", "type", "veth", "peer", "name", "eth0", "netns", {job!r}],
    ["ip", "-n", {job!r}, "addr", "add", "10.240.0.5/32", "dev", "eth0"],
):
    subprocess.run(argv, check=True)
netns.connect({job!r}, address="10.240.0.5", peers=[])
print(subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout)
"""


def test_a_namespace_an_earlier_agent_linked_is_left_as_it_is(host):
    scratch, job, _ = host
    done = on_the_host(scratch, UPGRADED.format(root=str(ROOT), job=job))
    assert done.returncode == 0, done.stderr  # not "File exists" for its eth0
    assert " pwj5@" in done.stdout and netns.host_ifname(job) not in done.stdout


# Run on a scratch host: two linked namespaces; the first deleted without being unlinked (its
# agent killed in between), and an earlier version's leftovers (`pwj5`, `job5_in/_out`);
# then the sweep an agent's start runs.
SWEPT = """
import json, subprocess, sys, time
sys.path.insert(0, {root!r})
from apps.agent import netns

netns.host_prepare()
for name, address in (({first!r}, "10.240.0.5"), ({second!r}, "10.240.0.6")):
    netns.ensure(name)
    netns.connect(name, address=address, peers=[])
netns.delete({first!r})
# the kernel takes the link down a few milliseconds later; an agent's next start is later
for _ in range(500):
    if not netns._has_link(netns.host_ifname({first!r})):
        break
    time.sleep(0.01)
netns._nft(
    "add chain inet paiweb job5_out\\nadd chain inet paiweb job5_in\\n"
    'add element inet paiweb pod_out {{ "pwj5" : jump job5_out }}\\n'
    'add element inet paiweb pod_in {{ "pwj5" : jump job5_in }}\\n'
)
dropped = netns.sweep_rules()
rules = subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True).stdout
print(json.dumps({{"dropped": dropped, "rules": rules, "again": netns.sweep_rules()}}))
"""


def test_an_agents_start_sweeps_the_rules_of_links_gone_and_keeps_the_rest(host):
    scratch, first, second = host
    done = on_the_host(scratch, SWEPT.format(root=str(ROOT), first=first, second=second))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    gone, kept = netns.host_ifname(first), netns.host_ifname(second)
    rules = report["rules"]
    # quoted: a live link's name may start with pwj5 too (12 hex digits of a hash)
    assert gone not in rules and '"pwj5"' not in rules and "job5_" not in rules, rules
    assert not any(f"chain {c} " in rules for c in netns._chains(first)), rules
    assert rules.count(kept) == 2, rules  # the live link: both map entries
    assert all(f"chain {c} " in rules for c in netns._chains(second)), rules
    assert set(report["dropped"]) == {gone, "pwj5", "job5_in", "job5_out", *netns._chains(first)}
    assert report["again"] == []  # nothing left to sweep


# Run on a scratch host: namespaces linked, then deleted and at once unlinked (what an agent
# did when it released a job's namespace), a few milliseconds apart or none.
RELEASED = """
import json, subprocess, sys, time
sys.path.insert(0, {root!r})
from apps.agent import netns

netns.host_prepare()
errors = []
for i in range(30):
    name = netns.name_for("dlc{tag}%04d" % i)
    netns.ensure(name)
    netns.connect(name, address="10.240.0.5", peers=[])
    time.sleep((0, 0.005, 0.015)[i % 3])
    try:
        netns.delete(name)
        netns.disconnect(name)
    except Exception as exc:
        errors.append(str(exc))
rules = subprocess.run(
    ["nft", "list", "table", "inet", netns.TABLE], capture_output=True, text=True
)
print(json.dumps({{"errors": errors, "rules": rules.stdout}}))
"""


def test_unlinking_a_namespace_just_deleted_neither_fails_nor_leaves_its_rules(host):
    # the kernel takes a deleted namespace's link down in the background: it may still be
    # there when the unlink looks, and gone when it deletes it ("Cannot find device")
    scratch, _, _ = host
    tag = uuid.uuid4().hex[:6]
    done = on_the_host(scratch, RELEASED.format(root=str(ROOT), tag=tag))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["errors"] == []
    assert "jump" not in report["rules"] and "chain job_" not in report["rules"], report["rules"]


# Link a namespace, listen on every address of the scratch host (IPv4 and IPv6), and try the
# host side of the link from inside: its IPv6 link-local address (the kernel gives one to
# each end of a link, though the job's addresses are IPv4 only) as well as the gateway.
LINK_LOCAL = """
import json, socket, subprocess, sys, time
sys.path.insert(0, {root!r})
from apps.agent import netns

name = {first!r}
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)  # as a host's is
netns.host_prepare()
netns.ensure(name)
netns.connect(name, address="10.240.0.5", peers=[])
ifname = netns.host_ifname(name)
server = socket.socket(socket.AF_INET6)
server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
server.bind(("::", 0))
server.listen(8)
port = server.getsockname()[1]


def link_local(device, *where):
    out = subprocess.run(
        ["ip", *where, "-6", "-o", "addr", "show", "dev", device, "scope", "link"],
        capture_output=True,
        text=True,
    ).stdout
    return "" if not out or "tentative" in out else out.split()[3].split("/")[0]


deadline = time.monotonic() + 10  # duplicate address detection: about a second
while time.monotonic() < deadline and not (
    link_local(ifname) and link_local("eth0", "-n", name)
):
    time.sleep(0.1)
address = link_local(ifname)
control = socket.socket(socket.AF_INET6)
control.settimeout(2)
control.connect((address, port, 0, socket.if_nametoindex(ifname)))  # from the host: it answers
control.close()
probe = f'''
import socket
eth0 = socket.if_nametoindex("eth0")
for target in (({{address!r}}, {{port}}, 0, eth0), ("169.254.1.1", {{port}})):
    family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
    s = socket.socket(family); s.settimeout(1)
    try:
        s.connect(target); print("REACHED", target[0])
    except OSError as exc:
        print("blocked", target[0], type(exc).__name__)
'''
inside = subprocess.run(
    ["ip", "netns", "exec", name, sys.executable, "-c", probe], capture_output=True, text=True
)
print(json.dumps({{"address": address, "out": inside.stdout, "err": inside.stderr}}))
"""


def test_a_linked_namespace_reaches_its_host_neither_over_ipv6_link_local_nor_the_gateway(host):
    scratch, first, _ = host
    done = on_the_host(scratch, LINK_LOCAL.format(root=str(ROOT), first=first))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["address"].startswith("fe80:"), report
    assert "REACHED" not in report["out"], report
    assert report["out"].count("blocked") == 2, report
