"""Error responses in Alibaba Cloud's shape, and DLC names for the job spec's field paths.

Every failure the API reports is an `ApplicationError` (code, message, HTTP status); the
body is `{"RequestId", "Code", "Message"}`, which the SDK raises as an exception carrying
the code and the status.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

from django.http import JsonResponse

from apps.core.errors import ApplicationError, ValidationFailed
from apps.core.i18n import localized
from apps.core.words import joined, say, say_n


def new_request_id() -> str:
    return str(uuid.uuid4()).upper()


class Throttled(ApplicationError):
    """A 429 that says when to come back: `retry_after` seconds."""

    def __init__(self, code: str, message: str, *, retry_after: int) -> None:
        super().__init__(code, message, status=429)
        self.retry_after = retry_after


def error_response(error: ApplicationError, *, request_id: str) -> JsonResponse:
    body = {"RequestId": request_id, "Code": error.code, "Message": localized(error.message)}
    headers = {"x-acs-request-id": request_id}
    if isinstance(error, Throttled):  # the SDK reads x-acs-retry-after, in milliseconds
        headers["Retry-After"] = str(error.retry_after)
        headers["x-acs-retry-after"] = str(error.retry_after * 1000)
    return JsonResponse(body, status=error.status, headers=headers)


def invalid_parameter(name: str, message: str) -> ApplicationError:
    return ApplicationError(
        "InvalidParameter", say("{field}: {message}", field=name, message=message), field=name
    )


# A message lists this many problems and counts the rest: a 2 MiB body of unknown fields
# made a 15 MB answer, one problem each.
MAX_PROBLEMS_SAID = 50


def problems_text(problems: list[str]) -> str:
    """Problems ("Field: message") as one message, the first MAX_PROBLEMS_SAID of them
    listed and the rest counted."""
    more = len(problems) - MAX_PROBLEMS_SAID
    if more <= 0:
        return joined(problems)
    counted = say_n(more, "{count} more problem", "{count} more problems")
    return joined([*problems[:MAX_PROBLEMS_SAID], counted])


def missing_parameter(name: str) -> ApplicationError:
    return ApplicationError("MissingParameter", say("{field} is required.", field=name), field=name)


def throttling(code: str, reason: str, *, retry_at: datetime, retry_after: int) -> Throttled:
    """429 `Throttling` (the caller's address) or `Throttling.User` (the AccessKeyId)."""
    return Throttled(
        code,
        say(
            "Request was denied due to {reason}. Retry after {at}.",
            reason=reason,
            at=f"{retry_at.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}",
        ),
        retry_after=retry_after,
    )


# Spec field path (apps.jobs.specs) → the CreateJob parameter a DLC user wrote.
_TOP_LEVEL = {
    "display_name": "DisplayName",
    "description": "Description",
    "termination_grace_seconds": "Settings.TerminationGracePeriodSeconds",
    "accessibility": "Accessibility",
    "tags": "Settings.Tags",
    "hang_seconds": "Settings.ErrorMonitoringArgs",
    "job_type": "JobType",
    "image": "JobSpecs[0].Image",
    "user_command": "UserCommand",
    "envs": "Envs",
    "data_sources": "DataSources",
    "code_source": "CodeSource",
    "code_source.mount_path": "CodeSource.MountPath",
    "priority": "Priority",
    "max_running_time_minutes": "JobMaxRunningTimeMinutes",
    "success_policy": "SuccessPolicy",
    "resource_type": "JobSpecs[0].EcsSpec",
    "resource_source": "ResourceId",
    "quota": "ResourceId",
    "idle_mode": "Settings.OversoldType",
    "vpc_id": "UserVpc.VpcId",
    "vswitch_id": "UserVpc.SwitchId",
    "security_group_id": "UserVpc.SecurityGroupId",
    "enable_aimaster": "Settings.EnableErrorMonitoringInAIMaster",
    "max_restarts": "Settings.ErrorMonitoringArgs",
    "execution_mode": "Settings.ErrorMonitoringArgs",
    "enable_easyckpt": "Settings.AdvancedSettings.EnableEasyCkpt",
    "roles": "JobSpecs",
}
_ROLE = {
    "role_type": "Type",
    "pod_count": "PodCount",
    "instance_type": "EcsSpec",
    "cpu": "ResourceConfig.CPU",
    "memory": "ResourceConfig.Memory",
    "gpu": "ResourceConfig.GPU",
    "resource_config": "ResourceConfig",
    "image": "Image",
    "restart_policy": "RestartPolicy",
    "spot_discount_limit": "SpotSpec.SpotDiscountLimit",
    "spot_price_limit": "SpotSpec.SpotPriceLimit",
}
_DATA_SOURCE = {"uri": "Uri", "mount_path": "MountPath"}
_FALLBACK = {
    "instance_type": "InstanceType",
    "spot_discount_limit": "SpotDiscountLimit",
    "spot_price_limit": "SpotPriceLimit",
}
_INDEXED = re.compile(r"^(roles|data_sources)\[(\d+)\](?:\.(\w+))?$")
_FALLBACKS = re.compile(r"^roles\[(\d+)\]\.elastic_spot_specs(?:\[(\d+)\](?:\.(\w+))?)?$")


def dlc_field(path: str) -> str:
    """`roles[0].spot_price_limit` → `JobSpecs[0].SpotSpec.SpotPriceLimit`, `roles[0]` →
    `JobSpecs[0]`,
    `roles[0].elastic_spot_specs[1].instance_type` →
    `JobSpecs[0].ElasticSpotSpecs[1].InstanceType`; unknown paths come back unchanged."""
    if fallback := _FALLBACKS.match(path):
        role, index, name = fallback.groups()
        field = f"JobSpecs[{role}].ElasticSpotSpecs"
        if index is not None:
            field += f"[{index}]"
        return f"{field}.{_FALLBACK.get(name, name)}" if name else field
    match = _INDEXED.match(path)
    if match:
        group, index, name = match.groups()
        field = f"JobSpecs[{index}]" if group == "roles" else f"DataSources[{index}]"
        if name is None:  # the role or data source as a whole
            return field
        names = _ROLE if group == "roles" else _DATA_SOURCE
        return f"{field}.{names.get(name, name)}"
    return _TOP_LEVEL.get(path, path)


def from_validation(error: ValidationFailed, *, within: str = "") -> ApplicationError:
    """One InvalidParameter naming every problem with the DLC parameter names, each under
    `within` if given (`Content` → `Content.JobSpecs[0].PodCount`)."""
    prefix = f"{within}." if within else ""
    problems = [
        say("{field}: {message}", field=prefix + dlc_field(path), message=message)
        for path, messages in error.errors.items()
        for message in messages
    ]
    first = prefix + dlc_field(error.field) if error.field else None
    return ApplicationError("InvalidParameter", problems_text(problems), field=first)
