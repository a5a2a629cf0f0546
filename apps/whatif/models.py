"""A What-if run: a trace replayed on the current cluster and on a changed cluster file."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext, pgettext_lazy


class WhatIfRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", pgettext_lazy("status", "Queued")
        RUNNING = "running", pgettext_lazy("status", "Running")
        DONE = "done", pgettext_lazy("status", "Done")
        FAILED = "failed", pgettext_lazy("status", "Failed")

    class Source(models.TextChoices):
        JOBS = "jobs", _("The cluster's own jobs")
        UPLOAD = "upload", _("A trace file")

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    title = models.CharField(max_length=128, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress = models.FloatField(default=0.0, help_text="0–1, across every policy and side")
    message = models.TextField(blank=True, help_text="what failed, when it failed")
    source = models.CharField(max_length=16, choices=Source.choices)
    days = models.PositiveSmallIntegerField(null=True, blank=True)
    trace_name = models.CharField(max_length=255, blank=True)  # the uploaded file's name
    mode = models.CharField(max_length=16, default="replay")
    policies = models.CharField(max_length=512, blank=True)
    cluster_file = models.TextField(help_text="the changed cluster file (TOML)")
    current = models.JSONField(null=True, blank=True)  # the simulator's summary, current
    changed = models.JSONField(null=True, blank=True)  # and with the changed cluster file

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.title or f"What-if run {self.pk}"

    @property
    def replayed(self) -> str:
        """What the run replays, in the reader's language: the uploaded trace's name, or the
        cluster's own quota jobs of its last days."""
        if self.source == self.Source.JOBS and self.days:
            return ngettext(
                "the quota jobs of the last %(days)d day",
                "the quota jobs of the last %(days)d days",
                self.days,
            ) % {"days": self.days}
        return self.trace_name

    @property
    def finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)
