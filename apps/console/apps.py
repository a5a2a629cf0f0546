from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The console's job pages: the list, the create form and the job page. They show a job's
    whole path (its queue or its bids, pods, restarts, bills), so they sit above every app
    they read; the other pages live with their own app (market, bills, quotas, workspaces,
    pod logs, health)."""

    name = "apps.console"
