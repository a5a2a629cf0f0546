from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from apps.workspaces.models import AccessKey, Membership, UserPreference, Workspace
from apps.workspaces.services import access_key_disable, access_key_enable


class MembershipInline(admin.TabularInline):
    model = Membership
    fields = ("user", "role")
    autocomplete_fields = ("user",)
    extra = 0


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "display_name", "member_count", "quota_names", "created_at")
    search_fields = ("name", "display_name", "description")
    readonly_fields = ("created_at",)
    inlines = [MembershipInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workspace]:
        return (
            super()
            .get_queryset(request)
            .annotate(_members=Count("membership", distinct=True))
            .prefetch_related("quotas")
        )

    @admin.display(description=_("members"), ordering="_members")
    def member_count(self, obj) -> int:
        return obj._members

    @admin.display(description=_("quotas"))
    def quota_names(self, obj: Workspace) -> str:
        return ", ".join(q.name for q in obj.quotas.all())


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "workspace", "role")
    list_filter = ("role", "workspace")
    list_select_related = ("user", "workspace")
    search_fields = ("user__username", "user__email", "workspace__name", "workspace__display_name")
    autocomplete_fields = ("user", "workspace")


class AccessKeyForm(forms.ModelForm):
    """Never carries the secret: `secret_encrypted` is not editable, so it is in no form.

    A new key gets a generated id and secret in `save_model`; the secret is shown once.
    """

    class Meta:
        model = AccessKey
        fields = ("user", "description", "enabled")


@admin.register(AccessKey)
class AccessKeyAdmin(admin.ModelAdmin):
    form = AccessKeyForm
    list_display = ("key_id", "user", "description", "enabled", "created_at", "last_used_at")
    list_filter = ("enabled",)
    list_select_related = ("user",)
    search_fields = ("key_id", "user__username", "description")
    autocomplete_fields = ("user",)
    actions = ["disable", "enable", "rotate_secret"]

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> tuple[str, ...]:
        # The key id and the owner are fixed once the key exists: clients hold that pair.
        base = ("created_at", "last_used_at")
        return ("key_id", "user", *base) if obj is not None else base

    def get_fields(self, request: HttpRequest, obj=None) -> tuple[str, ...]:
        if obj is None:
            return ("user", "description", "enabled")
        return ("key_id", "user", "description", "enabled", "created_at", "last_used_at")

    def save_model(self, request: HttpRequest, obj: AccessKey, form, change: bool) -> None:
        # Not services.access_key_create: a platform admin is not bound by the self-service
        # limit on keys per user.
        if change:
            super().save_model(request, obj, form, change)
            return
        obj.key_id, secret = AccessKey.new_pair()
        obj.set_secret(secret)
        super().save_model(request, obj, form, change)
        self._show_secret_once(request, obj, secret)

    @admin.action(description=_("Disable the selected keys"))
    def disable(self, request: HttpRequest, queryset: QuerySet[AccessKey]) -> None:
        keys = list(queryset.filter(enabled=True))
        for key in keys:
            access_key_disable(key=key)
        self.message_user(
            request,
            ngettext("Disabled %(count)d key.", "Disabled %(count)d keys.", len(keys))
            % {"count": len(keys)},
            messages.SUCCESS,
        )

    @admin.action(description=_("Enable the selected keys"))
    def enable(self, request: HttpRequest, queryset: QuerySet[AccessKey]) -> None:
        keys = list(queryset.filter(enabled=False))
        for key in keys:
            access_key_enable(key=key)
        self.message_user(
            request,
            ngettext("Enabled %(count)d key.", "Enabled %(count)d keys.", len(keys))
            % {"count": len(keys)},
            messages.SUCCESS,
        )

    @admin.action(description=_("Rotate the secret of the selected keys (shown once)"))
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[AccessKey]) -> None:
        for key in queryset:
            _, secret = AccessKey.new_pair()
            key.set_secret(secret)
            key.save(update_fields=["secret_encrypted"])
            self._show_secret_once(request, key, secret)

    def _show_secret_once(self, request: HttpRequest, key: AccessKey, secret: str) -> None:
        # A message, not a field: it is displayed on the next page and then gone. The admin's
        # change log records only field names, never this value.
        self.message_user(
            request,
            gettext(
                "AccessKey %(key)s for %(user)s: its secret is %(secret)s — copy it now, it "
                "will not be shown again."
            )
            % {"key": key.key_id, "user": key.user, "secret": secret},
            messages.WARNING,
        )


@admin.register(UserPreference)
class UserPreferenceAdmin(admin.ModelAdmin):
    list_display = ("user", "time_zone")
    search_fields = ("user__username", "time_zone")
    autocomplete_fields = ("user",)
