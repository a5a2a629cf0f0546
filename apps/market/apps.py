from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class MarketConfig(AppConfig):
    name = "apps.market"
    verbose_name = _("Spot market")

    def ready(self) -> None:
        from apps.cluster.signals import original_price_changed
        from apps.market.services import market_price_follow_original

        def follow(sender, *, instance_type_id, old, new, at, **kwargs) -> None:
            market_price_follow_original(instance_type_id=instance_type_id, old=old, new=new, at=at)

        original_price_changed.connect(follow, weak=False, dispatch_uid="paiweb-follow-original")
