from django.apps import AppConfig


class OpsConfig(AppConfig):
    """The platform as a whole: the demo that runs every process, the health page that
    watches them, and the fault harness that kills them."""

    name = "apps.ops"
