"""DLC request → paiweb values: the CreateJob body as a `JobSpec`, and query parameters.

Shapes and types are checked here (a string where a number belongs, a PodCount of "two");
the rules of the create-job form are checked once, by `job_spec_resolve`, for the console
and the API alike. Every problem becomes an InvalidParameter naming the DLC parameter.
"""

from __future__ import annotations

import json
import re
import shlex
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from apps.api.errors import invalid_parameter, missing_parameter, problems_text
from apps.api.serializers import IDLE_MODE
from apps.cluster.selectors import resource_type_of
from apps.core.errors import ApplicationError
from apps.core.limits import MAX_PODS_PER_ROLE
from apps.core.words import say
from apps.jobs.models import ExecutionMode, IdleMode, ResourceSource
from apps.jobs.specs import (
    DEFAULT_HANG_SECONDS,
    MAX_ROLES,
    JobSpec,
    RoleSpec,
    SpotFallback,
    as_decimal,
    data_source_of,
    gpu_amount,
)

SPOT_STRATEGIES = ("SpotWithPriceLimit",)
MAX_INT = 2**31 - 1  # what the database's integer columns hold
MAX_CPU_MILLICORES = 10_000 * 1000
MAX_MEMORY_MIB = 2**31 - 1
MAX_GPUS = 1024
MAX_PATH = 1024  # a mount path or URI the node agent can create and pass on
MAX_NAME = 256  # ids, branches and commits of data and code sources
MAX_MONITORING_ARGS = 4096  # AIMaster's flags: a few dozen characters each
MAX_DEPTH = 32  # JSON nesting: DLC's deepest body is 4 levels
MAX_WORKSPACE_ID = 2**63 - 1  # a bigint key
# Times the database and datetime arithmetic (a default window around them) can hold.
MIN_TIME = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIME = datetime(9000, 1, 1, tzinfo=UTC)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$", re.ASCII)
_MEMORY_UNITS_MIB = {
    "": 1024,
    "gi": 1024,
    "g": 1000**3 / 2**20,
    "mi": 1,
    "m": 1000**2 / 2**20,
    "ki": 1 / 1024,
    "k": 1000 / 2**20,
    "ti": 1024 * 1024,
}


class Problems:
    """Collects InvalidParameter messages keyed by DLC parameter path."""

    def __init__(self, *, within: str = "") -> None:
        self.within = within  # the body read is this field's value: `Content`
        self.items: list[tuple[str, str]] = []
        self._read: dict[int, set[str]] = {}
        self._tracked: dict[int, tuple[str, dict]] = {}  # by id(): a body has 1000s of objects

    def track(self, data: Any, path: str) -> None:
        """Watch the object at `path` for keys no reader asks for (`unread`)."""
        if isinstance(data, dict):
            self._tracked.setdefault(id(data), (path, data))

    def unread(self) -> list[str]:
        """The paths of the watched objects' keys that no reader asked for, but those left
        empty (null, "", [] or {}: the SDK sends every array field, empty when unset)."""
        return [
            f"{path}.{key}" if path else key
            for path, data in self._tracked.values()
            for key, value in data.items()
            if key not in self._read.get(id(data), ()) and value not in (None, "", [], {})
        ]

    def get(self, data: dict, key: str) -> Any:
        """`data[key]` or None, noted as read."""
        self._read.setdefault(id(data), set()).add(key)
        return data.get(key)

    def add(self, path: str, message: str) -> None:
        self.items.append((path, message))

    def raise_if_any(self) -> None:
        if self.items:
            prefix = f"{self.within}." if self.within else ""
            path = prefix + self.items[0][0]
            text = problems_text([f"{prefix}{p}: {m}" for p, m in self.items])
            raise ApplicationError("InvalidParameter", text, field=path)

    # Typed readers: each returns `default` when the key is absent (or null) and records a
    # problem when the value has the wrong type.

    def text(
        self, data: dict, key: str, path: str, default: str = "", *, max_length: int | None = None
    ) -> str:
        value = self.get(data, key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.add(path, say("must be a string"))
            return default
        if "\x00" in value:
            self.add(path, say("must not contain NUL characters"))
            return default
        if max_length is not None and len(value) > max_length:
            self.add(path, say("must be at most {max_length} characters", max_length=max_length))
            return default
        return value

    def integer(
        self,
        data: dict,
        key: str,
        path: str,
        default: int | None = None,
        *,
        minimum: int | None = None,
        maximum: int = MAX_INT,
    ) -> int | None:
        value = self.get(data, key)
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(path, say("must be an integer"))
            return default
        if minimum is not None and not minimum <= value <= maximum:
            self.add(
                path, say("must be from {minimum} to {maximum}", minimum=minimum, maximum=maximum)
            )
            return default
        if abs(value) > maximum:
            self.add(path, say("must be at most {maximum}", maximum=maximum))
            return default
        return value

    def boolean(self, data: dict, key: str, path: str, default: bool = False) -> bool:
        value = self.get(data, key)
        if value is None:
            return default
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            self.add(path, say("must be true or false"))
            return default
        return value

    def number(self, data: dict, key: str, path: str) -> Decimal | None:
        value = self.get(data, key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            self.add(path, say("must be a number"))
            return None
        try:
            return as_decimal(value)
        except ValueError:
            self.add(path, say("must be a number"))
            return None

    def mapping(self, data: dict, key: str, path: str) -> dict:
        value = self.get(data, key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.add(path, say("must be an object"))
            return {}
        return value

    def array(self, data: dict, key: str, path: str) -> list:
        value = self.get(data, key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.add(path, say("must be an array"))
            return []
        return value


# --- bodies ------------------------------------------------------------------------------


def json_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object no deeper than MAX_DEPTH, with no lone surrogate in its
    text (no database can store one); an empty body is {}."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw, parse_int=_integer)
    except RecursionError:
        raise _too_deep() from None
    except (ValueError, UnicodeDecodeError):
        raise ApplicationError(
            "InvalidParameter", say("The request body is not valid JSON.")
        ) from None
    if not isinstance(data, dict):
        raise ApplicationError("InvalidParameter", say("The request body must be a JSON object."))
    _check_tree(data)
    return data


def json_text(text: str, path: str) -> Any:
    """JSON text held in a field (a template's Content), checked as a body is (its own
    nesting, lone surrogates, integers too long to read), each problem named under `path`.
    ValueError if the text is not JSON."""
    try:
        data = json.loads(text, parse_int=_integer)
    except RecursionError:
        raise _too_deep(path) from None
    _check_tree(data, root=path)
    return data


class _TooLong:
    """An integer with more digits than Python reads (sys.get_int_max_str_digits): kept
    as a marker so that `_check_tree` can name the field that holds it."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _integer(text: str) -> int | _TooLong:
    try:
        return int(text)
    except ValueError:
        return _TooLong(len(text.lstrip("-")))


def _too_deep(field: str = "") -> ApplicationError:
    if field:
        return invalid_parameter(field, say("is nested deeper than {most} levels", most=MAX_DEPTH))
    return ApplicationError(
        "InvalidParameter",
        say("The request body is nested deeper than {most} levels.", most=MAX_DEPTH),
    )


def _check_tree(data: Any, *, root: str = "") -> None:
    """Walk the parsed body (or the JSON a field `root` holds) without recursion (it may be
    deep) and refuse what no field may hold, naming where it is."""
    stack: list[tuple[str, Any, int]] = [(root, data, 1)]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, str):
            if _has_surrogate(value):
                raise invalid_parameter(
                    path or "body",
                    say("must be valid Unicode text (it holds a lone surrogate such as \\ud800)"),
                )
            continue
        if isinstance(value, _TooLong):
            raise invalid_parameter(
                path or "body",
                say("is a number of {digits} digits, too long to read", digits=value.digits),
            )
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise _too_deep(root)
        if isinstance(value, list):
            stack.extend((f"{path}[{i}]", item, depth + 1) for i, item in enumerate(value))
            continue
        for key, item in value.items():
            if _has_surrogate(key):
                raise invalid_parameter(
                    path or "body",
                    say(
                        "a name is not valid Unicode text (it holds a lone surrogate)",
                    ),
                )
            stack.append((f"{path}.{key}" if path else key, item, depth + 1))


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# --- CreateJob ---------------------------------------------------------------------------


def workspace_id_of(body: dict) -> str:
    value = body.get("WorkspaceId")
    if value is None or value == "":
        raise missing_parameter("WorkspaceId")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise invalid_parameter("WorkspaceId", say("must be a string"))
    return str(value)


def is_key(value: str) -> bool:
    """Numeric text (ASCII digits: int() would also read "١٢") that a bigint key holds: a
    WorkspaceId, a TemplateId, a UserId."""
    return (
        value.isascii() and value.isdigit() and len(value) <= 19 and int(value) <= MAX_WORKSPACE_ID
    )


is_workspace_id = is_key


def job_spec_from_create_job(body: dict, *, within: str = "") -> JobSpec:
    """The CreateJob body as a JobSpec. Raises InvalidParameter for shapes and types,
    naming each field under `within` if given (a template's `Content`); the form's rules
    are left to job_spec_resolve."""
    p = Problems(within=within)
    p.track(body, "")
    p.text(body, "WorkspaceId", "WorkspaceId")  # read by the view (`workspace_id_of`)
    specs = p.array(body, "JobSpecs", "JobSpecs")
    if len(specs) > MAX_ROLES:  # refused before each is read: a 2 MiB body holds 20,000
        p.add(
            "JobSpecs",
            say(
                "must hold at most {most} roles: a job type's roles, each once",
                most=MAX_ROLES,
            ),
        )
        p.raise_if_any()
    roles, spot = [], False
    role_oversold: set[str] = set()
    quota_ids: set[str] = set()
    for i, item in enumerate(specs):
        path = f"JobSpecs[{i}]"
        if not isinstance(item, dict):
            p.add(path, say("must be an object"))
            continue
        p.track(item, path)
        role, is_spot = _role(p, item, path)
        roles.append(role)
        spot = spot or is_spot
        if oversold := p.text(item, "OversoldType", f"{path}.OversoldType"):
            role_oversold.add(oversold)
        quota_ids.add(p.text(item, "QuotaId", f"{path}.QuotaId"))

    quota = p.text(body, "ResourceId", "ResourceId").strip()
    if not quota:
        quota = next(iter(quota_ids - {""}), "") if len(quota_ids - {""}) == 1 else ""
    if spot and quota:
        p.add("ResourceId", say("a spot job bids for public instances; leave ResourceId empty"))
    if spot:
        source = ResourceSource.SPOT
    else:
        source = ResourceSource.QUOTA if quota else ResourceSource.PUBLIC

    settings = p.mapping(body, "Settings", "Settings")
    p.track(settings, "Settings")
    grace = p.integer(  # its range is the spec's rule
        settings,
        "TerminationGracePeriodSeconds",
        "Settings.TerminationGracePeriodSeconds",
        default=30,
    )
    idle_mode = _idle_mode(p, settings, role_oversold, quota=bool(quota))
    aimaster = p.boolean(
        settings, "EnableErrorMonitoringInAIMaster", "Settings.EnableErrorMonitoringInAIMaster"
    )
    monitoring_args = p.text(
        settings,
        "ErrorMonitoringArgs",
        "Settings.ErrorMonitoringArgs",
        max_length=MAX_MONITORING_ARGS,
    )
    mode, max_restarts, hang_seconds = _error_monitoring_args(p, monitoring_args)
    advanced = p.mapping(settings, "AdvancedSettings", "Settings.AdvancedSettings")
    p.track(advanced, "Settings.AdvancedSettings")
    easyckpt = p.boolean(advanced, "EnableEasyCkpt", "Settings.AdvancedSettings.EnableEasyCkpt")
    tags = p.mapping(settings, "Tags", "Settings.Tags")  # checked with the spec
    vpc = p.mapping(body, "UserVpc", "UserVpc")
    p.track(vpc, "UserVpc")

    spec = JobSpec(
        display_name=p.text(body, "DisplayName", "DisplayName"),
        description=p.text(body, "Description", "Description"),  # its length: the spec's rule
        accessibility=p.text(body, "Accessibility", "Accessibility", default="PUBLIC"),
        tags=dict(tags),
        job_type=p.text(body, "JobType", "JobType"),
        image=next((r.image for r in roles if r.image), ""),
        user_command=p.text(body, "UserCommand", "UserCommand"),
        envs=_envs(p, body),
        data_sources=_data_sources(p, body),
        code_source=_code_source(p, body),
        priority=p.integer(body, "Priority", "Priority", default=1),
        max_running_time_minutes=p.integer(
            body, "JobMaxRunningTimeMinutes", "JobMaxRunningTimeMinutes"
        ),
        success_policy=p.text(body, "SuccessPolicy", "SuccessPolicy", default="AllWorkers"),
        resource_type=_resource_type(quota, roles),
        resource_source=source,
        quota=quota if source == ResourceSource.QUOTA else "",
        idle_mode=idle_mode,
        vpc_id=p.text(vpc, "VpcId", "UserVpc.VpcId", max_length=64),
        vswitch_id=p.text(vpc, "SwitchId", "UserVpc.SwitchId", max_length=64),
        security_group_id=p.text(vpc, "SecurityGroupId", "UserVpc.SecurityGroupId", max_length=64),
        enable_aimaster=aimaster,
        max_restarts=max_restarts,
        execution_mode=mode,
        hang_seconds=hang_seconds,
        enable_easyckpt=easyckpt,
        termination_grace_seconds=30 if grace is None else grace,
        roles=roles,
        notes=(*_unread(p), *_aimaster_off(monitoring_args, aimaster=aimaster)),
    )
    p.raise_if_any()
    return spec


# CreateJob fields taken with no effect here, and why (docs/api.md): each becomes an event on
# the job. Any other field the body names and nothing reads is refused with a 400.
NO_EFFECT = {
    "Settings.EnableRDMA": say("this cluster has no RDMA network: the pods run without it"),
    "Settings.AllocateAllRDMADevices": say("this cluster has no RDMA devices"),
    "Settings.EnableTideResource": say("no tide resources here"),
    "Settings.EnableSanityCheck": say("no sanity check here: the job starts without one"),
    "Settings.SanityCheckArgs": say("no sanity check here"),
    "Settings.DisableEcsStockCheck": say("the market always checks spot stock here"),
    "Settings.EnableCPUAffinity": say("pods are not pinned to CPUs here"),
    "Settings.EnableOssAppend": say("no OSS here"),
    "Settings.Caller": say("not used here"),
    "Settings.PipelineId": say("not used here"),
    "Settings.BusinessUserId": say("not used here"),
}


def _unread(p: Problems) -> tuple[str, ...]:
    """Each field nothing read: a note if NO_EFFECT names it, else a problem."""
    notes = []
    for path in p.unread():
        generic = re.sub(r"\[\d+\]", "[]", path)
        if NO_EFFECT.get(generic):
            notes.append(
                say(
                    "{field} is accepted with no effect: {reason}",
                    field=path,
                    reason=NO_EFFECT[generic],
                )
            )
        else:
            p.add(path, say("not supported here (docs/api.md lists what CreateJob takes)"))
    return tuple(notes)


def _aimaster_off(monitoring_args: str, *, aimaster: bool) -> tuple[str, ...]:
    """AIMaster's settings on a job without AIMaster do nothing: said, not dropped (its hang
    detection is refused with the spec)."""
    if aimaster or not monitoring_args.strip():
        return ()
    reason = say("AIMaster is off: Settings.EnableErrorMonitoringInAIMaster is not true")
    return (
        say(
            "{field} is accepted with no effect: {reason}",
            field="Settings.ErrorMonitoringArgs",
            reason=reason,
        ),
    )


def _role(p: Problems, item: dict, path: str) -> tuple[RoleSpec, bool]:
    config = p.mapping(item, "ResourceConfig", f"{path}.ResourceConfig")
    p.track(config, f"{path}.ResourceConfig")
    spot_spec = p.mapping(item, "SpotSpec", f"{path}.SpotSpec")
    p.track(spot_spec, f"{path}.SpotSpec")
    strategy = p.text(spot_spec, "SpotStrategy", f"{path}.SpotSpec.SpotStrategy")
    if strategy and strategy not in SPOT_STRATEGIES:
        p.add(
            f"{path}.SpotSpec.SpotStrategy",
            say(
                "must be {choices}",
                choices=" or ".join(SPOT_STRATEGIES),
            ),
        )
    # A SpotSpec given asks for spot, even an empty one (the SDK's `SpotSpec()`): its limit
    # is then asked for, never a pay-as-you-go job billed at the full price instead.
    is_spot = item.get("SpotSpec") is not None or p.boolean(
        item, "UseSpotInstance", f"{path}.UseSpotInstance"
    )
    gpus = _gpu(p, config, f"{path}.ResourceConfig.GPU")
    role = RoleSpec(
        role_type=p.text(item, "Type", f"{path}.Type", default="Worker"),
        pod_count=p.integer(
            item, "PodCount", f"{path}.PodCount", default=1, minimum=1, maximum=MAX_PODS_PER_ROLE
        ),
        instance_type=p.text(item, "EcsSpec", f"{path}.EcsSpec").strip(),
        cpu=_cpu(p, config, f"{path}.ResourceConfig.CPU"),
        memory=_memory(p, config, f"{path}.ResourceConfig.Memory"),
        gpu=gpus[0] if gpus else None,
        gpu_milli=gpus[1] if gpus else 0,
        image=p.text(item, "Image", f"{path}.Image", max_length=512),
        restart_policy=p.text(item, "RestartPolicy", f"{path}.RestartPolicy", default="OnFailure"),
        spot_discount_limit=p.number(
            spot_spec, "SpotDiscountLimit", f"{path}.SpotSpec.SpotDiscountLimit"
        ),
        spot_price_limit=p.number(spot_spec, "SpotPriceLimit", f"{path}.SpotSpec.SpotPriceLimit"),
        elastic_spot_specs=_elastic_spot_specs(p, item, path),
    )
    return role, is_spot


def _elastic_spot_specs(p: Problems, item: dict, path: str) -> list[SpotFallback]:
    """JobSpecs[i].ElasticSpotSpecs: the role's fallback instance types, each with its own
    limit in SpotSpec's units (SpotDiscountLimit 0.1–0.9, SpotPriceLimit per minute)."""
    fallbacks = []
    for j, entry in enumerate(p.array(item, "ElasticSpotSpecs", f"{path}.ElasticSpotSpecs")):
        at = f"{path}.ElasticSpotSpecs[{j}]"
        if not isinstance(entry, dict):
            p.add(at, say("must be an object"))
            continue
        p.track(entry, at)
        strategy = p.text(entry, "SpotStrategy", f"{at}.SpotStrategy")
        if strategy and strategy not in SPOT_STRATEGIES:
            p.add(
                f"{at}.SpotStrategy",
                say(
                    "must be {choices}: each type is tried in the order given, at its own limit",
                    choices=" or ".join(SPOT_STRATEGIES),
                ),
            )
        fallbacks.append(
            SpotFallback(
                instance_type=p.text(entry, "InstanceType", f"{at}.InstanceType").strip(),
                spot_discount_limit=p.number(entry, "SpotDiscountLimit", f"{at}.SpotDiscountLimit"),
                spot_price_limit=p.number(entry, "SpotPriceLimit", f"{at}.SpotPriceLimit"),
            )
        )
    return fallbacks


def _quantity(p: Problems, config: dict, key: str, path: str) -> tuple[Decimal, str] | None:
    value = p.get(config, key)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        p.add(path, say('must be a quantity such as "4" or "16Gi"'))
        return None
    match = _QUANTITY.match(str(value))
    if match is None:
        p.add(path, say('{value} is not a quantity such as "4" or "16Gi"', value=f"{value!r}"))
        return None
    return Decimal(match[1]), match[2].lower()


def _cpu(p: Problems, config: dict, path: str) -> int | None:
    """CPU cores ("4", 4, "0.5") or millicores ("500m") → millicores."""
    parsed = _quantity(p, config, "CPU", path)
    if parsed is None:
        return None
    amount, unit = parsed
    if unit not in ("", "m"):
        p.add(path, say('give cores ("4") or millicores ("500m")'))
        return None
    exact = amount if unit == "m" else amount * 1000
    if exact != exact.to_integral_value():
        p.add(path, say("must be a whole number of millicores (1m is 0.001 of a core)"))
        return None
    millicores = int(exact)
    if millicores > MAX_CPU_MILLICORES:
        p.add(
            path,
            say(
                "must be at most {most} cores",
                most=MAX_CPU_MILLICORES // 1000,
            ),
        )
        return None
    return millicores


def _memory(p: Problems, config: dict, path: str) -> int | None:
    """ "16Gi", "512Mi", "16G" or a plain number of GiB → MiB."""
    parsed = _quantity(p, config, "Memory", path)
    if parsed is None:
        return None
    amount, unit = parsed
    if unit not in _MEMORY_UNITS_MIB:
        p.add(path, say('give a size such as "16Gi" or "512Mi"'))
        return None
    exact = amount * Decimal(str(_MEMORY_UNITS_MIB[unit]))
    if 0 < exact < 1:
        p.add(path, say("must be at least 1 MiB: memory is counted in whole MiB"))
        return None
    mib = int(exact)  # a part of a MiB (16G is 15,258.8 MiB) is rounded down
    if mib > MAX_MEMORY_MIB:
        p.add(path, say("is too large"))
        return None
    return mib


def _gpu(p: Problems, config: dict, path: str) -> tuple[int, int] | None:
    """Whole GPUs ("2") or a share of one ("0.5") → (GPUs, milli-GPUs of the share)."""
    parsed = _quantity(p, config, "GPU", path)
    if parsed is None:
        return None
    amount, unit = parsed
    if unit or amount > MAX_GPUS:
        p.add(
            path,
            say(
                "must be whole GPUs up to {most}, or a share of one GPU (0.5)",
                most=MAX_GPUS,
            ),
        )
        return None
    try:
        return gpu_amount(amount)
    except ValueError as problem:
        p.add(path, str(problem))
        return None


def _idle_mode(p: Problems, settings: dict, role_values: set[str], *, quota: bool) -> str:
    value = p.text(settings, "OversoldType", "Settings.OversoldType")
    path = "Settings.OversoldType"
    if not value and role_values:
        if len(role_values) > 1:
            p.add("JobSpecs.OversoldType", say("every JobSpec must use the same OversoldType"))
            return IdleMode.OFF
        value, path = next(iter(role_values)), "JobSpecs[0].OversoldType"
    elif value and role_values - {value}:
        p.add("JobSpecs.OversoldType", say("must agree with Settings.OversoldType"))
    if not value:
        return IdleMode.OFF
    if value not in IDLE_MODE:
        p.add(path, say("must be one of {choices}", choices=", ".join(IDLE_MODE)))
        return IdleMode.OFF
    if not quota and value == "ForbiddenQuotaOverSold":
        return IdleMode.OFF  # the default spelled out: harmless without a quota
    return IDLE_MODE[value]


def _error_monitoring_args(p: Problems, text: str) -> tuple[str, int, int | None]:
    """--job-execution-mode=Sync|Async --enable-job-restart=True|False
    --max-num-of-job-restart=N --enable-job-hang-detection=True|False --job-hang-interval=S
    → (execution mode, max restarts, hang interval in seconds or None). Other flags DLC
    knows are accepted and ignored."""
    path = "Settings.ErrorMonitoringArgs"
    mode, restart, max_restarts = ExecutionMode.SYNC, True, 3
    hang, hang_interval = False, DEFAULT_HANG_SECONDS
    try:
        tokens = shlex.split(text)
    except ValueError:
        p.add(path, say("cannot be split into --name=value flags"))
        return mode, max_restarts, None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--"):
            p.add(path, say("{token} is not a --name=value flag", token=f"{token!r}"))
            continue
        name, has_value, value = token[2:].partition("=")
        if not has_value and i < len(tokens) and not tokens[i].startswith("--"):
            value, i = tokens[i], i + 1
        if name == "job-execution-mode":
            modes = {m.lower(): m for m in ExecutionMode.values}
            if value.lower() not in modes:
                p.add(path, say("--job-execution-mode must be Sync or Async"))
            else:
                mode = modes[value.lower()]
        elif name == "enable-job-restart":
            if value.lower() not in ("true", "false", "1", "0"):
                p.add(path, say("--enable-job-restart must be True or False"))
            else:
                restart = value.lower() in ("true", "1")
        elif name == "max-num-of-job-restart":
            if not value.isascii() or not value.isdigit():
                p.add(path, say("--max-num-of-job-restart must be a whole number"))
            else:  # beyond 9 digits it is out of range (0 to 100) whatever it is
                digits = value.lstrip("0") or "0"
                max_restarts = int(digits) if len(digits) <= 9 else MAX_INT
        elif name == "enable-job-hang-detection":
            if value.lower() not in ("true", "false", "1", "0"):
                p.add(path, say("--enable-job-hang-detection must be True or False"))
            else:
                hang = value.lower() in ("true", "1")
        elif name == "job-hang-interval":
            if not value.isascii() or not value.isdigit() or len(value) > 9:
                p.add(path, say("--job-hang-interval must be a whole number of seconds"))
            else:
                hang_interval = int(value)
    return mode, max_restarts if restart else 0, hang_interval if hang else None


def _envs(p: Problems, body: dict) -> dict:
    envs = p.mapping(body, "Envs", "Envs")
    for name, value in envs.items():
        if "\x00" in name or (isinstance(value, str) and "\x00" in value):
            p.add("Envs", say("must not contain NUL characters"))
    return {str(k): v for k, v in envs.items()}


def _data_sources(p: Problems, body: dict) -> list[dict]:
    sources = []
    for i, item in enumerate(p.array(body, "DataSources", "DataSources")):
        path = f"DataSources[{i}]"
        if not isinstance(item, dict):
            p.add(path, say("must be an object"))
            continue
        p.track(item, path)
        ident = p.text(item, "DataSourceId", f"{path}.DataSourceId", max_length=MAX_NAME)
        uri = p.text(item, "Uri", f"{path}.Uri", max_length=MAX_PATH)
        mount = p.text(item, "MountPath", f"{path}.MountPath", max_length=MAX_PATH)
        sources.append(data_source_of(uri=uri, mount_path=mount, data_source_id=ident))
    return sources


def _code_source(p: Problems, body: dict) -> dict:
    item = p.mapping(body, "CodeSource", "CodeSource")
    p.track(item, "CodeSource")
    fields = {
        "code_source_id": p.text(
            item, "CodeSourceId", "CodeSource.CodeSourceId", max_length=MAX_NAME
        ),
        "branch": p.text(item, "Branch", "CodeSource.Branch", max_length=MAX_NAME),
        "commit": p.text(item, "Commit", "CodeSource.Commit", max_length=MAX_NAME),
        "mount_path": p.text(item, "MountPath", "CodeSource.MountPath", max_length=MAX_PATH),
    }
    return {k: v for k, v in fields.items() if v}


def _resource_type(quota: str, roles: list[RoleSpec]) -> str:
    """CreateJob has no ResourceType: a quota's type decides, else the first EcsSpec's."""
    names = [r.instance_type for r in roles if r.instance_type]
    return resource_type_of(quota=quota, instance_type=names[0] if names else "")


# --- query parameters --------------------------------------------------------------------


def query_int(
    query, name: str, *, default: int, minimum: int = 1, maximum: int | None = None
) -> int:
    """A whole number in ASCII digits from `minimum` to `maximum` (MAX_INT unless told)."""
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    maximum = MAX_INT if maximum is None else maximum
    if not _INTEGER.fullmatch(raw):
        raise invalid_parameter(name, say("must be an integer"))
    if len(raw) > 20 or not minimum <= int(raw) <= maximum:
        raise invalid_parameter(
            name,
            say(
                "must be from {minimum} to {maximum}",
                minimum=minimum,
                maximum=maximum,
            ),
        )
    return int(raw)


def query_bool(query, name: str) -> bool | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise invalid_parameter(name, say("must be true or false"))


def query_time(query, name: str) -> datetime | None:
    """An ISO-8601 time (2026-11-29T10:00:00Z) from MIN_TIME to MAX_TIME; without an
    offset it is taken as UTC."""
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        moment = datetime.fromisoformat(raw.strip().replace(" ", "T"))
    except ValueError:
        raise invalid_parameter(
            name,
            say(
                "{raw} is not an ISO-8601 time such as 2026-11-29T10:00:00Z",
                raw=f"{raw[:64]!r}",
            ),
        ) from None
    out_of_range = invalid_parameter(
        name,
        say(
            "must lie from {min_time} to {max_time}",
            min_time=f"{MIN_TIME:%Y-%m-%dT%H:%M:%SZ}",
            max_time=f"{MAX_TIME:%Y-%m-%dT%H:%M:%SZ}",
        ),
    )
    try:
        moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 has no UTC time
        raise out_of_range from None
    if not MIN_TIME <= moment <= MAX_TIME:
        raise out_of_range
    return moment


def query_time_range(query) -> tuple[datetime | None, datetime | None]:
    """StartTime and EndTime (`query_time`), each None when absent; refused when StartTime
    is after EndTime."""
    start, end = query_time(query, "StartTime"), query_time(query, "EndTime")
    time_order(start, end)
    return start, end


def query_time_window(query, *, now: datetime, span: timedelta) -> tuple[datetime, datetime]:
    """StartTime and EndTime with DLC's defaults, each on its own: StartTime `span` before
    `now`, EndTime `now`. EndTime alone is still bounded below (by `now` - `span`, where
    an EndTime older than that leaves the window empty), StartTime alone above."""
    start, end = query_time_range(query)
    return (now - span if start is None else start), (now if end is None else end)


def time_order(start: datetime | None, end: datetime | None) -> None:
    """Every call's one rule for a time range: StartTime may not be after EndTime."""
    if start is not None and end is not None and start > end:
        raise invalid_parameter("StartTime", say("must not be after EndTime"))


def query_choice(query, name: str, choices: dict[str, Any]) -> Any:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    folded = {k.lower(): v for k, v in choices.items()}
    if raw.lower() not in folded:
        raise invalid_parameter(name, say("must be one of {choices}", choices=", ".join(choices)))
    return folded[raw.lower()]
