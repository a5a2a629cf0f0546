from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.billing.services import billing_accrue
from apps.core.redis import singleton_lock


@shared_task
def billing_accrue_task() -> None:
    """Beat's "billing-accrue": bill the minutes started since the last run, under the lock."""
    with singleton_lock("billing-accrue", timeout=max(60.0, settings.BILLING_INTERVAL)) as ok:
        if ok:
            billing_accrue(now=timezone.now())
