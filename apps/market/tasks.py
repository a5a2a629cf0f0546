from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.core.redis import singleton_lock
from apps.market.services import market_rng, market_step


@shared_task
def market_step_task() -> None:
    """Beat's "market-step": one market tick under the lock (a held lock means another
    worker is doing this tick)."""
    with singleton_lock("market-step", timeout=max(30.0, settings.MARKET_STEP_INTERVAL)) as ok:
        if ok:
            now = timezone.now()
            market_step(now=now, rng=market_rng(now=now))
