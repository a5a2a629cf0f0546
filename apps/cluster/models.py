"""The cluster: instance types, resource pools and their nodes, and the quota tree.

Units everywhere: CPU in millicores, memory in MiB, GPUs as a count; money is Decimal
CNY, prices per instance-hour.
"""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q


class ResourceType(models.TextChoices):
    ECS = "ECS", "General computing (ECS)"
    LINGJUN = "Lingjun", "Lingjun (high-performance AI)"


class InstanceType(models.Model):
    """An EcsSpec such as ecs.g7.xlarge, with its pay-as-you-go (original) price."""

    name = models.CharField(max_length=64, unique=True)
    resource_type = models.CharField(max_length=16, choices=ResourceType.choices)
    cpu = models.PositiveIntegerField(help_text="millicores")
    memory = models.PositiveIntegerField(help_text="MiB")
    gpu = models.PositiveIntegerField(default=0)
    gpu_model = models.CharField(max_length=64, blank=True)
    price_per_hour = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        validators=[MinValueValidator(0)],
        help_text="original (pay-as-you-go) price, CNY per instance-hour",
    )
    public_capacity = models.PositiveIntegerField(
        default=0, help_text="instances in the public pool (pay-as-you-go and spot)"
    )
    spot_enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["resource_type", "name"]
        constraints = [
            models.CheckConstraint(condition=Q(price_per_hour__gte=0), name="instance_price_ge_0"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def vcpus(self) -> float:
        return self.cpu / 1000

    @property
    def memory_gib(self) -> float:
        return self.memory / 1024


class ResourcePool(models.Model):
    class Kind(models.TextChoices):
        DEDICATED = "dedicated", "Dedicated (subscription, behind quotas)"
        PUBLIC = "public", "Public (pay-as-you-go and spot)"

    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    resource_type = models.CharField(max_length=16, choices=ResourceType.choices)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    class Status(models.TextChoices):
        READY = "Ready", "Ready"
        CORDONED = "Cordoned", "Cordoned"
        LOST = "Lost", "Lost"

    name = models.CharField(max_length=128, unique=True)
    pool = models.ForeignKey(ResourcePool, on_delete=models.PROTECT, related_name="nodes")
    instance_type = models.ForeignKey(
        InstanceType, null=True, blank=True, on_delete=models.PROTECT, related_name="nodes"
    )
    cpu = models.PositiveIntegerField(help_text="millicores")
    memory = models.PositiveIntegerField(help_text="MiB")
    gpu = models.PositiveIntegerField(default=0)
    gpu_model = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.READY)
    last_heartbeat = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pool__name", "name"]

    def __str__(self) -> str:
        return self.name


class Quota(models.Model):
    """A node of the quota tree: guarantees `min` of its pool to the workspaces it serves.

    A child's usage counts toward every ancestor, so the children's `min` may not exceed the
    parent's, and the roots' together may not exceed their pool.
    """

    class Strategy(models.TextChoices):
        STRICT_FIFO = "StrictFIFO", "StrictFIFO (the head blocks)"
        BEST_EFFORT_FIFO = "BestEffortFIFO", "BestEffortFIFO (skip a head that cannot fit)"

    name = models.SlugField(max_length=64, unique=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    pool = models.ForeignKey(ResourcePool, on_delete=models.PROTECT, related_name="quotas")
    resource_type = models.CharField(max_length=16, choices=ResourceType.choices)
    min_cpu = models.PositiveIntegerField(default=0, help_text="millicores")
    min_memory = models.PositiveIntegerField(default=0, help_text="MiB")
    min_gpu = models.PositiveIntegerField(default=0)
    queue_strategy = models.CharField(
        max_length=16, choices=Strategy.choices, default=Strategy.STRICT_FIFO
    )
    workspaces = models.ManyToManyField("workspaces.Workspace", blank=True, related_name="quotas")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def ancestors(self) -> list[Quota]:
        """Parent first, root last."""
        chain, node = [], self.parent
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain
