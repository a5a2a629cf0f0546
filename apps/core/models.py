from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Heartbeat(models.Model):
    """The last time a periodic loop (beat's heartbeat, a node agent…) reported in."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    last_seen = models.DateTimeField(_("last seen"))
    detail = models.CharField(_("detail"), max_length=200, blank=True)
    # A node agent's: the start of its last watch round that looked at every pod it runs
    # (apps.jobs.execution.pods_vouched_until). Null for other loops, and for an agent
    # that does not report rounds (one from before).
    pods_watched_at = models.DateTimeField(
        _("pods watched at"),
        null=True,
        blank=True,
        help_text=_("the start of its agent's last watch round over every pod it runs"),
    )

    class Meta:
        verbose_name = _("heartbeat")
        verbose_name_plural = _("heartbeats")

    def __str__(self) -> str:
        return f"{self.name} @ {self.last_seen:%Y-%m-%d %H:%M:%S}"
