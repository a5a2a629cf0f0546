from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "apps.workspaces"
