from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BillingConfig(AppConfig):
    name = "apps.billing"
    verbose_name = _("Billing")

    def ready(self) -> None:
        from apps.billing.services import pod_meters_open
        from apps.jobs.signals import paid_pods_created

        def open_meters(sender, *, pod_ids, new: bool, **kwargs) -> None:
            pod_meters_open(pod_ids=pod_ids, new=new)

        paid_pods_created.connect(open_meters, weak=False, dispatch_uid="paiweb-open-meters")
