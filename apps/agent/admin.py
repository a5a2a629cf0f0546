"""Nodes, node agents and pod processes in the admin. Nodes are where agents run pods: the
Nodes page cordons, drains (moving their pods off) and readies them; agents and processes
are for looking only (agents write them)."""

from __future__ import annotations

from dataclasses import replace

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from apps.agent.models import NodeAgent, PodProcess
from apps.agent.services import nodes_drain
from apps.cluster.admin import cores_text, gib_text
from apps.cluster.clusterfile import NodeDecl, node_reshape_problem, pools_fit_problems
from apps.cluster.models import Node
from apps.cluster.selectors import cluster_state
from apps.cluster.services import node_set_status
from apps.jobs.models import LIVE_POD_STATUSES, Pod
from apps.jobs.selectors import busy_node_names


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(NodeAgent)
class NodeAgentAdmin(_ReadOnly):
    list_display = ("node", "worker", "hostname", "address", "sandbox", "last_seen")
    search_fields = ("node__name", "worker", "hostname")


@admin.register(PodProcess)
class PodProcessAdmin(_ReadOnly):
    list_display = (
        "pod",
        "state",
        "queue",
        "rank",
        "world_size",
        "agent",
        "pid",
        "sandbox",
        "exit_code",
        "started_at",
        "exited_at",
    )
    list_filter = ("state", "sandbox")
    search_fields = ("pod__pod_id", "agent")
    list_select_related = ("pod",)
    raw_id_fields = ("pod",)


def _pools_fit_without(nodes, *, instead: NodeDecl | None = None) -> list[str]:
    """The cluster file's rule (a pool's root quotas fit its nodes) on the cluster as it
    would be without `nodes` (and with `instead` in their place): what an edit would break."""
    state = cluster_state()
    names = {node.name for node in nodes}
    left = {name: decl for name, decl in state.nodes.items() if name not in names}
    if instead is not None:
        left[instead.name] = instead
    pools = {state.nodes[name].pool for name in names if name in state.nodes}
    pools |= {instead.pool} if instead is not None else set()
    return pools_fit_problems(replace(state, nodes=left), pools)


class NodeForm(forms.ModelForm):
    """A node's edit may not leave its pool holding less than its root quotas guarantee
    (the rule apply_cluster and the quota edit keep): lower their min first. Nor may it
    take a node with pods on it to another pool or give it less (apply_cluster's rule
    too): drain it first."""

    class Meta:
        model = Node
        fields = "__all__"

    def clean(self) -> dict:
        data = super().clean()
        if self.errors or data.get("pool") is None:
            return data
        edited = NodeDecl(
            data.get("name") or self.instance.name,
            data["pool"].name,
            data["instance_type"].name if data.get("instance_type") else None,
            data.get("cpu") or 0,
            data.get("memory") or 0,
            data.get("gpu") or 0,
            data.get("gpu_model") or "",
        )
        old = [self.instance] if self.instance.pk else []
        problems = _pools_fit_without(old, instead=edited)
        if self.instance.pk:
            renamed = replace(edited, name=self.instance.name)  # its pods stay with the row
            reshaped = node_reshape_problem(cluster_state(busy=busy_node_names()), renamed)
            problems += [reshaped] if reshaped else []
        if problems:
            raise forms.ValidationError(problems)
        return data


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    form = NodeForm
    list_display = (
        "name",
        "pool",
        "instance_type",
        "status",
        "gpu",
        "gpu_model",
        "vcpus",
        "memory_gib",
        "last_heartbeat",
    )
    list_filter = ("status", "pool", "gpu_model")
    list_select_related = ("pool", "instance_type")
    search_fields = ("name", "gpu_model", "instance_type__name")
    autocomplete_fields = ("instance_type",)
    readonly_fields = ("last_heartbeat", "pods_watched_at", "lost_at")
    actions = ["cordon", "drain", "uncordon"]

    def get_deleted_objects(self, objs, request: HttpRequest):
        """A node with pods still on it (Pending or Running) is not deleted, alone or in a
        bulk delete: its pods would run on with no node, their jobs Running on nothing and
        its capacity gone from under them. Drain it first; delete it once they have left."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        live = (
            Pod.objects.filter(node__in=objs, status__in=LIVE_POD_STATUSES)
            .select_related("node", "job")
            .order_by("node__name", "pod_id")
        )
        protected = [
            *protected,
            *(
                gettext(
                    "Pod %(pod)s of job %(job)s (%(status)s) on node %(node)s: drain the node "
                    "first (the Drain action moves its jobs off), then delete it"
                )
                % {
                    "pod": pod.pod_id,
                    "job": pod.job.job_id,
                    "status": pod.status,
                    "node": pod.node.name if pod.node else "",
                }
                for pod in live
            ),
            *(
                gettext("%(problem)s without the nodes deleted: lower the quotas' min first")
                % {"problem": problem}
                for problem in _pools_fit_without(list(objs))
            ),
        ]
        return deleted, counts, perms_needed, protected

    @admin.display(description=_("CPU (cores)"), ordering="cpu")
    def vcpus(self, obj: Node) -> str:
        return cores_text(obj.cpu)

    @admin.display(description=_("memory (GiB)"), ordering="memory")
    def memory_gib(self, obj: Node) -> str:
        return gib_text(obj.memory)

    @admin.action(description=_("Cordon: schedule no new pods on the selected nodes"))
    def cordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        # A Draining node is cordoned once its jobs are moved off: cordoning it again would
        # leave them where they are.
        changed = node_set_status(
            nodes=queryset.exclude(status=Node.Status.DRAINING), status=Node.Status.CORDONED
        )
        self.message_user(
            request,
            ngettext("Cordoned %(count)d node.", "Cordoned %(count)d nodes.", changed)
            % {"count": changed},
            messages.SUCCESS,
        )

    @admin.action(description=_("Drain: cordon the selected nodes and move their jobs elsewhere"))
    def drain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        moved = nodes_drain(nodes=queryset, now=timezone.now())
        drained = len(queryset)
        self.message_user(
            request,
            gettext(
                "%(drained)s: cordoned, %(moved)s. Their pods get SIGTERM and the job's grace "
                "period to checkpoint; the jobs are requeued as a platform interruption, "
                "spending no AIMaster restart. Mark the nodes Ready to use them again."
            )
            % {
                "drained": ngettext("Drained %(count)d node", "Drained %(count)d nodes", drained)
                % {"count": drained},
                "moved": ngettext("%(count)d job moved off", "%(count)d jobs moved off", moved)
                % {"count": moved},
            },
            messages.SUCCESS,
        )

    @admin.action(description=_("Mark the selected nodes Ready"))
    def uncordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        changed = node_set_status(nodes=queryset, status=Node.Status.READY)
        self.message_user(
            request,
            ngettext("Marked %(count)d node Ready.", "Marked %(count)d nodes Ready.", changed)
            % {"count": changed},
            messages.SUCCESS,
        )
