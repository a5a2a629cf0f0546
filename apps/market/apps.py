from django.apps import AppConfig


class MarketConfig(AppConfig):
    name = "apps.market"
    verbose_name = "Spot market"
