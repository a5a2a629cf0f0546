from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class MarketConfig(AppConfig):
    name = "apps.market"
    verbose_name = _("Spot market")
