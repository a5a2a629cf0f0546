"""GetJob's Pods[].Ip, PodIp and PodIps: the address a pod is reached at by its job's other
pods, as the node agents wire a job's network (apps/agent/netns.py), never a host's own.

The agents are played by their records (NodeAgent heartbeats, PodProcess claims): what
the addresses are derived from. tests/integration/test_multi_host.py runs real hosts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from alibabacloud_pai_dlc20201203.models import GetJobRequest
from django.utils import timezone

from apps.agent import netns
from apps.agent.models import NodeAgent, PodProcess
from apps.cluster.models import Node
from apps.jobs.models import Job, Pod
from apps.scheduler.services import scheduler_tick
from tests.api.conftest import quota_job_body

pytestmark = pytest.mark.django_db


def running_job(create_job, ws_a) -> Job:
    """A 2-pod quota job, placed by the scheduler (on one node or two)."""
    job_id = create_job(quota_job_body(ws_a))
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    return Job.objects.get(job_id=job_id)


def claim(pod: Pod, *, host: str, agent: str = "") -> None:
    """The pod's process, claimed by the agent on `host` (as `pod_claim` records it)."""
    PodProcess.objects.create(
        pod=pod,
        state=PodProcess.State.RUNNING,
        queue="q",
        agent=agent or f"agent@{host}",
        host=host,
        queued_at=timezone.now(),
    )


def heartbeat(node: Node, *, host: str, cidr: str = "") -> None:
    NodeAgent.objects.create(
        node=node,
        worker=f"agent@{host}",
        hostname=host,
        address=f"192.0.2.{len(host)}",  # the host's own address: never a pod's
        pod_cidr=cidr,
        last_seen=timezone.now(),
    )


def pods_of(raw, job: Job) -> list[dict]:
    return raw.send("GET", f"/api/v1/jobs/{job.job_id}").json()["Pods"]


def test_pods_on_one_host_reach_each_other_on_its_loopback(dlc, raw, create_job, ws_a):
    job = running_job(create_job, ws_a)
    for node in {pod.node for pod in job.pods.all()}:
        heartbeat(node, host="host-a")  # an agent without a pod subnet
    for pod in job.pods.all():
        claim(pod, host="host-a")
    for item in pods_of(raw, job):
        assert (item["Ip"], item["PodIp"]) == ("127.0.0.1", "127.0.0.1")
        assert item["PodIps"] == [{"InterfaceName": "lo", "Ip": "127.0.0.1"}]
    pods = dlc.get_job(job.job_id, GetJobRequest()).body.pods
    assert [p.ip for p in pods] == ["127.0.0.1", "127.0.0.1"]  # both SDKs model Ip


def test_pods_on_hosts_with_pod_subnets_get_the_jobs_address_on_each(
    raw, create_job, ws_a, cluster
):
    job = running_job(create_job, ws_a)
    first, second = job.pods.order_by("index")
    other = next(n for n in Node.objects.filter(pool=first.node.pool) if n != first.node)
    Pod.objects.filter(pk=second.pk).update(node=other)  # the gang spread over two hosts
    heartbeat(first.node, host="host-a", cidr="10.232.0.0/16")
    heartbeat(other, host="host-b", cidr="10.233.0.0/16")
    claim(first, host="host-a")
    claim(second, host="host-b")
    items = {item["PodId"]: item for item in pods_of(raw, job)}
    a, b = netns.job_address("10.232.0.0/16", job.pk), netns.job_address("10.233.0.0/16", job.pk)
    assert items[first.pod_id]["PodIps"] == [{"InterfaceName": "eth0", "Ip": a}]
    assert items[second.pod_id]["PodIps"] == [{"InterfaceName": "eth0", "Ip": b}]
    assert (items[first.pod_id]["Ip"], items[second.pod_id]["PodIp"]) == (a, b)
    assert a.startswith("10.232.") and b.startswith("10.233.")
    shown = str(items)
    assert "192.0.2." not in shown  # no host's own address


def test_a_job_across_hosts_without_pod_subnets_has_no_address(raw, create_job, ws_a):
    """Its pods' namespaces have only a loopback each: no address reaches across."""
    job = running_job(create_job, ws_a)
    first, second = job.pods.order_by("index")
    claim(first, host="host-a")
    claim(second, host="host-b")
    for item in pods_of(raw, job):
        assert "Ip" not in item and "PodIp" not in item and "PodIps" not in item


def test_a_pod_no_agent_has_claimed_has_no_address(raw, create_job, ws_a):
    job = running_job(create_job, ws_a)
    first, second = job.pods.order_by("index")
    claim(first, host="host-a")
    PodProcess.objects.create(pod=second, queue="q", queued_at=timezone.now())  # queued
    items = {item["PodId"]: item for item in pods_of(raw, job)}
    assert items[first.pod_id]["Ip"] == "127.0.0.1"
    assert "Ip" not in items[second.pod_id]


def test_a_history_pod_keeps_the_address_it_had(raw, create_job, ws_a):
    job = running_job(create_job, ws_a)
    pods = list(job.pods.all())
    for pod in pods:
        claim(pod, host="host-a")
    Pod.objects.filter(job=job).update(status="Preempted", finished_at=timezone.now())
    Job.objects.filter(pk=job.pk).update(attempt=1)
    for pod in pods:  # the next attempt, not claimed yet
        Pod.objects.create(
            job=job, role=pod.role, index=pod.index, attempt=1, pod_id=f"{pod.pod_id}-a1"
        )
    for item in pods_of(raw, job):
        assert "Ip" not in item
        assert [h["Ip"] for h in item["HistoryPods"]] == ["127.0.0.1"]
