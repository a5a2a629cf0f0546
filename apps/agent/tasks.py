"""Node agent tasks. pod_start_task and pod_stop_task run on the agent serving the pod's node
(queue "node.<name>", or "public"); the two periodic ones run on any ordinary worker.

Heartbeats: `agent_heartbeat_task` asks every worker over Celery's broadcast (remote
control) channel for `agent_info`; each agent answers with the node queues it consumes, so
a node is alive exactly while an agent consuming its queue answers.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import UTC, datetime

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown
from celery.worker.control import inspect_command
from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.agent import housekeeping, runner, services, supervisor
from apps.core.redis import singleton_lock

logger = logging.getLogger(__name__)


@shared_task
def pod_start_task(pod_id: str) -> None:
    supervisor.pod_start(pod_id=pod_id)


@shared_task
def pod_stop_task(pod_id: str, grace: float) -> None:
    supervisor.pod_stop(pod_id=pod_id, grace=grace)


@shared_task
def agent_heartbeat_task() -> None:
    if settings.EXECUTION_BACKEND != "agent":
        return
    with singleton_lock(
        "agent-heartbeat", timeout=max(30.0, settings.AGENT_HEARTBEAT_INTERVAL)
    ) as acquired:
        if acquired:
            agents_ping(timeout=1.0)


def agents_ping(*, timeout: float) -> int:
    """Ask all agents for `agent_info` and record each answer as a heartbeat of its nodes."""
    from paiweb.celery import app

    replies = app.control.broadcast("agent_info", reply=True, timeout=timeout) or []
    now, served = timezone.now(), 0
    for reply in replies:
        for worker, info in reply.items():
            if isinstance(info, dict) and (info.get("nodes") or info.get("public")):
                served += services.agent_heartbeat(
                    worker=worker,
                    hostname=info.get("hostname", ""),
                    address=info.get("address", ""),
                    nodes=info.get("nodes", []),
                    public=bool(info.get("public")),
                    sandbox=info.get("sandbox", ""),
                    now=now,
                    pod_cidr=str(info.get("pod_cidr") or ""),
                    # an agent from before does not report its watch rounds
                    reports_rounds="pods_watched_at" in info,
                    pods_watched_at=_epoch(info.get("pods_watched_at")),
                )
    return served


def _epoch(value) -> datetime | None:
    """An agent's epoch seconds as a time; None for anything else (no round yet)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        try:
            return datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    return None


@shared_task
def nodes_watchdog_task() -> None:
    with singleton_lock(
        "nodes-watchdog", timeout=max(30.0, settings.AGENT_HEARTBEAT_INTERVAL)
    ) as acquired:
        if not acquired:
            return
        now = timezone.now()
        services.nodes_drain_sweep(now=now)  # whatever runs the pods
        if settings.EXECUTION_BACKEND == "agent":
            services.nodes_mark_lost(now=now)
            services.jobs_timeout_sweep(now=now)
            services.restarts_launch_sweep(now=now)
            services.jobs_stopping_sweep(now=now)


# --- inside the agent process --------------------------------------------------------------


def _served(queues) -> tuple[list[str], bool]:
    names = [q.name for q in queues]
    prefix = services.node_queue("")
    return [
        n.removeprefix(prefix) for n in names if n.startswith(prefix)
    ], services.PUBLIC_QUEUE in names


def agent_address() -> str:
    """Where pods on other hosts reach this host's pods (MASTER_ADDR)."""
    if address := os.environ.get("PAIWEB_AGENT_ADDRESS"):
        return address
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _info(nodes: list[str], public: bool) -> dict:
    return {
        "nodes": nodes,
        "public": public,
        "hostname": socket.gethostname(),
        "address": agent_address(),
        "sandbox": runner.isolation_status(settings.SANDBOX).mode,
        "pod_cidr": settings.POD_CIDR,
        "pods": len(supervisor.running_pods()),
        "pods_watched_at": supervisor.pods_watched_at(),
    }


@inspect_command()
def agent_info(state) -> dict:
    """Remote-control command every worker answers; only agents name nodes or "public"."""
    nodes, public = _served(state.consumer.task_consumer.queues)
    if not (nodes or public):
        return {}
    try:
        supervisor.network_sync()  # routes to hosts that joined since
    finally:
        connection.close()  # the remote-control thread's own connection
    return _info(nodes, public)


@worker_ready.connect
def _agent_ready(sender=None, **kwargs) -> None:
    """An agent starts: take its name, re-adopt the pods an earlier agent of this name left
    running, report in, then reconcile and watch for as long as it runs."""
    nodes, public = _served(sender.task_consumer.queues)
    if not (nodes or public):
        return
    supervisor.set_agent_name(sender.hostname, tuple(q.name for q in sender.task_consumer.queues))
    status = runner.isolation_status(settings.SANDBOX)
    how = (
        "isolated"
        if status.complete
        else f"INSECURELY ({status.detail})"
        if status.can_run
        else f"NOT AT ALL ({status.detail})"
    )
    logger.warning(
        "agent %s serves %s%s; pods run %s",
        sender.hostname,
        ", ".join(nodes) or "no nodes",
        " and the public pool" if public else "",
        how,
    )
    try:
        supervisor.reconcile_once(starts=False)  # re-adopt first: the sweep spares them
    except Exception:
        logger.exception(
            "agent %s could not reconcile at its start (the loop tries again)", sender.hostname
        )
    supervisor.sweep_leftovers()
    housekeeping.start_housekeeping(interval=settings.POD_HOUSEKEEPING_SECONDS)
    try:
        info = _info(nodes, public)
        services.agent_heartbeat(
            worker=sender.hostname,
            hostname=info["hostname"],
            address=info["address"],
            nodes=nodes,
            public=public,
            sandbox=info["sandbox"],
            now=timezone.now(),
            pod_cidr=info["pod_cidr"],
            reports_rounds=True,
            pods_watched_at=_epoch(info["pods_watched_at"]),
        )
    except Exception:
        logger.exception("agent %s could not report in", sender.hostname)
    finally:
        connection.close()
    supervisor.network_sync()
    supervisor.start_loops()


@worker_shutdown.connect
def _agent_shutdown(sender=None, **kwargs) -> None:
    if supervisor.is_agent():
        supervisor.shutdown()
        supervisor.release_host()
