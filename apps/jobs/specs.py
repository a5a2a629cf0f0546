"""What a user asks for when creating a job, and its validation.

The console's form and the API both translate their input into a `JobSpec` and call
`job_spec_resolve`, so the two apply the same rules and name the same fields. Field paths
are the spec's own (`roles[0].spot_discount_limit`); each interface maps them to its names.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from apps.cluster.clusterfile import IMAGE_URI
from apps.cluster.models import InstanceType, Quota, ResourceType
from apps.cluster.selectors import market_params
from apps.core import pricing
from apps.core.errors import ValidationFailed
from apps.core.limits import MAX_PODS_PER_ROLE
from apps.core.words import say
from apps.jobs.models import (
    Accessibility,
    ExecutionMode,
    IdleMode,
    JobRole,
    JobType,
    ResourceSource,
    SuccessPolicy,
)

SPOT_DISCOUNTS = tuple(Decimal(f"0.{n}") for n in range(1, 10))
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What a pod's execve can take (ARG_MAX is 2 MiB with the usual 8 MiB stack, argv and the
# environment together): refused at submission rather than failing the pod with E2BIG.
MAX_USER_COMMAND_BYTES = 64 * 1024
MAX_ENVS = 100
MAX_ENV_VALUE_BYTES = 32 * 1024
MAX_ENVS_TOTAL_BYTES = 256 * 1024  # "NAME=value" strings together
MAX_DISPLAY_NAME = 256  # Job.display_name's max_length
MAX_DESCRIPTION = 4096
MAX_GRACE_SECONDS = 24 * 3600  # between SIGTERM and SIGKILL
MAX_DATA_SOURCES = 32  # each is a bind mount in every pod of the job
MAX_RUNNING_TIME_MINUTES = 10 * 366 * 24 * 60  # ten years: far beyond any run, within a column
# A resource config's pod: far above any node, far below what the database columns hold.
MAX_POD_CPU = 10_000 * 1000  # millicores
MAX_POD_MEMORY = 64 * 1024 * 1024  # MiB (64 TiB)
MAX_POD_GPU = 1024
MAX_ELASTIC_SPOT_SPECS = 5  # fallback instance types per role, each tried every market step
# The roles (JobSpecs types) of each job type, as its training operator names its replicas,
# in the order the create form's rows offer them: a one-role job of the type uses the first.
JOB_ROLE_TYPES: dict[str, tuple[str, ...]] = {
    JobType.PYTORCH: ("Worker", "Master"),
    JobType.TF: ("Worker", "PS", "Chief", "Evaluator"),
    JobType.MPI: ("Launcher", "Worker"),
    JobType.XGBOOST: ("Worker", "Master"),
    JobType.RAY: ("Head", "Worker"),
}
# The most roles a job can have: every role of the job type with the most, each once.
MAX_ROLES = max(map(len, JOB_ROLE_TYPES.values()))
# Roles of which a job has one pod, as the training operators take them (Kubeflow's
# PyTorchJob and XGBoostJob: one Master; TFJob: one Chief, at most one Evaluator; MPIJob:
# one Launcher; KubeRay: one Head).
SINGLE_POD_ROLES = frozenset({"Master", "Chief", "Evaluator", "Launcher", "Head"})


@dataclass
class SpotFallback:
    """A further instance type a spot role may run on, with its own bid limit
    (ElasticSpotSpecs): tried after the role's own, in order."""

    instance_type: str = ""
    spot_discount_limit: Decimal | None = None
    spot_price_limit: Decimal | None = None  # CNY per instance-minute


@dataclass
class RoleSpec:
    role_type: str = "Worker"
    pod_count: int = 1
    instance_type: str = ""  # EcsSpec name; or give cpu/memory/gpu
    cpu: int | None = None  # millicores
    memory: int | None = None  # MiB
    gpu: int | None = None
    gpu_milli: int = 0  # a share of one GPU, 1..999 (gpu then 0): `gpu_amount`
    image: str = ""
    restart_policy: str = JobRole.RestartPolicy.ON_FAILURE
    spot_discount_limit: Decimal | None = None
    spot_price_limit: Decimal | None = None  # CNY per instance-minute
    elastic_spot_specs: list[SpotFallback] = field(default_factory=list)


@dataclass
class JobSpec:
    display_name: str = ""
    description: str = ""
    accessibility: str = Accessibility.PUBLIC  # PRIVATE: its owner and workspace admins see it
    tags: dict[str, str] = field(default_factory=dict)
    job_type: str = JobType.PYTORCH
    image: str = ""
    user_command: str = ""
    envs: dict[str, str] = field(default_factory=dict)
    data_sources: list[dict] = field(default_factory=list)
    code_source: dict = field(default_factory=dict)
    priority: int = 1
    max_running_time_minutes: int | None = None
    success_policy: str = SuccessPolicy.ALL_WORKERS
    resource_type: str = ResourceType.ECS
    resource_source: str = ResourceSource.QUOTA
    quota: str = ""  # quota name
    idle_mode: str = IdleMode.OFF
    vpc_id: str = ""
    vswitch_id: str = ""
    security_group_id: str = ""
    enable_aimaster: bool = False
    max_restarts: int = 3
    execution_mode: str = ExecutionMode.SYNC
    hang_seconds: int | None = None  # AIMaster hang detection: restart after this long quiet
    enable_easyckpt: bool = False
    termination_grace_seconds: int = 30  # SIGTERM, this long to save a checkpoint, SIGKILL
    roles: list[RoleSpec] = field(default_factory=list)
    # Fields accepted with no effect here, each said as an event on the job (the API's
    # Settings.EnableRDMA on a cluster without RDMA, …: docs/api.md).
    notes: tuple[str, ...] = ()


# --- a spec as data (job templates) and a job's own spec --------------------------------------

_DECIMALS = ("spot_discount_limit", "spot_price_limit")


def spec_to_json(spec: JobSpec) -> dict:
    """The spec as JSON data (decimals as strings), for a job template's `content`."""
    data = dataclasses.asdict(spec)
    data.pop("notes", None)  # said on the job it was submitted as, not kept
    for role in data["roles"]:
        for item in [role, *role["elastic_spot_specs"]]:
            for name in _DECIMALS:
                if item[name] is not None:
                    item[name] = str(item[name])
    return data


def spec_from_json(data: dict) -> JobSpec:
    """A spec from `spec_to_json`'s data; names it does not know are left out (a template
    saved by an older version), the rest is checked when a job is submitted from it."""
    job_fields = {f.name for f in dataclasses.fields(JobSpec)} - {"roles", "notes"}
    role_fields = {f.name for f in dataclasses.fields(RoleSpec)}
    fallback_fields = {f.name for f in dataclasses.fields(SpotFallback)}
    roles = []
    for raw in data.get("roles") or []:
        role = {k: v for k, v in raw.items() if k in role_fields}
        fallbacks = [
            {k: v for k, v in item.items() if k in fallback_fields}
            for item in role.pop("elastic_spot_specs", None) or []
        ]
        for item in [role, *fallbacks]:
            for name in _DECIMALS:
                if item.get(name) is not None:
                    item[name] = Decimal(str(item[name]))
        roles.append(
            RoleSpec(**role, elastic_spot_specs=[SpotFallback(**item) for item in fallbacks])
        )
    return JobSpec(**{k: v for k, v in data.items() if k in job_fields}, roles=roles)


def job_spec_of(job, roles: list[JobRole]) -> JobSpec:
    """The spec `job` was submitted with, as far as the job keeps it (its roles given)."""
    return JobSpec(
        display_name=job.display_name,
        description=job.description,
        accessibility=job.accessibility,
        tags={tag.key: tag.value for tag in job.tags.all()},
        job_type=job.job_type,
        image=job.image,
        user_command=job.user_command,
        envs=dict(job.envs),
        data_sources=[dict(source) for source in job.data_sources],
        code_source=dict(job.code_source),
        priority=job.priority,
        max_running_time_minutes=job.max_running_time_minutes,
        success_policy=job.success_policy,
        resource_type=job.resource_type,
        resource_source=job.resource_source,
        quota=job.quota.name if job.quota_id else "",
        idle_mode=job.idle_mode,
        vpc_id=job.vpc_id,
        vswitch_id=job.vswitch_id,
        security_group_id=job.security_group_id,
        enable_aimaster=job.enable_aimaster,
        max_restarts=job.max_restarts,
        execution_mode=job.execution_mode,
        hang_seconds=job.hang_seconds,
        enable_easyckpt=job.enable_easyckpt,
        termination_grace_seconds=job.termination_grace_seconds,
        roles=[
            RoleSpec(
                role_type=role.role_type,
                pod_count=role.pod_count,
                instance_type=role.instance_type.name if role.instance_type_id else "",
                cpu=None if role.instance_type_id else role.cpu,
                memory=None if role.instance_type_id else role.memory,
                gpu=None if role.instance_type_id else role.gpu,
                gpu_milli=0 if role.instance_type_id else role.gpu_milli,
                image=role.image,
                restart_policy=role.restart_policy,
                spot_discount_limit=role.spot_discount_limit,
                spot_price_limit=role.spot_price_limit,
                elastic_spot_specs=[
                    SpotFallback(
                        instance_type=item.instance_type.name,
                        spot_discount_limit=item.spot_discount_limit,
                        spot_price_limit=item.spot_price_limit,
                    )
                    for item in role.elastic_spot_specs.all()
                ],
            )
            for role in roles
        ],
    )


@dataclass(frozen=True)
class ResolvedRole:
    spec: RoleSpec
    instance_type: InstanceType | None
    cpu: int
    memory: int
    gpu: int
    gpu_milli: int = 0
    # the ElasticSpotSpecs' instance types, in the spec's order
    fallback_types: tuple[InstanceType, ...] = ()

    @property
    def milli(self) -> int:
        """Milli-GPUs per pod, as quotas count them."""
        return self.gpu_milli or self.gpu * 1000


@dataclass(frozen=True)
class ResolvedJob:
    spec: JobSpec
    quota: Quota | None
    roles: list[ResolvedRole]


def spot_price_range_per_minute(
    instance_type: InstanceType, *, floor_ratio: Decimal | None = None
) -> tuple[Decimal, Decimal]:
    """The SpotPriceLimits an instance type takes, CNY per instance-minute
    (`pricing.price_limit_range`). The floor follows the market's configured ratio (the
    cluster file's [market] table)."""
    if floor_ratio is None:
        floor_ratio = market_params().floor_ratio
    return pricing.price_limit_range(instance_type.price_per_hour, floor_ratio)


def gpu_amount(number: Decimal) -> tuple[int, int]:
    """GPUs per pod as (whole GPUs, milli-GPUs of a share): "2" → (2, 0), "0.5" → (0, 500).
    A fraction is a share of one GPU, in thousandths, below 1; raises ValueError otherwise."""
    if number < 0:
        raise ValueError("must not be negative")
    if number == number.to_integral_value():
        return int(number), 0
    milli = number * 1000
    if number > 1 or milli != milli.to_integral_value():
        raise ValueError(
            "give whole GPUs, or a share of one GPU below 1 in thousandths (0.5, 0.25)"
        )
    return 0, int(milli)


def as_decimal(value) -> Decimal | None:
    """Parse a number from the form or the API; None when absent, raises ValueError if bad
    (digits other than ASCII's too: Decimal would read "٠.٤" as 0.4)."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and not value.isascii():
        raise ValueError(f"{value!r} is not a number")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a number") from None
    if not number.is_finite():
        raise ValueError(f"{value!r} is not a number")
    return number


class _Errors(dict):
    def add(self, path: str, message: str) -> None:
        self.setdefault(path, []).append(message)


def job_spec_resolve(spec: JobSpec, *, workspace) -> ResolvedJob:
    """Check every rule of the create-job form; raise ValidationFailed listing all problems."""
    errors = _Errors()
    _check_basics(spec, errors)
    quota = _check_source(spec, workspace, errors)
    roles = _check_roles(spec, errors)
    if quota is not None and not errors:
        _check_fits(spec, quota, roles, errors)
    if spec.resource_source != ResourceSource.QUOTA and not errors:
        _check_public_fits(roles, errors)
    if errors:
        raise ValidationFailed(dict(errors))
    return ResolvedJob(spec=spec, quota=quota, roles=roles)


def template_spec_check(spec: JobSpec, *, workspace, given: Callable[[str], bool]) -> None:
    """A job template's spec: what it gives must pass `job_spec_resolve`'s rules, so a job
    submitted from it is not refused for the template's own values. A template may leave
    fields out (the job submitted from it gives them): a problem with a field `given` says
    the template did not give (by its spec path) is not the template's. Raises
    ValidationFailed."""
    try:
        job_spec_resolve(spec, workspace=workspace)
    except ValidationFailed as failed:
        errors = {path: messages for path, messages in failed.errors.items() if given(path)}
        if errors:
            raise ValidationFailed(errors) from None


def _check_fits(spec: JobSpec, quota: Quota, roles: list[ResolvedRole], errors: _Errors) -> None:
    """A quota job that could never start is refused, not queued for ever (in a StrictFIFO
    queue it would block every job behind it): a pod larger than every node of the quota's
    pool, or, without idle resources, a job needing more in all than its quota guarantees
    (its pods may only use the quota's min), or more than the whole pool with them."""
    nodes = [
        (cpu, memory, gpu * 1000)
        for cpu, memory, gpu in quota.pool.nodes.values_list("cpu", "memory", "gpu")
    ]
    largest = tuple(max((n[i] for n in nodes), default=0) for i in range(3))
    for i, role in enumerate(roles):
        if any(
            need > room
            for need, room in zip((role.cpu, role.memory, role.milli), largest, strict=True)
        ):
            needs = _amounts(role.cpu, role.memory, role.milli)
            errors.add(
                f"roles[{i}]",
                say(
                    "one pod needs {needs}, more than any node of pool {pool} holds "
                    "(the largest: {largest_needs})",
                    needs=needs,
                    pool=quota.pool.name,
                    largest_needs=_amounts(*largest),
                ),
            )
    if errors:
        return
    total = tuple(
        sum(getattr(r, k) * r.spec.pod_count for r in roles) for k in ("cpu", "memory", "milli")
    )
    off = spec.idle_mode == IdleMode.OFF
    if off:
        room = (quota.min_cpu, quota.min_memory, quota.min_gpu * 1000)
    else:
        room = tuple(sum(n[i] for n in nodes) for i in range(3))
    if any(need > have for need, have in zip(total, room, strict=True)):
        values = {"needs": _amounts(*total), "room_needs": _amounts(*room)}
        if off:
            problem = say(
                "the job needs {needs} in all, more than quota {quota} guarantees ({room_needs}): "
                "it could never start; with idle resources (Acceptable) it may borrow",
                quota=quota.name,
                **values,
            )
        else:
            problem = say(
                "the job needs {needs} in all, more than pool {pool} holds ({room_needs}): it "
                "could never start",
                pool=quota.pool.name,
                **values,
            )
        errors.add("quota", problem)


def _check_public_fits(roles: list[ResolvedRole], errors: _Errors) -> None:
    """A pay-as-you-go or spot job that could never start is refused, as a quota job is:
    all its pods start together, each on an instance of the public pool, so a role needing
    more instances than its instance type's public capacity (for a spot role, than that of
    every type it may run on), or roles of one type needing more together, would wait for
    ever."""
    alone: dict[str, int] = {}  # pods of the roles that have one type only, per type
    for i, role in enumerate(roles):
        choices = [t for t in (role.instance_type, *role.fallback_types) if t is not None]
        if not choices:
            continue
        largest = max(choices, key=lambda t: t.public_capacity)
        if role.spec.pod_count > largest.public_capacity:
            errors.add(
                f"roles[{i}].pod_count",
                say(
                    "{pods} pods need {pods} instances of {name}, more than its public "
                    "capacity ({capacity}): the job could never start",
                    pods=role.spec.pod_count,
                    name=largest.name,
                    capacity=largest.public_capacity,
                ),
            )
        elif len(choices) == 1:
            alone[largest.name] = alone.get(largest.name, 0) + role.spec.pod_count
    for role in roles:
        itype = role.instance_type
        if itype is not None and alone.get(itype.name, 0) > itype.public_capacity:
            errors.add(
                "roles",
                say(
                    "the roles on {name} need {pods} instances together, more than its public "
                    "capacity ({capacity}): the job could never start",
                    name=itype.name,
                    pods=alone.pop(itype.name),
                    capacity=itype.public_capacity,
                ),
            )


def _amounts(cpu: int, memory: int, milli_gpu: int) -> str:
    """ "8 cores, 32 GiB, 1 GPU" (a message: placeholders holding it end in `needs`)."""
    values = {
        "cores": f"{cpu / 1000:g}",
        "memory": f"{memory / 1024:g}",
        "gpus": f"{milli_gpu / 1000:g}",
    }
    if cpu == 1000:
        return say("{cores} core, {memory} GiB, {gpus} GPU", **values)
    return say("{cores} cores, {memory} GiB, {gpus} GPU", **values)


# at least twice as long as an agent may lag in telling a pod's output
# (apps.agent.supervisor.OUTPUT_REPORT_SECONDS)
MIN_HANG_SECONDS, MAX_HANG_SECONDS = 10, 7 * 86400
DEFAULT_HANG_SECONDS = 1800  # PAI's --job-hang-interval default
MAX_TAGS = 20
MAX_TAG_KEY = 128
MAX_TAG_VALUE = 128


def tags_problems(tags: object) -> list[str]:
    """What is wrong with a job's tags ([] when nothing): at most 20, each key 1–128
    characters not starting with "aliyun" or "acs:" (names the cloud keeps for itself), each
    value a string of at most 128; no control characters. The form, the API and ListJobs'
    Tags filter all ask here."""
    if not isinstance(tags, dict):
        return ["must be an object of key → value"]
    problems = []
    if len(tags) > MAX_TAGS:
        problems.append(say("at most {most} tags", most=MAX_TAGS))
    for key, value in tags.items():
        if not isinstance(key, str) or not key.strip():
            problems.append(say("a tag key must be a non-empty string"))
            continue
        if not isinstance(value, str):
            problems.append(say("tag {key}: the value must be a string", key=f"{key!r}"))
            continue
        if len(key) > MAX_TAG_KEY:
            problems.append(
                say(
                    "tag key {key}…: at most {most} characters",
                    key=f"{key[:32]!r}",
                    most=MAX_TAG_KEY,
                )
            )
        elif key.lower().startswith(("aliyun", "acs:")):
            problems.append(
                say("tag key {key}: keys starting aliyun or acs: are reserved", key=f"{key!r}")
            )
        if len(value) > MAX_TAG_VALUE:
            problems.append(
                say(
                    "tag {key}: the value must be at most {most} characters",
                    key=f"{key!r}",
                    most=MAX_TAG_VALUE,
                )
            )
        if has_control_characters(key + value):
            problems.append(say("tag {key}: no control characters", key=f"{key!r}"))
    return problems


# The invisible marks that reorder the text around them: embeddings, overrides, isolates and
# the direction marks. In a name others read (a job's, in a preemption's message on another
# team's page), they would make the words after it read backwards.
_DIRECTION_MARKS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def has_control_characters(text: str) -> bool:
    """Control characters (C0, DEL, C1) or text-direction marks: a name must read as typed."""
    return any(unicodedata.category(c) == "Cc" or c in _DIRECTION_MARKS for c in text)


def _check_basics(spec: JobSpec, errors: _Errors) -> None:
    if not spec.display_name.strip():
        errors.add("display_name", say("is required"))
    elif len(spec.display_name) > MAX_DISPLAY_NAME:
        errors.add("display_name", say("must be at most {most} characters", most=MAX_DISPLAY_NAME))
    elif has_control_characters(spec.display_name):
        errors.add("display_name", say("must not contain control or text-direction characters"))
    if not isinstance(spec.description, str) or len(spec.description) > MAX_DESCRIPTION:
        errors.add("description", say("must be at most {most} characters", most=MAX_DESCRIPTION))
    grace = spec.termination_grace_seconds
    if not isinstance(grace, int) or not 0 <= grace <= MAX_GRACE_SECONDS:
        errors.add(
            "termination_grace_seconds",
            say("must be from {least} to {most} seconds", least=0, most=MAX_GRACE_SECONDS),
        )
    if spec.job_type not in JobType.values:
        errors.add("job_type", say("must be one of {choices}", choices=", ".join(JobType.values)))
    if spec.accessibility not in Accessibility.values:
        errors.add(
            "accessibility",
            say("must be one of {choices}", choices=", ".join(Accessibility.values)),
        )
    for problem in tags_problems(spec.tags):
        errors.add("tags", problem)
    # The API gives the job's image as its first role's: said there, not twice.
    if spec.image and spec.image not in (role.image for role in spec.roles):
        _check_image(spec.image, "image", errors)
    for i, role in enumerate(spec.roles):
        if role.image:
            _check_image(role.image, f"roles[{i}].image", errors)
    if not spec.user_command.strip():
        errors.add("user_command", say("is required"))
    elif _utf8_size(spec.user_command) > MAX_USER_COMMAND_BYTES:
        errors.add(
            "user_command",
            say(
                "must be at most {most} KiB",
                most=MAX_USER_COMMAND_BYTES // 1024,
            ),
        )
    if not isinstance(spec.priority, int) or not 1 <= spec.priority <= 9:
        errors.add("priority", say("must be a whole number from 1 to 9"))
    if spec.max_running_time_minutes is not None and not (
        1 <= spec.max_running_time_minutes <= MAX_RUNNING_TIME_MINUTES
    ):
        errors.add(
            "max_running_time_minutes",
            say(
                "must be from 1 to {most} minutes (ten years)",
                most=f"{MAX_RUNNING_TIME_MINUTES:,}",
            ),
        )
    if spec.success_policy not in SuccessPolicy.values:
        errors.add(
            "success_policy",
            say("must be one of {choices}", choices=", ".join(SuccessPolicy.values)),
        )
    _check_envs(spec.envs, errors)
    if len(spec.data_sources) > MAX_DATA_SOURCES:
        errors.add(
            "data_sources",
            say(
                "must hold at most {most} data sources",
                most=MAX_DATA_SOURCES,
            ),
        )
    _check_mounts(spec, errors)
    if spec.max_restarts is None or not 0 <= spec.max_restarts <= 100:
        errors.add("max_restarts", say("must be from 0 to 100"))
    if spec.execution_mode not in ExecutionMode.values:
        errors.add("execution_mode", say("must be Sync or Async"))
    if spec.hang_seconds is not None:
        if not spec.enable_aimaster:
            errors.add("hang_seconds", say("hang detection is part of AIMaster: turn AIMaster on"))
        elif not MIN_HANG_SECONDS <= spec.hang_seconds <= MAX_HANG_SECONDS:
            errors.add(
                "hang_seconds",
                say(
                    "must be from {least} to {most} seconds",
                    least=MIN_HANG_SECONDS,
                    most=MAX_HANG_SECONDS,
                ),
            )


DATA_MOUNT_ROOT = "/mnt/data"  # where every data source is mounted in a pod
CODE_MOUNT_DEFAULT = "/root/code/"  # DLC's CodeSource.MountPath when none is given
# Trees of the pod's own system: no code source is mounted over them.
SYSTEM_MOUNTS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/proc",
    "/sbin",
    "/sys",
    "/usr",
)


DATA_SOURCE_URI = "datasource://"  # a registered data source (DataSourceId) as a URI


def data_source_of(*, uri: str, mount_path: str, data_source_id: str = "") -> dict:
    """A data source as a job keeps it: its URI and mount path, and a registered data
    source's DataSourceId. A DataSourceId given without a URI is the URI
    datasource://<id>, and that URI names the DataSourceId back (the create form, and a
    clone of the job, give it so)."""
    if data_source_id and not uri:
        uri = DATA_SOURCE_URI + data_source_id
    elif not data_source_id and uri.startswith(DATA_SOURCE_URI):
        data_source_id = uri.removeprefix(DATA_SOURCE_URI)
    source = {"uri": uri, "mount_path": mount_path}
    if data_source_id:
        source["data_source_id"] = data_source_id
    return source


def _nested(path: str, other: str) -> bool:
    """Whether two normalised absolute paths are one, or one is inside the other."""
    return (
        path == other
        or path.startswith(other.rstrip("/") + "/")
        or other.startswith(path.rstrip("/") + "/")
    )


def _mount_path_problem(mount: str, *, data: bool) -> str | None:
    """Why `mount` cannot be a mount path (None if it can): a data source's is a path
    strictly under /mnt/data/; any other (the code source's) is an absolute path, not `/`
    and not in or over a system tree (SYSTEM_MOUNTS) or /mnt/data; neither has a `..`
    part or control characters."""
    normal = posixpath.normpath(mount) if mount.startswith("/") else ""
    if data:
        if not normal.startswith(DATA_MOUNT_ROOT + "/") or ".." in mount.split("/"):
            return say("must be a path under /mnt/data/")
    elif not normal or ".." in mount.split("/"):
        return say("must be an absolute path without a .. part")
    if has_control_characters(mount):
        return say("must not contain control characters")
    if not data and (
        normal == "/" or any(_nested(normal, tree) for tree in (*SYSTEM_MOUNTS, DATA_MOUNT_ROOT))
    ):
        return say(
            "must not be /, a system directory ({trees}) or /mnt/data (the data sources')",
            trees=", ".join(SYSTEM_MOUNTS),
        )
    return None


def _check_mounts(spec: JobSpec, errors: _Errors) -> None:
    """Every data source at its own path under /mnt/data/, none inside another's (a later
    one's files would hide the earlier one's), and the code source's MountPath, when
    given, by the same rule outside /mnt/data."""
    mounted: list[str] = []
    for i, source in enumerate(spec.data_sources[:MAX_DATA_SOURCES]):
        mount = str(source.get("mount_path", ""))
        path = f"data_sources[{i}].mount_path"
        if not source.get("uri"):
            errors.add(f"data_sources[{i}].uri", say("is required"))
        if problem := _mount_path_problem(mount, data=True):
            errors.add(path, problem)
            continue
        normal = posixpath.normpath(mount)
        if normal in mounted:
            errors.add(
                path, say("is the mount path of a data source before it: each needs its own")
            )
        elif other := next((m for m in mounted if _nested(normal, m)), None):
            errors.add(
                path,
                say(
                    "is inside or around {other}, the mount path of a data source before it: "
                    "mount paths must not nest",
                    other=other,
                ),
            )
        mounted.append(normal)
    code_mount = spec.code_source.get("mount_path")
    if code_mount:
        if problem := _mount_path_problem(str(code_mount), data=False):
            errors.add("code_source.mount_path", problem)


def _check_image(image: str, path: str, errors: _Errors) -> None:
    """An image reference, as the cluster file's images are (`IMAGE_URI`)."""
    if not IMAGE_URI.fullmatch(image):
        errors.add(
            path,
            say(
                "must be an image reference (registry/name:tag): printable ASCII without "
                "spaces, at most 512 characters"
            ),
        )


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _check_envs(envs: dict, errors: _Errors) -> None:
    if len(envs) > MAX_ENVS:
        errors.add("envs", say("must hold at most {most} variables", most=MAX_ENVS))
        return
    total = 0
    for name, value in envs.items():
        if not ENV_NAME.fullmatch(str(name)):
            errors.add(
                "envs", say("{name} is not a valid variable name", name=f"{str(name)[:64]!r}")
            )
        elif not isinstance(value, str):
            errors.add("envs", say("{name}: the value must be text", name=name))
        elif _utf8_size(value) > MAX_ENV_VALUE_BYTES:
            errors.add(
                "envs",
                say(
                    "{name}: the value must be at most {most} KiB",
                    name=name,
                    most=MAX_ENV_VALUE_BYTES // 1024,
                ),
            )
        else:
            total += _utf8_size(f"{name}={value}")
    if total > MAX_ENVS_TOTAL_BYTES:
        errors.add(
            "envs",
            say(
                "all variables together must be at most {most} KiB",
                most=MAX_ENVS_TOTAL_BYTES // 1024,
            ),
        )


def _check_source(spec: JobSpec, workspace, errors: _Errors) -> Quota | None:
    if spec.resource_type not in ResourceType.values:
        errors.add("resource_type", say("must be ECS or Lingjun"))
        return None
    if spec.resource_source not in ResourceSource.values:
        errors.add("resource_source", say("must be quota, public or spot"))
        return None
    if spec.idle_mode not in IdleMode.values:
        errors.add("idle_mode", say("must be off, acceptable or only_idle"))
    quota = None
    if spec.resource_source == ResourceSource.QUOTA:
        if not spec.quota:
            errors.add("quota", say("is required for a job on a resource quota"))
        else:
            quota = workspace.quotas.filter(name=spec.quota).first()
            if quota is None:
                errors.add(
                    "quota", say("no quota {quota} serves this workspace", quota=f"{spec.quota!r}")
                )
            elif quota.resource_type != spec.resource_type:
                errors.add(
                    "quota",
                    say(
                        "quota {name} holds {resource_type}, not {job_resource_type}",
                        name=quota.name,
                        resource_type=quota.resource_type,
                        job_resource_type=spec.resource_type,
                    ),
                )
    elif spec.idle_mode != IdleMode.OFF:
        errors.add("idle_mode", say("idle resources apply only to jobs on a resource quota"))
    if spec.resource_source == ResourceSource.SPOT and spec.resource_type == ResourceType.LINGJUN:
        for name in ("vpc_id", "vswitch_id", "security_group_id"):
            if not getattr(spec, name).strip():
                errors.add(name, say("is required for Lingjun spot jobs"))
    return quota


def _check_roles(spec: JobSpec, errors: _Errors) -> list[ResolvedRole]:
    if not spec.roles:
        errors.add("roles", say("add at least one role (JobSpecs)"))
        return []
    names = [r.instance_type for r in spec.roles if r.instance_type]
    names += [
        f.instance_type
        for r in spec.roles
        for f in r.elastic_spot_specs[:MAX_ELASTIC_SPOT_SPECS]
        if isinstance(f.instance_type, str) and f.instance_type
    ]
    known = {t.name: t for t in InstanceType.objects.filter(name__in=names)}
    seen: set[str] = set()
    resolved = []
    for i, role in enumerate(spec.roles):
        resolved_role = _check_role(spec, role, f"roles[{i}]", known, errors)
        if role.role_type in seen:
            errors.add(
                f"roles[{i}].role_type", say("{role_type} appears twice", role_type=role.role_type)
            )
        seen.add(role.role_type)
        if resolved_role is not None:
            resolved.append(resolved_role)
    return resolved


def _check_role(
    spec: JobSpec, role: RoleSpec, path: str, known: dict[str, InstanceType], errors: _Errors
) -> ResolvedRole | None:
    ok = True
    if role.role_type not in JobRole.RoleType.values:
        errors.add(
            f"{path}.role_type",
            say("must be one of {choices}", choices=", ".join(JobRole.RoleType.values)),
        )
        ok = False
    elif spec.job_type in JOB_ROLE_TYPES and role.role_type not in JOB_ROLE_TYPES[spec.job_type]:
        roles = ", ".join(JOB_ROLE_TYPES[spec.job_type])
        errors.add(
            f"{path}.role_type",
            say(
                "{job_type} has no {role_type} role; its roles are {roles}",
                job_type=spec.job_type,
                role_type=role.role_type,
                roles=roles,
            ),
        )
        ok = False
    if not isinstance(role.pod_count, int) or not 1 <= role.pod_count <= MAX_PODS_PER_ROLE:
        errors.add(
            f"{path}.pod_count",
            say("must be from 1 to {most}", most=MAX_PODS_PER_ROLE),
        )
        ok = False
    elif role.role_type in SINGLE_POD_ROLES and role.pod_count != 1:
        errors.add(
            f"{path}.pod_count",
            say(
                "a job has one {role_type} pod, not {pods}",
                role_type=role.role_type,
                pods=role.pod_count,
            ),
        )
        ok = False
    if role.restart_policy not in JobRole.RestartPolicy.values:
        errors.add(f"{path}.restart_policy", say("is not a known restart policy"))
    itype = None
    if role.instance_type:
        itype = known.get(role.instance_type)
        if itype is None:
            errors.add(
                f"{path}.instance_type",
                say(
                    "unknown instance type {instance_type}", instance_type=f"{role.instance_type!r}"
                ),
            )
            return None
        if itype.resource_type != spec.resource_type:
            errors.add(
                f"{path}.instance_type",
                say(
                    "{name} is {resource_type}, the job uses {job_resource_type}",
                    name=itype.name,
                    resource_type=itype.resource_type,
                    job_resource_type=spec.resource_type,
                ),
            )
            ok = False
        cpu, memory, gpu = itype.cpu, itype.memory, itype.gpu
        if role.gpu_milli:
            errors.add(
                f"{path}.gpu",
                say(
                    "a share of a GPU is asked for with CPU and memory, not with an instance "
                    "type (instances come whole)"
                ),
            )
            ok = False
        elif role.cpu is not None or role.memory is not None or role.gpu is not None:
            errors.add(
                f"{path}.resource_config",
                say(
                    "give an instance type or CPU, memory and GPU, not both: a pod of an "
                    "instance type gets the whole instance"
                ),
            )
            ok = False
    else:
        if spec.resource_source != ResourceSource.QUOTA:
            errors.add(f"{path}.instance_type", say("public and spot jobs need an instance type"))
            return None
        cpu, memory, gpu = role.cpu or 0, role.memory or 0, role.gpu or 0
        if cpu <= 0:
            errors.add(f"{path}.cpu", say("give an instance type or a CPU amount above 0"))
            ok = False
        if memory <= 0:
            errors.add(f"{path}.memory", say("give an instance type or a memory amount above 0"))
            ok = False
        if gpu < 0:
            errors.add(f"{path}.gpu", say("must not be negative"))
            ok = False
        if role.gpu_milli and (gpu or not 0 < role.gpu_milli < 1000):
            errors.add(f"{path}.gpu", say("a share of a GPU is below one GPU, with no whole GPU"))
            ok = False
        for name, value, most, shown in (
            ("cpu", cpu, MAX_POD_CPU, f"{MAX_POD_CPU // 1000:,} cores"),
            ("memory", memory, MAX_POD_MEMORY, f"{MAX_POD_MEMORY // 1024:,} GiB"),
            ("gpu", gpu, MAX_POD_GPU, f"{MAX_POD_GPU:,} GPUs"),
        ):
            if value > most:
                errors.add(f"{path}.{name}", say("must be at most {shown} per pod", shown=shown))
                ok = False
    ok = _check_bid(spec, role, path, itype, errors) and ok
    fallbacks = _check_fallbacks(spec, role, path, itype, known, errors)
    if not ok or fallbacks is None:
        return None
    share = 0 if itype is not None else role.gpu_milli
    return ResolvedRole(
        spec=role,
        instance_type=itype,
        cpu=cpu,
        memory=memory,
        gpu=gpu,
        gpu_milli=share,
        fallback_types=fallbacks,
    )


def _check_bid(
    spec: JobSpec, role: RoleSpec, path: str, itype: InstanceType | None, errors: _Errors
) -> bool:
    discount, price = role.spot_discount_limit, role.spot_price_limit
    if spec.resource_source != ResourceSource.SPOT:
        if discount is not None or price is not None:
            errors.add(f"{path}.spot_discount_limit", say("bids apply only to spot jobs"))
            return False
        return True
    problem = _bid_problem(spec, itype, discount, price)
    if problem is not None:
        errors.add(f"{path}.{problem[0]}", problem[1])
        return False
    return True


def _bid_problem(
    spec: JobSpec, itype: InstanceType | None, discount: Decimal | None, price: Decimal | None
) -> tuple[str, str] | None:
    """What is wrong with a spot bid on `itype` (a role's own, or one of its
    ElasticSpotSpecs), as (field, message); None when nothing is."""
    if itype is not None and (not itype.spot_enabled or itype.public_capacity == 0):
        return "instance_type", say("{name} is not sold as spot", name=itype.name)
    if discount is None and price is None:
        return "spot_discount_limit", say("set a SpotDiscountLimit or a SpotPriceLimit")
    if discount is not None and price is not None:
        return "spot_price_limit", say("set only one of SpotDiscountLimit and SpotPriceLimit")
    if discount is not None and discount not in SPOT_DISCOUNTS:
        return "spot_discount_limit", say("must be one of 0.1, 0.2 … 0.9")
    if price is not None:
        if spec.resource_type == ResourceType.LINGJUN:
            return "spot_price_limit", say("Lingjun spot takes only a SpotDiscountLimit")
        if itype is not None:
            low, high = spot_price_range_per_minute(itype)
            if not low <= price <= high:
                return "spot_price_limit", say(
                    "must lie in {name}'s market price range ¥{low}–¥{high} per minute",
                    name=itype.name,
                    low=low,
                    high=high,
                )
    return None


def _check_fallbacks(
    spec: JobSpec,
    role: RoleSpec,
    path: str,
    itype: InstanceType | None,
    known: dict[str, InstanceType],
    errors: _Errors,
) -> tuple[InstanceType, ...] | None:
    """A spot role's ElasticSpotSpecs: at most MAX_ELASTIC_SPOT_SPECS, each a known spot
    type of the job's resource type that no other choice of the role names, with at least
    the role's vCPUs, memory and GPUs per pod (a pod gets the role's resources on whichever
    type it runs), and a bid the role's own would be allowed on that type. Their types in
    order, or None after a problem."""
    fallbacks = role.elastic_spot_specs
    if not fallbacks:
        return ()
    where = f"{path}.elastic_spot_specs"
    if spec.resource_source != ResourceSource.SPOT:
        errors.add(where, say("fallback instance types apply only to spot jobs"))
        return None
    if len(fallbacks) > MAX_ELASTIC_SPOT_SPECS:
        errors.add(
            where, say("at most {most} fallback instance types", most=MAX_ELASTIC_SPOT_SPECS)
        )
        return None
    if itype is None:
        return None  # the role's own type is missing or unknown: said already
    found, seen, ok = [], {itype.name}, True
    for j, item in enumerate(fallbacks):
        at = f"{where}[{j}]"
        fallback = known.get(item.instance_type) if item.instance_type else None
        problem = None
        if not item.instance_type:
            problem = "instance_type", say("is required")
        elif fallback is None:
            problem = (
                "instance_type",
                say(
                    "unknown instance type {instance_type}", instance_type=f"{item.instance_type!r}"
                ),
            )
        elif fallback.name in seen:
            problem = (
                "instance_type",
                say(
                    "{name} is named already: each type once per role, the role's own first",
                    name=fallback.name,
                ),
            )
        elif fallback.resource_type != spec.resource_type:
            problem = (
                "instance_type",
                say(
                    "{name} is {resource_type}, the job uses {job_resource_type}",
                    name=fallback.name,
                    resource_type=fallback.resource_type,
                    job_resource_type=spec.resource_type,
                ),
            )
        elif short := _shorter(fallback, itype):
            problem = (
                "instance_type",
                say(
                    "{name} has less than the role's pods need ({needs})",
                    name=fallback.name,
                    needs=short,
                ),
            )
        else:
            problem = _bid_problem(spec, fallback, item.spot_discount_limit, item.spot_price_limit)
        if problem is not None:
            errors.add(f"{at}.{problem[0]}", problem[1])
            ok = False
            continue
        assert fallback is not None  # every other case is a problem, above
        seen.add(fallback.name)
        found.append(fallback)
    return tuple(found) if ok else None


def _shorter(fallback: InstanceType, own: InstanceType) -> str:
    """What `fallback` lacks of `own`'s vCPUs, memory and GPUs ("" when nothing)."""
    if fallback.cpu >= own.cpu and fallback.memory >= own.memory and fallback.gpu >= own.gpu:
        return ""
    return _amounts(own.cpu, own.memory, own.gpu * 1000)
