"""The market in the admin: its tuning is editable (one row); prices are for looking."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from apps.cluster.models import MarketParameters
from apps.market.models import MarketState, PricePoint


@admin.register(MarketParameters)
class MarketParametersAdmin(admin.ModelAdmin):
    list_display = [
        "__str__",
        "floor_ratio",
        "smoothing",
        "volatility",
        "sensitivity",
        "average_window_seconds",
        "updated_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not MarketParameters.objects.exists()  # a singleton

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(MarketState)
class MarketStateAdmin(_ReadOnly):
    list_display = ["instance_type", "price_per_hour", "stepped_at", "recorded_at"]


@admin.register(PricePoint)
class PricePointAdmin(_ReadOnly):
    list_display = ["instance_type", "at", "price_per_hour"]
    list_filter = ["instance_type"]
    date_hierarchy = "at"
    list_select_related = ["instance_type"]
