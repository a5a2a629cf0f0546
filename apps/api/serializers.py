"""Model → DLC dict: the response bodies of the API, field for field as the SDK's models
name and type them (`from_map` fills every field it knows and ignores the rest).

Times are ISO-8601 UTC (`2026-11-29T10:00:00Z`); absent values are left out, never null.
A few fields the SDK does not model are added where a raw HTTP caller needs them; they are
listed in docs/api.md.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from apps.agent.selectors import PodAddress
from apps.billing.models import pay_type_tag
from apps.billing.selectors import JobBillLine, JobUsage
from apps.cluster.models import InstanceType, Quota
from apps.core import pricing
from apps.core.i18n import localized
from apps.core.words import say
from apps.jobs.models import (
    FINISHED_STATUSES,
    LIVE_POD_STATUSES,
    PENDING_STATUSES,
    Job,
    JobEvent,
    JobRestart,
    JobRole,
    JobTemplate,
    JobTemplateVersion,
    Pod,
    PodStatus,
    ResourceSource,
    StatusTransition,
    gpu_hours_text,
    gpu_text,
)
from apps.jobs.specs import JobSpec, spec_from_json, spot_price_range_per_minute
from apps.jobs.waiting import IN_QUOTA, NOT_IN_QUOTA, quota_level, sub_status, waiting_text
from apps.scheduler.lifecycle import PLATFORM_REASONS
from apps.workspaces.models import Workspace

# Job.idle_mode ↔ DLC's Settings.OversoldType
OVERSOLD_TYPE = {
    "off": "ForbiddenQuotaOverSold",
    "acceptable": "AcceptQuotaOverSold",
    "only_idle": "ForceQuotaOverSold",
}
IDLE_MODE = {value: key for key, value in OVERSOLD_TYPE.items()}
MIB_PER_GIB = 1024


def iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None


def compact(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if value is not None}


def _float(value: Decimal | None) -> float | None:
    return float(value) if value is not None else None


def cpu_text(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_text(mib: int) -> str:
    return f"{mib // MIB_PER_GIB}Gi" if mib % MIB_PER_GIB == 0 else f"{mib}Mi"


def pod_uid(pod: Pod) -> str:
    """A stable UID per pod (DLC's PodUid tells history pods of one name apart)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"paiweb:pod:{pod.pod_id}"))


# --- jobs --------------------------------------------------------------------------------


def error_monitoring_args(job: Job | JobSpec) -> str:
    """AIMaster's settings in the ErrorMonitoringArgs syntax the DLC console writes."""
    restart = job.max_restarts > 0
    args = (
        f"--job-execution-mode={job.execution_mode} --enable-job-restart={restart} "
        f"--max-num-of-job-restart={job.max_restarts}"
    )
    if job.hang_seconds is not None:
        args += f" --enable-job-hang-detection=True --job-hang-interval={job.hang_seconds}"
    return args


def job_settings(job: Job) -> dict[str, Any]:
    return compact(
        {
            "OversoldType": OVERSOLD_TYPE[job.idle_mode]
            if job.resource_source == ResourceSource.QUOTA
            else None,
            "EnableErrorMonitoringInAIMaster": job.enable_aimaster,
            "ErrorMonitoringArgs": error_monitoring_args(job) if job.enable_aimaster else None,
            "AdvancedSettings": {"EnableEasyCkpt": job.enable_easyckpt},
            "TerminationGracePeriodSeconds": job.termination_grace_seconds,
            "Tags": {tag.key: tag.value for tag in job.tags.all()} or None,
        }
    )


def job_spec(job: Job, role: JobRole) -> dict[str, Any]:
    itype = role.instance_type
    spot = None
    if role.spot_strategy:
        spot = compact(
            {
                "SpotStrategy": role.spot_strategy,
                "SpotDiscountLimit": _float(role.spot_discount_limit),
                "SpotPriceLimit": _float(role.spot_price_limit),
            }
        )
    fallbacks = [
        compact(
            {
                "InstanceType": item.instance_type.name,
                "SpotStrategy": item.spot_strategy,
                "SpotDiscountLimit": _float(item.spot_discount_limit),
                "SpotPriceLimit": _float(item.spot_price_limit),
            }
        )
        for item in role.elastic_spot_specs.all()
    ]
    quota = job.resource_source == ResourceSource.QUOTA
    return compact(
        {
            "Type": role.role_type,
            "PodCount": role.pod_count,
            "Image": role.image or job.image or None,
            "EcsSpec": itype.name if itype else None,
            "ResourceConfig": compact(
                {
                    "CPU": cpu_text(role.cpu),
                    "Memory": memory_text(role.memory),
                    "GPU": role.gpu_text,
                    "GPUType": (itype.gpu_model if itype else "") or None,
                }
            ),
            "SpotSpec": spot,
            "ElasticSpotSpecs": fallbacks or None,
            "UseSpotInstance": bool(role.spot_strategy),
            "RestartPolicy": role.restart_policy,
            "QuotaId": job.quota.name if quota and job.quota_id else None,
            "OversoldType": OVERSOLD_TYPE[job.idle_mode] if quota else None,
        }
    )


def _finish_times(job: Job) -> dict[str, str | None]:
    finished = iso(job.finished_at)
    return {
        "GmtFinishTime": finished,
        "GmtSuccessedTime": finished if job.status == "Succeeded" else None,
        "GmtFailedTime": finished if job.status == "Failed" else None,
        "GmtStoppedTime": finished if job.status == "Stopped" else None,
    }


def _requests(roles: list[JobRole]) -> tuple[int, Decimal, Decimal]:
    """Total CPU cores, GPUs and memory (GiB) the job asks for."""
    cpu = sum(r.cpu * r.pod_count for r in roles)
    gpu = sum(r.gpus * r.pod_count for r in roles)
    memory = sum(r.memory * r.pod_count for r in roles)
    return cpu // 1000, Decimal(gpu), Decimal(memory) / MIB_PER_GIB


def _user_vpc(job: Job) -> dict[str, str] | None:
    if not (job.vpc_id or job.vswitch_id or job.security_group_id):
        return None
    return compact(
        {
            "VpcId": job.vpc_id or None,
            "SwitchId": job.vswitch_id or None,
            "SecurityGroupId": job.security_group_id or None,
        }
    )


def _job_common(job: Job, roles: list[JobRole], *, sub: str) -> dict[str, Any]:
    """What GetJob and ListJobs report alike (`sub`: the job's SubStatus)."""
    cpu, _, _ = _requests(roles)
    return {
        "JobId": job.job_id,
        "DisplayName": job.display_name,
        "Description": job.description or None,
        "Accessibility": job.accessibility,
        "JobType": job.job_type,
        "WorkspaceId": job.workspace.workspace_id,
        "WorkspaceName": job.workspace.name,
        "UserId": str(job.user_id),
        "Status": job.status,
        "SubStatus": sub or None,
        "ReasonCode": job.reason_code or None,
        # A pending job says why it waits and where it stands, as its page does.
        "ReasonMessage": localized(waiting_text(job) or job.reason_message) or None,
        "GmtCreateTime": iso(job.created_at),
        "GmtSubmittedTime": iso(job.submitted_at),
        "GmtRunningTime": iso(job.started_at),
        **_finish_times(job),
        "Duration": int(job.duration_seconds or 0),
        "Priority": job.priority,
        "UserCommand": job.user_command,
        "Envs": dict(job.envs),
        "DataSources": [data_source(source) for source in job.data_sources],
        "CodeSource": code_source(job.code_source),
        "JobSpecs": [job_spec(job, role) for role in roles],
        "JobMaxRunningTimeMinutes": job.max_running_time_minutes,
        "ResourceId": job.quota.name if job.quota_id else None,
        "ResourceType": job.resource_type,
        "RestartTimes": job.restart_budget,
        "Settings": job_settings(job),
        "ElasticSpec": {"EnableAIMaster": job.enable_aimaster},
        "RequestCPU": cpu,
        "UserVpc": _user_vpc(job),
    }


def data_source(source: dict) -> dict[str, Any]:
    return compact(
        {
            "DataSourceId": source.get("data_source_id") or None,
            "Uri": source.get("uri") or None,
            "MountPath": source.get("mount_path") or None,
        }
    )


def code_source(source: dict) -> dict[str, Any] | None:
    if not source:
        return None
    return compact(
        {
            "CodeSourceId": source.get("code_source_id") or source.get("uri") or None,
            "Branch": source.get("branch") or None,
            "Commit": source.get("commit") or None,
            "MountPath": source.get("mount_path") or None,
        }
    )


def job_detail(
    job: Job,
    *,
    roles: list[JobRole],
    pods: list[Pod],
    history: list[StatusTransition],
    restarts: list[JobRestart],
    addresses: Mapping[int, PodAddress] | None = None,
) -> dict[str, Any]:
    """GetJob's body (without RequestId). `addresses`: where each pod is reached
    (`apps.agent.selectors.pod_addresses`), its Ip, PodIp and PodIps."""
    _, gpu, memory = _requests(roles)
    live = [p for p in pods if p.attempt == job.attempt and p.status in LIVE_POD_STATUSES]
    in_quota = sum(p.in_quota is True for p in live)
    sub = sub_status(job, in_quota=in_quota, not_in_quota=sum(p.in_quota is False for p in live))
    return compact(
        {
            **_job_common(job, roles, sub=sub),
            "RequestGPU": float(gpu),
            "RequestMemory": float(memory),
            "ResourceLevel": resource_level(job, pods),
            "Pods": pod_tree(pods, addresses or {}),
            "StatusHistory": [status_transition(t) for t in history],
            "JobReplicaStatuses": [replica_status(job, role, pods) for role in roles],
            "RestartRecord": [restart_record(job, r, history) for r in restarts],
        }
    )


def replica_status(job: Job, role: JobRole, pods: list[Pod]) -> dict[str, Any]:
    """A role's pods of the current attempt: running (Active), placed and starting
    (Dequeued), waiting for the scheduler or the market (Queuing)."""
    current = [p for p in pods if p.role_id == role.pk and p.attempt == job.attempt]
    active = sum(p.status == PodStatus.RUNNING for p in current)
    dequeued = sum(p.status == PodStatus.PENDING for p in current)
    queuing = role.pod_count if job.status in PENDING_STATUSES and not current else 0
    return compact(
        {
            "Type": role.role_type,
            "Active": active,
            "Dequeued": dequeued,
            "Queuing": queuing,
            "EstimatedPodCount": role.pod_count,
            "CurrentSpotInstanceType": current_spot_instance_type(job, role, current),
        }
    )


def current_spot_instance_type(job: Job, role: JobRole, current: list[Pod]) -> str | None:
    """The instance type a spot role's pods of the current attempt run on (its EcsSpec or
    the ElasticSpotSpecs type the market chose); before they exist, its EcsSpec."""
    if job.resource_source != ResourceSource.SPOT or role.instance_type is None:
        return None
    ran = next((p.instance_type for p in current if p.instance_type_id), None)
    return (ran or role.instance_type).name


def restart_record(
    job: Job, restart: JobRestart, history: list[StatusTransition]
) -> dict[str, Any]:
    """One interruption that started a new attempt (`JobRestart`): when and why, how long
    until the job ran again and whether it did, and the work it lost (GPU-seconds since the
    last checkpoint; `LostGpuSeconds`, paiweb's own, beside the SDK's fields)."""
    back = next(
        (t.started_at for t in history if t.status == "Running" and t.started_at > restart.at),
        None,
    )
    if back is not None:
        status, duration = "Succeeded", int((back - restart.at).total_seconds())
    elif job.status in FINISHED_STATUSES:
        status, duration = "Failed", None
    else:
        status, duration = "Restarting", None
    lost = gpu_hours_text(restart.lost_gpu_seconds)
    detail = (
        say(
            "an AIMaster restart; lost {lost} GPU-hours of work since the last checkpoint",
            lost=lost,
        )
        if restart.counted
        else say(
            "a platform interruption: no AIMaster restart spent; lost {lost} GPU-hours of work "
            "since the last checkpoint",
            lost=lost,
        )
        if restart.cause in PLATFORM_REASONS
        else say(
            "its resources were taken back: no AIMaster restart spent; lost {lost} GPU-hours "
            "of work since the last checkpoint",
            lost=lost,
        )
    )
    pod_level = restart.cause == "PodFailed" and job.execution_mode == "Async"
    return compact(
        {
            "JobRestartCount": getattr(restart, "budget", None) if restart.counted else None,
            "OccurTime": iso(restart.at),
            "OccurPhase": "Running",
            "Reason": restart.cause,
            "RestartDurationInSec": duration,
            "RestartStatus": status,
            "RestartFailReason": localized(job.reason_message) or None
            if status == "Failed"
            else None,
            "RestartLevelType": "PodLevel" if pod_level else "JobLevel",
            "TriggerID": f"{job.job_id}-restart-{restart.number}",
            "DetailErrorInfoList": [
                {
                    "ErrorCode": restart.cause,
                    "ErrorMsg": localized(restart.message) or restart.cause,
                    "DetailErrorMsg": localized(detail),
                }
            ],
            "LostGpuSeconds": round(restart.lost_gpu_seconds, 1),
        }
    )


def job_item(job: Job, *, roles: list[JobRole]) -> dict[str, Any]:
    """One entry of ListJobs (the SDK types RequestGPU and RequestMemory as text here)."""
    _, gpu, memory = _requests(roles)
    sub = sub_status(job, in_quota=job.pods_in_quota, not_in_quota=job.pods_not_in_quota)
    return compact(
        {
            **_job_common(job, roles, sub=sub),
            "RequestGPU": str(gpu),
            "RequestMemory": format(memory.normalize(), "f"),
            "NodeCount": str(sum(r.pod_count for r in roles)),
            "Username": job.user.get_username(),
            "ResourceQuotaName": job.quota.name if job.quota_id else None,
            "UseOversoldResource": job.idle_mode != "off",
        }
    )


def status_transition(entry: StatusTransition) -> dict[str, Any]:
    return compact(
        {
            "Status": entry.status,
            "StartTime": iso(entry.started_at),
            "EndTime": iso(entry.ended_at),
            "ReasonCode": entry.reason_code or None,
            "ReasonMessage": localized(entry.reason_message) or None,
        }
    )


def pod_resource_type(pod: Pod) -> str | None:
    if pod.in_quota is None:
        return None
    return IN_QUOTA if pod.in_quota else NOT_IN_QUOTA


def resource_level(job: Job, pods: list[Pod]) -> str | None:
    """For quota jobs: whether the current pods run In Quota, Not in Quota, or Mixed."""
    if job.resource_source != ResourceSource.QUOTA:
        return None
    current = [p for p in pods if p.attempt == job.attempt]
    in_quota = sum(p.in_quota is True for p in current)
    return quota_level(in_quota, sum(p.in_quota is False for p in current)) or None


def pod_item(pod: Pod, address: PodAddress | None = None) -> dict[str, Any]:
    duration = None
    if pod.started_at is not None and pod.finished_at is not None:
        duration = max((pod.finished_at - pod.started_at).total_seconds(), 0.0)
    return compact(
        {
            "PodId": pod.pod_id,
            "PodUid": pod_uid(pod),
            "Type": pod.role.role_type,
            "Status": pod.status,
            "SubStatus": pod.reason or None,
            "NodeName": pod.node.name if pod.node_id else None,
            "GmtCreateTime": iso(pod.created_at),
            "GmtStartTime": iso(pod.started_at),
            "GmtFinishTime": iso(pod.finished_at),
            "ResourceType": pod_resource_type(pod),
            "Duration": duration,
            # the address the job's other pods reach it at; absent when there is none
            "Ip": address.ip if address else None,
            "PodIp": address.ip if address else None,
            "PodIps": [{"InterfaceName": address.interface, "Ip": address.ip}] if address else None,
        }
    )


def pod_tree(pods: list[Pod], addresses: Mapping[int, PodAddress]) -> list[dict[str, Any]]:
    """One entry per pod slot (role and index): its newest pod, with the pods it replaced
    (earlier attempts: preempted, reclaimed, restarted) as HistoryPods, newest first."""
    slots: dict[tuple[int, int], list[Pod]] = defaultdict(list)
    for pod in pods:
        slots[(pod.role_id, pod.index)].append(pod)
    tree = []
    for key in sorted(slots):
        newest, *older = sorted(slots[key], key=lambda p: (-p.attempt, -p.pk))
        item = pod_item(newest, addresses.get(newest.pk))
        item["HistoryPods"] = [pod_item(p, addresses.get(p.pk)) for p in older]
        tree.append(item)
    return tree


def event_line(event: JobEvent) -> str:
    where = f" [{event.pod.pod_id}]" if event.pod_id else ""
    return f"{iso(event.at)} {event.kind}{where}: {localized(event.message)}"


# --- instance types and prices -------------------------------------------------------------


def ecs_spec(
    itype: InstanceType,
    *,
    spot_in_use: int = 0,
    payg_in_use: int = 0,
    market_price: Decimal | None = None,
    floor_ratio: Decimal | None = None,
) -> dict[str, Any]:
    """ListEcsSpecs' EcsSpec, plus the SpotPriceLimit range (CNY per instance-minute).
    `market_price` is the spot market's price now, CNY per instance-hour; `floor_ratio` the
    market's, read once for a whole list (else read here)."""
    low, high = spot_price_range_per_minute(itype, floor_ratio=floor_ratio)
    sold = itype.public_capacity > 0
    spot = sold and itype.spot_enabled
    stock = pricing.spot_stock(itype.public_capacity, payg_in_use, spot_in_use)
    payment_types = (["PostPaid"] if sold else []) + (["Spot"] if spot else [])
    return compact(
        {
            "InstanceType": itype.name,
            "ResourceType": itype.resource_type,
            "AcceleratorType": "GPU" if itype.gpu else "CPU",
            "Cpu": itype.cpu // 1000,
            "Memory": itype.memory // MIB_PER_GIB,
            "Gpu": itype.gpu,
            "GpuType": itype.gpu_model or None,
            "IsAvailable": sold,
            "PaymentTypes": payment_types,
            "SpotStockStatus": ("WithStock" if stock > 0 else "WithoutStock") if spot else None,
            # The market price as a fraction of the original (0.3: 70% cheaper).
            "NonProtectSpotDiscount": float(round(market_price / itype.price_per_hour, 4))
            if spot and market_price is not None and itype.price_per_hour
            else None,
            # paiweb additions (the SDK's EcsSpec has no price fields):
            "OriginalPricePerHour": float(itype.price_per_hour),
            "SpotPriceLimitRange": {"Min": float(low), "Max": float(high)} if spot else None,
        }
    )


# --- workspaces and quotas ----------------------------------------------------------------


def workspace_item(
    workspace: Workspace, *, admins: list[str], is_default: bool, creator: str | None
) -> dict[str, Any]:
    return compact(
        {
            "WorkspaceId": workspace.workspace_id,
            "WorkspaceName": workspace.name,
            "DisplayName": workspace.display_name or workspace.name,
            "Description": workspace.description,
            "Creator": creator,
            "AdminNames": admins,
            "GmtCreateTime": iso(workspace.created_at),
            "GmtModifiedTime": iso(workspace.created_at),
            "IsDefault": is_default,
            "Status": "ENABLED",
            "EnvTypes": ["prod"],
        }
    )


def quota_item(quota: Quota, *, workspace_ids: list[str]) -> dict[str, Any]:
    specs = [
        {"Name": "CPU", "Type": "Cores", "Value": cpu_text(quota.min_cpu)},
        {"Name": "Memory", "Type": "GiB", "Value": str(quota.min_memory // MIB_PER_GIB)},
        {"Name": "GPU", "Type": "Count", "Value": str(quota.min_gpu)},
    ]
    return compact(
        {
            "Id": quota.name,
            "Name": quota.name,
            "DisplayName": quota.name,
            "QuotaType": quota.resource_type,
            "Mode": "isolate",
            "ProductCode": "PAI",
            "Specs": specs,
            # paiweb additions:
            "ParentId": quota.parent.name if quota.parent_id else None,
            "QueueStrategy": quota.queue_strategy,
            "WorkspaceIds": workspace_ids,
        }
    )


def create_job_body(spec: JobSpec) -> dict[str, Any]:
    """The CreateJob body that `parsing.job_spec_from_create_job` reads back as `spec` (a job
    template's Content): every field the spec holds, in DLC's names."""
    quota = spec.resource_source == ResourceSource.QUOTA
    spot = spec.resource_source == ResourceSource.SPOT
    roles = []
    any_image = any(role.image for role in spec.roles)
    for role in spec.roles:
        gpus = None
        if role.gpu is not None or role.gpu_milli:
            gpus = gpu_text(role.gpu or 0, role.gpu_milli)
        config = compact(
            {
                "CPU": cpu_text(role.cpu) if role.cpu is not None else None,
                "Memory": memory_text(role.memory) if role.memory is not None else None,
                "GPU": gpus,
            }
        )
        spot_spec = None
        if spot:
            spot_spec = compact(
                {
                    "SpotStrategy": "SpotWithPriceLimit",
                    "SpotDiscountLimit": _plain(role.spot_discount_limit),
                    "SpotPriceLimit": _plain(role.spot_price_limit),
                }
            )
        fallbacks = [
            compact(
                {
                    "InstanceType": item.instance_type,
                    "SpotStrategy": "SpotWithPriceLimit",
                    "SpotDiscountLimit": _plain(item.spot_discount_limit),
                    "SpotPriceLimit": _plain(item.spot_price_limit),
                }
            )
            for item in role.elastic_spot_specs
        ]
        roles.append(
            compact(
                {
                    "Type": role.role_type,
                    "PodCount": role.pod_count,
                    # the job's image where no role names one (the console's form keeps
                    # one image for the job): what each pod runs either way
                    "Image": (role.image if any_image else spec.image) or None,
                    "EcsSpec": role.instance_type or None,
                    "ResourceConfig": config or None,
                    "SpotSpec": spot_spec,
                    "ElasticSpotSpecs": fallbacks or None,
                    "RestartPolicy": role.restart_policy,
                }
            )
        )
    code = spec.code_source
    return compact(
        {
            "DisplayName": spec.display_name,
            "Description": spec.description or None,
            "Accessibility": spec.accessibility,
            "JobType": spec.job_type,
            "UserCommand": spec.user_command,
            "Envs": spec.envs or None,
            "DataSources": [
                compact(
                    {
                        "DataSourceId": source.get("data_source_id"),
                        "Uri": None if source.get("data_source_id") else source.get("uri"),
                        "MountPath": source.get("mount_path"),
                    }
                )
                for source in spec.data_sources
            ]
            or None,
            "CodeSource": compact(
                {
                    "CodeSourceId": code.get("code_source_id"),
                    "Branch": code.get("branch"),
                    "Commit": code.get("commit"),
                    "MountPath": code.get("mount_path"),
                }
            )
            or None,
            "Priority": spec.priority,
            "JobMaxRunningTimeMinutes": spec.max_running_time_minutes,
            "SuccessPolicy": spec.success_policy,
            "ResourceId": spec.quota if quota else None,
            "UserVpc": compact(
                {
                    "VpcId": spec.vpc_id or None,
                    "SwitchId": spec.vswitch_id or None,
                    "SecurityGroupId": spec.security_group_id or None,
                }
            )
            or None,
            "JobSpecs": roles,
            "Settings": compact(
                {
                    "OversoldType": OVERSOLD_TYPE[spec.idle_mode] if quota else None,
                    "EnableErrorMonitoringInAIMaster": spec.enable_aimaster,
                    "ErrorMonitoringArgs": error_monitoring_args(spec)
                    if spec.enable_aimaster
                    else None,
                    "AdvancedSettings": {"EnableEasyCkpt": spec.enable_easyckpt},
                    "TerminationGracePeriodSeconds": spec.termination_grace_seconds,
                    "Tags": spec.tags or None,
                }
            ),
        }
    )


def _plain(value: Decimal | None) -> str | None:
    return None if value is None else format(value.normalize(), "f")


def template_item(template: JobTemplate) -> dict[str, Any]:
    """A job template as GetJobTemplate and ListJobTemplates give it (Versions aside)."""
    return compact(
        {
            "TemplateId": str(template.pk),
            "TemplateName": template.name,
            "WorkspaceId": template.workspace.workspace_id,
            "Description": template.description,
            "DefaultVersion": template.default_version,
            "UserId": str(template.user_id),
            "ModifiedBy": str(template.modified_by_id) if template.modified_by_id else None,
            "Metadata": template.metadata,
            "GmtCreateTime": iso(template.created_at),
            "GmtModifyTime": iso(template.updated_at),
            "LastUsedTime": iso(template.last_used_at),
        }
    )


def template_version_item(version: JobTemplateVersion) -> dict[str, Any]:
    """One version: its Content as a CreateJob body in JSON text, as DLC passes it."""
    body = create_job_body(spec_from_json(version.content))
    return {
        "Version": version.version,
        "Content": json.dumps(body, ensure_ascii=False),
        "Constraints": version.constraints,
        "CreatedBy": str(version.created_by_id),
        "GmtCreateTime": iso(version.created_at),
    }


# --- cost ------------------------------------------------------------------------------------


def job_cost(usage: JobUsage) -> dict[str, Any]:
    """GetJobCost's totals; money as decimal text in CNY (exact, as billed)."""
    return {
        "Prepaid": usage.prepaid,
        "PayType": usage.pay_type or None,
        "Tag": pay_type_tag(usage.pay_type) if usage.pay_type else None,
        "Currency": "CNY",
        "Cost": str(usage.cost),
        "BilledMinutes": usage.billed_minutes,
        "GpuHours": round(usage.gpu_hours, 4),
        "InstanceHours": round(usage.instance_hours, 4),
    }


def bill_line(line: JobBillLine) -> dict[str, Any]:
    """One line of GetJobCost: a pod's billed minutes on one UTC day."""
    return {
        "Day": line.day.isoformat(),
        "PodId": line.pod_id,
        "InstanceType": line.instance_type,
        "PayType": line.pay_type,
        "Tag": line.tag,
        "Minutes": line.minutes,
        "Amount": str(line.amount),
        "StartTime": iso(line.start),
        "EndTime": iso(line.end),
        "MinPricePerHour": str(line.low),
        "MaxPricePerHour": str(line.high),
    }
