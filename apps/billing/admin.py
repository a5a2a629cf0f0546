"""Bills in the admin: read-only, since every line comes from `billing_accrue`."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from apps.billing.models import BillDay, BillLine, PodMeter


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(BillLine)
class BillLineAdmin(_ReadOnly):
    list_display = [
        "day",
        "minute",
        "workspace",
        "job",
        "pod",
        "instance_type",
        "pay_type",
        "price_per_hour",
        "amount",
    ]
    list_filter = ["pay_type", "workspace", "day"]
    list_select_related = ["workspace", "job", "pod", "instance_type"]
    search_fields = ["job__job_id", "pod__pod_id"]


@admin.register(BillDay)
class BillDayAdmin(_ReadOnly):
    list_display = [
        "day",
        "workspace",
        "job",
        "pod",
        "instance_type",
        "pay_type",
        "minutes",
        "amount",
        "low",
        "high",
    ]
    list_filter = ["pay_type", "workspace", "day"]
    list_select_related = ["workspace", "job", "pod", "instance_type"]
    search_fields = ["job__job_id", "pod__pod_id"]


@admin.register(PodMeter)
class PodMeterAdmin(_ReadOnly):
    list_display = ["pod", "billed_until", "closed"]
    list_filter = ["closed"]
