from django.apps import AppConfig


class WhatIfConfig(AppConfig):
    """What if: the cluster's own jobs (or a trace) replayed by the simulator on the current
    configuration and on a changed cluster file, side by side, in the background."""

    name = "apps.whatif"
    verbose_name = "What if"
