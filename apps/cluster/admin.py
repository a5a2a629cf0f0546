from __future__ import annotations

from dataclasses import replace

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, QuerySet, Sum
from django.http import HttpRequest
from django.utils import timezone

from apps.agent.services import node_drain
from apps.cluster.clusterfile import cluster_file_check, path_of
from apps.cluster.models import InstanceType, Node, Quota, ResourcePool
from apps.cluster.selectors import cluster_state
from apps.cluster.services import node_set_status


def _cores(millicores: int) -> str:
    return f"{millicores / 1000:g}"


def _gib(mib: int) -> str:
    return f"{mib / 1024:g}"


@admin.register(InstanceType)
class InstanceTypeAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "resource_type",
        "vcpus_",
        "memory_gib_",
        "gpu",
        "gpu_model",
        "price_per_hour",
        "public_capacity",
        "spot_enabled",
    )
    list_filter = ("resource_type", "spot_enabled", "gpu_model")
    search_fields = ("name", "gpu_model")

    @admin.display(description="vCPUs", ordering="cpu")
    def vcpus_(self, obj: InstanceType) -> str:
        return _cores(obj.cpu)

    @admin.display(description="memory (GiB)", ordering="memory")
    def memory_gib_(self, obj: InstanceType) -> str:
        return _gib(obj.memory)


class NodeInline(admin.TabularInline):
    model = Node
    fields = (
        "name",
        "instance_type",
        "cpu",
        "memory",
        "gpu",
        "gpu_model",
        "status",
        "last_heartbeat",
    )
    readonly_fields = ("last_heartbeat",)
    autocomplete_fields = ("instance_type",)
    extra = 0
    show_change_link = True


@admin.register(ResourcePool)
class ResourcePoolAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "resource_type", "node_count", "gpu_total", "quota_count")
    list_filter = ("kind", "resource_type")
    search_fields = ("name",)
    inlines = [NodeInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ResourcePool]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                _nodes=Count("nodes", distinct=True),
                _gpus=Sum("nodes__gpu"),
                _quotas=Count("quotas", distinct=True),
            )
        )

    @admin.display(description="nodes", ordering="_nodes")
    def node_count(self, obj) -> int:
        return obj._nodes

    @admin.display(description="GPUs", ordering="_gpus")
    def gpu_total(self, obj) -> int:
        return obj._gpus or 0

    @admin.display(description="quotas", ordering="_quotas")
    def quota_count(self, obj) -> int:
        return obj._quotas


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
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
    readonly_fields = ("last_heartbeat",)
    actions = ["cordon", "drain", "uncordon"]

    @admin.display(description="vCPUs", ordering="cpu")
    def vcpus(self, obj: Node) -> str:
        return _cores(obj.cpu)

    @admin.display(description="memory (GiB)", ordering="memory")
    def memory_gib(self, obj: Node) -> str:
        return _gib(obj.memory)

    @admin.action(description="Cordon: schedule no new pods on the selected nodes")
    def cordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        changed = node_set_status(nodes=queryset, status=Node.Status.CORDONED)
        self.message_user(request, f"Cordoned {changed} node(s).", messages.SUCCESS)

    @admin.action(description="Drain: cordon the selected nodes and move their jobs elsewhere")
    def drain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        now = timezone.now()
        # All cordoned first, so a job on two of them is not placed back onto the second.
        node_set_status(
            nodes=queryset.filter(status=Node.Status.READY), status=Node.Status.CORDONED
        )
        moved = sum(node_drain(node=node, now=now) for node in queryset)
        self.message_user(
            request,
            f"Drained {len(queryset)} node(s): cordoned, {moved} job(s) moved off. Their pods "
            "get SIGTERM and the job's grace period to checkpoint; the jobs are requeued as a "
            "platform interruption, spending no AIMaster restart. Mark the nodes Ready to use "
            "them again.",
            messages.SUCCESS,
        )

    @admin.action(description="Mark the selected nodes Ready")
    def uncordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        changed = node_set_status(nodes=queryset, status=Node.Status.READY)
        self.message_user(request, f"Marked {changed} node(s) Ready.", messages.SUCCESS)


class QuotaForm(forms.ModelForm):
    """Applies the cluster file's quota-tree rules to the tree this edit would leave."""

    class Meta:
        model = Quota
        fields = "__all__"

    def clean(self) -> dict:
        data = super().clean()
        name, pool, parent = data.get("name"), data.get("pool"), data.get("parent")
        if self.errors or not name or pool is None:
            return data
        state = cluster_state()
        others = {k: v for k, v in state.quotas.items() if k not in {name, self.instance.name}}
        # The edit, written as a one-quota cluster file and checked against the rest.
        declared = {
            "resource_type": data.get("resource_type", ""),
            "min": {
                "cpu": (data.get("min_cpu") or 0) / 1000,
                "memory_gib": (data.get("min_memory") or 0) / 1024,
                "gpu": data.get("min_gpu") or 0,
            },
        }
        declared.update(
            {"parent": parent.name, "pool": pool.name} if parent else {"pool": pool.name}
        )
        _, errors = cluster_file_check(
            {"quotas": {name: declared}}, existing=replace(state, quotas=others)
        )
        prefix = path_of("quotas", name) + "."
        if errors:
            raise forms.ValidationError([e.removeprefix(prefix) for e in errors])
        return data


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    form = QuotaForm
    list_display = (
        "name",
        "parent",
        "pool",
        "resource_type",
        "min_gpu",
        "min_cores",
        "min_memory_gib",
        "queue_strategy",
        "workspace_names",
    )
    list_filter = ("resource_type", "pool", "queue_strategy")
    list_select_related = ("parent", "pool")
    search_fields = ("name", "workspaces__name")
    filter_horizontal = ("workspaces",)
    autocomplete_fields = ("parent",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Quota]:
        return super().get_queryset(request).prefetch_related("workspaces")

    @admin.display(description="min cores", ordering="min_cpu")
    def min_cores(self, obj: Quota) -> str:
        return _cores(obj.min_cpu)

    @admin.display(description="min memory (GiB)", ordering="min_memory")
    def min_memory_gib(self, obj: Quota) -> str:
        return _gib(obj.min_memory)

    @admin.display(description="workspaces")
    def workspace_names(self, obj: Quota) -> str:
        return ", ".join(w.name for w in obj.workspaces.all())
