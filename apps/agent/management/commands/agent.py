"""`manage.py agent`: run a node agent — a Celery worker consuming its nodes' queues.

    manage.py agent --nodes all                      # every node (one host runs them all)
    manage.py agent --nodes gpu-node-0,gpu-node-1    # one agent per host, each its nodes

It also consumes "public" (pods of pay-as-you-go and spot jobs) unless --no-public. The
worker uses the threads pool for the short start and stop tasks; one watch loop and one
reconcile loop cover every pod (apps/agent/supervisor.py). Each pod runs under a shim that
outlives the agent. The command execs Celery, so signals reach the worker directly: SIGTERM
stops the agent and leaves its pods running for the next agent of the same name to re-adopt
(with AGENT_STOP_PODS_ON_EXIT, it stops them first).
"""

from __future__ import annotations

import os
import shutil
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.agent.runner import isolation_status
from apps.agent.services import PUBLIC_QUEUE, node_queue
from apps.cluster.models import Node


class Command(BaseCommand):
    help = "Run a node agent: a Celery worker on the queues of the nodes it serves."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--nodes",
            default=os.environ.get("AGENT_NODES") or "all",
            help='"all" (default) or comma-separated node names',
        )
        parser.add_argument(
            "--no-public",
            action="store_true",
            help='do not run pods of the public pool (queue "public")',
        )
        parser.add_argument("--name", default="agent@%h", help="Celery worker name")
        parser.add_argument(
            "--concurrency", type=int, default=8, help="threads for start/stop tasks"
        )
        parser.add_argument(
            "--address",
            default="",
            help="address other hosts reach this host's pods at (MASTER_ADDR)",
        )
        parser.add_argument(
            "--pod-cidr", default="", help="this host's pod subnet for multi-host jobs (POD_CIDR)"
        )
        parser.add_argument("--log-level", default="info")

    def handle(self, *args, **options) -> None:
        status = isolation_status(settings.SANDBOX)  # first: refuse before touching anything
        if not status.can_run:
            raise CommandError(
                f"this host cannot isolate pods, so the agent will not run any "
                f"(SANDBOX=strict): {'; '.join(status.missing)}. Fix that, or set "
                f"SANDBOX=insecure to run pods without full isolation (unsafe)."
            )
        if (options["pod_cidr"] or settings.POD_CIDR) and not shutil.which("nft"):
            raise CommandError(
                "POD_CIDR is set, but nftables (nft) is not installed: pods on "
                "several hosts could not be kept apart (apt-get install "
                "nftables)"
            )
        names = self._nodes(options["nodes"])
        queues = [node_queue(name) for name in names]
        if not options["no_public"]:
            queues.append(PUBLIC_QUEUE)
        if not queues:
            raise CommandError("no nodes to serve and --no-public: nothing to do")
        self.stdout.write(
            f"agent {options['name']}: nodes {', '.join(names) or '(none)'}"
            f"{' + public' if not options['no_public'] else ''}; "
            f"pods: {status.detail}"
        )
        if not status.complete:
            self.stderr.write(
                f"WARNING: SANDBOX=insecure: pods are NOT isolated from the "
                f"host: {'; '.join(status.missing)}"
            )
        if options["address"]:
            os.environ["PAIWEB_AGENT_ADDRESS"] = options["address"]
        if options["pod_cidr"]:
            os.environ["POD_CIDR"] = options["pod_cidr"]
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "paiweb",
            "worker",
            "-Q",
            ",".join(queues),
            "-n",
            options["name"],
            "-P",
            "threads",
            "-c",
            str(options["concurrency"]),
            "-l",
            options["log_level"],
            "--without-gossip",
            "--without-mingle",
        ]
        self.stdout.flush()
        os.execv(sys.executable, argv)

    def _nodes(self, spec: str) -> list[str]:
        known = list(Node.objects.order_by("name").values_list("name", flat=True))
        if spec.strip() == "all":
            return known
        wanted = [name.strip() for name in spec.split(",") if name.strip()]
        if unknown := sorted(set(wanted) - set(known)):  # e.g. before apply_cluster: serve anyway
            self.stderr.write(f"warning: not (yet) in the database: {', '.join(unknown)}")
        return wanted
