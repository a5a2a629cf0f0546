from django.contrib import admin

from apps.core.models import Heartbeat


@admin.register(Heartbeat)
class HeartbeatAdmin(admin.ModelAdmin):
    list_display = ("name", "last_seen", "detail")
    search_fields = ("name",)
