"""The market pages: every instance type's spot price and stock, one type's price chart, and
the live price panel the create-job form embeds.

The market is public (every signed-in user sees the same prices), so nothing here is
scoped to a workspace.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from apps.core import pricing
from apps.core.http import HtmxHttpRequest
from apps.jobs.specs import as_decimal
from apps.market import selectors


def _htmx_target(request: HtmxHttpRequest) -> str | None:
    return request.htmx.target if request.htmx else None


def _poll_seconds() -> int:
    return max(int(settings.MARKET_STEP_INTERVAL), 2)


@login_required
@require_GET
def market_index(request: HtmxHttpRequest) -> HttpResponse:
    """All instance types of the public pool; the table re-polls itself (#market-table)."""
    template = "market/index.html"
    if _htmx_target(request) == "market-table":
        template += "#market-table"
    context = {"rows": selectors.market_overview(), "poll_seconds": _poll_seconds()}
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request", "HX-Target"])
    return response


@login_required
@require_GET
def market_detail(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """One instance type: price chart (?window=1h|6h|24h|7d) with floor, original and, for
    Lingjun, the system average; stock and usage."""
    row = selectors.market_type(name=name)
    window = request.GET.get("window", "1h")
    if window not in selectors.CHART_WINDOWS:
        window = "1h"
    context = {
        "row": row,
        "chart": selectors.price_chart(row=row, window=window),
        "window": window,
        "windows": list(selectors.CHART_WINDOWS),
        "poll_seconds": _poll_seconds(),
    }
    template = "market/detail.html"
    if _htmx_target(request) == "price-chart":
        template += "#price-chart"
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request", "HX-Target"])
    return response


def _instance_type_param(query) -> str:
    """`instance_type`, or any field ending in `instance_type` (the create form's role rows
    are named like `r0-instance_type`, so hx-include of a row just works)."""
    if query.get("instance_type"):
        return query["instance_type"].strip()
    for key, value in query.items():
        if key.endswith("instance_type") and value:
            return value.strip()
    return ""


def _bid_param(query, row: selectors.MarketRow) -> Decimal | None:
    """The create form's bid for the row, in ¥/h: its SpotDiscountLimit or SpotPriceLimit
    (whichever its limit type says; the inputs are named like `roles-0-spot_price_limit`).
    None when absent or not a number."""

    def field(suffix: str) -> str:
        return next((v for k, v in query.items() if k.endswith(suffix) and v), "")

    kind = field("spot_limit_type") or "discount"
    try:
        value = as_decimal(field("spot_price_limit" if kind == "price" else "spot_discount_limit"))
    except ValueError:
        return None
    if value is None or value <= 0:
        return None
    original = row.instance_type.price_per_hour
    if kind == "price":
        return pricing.bid_limit_per_hour(original, discount=None, price_limit_per_minute=value)
    if value >= 1:
        return None
    return pricing.bid_limit_per_hour(original, discount=value, price_limit_per_minute=None)


@login_required
@require_GET
def price_panel(request: HtmxHttpRequest) -> HttpResponse:
    """The live market price and range of one instance type, for the create-job form:
    an HTML fragment, or JSON with ?format=json."""
    name = _instance_type_param(request.GET)
    row = selectors.price_panel(name=name) if name else None
    if request.GET.get("format") == "json":
        return JsonResponse(_panel_json(name, row), status=200 if row else 404)
    bid = _bid_param(request.GET, row) if row is not None else None
    guidance = selectors.bid_guidance(row=row, bid_per_hour=bid) if bid and row else None
    response = render(
        request,
        "market/price_panel.html",
        {"row": row, "name": name, "bid": bid, "guidance": guidance},
    )
    patch_vary_headers(response, ["HX-Request"])
    return response


def _panel_json(name: str, row: selectors.MarketRow | None) -> dict:
    if row is None:
        return {"instance_type": name, "available": False}
    money = lambda value: None if value is None else str(value)  # noqa: E731
    return {
        "instance_type": row.instance_type.name,
        "resource_type": row.instance_type.resource_type,
        "available": True,
        "price_per_hour": money(row.price),
        "price_per_minute": money(row.price_per_minute),
        "floor_per_hour": money(row.floor),
        "floor_per_minute": money(row.floor_per_minute),
        "original_per_hour": money(row.original),
        "original_per_minute": money(row.original_per_minute),
        "system_average_per_hour": money(row.system_average),
        "stock": row.stock,
        "capacity": row.capacity,
        "as_of": row.stepped_at.isoformat() if row.stepped_at else None,
    }
