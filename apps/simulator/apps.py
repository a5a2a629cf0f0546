from django.apps import AppConfig


class SimulatorConfig(AppConfig):
    name = "apps.simulator"
    verbose_name = "Trace simulator"
