from __future__ import annotations

from dataclasses import replace

from django import forms
from django.contrib import admin
from django.db.models import Count, QuerySet, Sum
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from apps.cluster.clusterfile import cluster_file_check, path_of
from apps.cluster.models import Image, InstanceType, Node, OriginalPrice, Quota, ResourcePool
from apps.cluster.selectors import cluster_state


def cores_text(millicores: int) -> str:
    return f"{millicores / 1000:g}"


def gib_text(mib: int) -> str:
    return f"{mib / 1024:g}"


class OriginalPriceInline(admin.TabularInline):
    """The type's original price history, recorded by every save that changes the price
    (bills read it): shown, never edited."""

    model = OriginalPrice
    fields = ("at", "price_per_hour")
    readonly_fields = fields
    ordering = ("-at",)
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(OriginalPrice)
class OriginalPriceAdmin(admin.ModelAdmin):
    """The original price history: written by the saves that change a price, never here
    (bills read it)."""

    list_display = ["instance_type", "at", "price_per_hour"]
    list_filter = ["instance_type"]
    search_fields = ["instance_type__name"]
    date_hierarchy = "at"
    list_select_related = ["instance_type"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(InstanceType)
class InstanceTypeAdmin(admin.ModelAdmin):
    inlines = [OriginalPriceInline]
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

    @admin.display(description=_("CPU (cores)"), ordering="cpu")
    def vcpus_(self, obj: InstanceType) -> str:
        return cores_text(obj.cpu)

    @admin.display(description=_("memory (GiB)"), ordering="memory")
    def memory_gib_(self, obj: InstanceType) -> str:
        return gib_text(obj.memory)


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = ("name", "uri", "description")
    search_fields = ("name", "uri", "description")


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
    # Deleted on its own page, which refuses a node pods still run on (NodeAdmin).
    can_delete = False


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

    @admin.display(description=_("nodes"), ordering="_nodes")
    def node_count(self, obj) -> int:
        return obj._nodes

    @admin.display(description=_("GPUs"), ordering="_gpus")
    def gpu_total(self, obj) -> int:
        return obj._gpus or 0

    @admin.display(description=_("quotas"), ordering="_quotas")
    def quota_count(self, obj) -> int:
        return obj._quotas


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

    @admin.display(description=_("min cores"), ordering="min_cpu")
    def min_cores(self, obj: Quota) -> str:
        return cores_text(obj.min_cpu)

    @admin.display(description=_("min memory (GiB)"), ordering="min_memory")
    def min_memory_gib(self, obj: Quota) -> str:
        return gib_text(obj.min_memory)

    @admin.display(description=_("workspaces"))
    def workspace_names(self, obj: Quota) -> str:
        return ", ".join(w.name for w in obj.workspaces.all())
