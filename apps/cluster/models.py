"""The cluster: instance types, resource pools and their nodes, the quota tree, the images
the create form suggests, and the spot market's parameters (all declared by the cluster
file).

Units everywhere: CPU in millicores, memory in MiB, GPUs as a count; money is Decimal
CNY, prices per instance-hour.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.core import pricing
from apps.core.limits import MAX_NODE_GPUS


class ResourceType(models.TextChoices):
    ECS = "ECS", _("General computing (ECS)")
    LINGJUN = "Lingjun", _("Lingjun (high-performance AI)")


class InstanceType(models.Model):
    """An EcsSpec such as ecs.g7.xlarge, with its pay-as-you-go (original) price."""

    name = models.CharField(max_length=64, unique=True)
    resource_type = models.CharField(max_length=16, choices=ResourceType.choices)
    cpu = models.PositiveIntegerField(help_text="millicores")
    memory = models.PositiveIntegerField(help_text="MiB")
    gpu = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(MAX_NODE_GPUS)])
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
        DEDICATED = "dedicated", _("Dedicated (subscription, behind quotas)")
        PUBLIC = "public", _("Public (pay-as-you-go and spot)")

    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    resource_type = models.CharField(max_length=16, choices=ResourceType.choices)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    class Status(models.TextChoices):
        READY = "Ready", _("Ready")
        CORDONED = "Cordoned", _("Cordoned")
        DRAINING = "Draining", _("Draining")  # Cordoned once its jobs are moved off
        LOST = "Lost", _("Lost")

    name = models.CharField(max_length=128, unique=True)
    pool = models.ForeignKey(ResourcePool, on_delete=models.PROTECT, related_name="nodes")
    instance_type = models.ForeignKey(
        InstanceType, null=True, blank=True, on_delete=models.PROTECT, related_name="nodes"
    )
    cpu = models.PositiveIntegerField(help_text="millicores")
    memory = models.PositiveIntegerField(help_text="MiB")
    gpu = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(MAX_NODE_GPUS)])
    gpu_model = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.READY)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    # When the watchdog found it silent, whatever its status (a Cordoned or Draining one
    # stays so): its processes are gone as far as anyone knows until its agent answers.
    lost_at = models.DateTimeField(null=True, blank=True)

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
        STRICT_FIFO = "StrictFIFO", _("StrictFIFO (the head blocks)")
        BEST_EFFORT_FIFO = "BestEffortFIFO", _("BestEffortFIFO (skip a head that cannot fit)")

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


class Image(models.Model):
    """An image the create form suggests for a job or a role (a job may name any other)."""

    name = models.CharField(max_length=64, unique=True)
    uri = models.CharField(max_length=512, help_text="what a job's image field takes")
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


_MARKET_DEFAULTS = pricing.MarketParams()


class MarketParameters(models.Model):
    """The market's tuning: a single row (pk 1), edited in the admin or by the cluster file
    through `market_params_set`. Defaults are `pricing.MarketParams()`."""

    floor_ratio = models.DecimalField(
        max_digits=4,
        decimal_places=3,
        default=_MARKET_DEFAULTS.floor_ratio,
        validators=[MinValueValidator(Decimal("0.001")), MaxValueValidator(Decimal(1))],
        help_text="floor = this share of the original price (0.1: up to 90% saving)",
    )
    smoothing = models.FloatField(
        default=_MARKET_DEFAULTS.smoothing,
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        help_text="share of the gap to the demand target closed per tick",
    )
    volatility = models.FloatField(
        default=_MARKET_DEFAULTS.volatility,
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        help_text="seeded random part of each move, relative to the price",
    )
    sensitivity = models.FloatField(
        default=_MARKET_DEFAULTS.sensitivity,
        validators=[MinValueValidator(0)],
        help_text="how strongly demand against supply moves the target",
    )
    average_window_seconds = models.FloatField(
        default=_MARKET_DEFAULTS.average_window_seconds,
        validators=[MinValueValidator(1)],
        help_text="window of Lingjun's system average price",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "market_marketparameters"  # the market app's table, from before the move
        verbose_name = verbose_name_plural = "market parameters"

    def __str__(self) -> str:
        return "Market parameters"

    def save(self, *args, **kwargs) -> None:
        self.pk = 1  # a singleton: every save writes the one row
        super().save(*args, **kwargs)

    @classmethod
    def load(cls) -> MarketParameters:
        return cls.objects.get_or_create(pk=1)[0]

    def to_params(self) -> pricing.MarketParams:
        return pricing.MarketParams(
            floor_ratio=Decimal(self.floor_ratio),
            smoothing=self.smoothing,
            volatility=self.volatility,
            sensitivity=self.sensitivity,
            average_window_seconds=self.average_window_seconds,
        )
