from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.utils.translation import gettext_lazy as _


class CoreConfig(AppConfig):
    name = "apps.core"
    verbose_name = _("Core")

    def ready(self) -> None:
        from apps.core.db import sqlite_functions

        connection_created.connect(sqlite_functions, dispatch_uid="paiweb-sqlite-functions")
