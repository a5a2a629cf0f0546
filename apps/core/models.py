from __future__ import annotations

from django.db import models


class Heartbeat(models.Model):
    """The last time a periodic loop (beat's heartbeat, a node agent…) reported in."""

    name = models.CharField(max_length=100, unique=True)
    last_seen = models.DateTimeField()
    detail = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"{self.name} @ {self.last_seen:%Y-%m-%d %H:%M:%S}"
