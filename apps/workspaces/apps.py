from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WorkspacesConfig(AppConfig):
    name = "apps.workspaces"
    verbose_name = _("Workspaces")

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from apps.workspaces.middleware import remember_time_zone

        user_logged_in.connect(remember_time_zone, dispatch_uid="paiweb-remember-time-zone")
