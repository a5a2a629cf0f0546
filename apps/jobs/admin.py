"""Jobs in the admin: for looking, not for driving.

A job's state moves only through the job services (submit, stop, the scheduler), which keep
StatusHistory, events and pods consistent, so the admin shows state read-only and offers no
"add job": submit through the console or the API.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from apps.core.i18n import localized
from apps.jobs.models import (
    Checkpoint,
    ElasticSpotSpec,
    Job,
    JobEvent,
    JobRestart,
    JobRole,
    JobTag,
    JobTemplate,
    JobTemplateVersion,
    Pod,
    StatusTransition,
)


def _said(name: str, label):
    """A read-only field showing a message the platform stored in English (a reason, an
    event) in the reader's language, as the console shows it."""

    @admin.display(description=label)
    def said(self, obj) -> str:
        return localized(getattr(obj, name)) or self.get_empty_value_display()

    return said


class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class JobRoleInline(_ReadOnlyInline):
    model = JobRole
    fields = (
        "role_type",
        "pod_count",
        "instance_type",
        "cpu",
        "memory",
        "gpu",
        "gpu_milli",
        "restart_policy",
        "spot_strategy",
        "spot_discount_limit",
        "spot_price_limit",
    )


class PodInline(_ReadOnlyInline):
    model = Pod
    fields = (
        "pod_id",
        "role",
        "attempt",
        "status",
        "node",
        "in_quota",
        "gpu_ids",
        "reason",
        "exit_code",
        "started_at",
        "finished_at",
    )
    show_change_link = True

    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).select_related("role", "node")


class StatusTransitionInline(_ReadOnlyInline):
    model = StatusTransition
    verbose_name_plural = _("Status history")
    fields = ("status", "reason_code", "reason_message_said", "started_at", "ended_at")
    readonly_fields = fields
    reason_message_said = _said("reason_message", _("Reason message"))


class JobEventInline(_ReadOnlyInline):
    model = JobEvent
    fields = ("at", "kind", "pod", "message_said")
    readonly_fields = fields
    message_said = _said("message", _("Message"))

    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).select_related("pod")


class CheckpointInline(_ReadOnlyInline):
    model = Checkpoint
    fields = ("step", "path", "size_bytes", "created_at")


class JobTagInline(_ReadOnlyInline):
    model = JobTag
    fields = ("key", "value")


class JobRestartInline(_ReadOnlyInline):
    model = JobRestart
    fields = ("number", "at", "cause", "counted", "message_said", "lost_gpu_seconds")
    readonly_fields = fields
    message_said = _said("message", _("Message"))


STATE_FIELDS = (
    "job_id",
    "status",
    "sub_status",
    "reason_code",
    "reason_message_said",
    "restart_times",
    "ended_lost_gpu_seconds",
    "attempt",
    "created_at",
    "submitted_at",
    "status_changed_at",
    "started_at",
    "finished_at",
    "not_before",
    "last_checkpoint_at",
    "pending_reason_said",
    "queue_position",
    "queue_size",
)


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "job_id",
        "display_name",
        "workspace",
        "user",
        "status",
        "resource_source",
        "resource_type",
        "quota",
        "idle_mode",
        "priority",
        "created_at",
    )
    list_filter = (
        "status",
        "resource_source",
        "resource_type",
        "job_type",
        "idle_mode",
        "enable_aimaster",
        "workspace",
        "quota",
    )
    list_select_related = ("workspace", "user", "quota")
    search_fields = ("job_id", "display_name", "user__username", "workspace__name")
    date_hierarchy = "created_at"
    # Where a job runs is the scheduler's business once it exists: shown, not edited.
    readonly_fields = (
        *STATE_FIELDS,
        "workspace",
        "user",
        "resource_type",
        "resource_source",
        "quota",
        "idle_mode",
    )
    inlines = [
        JobRoleInline,
        JobTagInline,
        PodInline,
        StatusTransitionInline,
        JobEventInline,
        CheckpointInline,
        JobRestartInline,
    ]
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "job_id",
                    "display_name",
                    "workspace",
                    "user",
                    "job_type",
                    "image",
                    "user_command",
                    "envs",
                    "data_sources",
                    "code_source",
                    "priority",
                    "max_running_time_minutes",
                    "success_policy",
                )
            },
        ),
        (
            _("Resources"),
            {
                "fields": (
                    "resource_type",
                    "resource_source",
                    "quota",
                    "idle_mode",
                    "vpc_id",
                    "vswitch_id",
                    "security_group_id",
                )
            },
        ),
        (
            _("Fault tolerance"),
            {
                "fields": (
                    "enable_aimaster",
                    "max_restarts",
                    "execution_mode",
                    "enable_easyckpt",
                    "termination_grace_seconds",
                )
            },
        ),
        (_("State"), {"fields": STATE_FIELDS[1:]}),
    )

    reason_message_said = _said("reason_message", _("Reason message"))
    pending_reason_said = _said("pending_reason", _("pending reason"))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class _ReadOnlyAdmin(admin.ModelAdmin):
    """Records the services write: browsable and searchable, never edited by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(JobRole)
class JobRoleAdmin(_ReadOnlyAdmin):
    list_display = (
        "job",
        "role_type",
        "pod_count",
        "instance_type",
        "cpu",
        "memory",
        "gpu",
        "gpu_milli",
        "spot_discount_limit",
        "spot_price_limit",
    )
    list_filter = ("role_type", "restart_policy")
    list_select_related = ("job", "instance_type")
    search_fields = ("job__job_id", "job__display_name", "instance_type__name")


@admin.register(ElasticSpotSpec)
class ElasticSpotSpecAdmin(_ReadOnlyAdmin):
    list_display = ("role", "position", "instance_type", "spot_discount_limit", "spot_price_limit")
    list_select_related = ("role__job", "instance_type")
    search_fields = ("role__job__job_id", "role__job__display_name", "instance_type__name")


@admin.register(Pod)
class PodAdmin(_ReadOnlyAdmin):
    list_display = (
        "pod_id",
        "job",
        "role",
        "attempt",
        "status",
        "node",
        "instance_type",
        "in_quota",
        "exit_code",
        "started_at",
        "finished_at",
    )
    list_filter = ("status", "in_quota", "node__pool", "node")
    list_select_related = ("job", "role", "node", "instance_type")
    search_fields = ("pod_id", "job__job_id", "job__display_name", "node__name")


@admin.register(StatusTransition)
class StatusTransitionAdmin(_ReadOnlyAdmin):
    list_display = ("job", "status", "reason_code", "started_at", "ended_at")
    list_filter = ("status", "reason_code")
    list_select_related = ("job",)
    search_fields = ("job__job_id", "reason_code", "reason_message")
    date_hierarchy = "started_at"


@admin.register(JobEvent)
class JobEventAdmin(_ReadOnlyAdmin):
    list_display = ("at", "job", "kind", "pod", "message_said")
    list_filter = ("kind",)
    list_select_related = ("job", "pod")
    search_fields = ("job__job_id", "message", "kind")
    date_hierarchy = "at"
    message_said = _said("message", _("Message"))


@admin.register(Checkpoint)
class CheckpointAdmin(_ReadOnlyAdmin):
    list_display = ("job", "step", "path", "size_bytes", "created_at")
    list_select_related = ("job",)
    search_fields = ("job__job_id", "path")
    date_hierarchy = "created_at"


@admin.register(JobRestart)
class JobRestartAdmin(_ReadOnlyAdmin):
    list_display = ("job", "number", "at", "cause", "counted", "lost_gpu_seconds")
    list_filter = ("cause", "counted")
    list_select_related = ("job",)
    search_fields = ("job__job_id", "cause", "message")
    date_hierarchy = "at"


@admin.register(JobTag)
class JobTagAdmin(_ReadOnlyAdmin):
    list_display = ("job", "key", "value")
    list_select_related = ("job",)
    search_fields = ("job__job_id", "key", "value")


class _TemplateVersionInline(_ReadOnlyInline):
    model = JobTemplateVersion
    fields = ("version", "content", "constraints", "created_by", "created_at")
    readonly_fields = fields


@admin.register(JobTemplate)
class JobTemplateAdmin(_ReadOnlyAdmin):
    """Saved from the console (a job's Save as template) or the API; admins may delete them
    here."""

    list_display = ("name", "workspace", "user", "default_version", "updated_at")
    list_filter = ("workspace",)
    list_select_related = ("workspace", "user")
    search_fields = ("name", "description")
    inlines = [_TemplateVersionInline]


@admin.register(JobTemplateVersion)
class JobTemplateVersionAdmin(_ReadOnlyAdmin):
    list_display = ("template", "version", "created_by", "created_at")
    list_select_related = ("template", "created_by")
    search_fields = ("template__name",)
