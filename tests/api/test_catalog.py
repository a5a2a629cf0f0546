"""ListEcsSpecs with spot price ranges, paiweb's spot price endpoint, and the AIWorkspace
calls: ListWorkspaces, GetWorkspace, ListQuotas."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from alibabacloud_aiworkspace20210204.models import (
    GetWorkspaceRequest,
    ListQuotasRequest,
    ListWorkspacesRequest,
)
from alibabacloud_pai_dlc20201203.models import ListEcsSpecsRequest

from apps.market.models import MarketState, PricePoint
from tests.api.conftest import sdk_error


def test_list_ecs_specs_reports_the_instance_types(dlc):
    body = dlc.list_ecs_specs(ListEcsSpecsRequest()).body
    assert body.total_count == 3
    specs = {s.instance_type: s for s in body.ecs_specs}
    g7 = specs["ecs.g7.xlarge"]
    assert (g7.cpu, g7.memory, g7.gpu, g7.accelerator_type, g7.resource_type) == (
        4,
        16,
        0,
        "CPU",
        "ECS",
    )
    assert g7.is_available and g7.payment_types == ["PostPaid", "Spot"]
    assert g7.spot_stock_status == "WithStock"
    gpu = specs["ecs.gn7i-c8g1.2xlarge"]
    assert (gpu.gpu, gpu.gpu_type, gpu.accelerator_type) == (1, "A10", "GPU")


def test_list_ecs_specs_filters_and_pages(dlc):
    def names(**params):
        return [
            s.instance_type
            for s in dlc.list_ecs_specs(ListEcsSpecsRequest(**params)).body.ecs_specs
        ]

    assert names(accelerator_type="GPU", resource_type="ECS") == ["ecs.gn7i-c8g1.2xlarge"]
    assert names(resource_type="Lingjun") == ["ml.gu8xf.8xlarge-gu108"]
    assert names(instance_types="ecs.g7.xlarge,ecs.nope") == ["ecs.g7.xlarge"]
    assert names(sort_by="CPU", order="asc", page_size=1, page_number=2) == [
        "ecs.gn7i-c8g1.2xlarge"
    ]


def test_list_ecs_specs_carries_the_spot_price_limit_range(raw):
    """The SDK's EcsSpec has no price fields; raw callers (and the console) read them."""
    specs = {s["InstanceType"]: s for s in raw.send("GET", "/api/v1/ecsspecs").json()["EcsSpecs"]}
    g7 = specs["ecs.g7.xlarge"]
    assert g7["OriginalPricePerHour"] == 0.8
    # CNY per instance-minute: 10% of the original price up to the original price.
    assert g7["SpotPriceLimitRange"] == {"Min": 0.001333, "Max": 0.013333}


def test_spot_prices_report_the_range_before_the_market_prices_anything(raw):
    body = raw.send(
        "GET",
        "/api/v1/spot/prices",
        query={"InstanceType": "ecs.g7.xlarge", "StartTime": "2026-11-28T00:00:00Z"},
    ).json()
    assert body["InstanceType"] == "ecs.g7.xlarge"
    assert (body["Unit"], body["MinPrice"], body["MaxPrice"]) == (
        "CNY/instance-minute",
        0.001333,
        0.013333,
    )
    assert body["StartTime"] == "2026-11-28T00:00:00Z"
    assert body["Prices"] == [] and "Price" not in body


def test_spot_prices_report_the_market_history_per_minute(raw, cluster):
    g7 = cluster["g7"]
    start = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
    for minutes, per_hour in ((-30, "0.3000"), (10, "0.4800"), (20, "0.6000"), (90, "0.7200")):
        PricePoint.objects.create(
            instance_type=g7,
            at=start + timedelta(minutes=minutes),
            price_per_hour=Decimal(per_hour),
        )
    MarketState.objects.create(
        instance_type=g7, price_per_hour=Decimal("0.7200"), stepped_at=start, recorded_at=start
    )
    body = raw.send(
        "GET",
        "/api/v1/spot/prices",
        query={
            "InstanceType": "ecs.g7.xlarge",
            "StartTime": "2026-11-29T08:00:00Z",
            "EndTime": "2026-11-29T09:00:00Z",
        },
    ).json()
    assert body["Prices"] == [
        {"Time": "2026-11-29T07:30:00Z", "Price": 0.005},  # in force at StartTime
        {"Time": "2026-11-29T08:10:00Z", "Price": 0.008},
        {"Time": "2026-11-29T08:20:00Z", "Price": 0.01},
    ]
    assert body["Price"] == 0.012
    specs = {s["InstanceType"]: s for s in raw.send("GET", "/api/v1/ecsspecs").json()["EcsSpecs"]}
    assert specs["ecs.g7.xlarge"]["NonProtectSpotDiscount"] == 0.9


def test_list_workspaces_shows_only_the_callers(aiworkspace, personas):
    body = aiworkspace.list_workspaces(ListWorkspacesRequest()).body
    assert body.total_count == 1
    [ws] = body.workspaces
    assert (ws.workspace_id, ws.workspace_name, ws.status) == (
        personas["ws_a"].workspace_id,
        "team-a",
        "ENABLED",
    )
    assert ws.admin_names == ["alice"] and ws.is_default is True
    assert ws.gmt_create_time.endswith("Z")


def test_list_workspaces_lists_the_oldest_first_unless_told(aiworkspace, personas):
    """The SDK's ListWorkspacesRequest: SortBy "GmtCreateTime (default)", Order "ASC (default)";
    they came by name."""
    from apps.workspaces.models import Membership, Workspace

    later = Workspace.objects.create(name="aaa-later", display_name="Later")
    Membership.objects.create(user=personas["alice"], workspace=later, role="member")

    def names(**kwargs) -> list[str]:
        request = ListWorkspacesRequest(**kwargs)
        return [w.workspace_name for w in aiworkspace.list_workspaces(request).body.workspaces]

    assert names() == ["team-a", "aaa-later"]
    assert names(order="DESC") == ["aaa-later", "team-a"]
    assert names(sort_by="WorkspaceName") == ["aaa-later", "team-a"]


def test_get_workspace(aiworkspace, personas):
    ws_id = personas["ws_a"].workspace_id
    body = aiworkspace.get_workspace(ws_id, GetWorkspaceRequest()).body
    assert (body.workspace_id, body.workspace_name, body.display_name) == (
        ws_id,
        "team-a",
        "Team A",
    )
    assert (body.owner.user_name, body.owner.user_id) == ("alice", str(personas["alice"].pk))
    with pytest.raises(Exception) as caught:
        aiworkspace.get_workspace("not-a-number", GetWorkspaceRequest())
    assert sdk_error(caught) == ("EntityNotExist.Workspace", 404)


def test_list_quotas_shows_the_quotas_of_the_callers_workspaces(aiworkspace):
    body = aiworkspace.list_quotas(ListQuotasRequest()).body
    assert [q.name for q in body.quotas] == ["lingjun-a", "team-a"]
    team_a = body.quotas[1]
    assert (team_a.id, team_a.quota_type) == ("team-a", "ECS")
    assert {s.name: s.value for s in team_a.specs} == {"CPU": "192", "Memory": "1536", "GPU": "8"}
    assert [
        q.name for q in aiworkspace.list_quotas(ListQuotasRequest(name="team-a")).body.quotas
    ] == ["team-a"]


def test_list_quotas_finds_a_quota_by_part_of_its_name_in_any_case(aiworkspace):
    """The SDK's ListQuotasRequest.name: "Fuzzy search is supported"."""

    def named(name: str) -> list[str]:
        return [q.name for q in aiworkspace.list_quotas(ListQuotasRequest(name=name)).body.quotas]

    assert named("TEAM") == ["team-a"]
    assert named("-a") == ["lingjun-a", "team-a"]
    assert named("nope") == []


def test_list_quotas_takes_a_workspace_of_the_callers_only(raw, personas, ws_a):
    """(The SDK's ListQuotasRequest has no WorkspaceId: sent by hand.)"""
    listed = raw.send("GET", "/api/v1/quotas", query={"WorkspaceId": ws_a}).json()
    assert [q["Name"] for q in listed["Quotas"]] == ["lingjun-a", "team-a"]
    for other in (personas["ws_b"].workspace_id, "abc", "99999"):
        response = raw.send("GET", "/api/v1/quotas", query={"WorkspaceId": other})
        assert (response.status_code, response.json()["Code"]) == (404, "EntityNotExist.Workspace")
