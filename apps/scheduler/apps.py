from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "apps.scheduler"
