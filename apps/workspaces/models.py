from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.workspaces.crypto import decrypt_secret, encrypt_secret


class Workspace(models.Model):
    """The tenancy unit: users are members; jobs, access keys and quotas are bound to it."""

    name = models.SlugField(max_length=64, unique=True)
    display_name = models.CharField(max_length=128, blank=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="workspaces"
    )

    class Meta:
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

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "workspace"], name="one_membership_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace} ({self.role})"


class AccessKey(models.Model):
    """An AccessKey pair: acts as its user in the API. The secret is stored encrypted."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_keys"
    )
    key_id = models.CharField(max_length=64, unique=True)
    secret_encrypted = models.TextField(editable=False)
    description = models.CharField(max_length=200, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
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
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference"
    )
    time_zone = models.CharField(max_length=64, blank=True)
    language = models.CharField(max_length=16, blank=True)

    def __str__(self) -> str:
        return f"{self.user}: {self.time_zone or 'browser time zone'}"
