from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.workspaces.crypto import decrypt_secret, encrypt_secret


class Workspace(models.Model):
    """The tenancy unit: users are members; jobs, access keys and quotas are bound to it."""

    name = models.SlugField(_("name"), max_length=64, unique=True)
    display_name = models.CharField(_("display name"), max_length=128, blank=True)
    description = models.TextField(_("Description"), blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        through="Membership",
        related_name="workspaces",
        verbose_name=_("members"),
    )

    class Meta:
        verbose_name = _("workspace")
        verbose_name_plural = _("workspaces")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.display_name or self.name

    @property
    def workspace_id(self) -> str:
        """The id the API uses (DLC's WorkspaceId is a numeric string)."""
        return str(self.pk)


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", _("Owner")
        ADMIN = "admin", _("Administrator")
        MEMBER = "member", _("Member")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, verbose_name=_("user")
    )
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, verbose_name=_("workspace"))
    role = models.CharField(_("Role"), max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        constraints = [
            models.UniqueConstraint(fields=["user", "workspace"], name="one_membership_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace} ({self.role})"


class AccessKey(models.Model):
    """An AccessKey pair: acts as its user in the API. The secret is stored encrypted."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="access_keys",
        verbose_name=_("user"),
    )
    key_id = models.CharField(_("AccessKey ID"), max_length=64, unique=True)
    secret_encrypted = models.TextField(_("encrypted secret"), editable=False)
    description = models.CharField(_("Description"), max_length=200, blank=True)
    enabled = models.BooleanField(_("enabled"), default=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)

    class Meta:
        verbose_name = _("access key")
        verbose_name_plural = _("access keys")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.key_id

    @staticmethod
    def new_pair() -> tuple[str, str]:
        """A fresh (key id, secret) in the shape Alibaba Cloud uses."""
        return "LTAI" + secrets.token_hex(10), secrets.token_urlsafe(22)[:30]

    def set_secret(self, plain: str) -> None:
        self.secret_encrypted = encrypt_secret(plain)

    def secret(self) -> str:
        return decrypt_secret(self.secret_encrypted)


class UserPreference(models.Model):
    """What a person chose for the console: the time zone its pages show times in and the
    language they speak (empty: the browser's)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="preference",
        verbose_name=_("user"),
    )
    time_zone = models.CharField(_("Time zone"), max_length=64, blank=True)
    language = models.CharField(_("Language"), max_length=16, blank=True)

    class Meta:
        verbose_name = _("user preference")
        verbose_name_plural = _("user preferences")

    def __str__(self) -> str:
        return f"{self.user}: {self.time_zone or 'browser time zone'}"
