"""The console's forms: create a job (the job's fields plus a fixed set of role rows) and
filter the job list.

The forms only parse input into a `JobSpec`; every rule lives in `job_spec_resolve`, shared
with the API. Its errors come back as spec paths (`roles[1].spot_discount_limit`) and
`JobCreateForm.add_spec_errors` puts each one beside the input it is about.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from django import forms
from django.forms.utils import ErrorDict
from django.utils.functional import lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from apps.cluster.models import Image, InstanceType, Quota, ResourceType
from apps.core.errors import ValidationFailed
from apps.core.i18n import localized
from apps.jobs.models import (
    Accessibility,
    ExecutionMode,
    IdleMode,
    Job,
    JobRole,
    JobStatus,
    JobTemplateVersion,
    JobType,
    ResourceSource,
    SuccessPolicy,
    gpu_text,
    job_status_named,
)
from apps.jobs.selectors import JOB_SORT_DEFAULT, JOB_SORTS, PriceInfo
from apps.jobs.specs import (
    CODE_MOUNT_DEFAULT,
    JOB_ROLE_TYPES,
    MAX_GRACE_SECONDS,
    MAX_ROLES,
    MAX_RUNNING_TIME_MINUTES,
    SPOT_DISCOUNTS,
    JobSpec,
    RoleSpec,
    SpotFallback,
    as_decimal,
    data_source_of,
    gpu_amount,
    job_spec_of,
    job_spec_resolve,
    spec_from_json,
)

# `lazy_msg % values` would translate at once (at import); this formats when it is shown
_format_lazy = lazy(operator.mod, str)

ROLE_ROWS = MAX_ROLES  # room for every role of any job type
DISCOUNT_CHOICES = [("", "—")] + [
    (
        str(d),
        _format_lazy(
            _("%(discount)s (%(percent)s%% of the original price)"),
            {"discount": d, "percent": int(d * 100)},
        ),
    )
    for d in SPOT_DISCOUNTS
]
IMAGE_LIST_ID = "image-choices"  # the page's <datalist> of the cluster's images
LIMIT_TYPES = [("discount", "SpotDiscountLimit"), ("price", "SpotPriceLimit")]
# spec field → role-form field, where the form asks in friendlier units
ROLE_FIELD_NAMES = {"cpu": "cpu_cores", "memory": "memory_gib", "gpu": "gpus"}
JOB_FIELD_NAMES = {"code_source": "code_source_uri"}
# a data source's spec fields (data_sources[0].mount_path) as the form's help names them
DATA_SOURCE_PARTS = {"uri": _("URI"), "mount_path": _("mount path")}
# spec paths of a part of a field → the form's input for it
JOB_PATH_FIELDS = {"code_source.mount_path": "code_source_mount_path"}
SPEC_PATH = re.compile(
    r"^(?P<name>\w+)(?:\[(?P<index>\d+)\])?(?:\.(?P<field>\w+))?"
    r"(?:\[(?P<item>\d+)\](?:\.\w+)?)?$"  # roles[0].elastic_spot_specs[1].instance_type
)
FALLBACK_LIMITS = {"spotdiscountlimit": "spot_discount_limit", "spotpricelimit": "spot_price_limit"}


def _as_named(choices) -> list[tuple[str, str]]:
    """DLC's own names (PyTorchJob, OnFailure, PS) as labels, not Django's prettified ones."""
    return [(value, value) for value in choices.values]


class OptionAttrsSelect(forms.Select):
    """A select whose options carry data attributes (resource type, price) for the page's JS."""

    def __init__(self, *args, option_attrs: dict[str, dict] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.option_attrs = option_attrs or {}

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        option["attrs"].update(self.option_attrs.get(str(value), {}))
        return option


def instance_type_label(itype: InstanceType) -> str:
    gpu = f" · {itype.gpu}× {itype.gpu_model or 'GPU'}" if itype.gpu else ""
    price = f"¥{itype.price_per_hour:.2f}/h"
    return f"{itype.name} — {itype.vcpus:g} vCPU · {itype.memory_gib:g} GiB{gpu} · {price}"


class JobForm(forms.Form):
    """The job's own fields: basics, resource information, VPC, fault tolerance."""

    # Basics
    display_name = forms.CharField(label=_("Display name"), max_length=256, required=False)
    description = forms.CharField(
        label=_("Description"),
        required=False,
        strip=False,  # kept as written, as CreateJob keeps it
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    job_type = forms.ChoiceField(
        label=_("Job type"), choices=_as_named(JobType), initial=JobType.PYTORCH, required=False
    )
    image = forms.CharField(label=_("Image"), max_length=512, required=False)
    user_command = forms.CharField(
        label=_("User command"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
    )
    envs = forms.CharField(
        label=_("Environment variables"),
        required=False,
        strip=False,  # a line's number counts the blank lines above it
        widget=forms.Textarea(
            attrs={"rows": 3, "spellcheck": "false", "placeholder": "NCCL_DEBUG=INFO"}
        ),
        help_text=_("KEY=VALUE, one per line."),
    )
    data_sources = forms.CharField(
        label=_("Data sources"),
        required=False,
        strip=False,  # a line's number counts the blank lines above it
        widget=forms.Textarea(
            attrs={
                "rows": 2,
                "spellcheck": "false",
                "placeholder": "oss://bucket/imagenet /mnt/data/imagenet",
            }
        ),
        help_text=_("One per line: the source URI, a space, the mount path under /mnt/data/."),
    )
    code_source_uri = forms.CharField(label=_("Code source"), max_length=512, required=False)
    code_source_branch = forms.CharField(label=_("Branch"), max_length=128, required=False)
    code_source_commit = forms.CharField(
        label=_("Commit"),
        max_length=256,
        required=False,
        widget=forms.TextInput(attrs={"spellcheck": "false"}),
    )
    code_source_mount_path = forms.CharField(
        label=_("Code mount path"),
        max_length=1024,
        required=False,
        widget=forms.TextInput(attrs={"spellcheck": "false", "placeholder": CODE_MOUNT_DEFAULT}),
        help_text=_format_lazy(
            _(
                "Where the code is mounted in each pod: an absolute path, not a system "
                "directory and not under /mnt/data/. Empty: %(default)s, as DLC."
            ),
            {"default": CODE_MOUNT_DEFAULT},
        ),
    )
    priority = forms.IntegerField(
        label=_("Priority"),
        initial=1,
        required=False,
        widget=forms.NumberInput(attrs={"min": 1, "max": 9}),
        help_text=_("1 to 9; 9 is the highest."),
    )
    max_running_time_minutes = forms.IntegerField(
        label=_("Max running time (minutes)"),
        required=False,
        widget=forms.NumberInput(attrs={"min": 1, "max": MAX_RUNNING_TIME_MINUTES}),
        help_text=_("Empty: no limit."),
    )
    success_policy = forms.ChoiceField(
        label=_("Success policy"),
        choices=_as_named(SuccessPolicy),
        initial=SuccessPolicy.ALL_WORKERS,
        required=False,
    )
    accessibility = forms.ChoiceField(
        label=_("Visibility"),
        choices=Accessibility.choices,
        initial=Accessibility.PUBLIC,
        required=False,
    )
    tags = forms.CharField(
        label=_("Tags"),
        required=False,
        strip=False,  # a line's number counts the blank lines above it
        widget=forms.Textarea(
            attrs={"rows": 2, "spellcheck": "false", "placeholder": "team=vision"}
        ),
        help_text=_("key=value, one per line (at most 20): to find the job again by them."),
    )

    # Resource information
    resource_type = forms.ChoiceField(
        label=_("Resource type"),
        choices=ResourceType.choices,
        widget=forms.RadioSelect,
        required=False,
    )
    resource_source = forms.ChoiceField(
        label=_("Resource source"),
        choices=ResourceSource.choices,
        widget=forms.RadioSelect,
        initial=ResourceSource.QUOTA,
        required=False,
    )
    quota = forms.ChoiceField(label=_("Quota"), required=False)
    idle_mode = forms.ChoiceField(
        label=_("Idle resources"),
        choices=IdleMode.choices,
        widget=forms.RadioSelect,
        initial=IdleMode.OFF,
        required=False,
    )
    vpc_id = forms.CharField(label=_("VPC id"), max_length=64, required=False)
    vswitch_id = forms.CharField(label=_("vSwitch id"), max_length=64, required=False)
    security_group_id = forms.CharField(label=_("Security group id"), max_length=64, required=False)

    # Fault tolerance and diagnosis
    enable_aimaster = forms.BooleanField(
        label=_("Automatic fault tolerance (AIMaster)"), required=False
    )
    max_restarts = forms.IntegerField(
        label=_("Max restarts"),
        initial=3,
        required=False,
        widget=forms.NumberInput(attrs={"min": 0, "max": 100}),
    )
    execution_mode = forms.ChoiceField(
        label=_("Execution mode"),
        choices=ExecutionMode.choices,
        widget=forms.RadioSelect,
        initial=ExecutionMode.SYNC,
        required=False,
    )
    hang_seconds = forms.IntegerField(
        label=_("Hang detection (seconds)"),
        required=False,
        widget=forms.NumberInput(attrs={"min": 10, "placeholder": "1800"}),
        help_text=_("Restart the job when no pod has printed anything for this long. Empty: off."),
    )
    enable_easyckpt = forms.BooleanField(label=_("EasyCkpt checkpoints"), required=False)
    termination_grace_seconds = forms.IntegerField(
        label=_("Termination grace period (seconds)"),
        initial=30,
        required=False,
        widget=forms.NumberInput(attrs={"min": 0, "max": MAX_GRACE_SECONDS}),
        help_text=_(
            "How long a stopped, preempted or drained pod has between SIGTERM and SIGKILL to "
            "save a checkpoint."
        ),
    )

    def __init__(
        self,
        *args,
        resource_types: list[str],
        quotas: list[Quota],
        images: Sequence[Image] = (),
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.data_sources_read: list[dict] = []
        self.data_source_lines: list[int] = []  # the line of each of data_sources_read
        if images:
            self.fields["image"].widget.attrs["list"] = IMAGE_LIST_ID
            self.fields["image"].help_text = gettext(
                "Pick one the cluster offers, or type any other."
            )
        labels = dict(ResourceType.choices)
        self.fields["resource_type"].choices = [(t, labels[t]) for t in resource_types]
        self.fields["resource_type"].initial = resource_types[0]
        if len(resource_types) == 1:
            self.fields["resource_type"].widget = forms.HiddenInput()
        self.fields["quota"].choices = [("", "—")] + [(q.name, q.name) for q in quotas]
        self.fields["quota"].widget = OptionAttrsSelect(
            choices=self.fields["quota"].choices,
            option_attrs={q.name: {"data-resource-type": q.resource_type} for q in quotas},
        )
        if quotas:
            self.fields["quota"].initial = quotas[0].name
        else:
            self.fields["resource_source"].initial = ResourceSource.PUBLIC

    @property
    def resource_type_fixed(self) -> bool:
        return len(self.fields["resource_type"].choices) == 1

    def clean_envs(self) -> dict[str, str]:
        return _key_values(self.cleaned_data["envs"], "KEY=VALUE")

    def clean_tags(self) -> dict[str, str]:
        return _key_values(self.cleaned_data["tags"], "key=value")

    def clean_data_sources(self) -> list[dict]:
        """The lines that read as a data source, each line's number kept (the spec's rules
        then name it), even when other lines do not: the page says every bad line at once."""
        sources, problems = self.data_sources_read, []
        sources.clear()
        self.data_source_lines.clear()
        for n, line in enumerate(self.cleaned_data["data_sources"].splitlines(), start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2:
                problems.append(
                    gettext("line %(line)s: write the URI and the mount path, separated by a space")
                    % {"line": n}
                )
                continue
            uri, mount = parts
            if not mount.startswith("/"):
                mount = "/mnt/data/" + mount  # a bare name mounts under /mnt/data/
            sources.append(data_source_of(uri=uri, mount_path=mount))
            self.data_source_lines.append(n)
        if problems:
            raise forms.ValidationError(problems)
        return sources


class RoleForm(forms.Form):
    """One role row (JobSpec). Row 0 is always used; the others only when `enabled`."""

    enabled = forms.BooleanField(label=_("Use this role"), required=False)
    role_type = forms.ChoiceField(
        label=_("Role"), choices=_as_named(JobRole.RoleType), required=False
    )
    pod_count = forms.IntegerField(label=_("Pods"), initial=1, required=False)
    instance_type = forms.ChoiceField(label=_("Instance type"), required=False)
    image = forms.CharField(
        label=_("Image of this role"),
        max_length=512,
        required=False,
        help_text=_("Empty: the job's image."),
    )
    cpu_cores = forms.DecimalField(
        label=_("CPU cores"), required=False, min_value=0, decimal_places=3
    )
    memory_gib = forms.DecimalField(
        label=_("Memory (GiB)"), required=False, min_value=0, decimal_places=3
    )
    gpus = forms.DecimalField(
        label=_("GPUs"),
        required=False,
        min_value=0,
        decimal_places=3,
        help_text=_("Whole GPUs, or a share of one (0.5) that other shared pods use too."),
    )
    restart_policy = forms.ChoiceField(
        label=_("Restart policy"),
        choices=_as_named(JobRole.RestartPolicy),
        initial=JobRole.RestartPolicy.ON_FAILURE,
        required=False,
    )
    spot_limit_type = forms.ChoiceField(
        label=_("Bid limit"),
        choices=LIMIT_TYPES,
        widget=forms.RadioSelect,
        initial="discount",
        required=False,
    )
    spot_discount_limit = forms.DecimalField(
        label="SpotDiscountLimit", required=False, widget=forms.Select(choices=DISCOUNT_CHOICES)
    )
    spot_price_limit = forms.DecimalField(
        label=_("SpotPriceLimit (¥ per instance-minute)"),
        required=False,
        max_digits=12,
        decimal_places=6,
        widget=forms.NumberInput(attrs={"step": "0.000001", "min": 0}),
    )
    elastic_spot_specs = forms.CharField(
        label=_("Fallback instance types (ElasticSpotSpecs)"),
        required=False,
        widget=forms.Textarea(
            attrs={
                "rows": 2,
                "spellcheck": "false",
                "placeholder": "ecs.g6.xlarge SpotDiscountLimit=0.5",
            }
        ),
        help_text=_(
            "Optional, one per line: an instance type and its own limit, SpotDiscountLimit=0.5 "
            "or SpotPriceLimit=0.006 (¥ per minute). Tried in this order when the type above "
            "has no stock at an acceptable price."
        ),
    )

    def __init__(
        self,
        *args,
        index: int,
        instance_types: list[InstanceType],
        job_type: str = JobType.PYTORCH,
        images: Sequence[Image] = (),
        **kwargs,
    ):
        kwargs.setdefault("prefix", f"roles-{index}")
        super().__init__(*args, **kwargs)
        self.index = index
        self.instance_types = {t.name: t for t in instance_types}
        self._offer_role_types(job_type)
        if images:
            self.fields["image"].widget.attrs["list"] = IMAGE_LIST_ID
        if index == 0:
            del self.fields["enabled"]
        choices = [("", gettext("Custom resources (quota jobs only)"))] + [
            (t.name, instance_type_label(t)) for t in instance_types
        ]
        self.fields["instance_type"].choices = choices
        self.fields["instance_type"].widget = OptionAttrsSelect(
            choices=choices,
            option_attrs={
                t.name: {
                    "data-resource-type": t.resource_type,
                    "data-price-per-hour": str(t.price_per_hour),
                }
                for t in instance_types
            },
        )

    def _offer_role_types(self, job_type: str) -> None:
        """Offer the job type's roles, this row's by default. A known role of another job
        type that the row already holds stays on offer, marked, so the select shows what
        was asked for beside the error that says why it does not fit."""
        roles = JOB_ROLE_TYPES[job_type]
        self.default_role_type = roles[self.index % len(roles)]
        if self.is_bound:
            held = self.data.get(self.add_prefix("role_type"))
        else:
            held = self.initial.get("role_type")
        choices = [(role, role) for role in roles]
        if held in JobRole.RoleType.values and held not in roles:
            label = gettext("%(role)s (not a %(job_type)s role)")
            choices.append((held, label % {"role": held, "job_type": job_type}))
        self.fields["role_type"].choices = choices
        self.fields["role_type"].initial = self.default_role_type

    @property
    def show_when(self) -> str:
        """The page's condition for showing this row: a job type with a role for it (""
        when every job type has one)."""
        types = [t for t, roles in JOB_ROLE_TYPES.items() if self.index < len(roles)]
        return "" if len(types) == len(JOB_ROLE_TYPES) else "job_type=" + "|".join(types)

    def clean_gpus(self) -> Decimal | None:
        gpus = self.cleaned_data.get("gpus")
        try:
            self.cleaned_data["gpu_amount"] = gpu_amount(gpus) if gpus is not None else (0, 0)
        except ValueError as problem:
            raise forms.ValidationError(str(problem)) from None
        return gpus

    def clean_elastic_spot_specs(self) -> list[SpotFallback]:
        """ "ecs.g6.xlarge SpotDiscountLimit=0.5" lines (blank ones skipped) as fallbacks;
        the rules (known type, limit in range…) are the spec's."""
        fallbacks, problems = [], []
        for n, line in enumerate(self.cleaned_data["elastic_spot_specs"].splitlines(), start=1):
            parts = line.split()
            if not parts:
                continue
            name, _, number = parts[-1].partition("=") if len(parts) == 2 else ("", "", "")
            limit = FALLBACK_LIMITS.get(name.lower())
            try:
                value = as_decimal(number) if limit else None
            except ValueError:
                value = None
            if value is None:
                problems.append(
                    gettext(
                        "line %(line)s: write an instance type, a space, then "
                        "SpotDiscountLimit=0.5 or SpotPriceLimit=0.006"
                    )
                    % {"line": n}
                )
                continue
            fallbacks.append(SpotFallback(instance_type=parts[0], **{str(limit): value}))
        if problems:
            raise forms.ValidationError(problems)
        return fallbacks

    def full_clean(self) -> None:
        if self.is_bound and not self.is_enabled:  # an unused row is not validated
            self._errors, self.cleaned_data = ErrorDict(), {}
            return
        super().full_clean()

    @property
    def is_enabled(self) -> bool:
        if self.index == 0:
            return True
        if not self.is_bound:
            return False
        return bool(
            self.fields["enabled"].widget.value_from_datadict(
                self.data, self.files, self.add_prefix("enabled")
            )
        )

    def to_spec(self, *, resource_source: str) -> RoleSpec:
        c = getattr(self, "cleaned_data", {})
        itype = c.get("instance_type") or ""
        spot = resource_source == ResourceSource.SPOT
        role = RoleSpec(
            role_type=c.get("role_type") or self.default_role_type,
            pod_count=_or(c.get("pod_count"), 0),
            instance_type=itype,
            image=c.get("image", ""),
            restart_policy=c.get("restart_policy") or JobRole.RestartPolicy.ON_FAILURE,
            # Bids mean something only to spot jobs; a stray value left in a hidden input
            # of a quota job is not the user's intent.
            spot_discount_limit=c.get("spot_discount_limit") if spot else None,
            spot_price_limit=c.get("spot_price_limit") if spot else None,
            elastic_spot_specs=list(c.get("elastic_spot_specs") or []) if spot else [],
        )
        if not itype:
            role.cpu = _scaled(c.get("cpu_cores"), 1000)
            role.memory = _scaled(c.get("memory_gib"), 1024)
            role.gpu, role.gpu_milli = c.get("gpu_amount") or (0, 0)
        return role

    def price_info(self) -> PriceInfo | None:
        """The chosen instance type's prices and this row's bid in ¥/h, for the form."""
        data = getattr(self, "cleaned_data", None)
        if data is None:  # an unbound row shows the initial choice
            name = self.initial.get("instance_type") or self.fields["instance_type"].initial
            data = {"instance_type": name}
        itype = self.instance_types.get(data.get("instance_type") or "")
        if itype is None:
            return None
        return PriceInfo(
            itype,
            discount=data.get("spot_discount_limit"),
            price_limit=data.get("spot_price_limit"),
        )


@dataclass(frozen=True)
class ErrorLink:
    """One line of the create form's error summary: the input it is about, and why."""

    field_id: str
    label: str
    message: str


class JobCreateForm:
    """The create-job page's input: a `JobForm` and `ROLE_ROWS` role rows, as one form."""

    role_types = JOB_ROLE_TYPES  # for the page's script: the roles each job type offers

    def __init__(
        self,
        data=None,
        *,
        workspace,
        resource_types: list[str],
        quotas: list[Quota],
        instance_types: list[InstanceType],
        images: Sequence[Image] = (),
        initial: CloneInitial | None = None,
    ):
        self.workspace = workspace
        initial = initial or CloneInitial()
        self.images = list(images)
        self.job = JobForm(
            data, initial=initial.job, resource_types=resource_types, quotas=quotas, images=images
        )
        job_type = (data if data is not None else initial.job).get("job_type")
        self.roles = [
            RoleForm(
                data,
                index=i,
                instance_types=instance_types,
                job_type=job_type if job_type in JOB_ROLE_TYPES else JobType.PYTORCH,
                images=images,
                initial=initial.roles[i] if i < len(initial.roles) else None,
            )
            for i in range(ROLE_ROWS)
        ]
        self.cloned_from = initial.source
        self.from_template = initial.template
        self.roles_left_out = initial.roles_left_out
        self.role_errors: list[str] = []  # about the roles as a whole ("add at least one")
        self.other_errors: list[str] = []  # paths no input shows

    @property
    def enabled_roles(self) -> list[RoleForm]:
        return [r for r in self.roles if r.is_enabled]

    @property
    def has_errors(self) -> bool:
        return bool(
            self.job.errors
            or self.role_errors
            or self.other_errors
            or any(r.errors for r in self.enabled_roles)
        )

    @property
    def error_links(self) -> list[ErrorLink]:
        """Every field error, in the page's order, for the summary above the form: each
        links to its input."""
        links = []
        first_role = self.roles[0]["role_type"].id_for_label
        links += [ErrorLink(first_role, gettext("Roles"), message) for message in self.role_errors]
        parts: list[tuple[str, forms.Form]] = [("", self.job)]
        parts += [(str(r.index + 1), r) for r in self.enabled_roles]
        for role, part in parts:
            if role:  # about the role as a whole ("one pod needs …"): beside its first input
                label = gettext("Role %(counter)s") % {"counter": role}
                target = part["role_type"].id_for_label
                links += [ErrorLink(target, label, message) for message in part.non_field_errors()]
            for name, form_field in part.fields.items():
                for message in part.errors.get(name, ()):
                    label = str(form_field.label or name.replace("_", " ").capitalize())
                    if role:
                        label = gettext("Role %(number)s: %(label)s") % {
                            "number": role,
                            "label": label,
                        }
                    bound = part[name]
                    target = bound.id_for_label or f"{bound.auto_id}_0"  # radios: the first
                    links.append(ErrorLink(target, label, message))
        return links

    def is_valid(self) -> bool:
        """Parse every part; when parsing fails, still run the spec's rules so the page
        lists every problem at once, not the parse errors first and the rules next time."""
        parsed = [self.job.is_valid()] + [r.is_valid() for r in self.enabled_roles]
        if all(parsed):
            return True
        try:
            job_spec_resolve(self.to_spec(), workspace=self.workspace)
        except ValidationFailed as failed:
            self.add_spec_errors(failed.errors)
        return False

    def to_spec(self) -> JobSpec:
        c = getattr(self.job, "cleaned_data", {})
        fields = self.job.fields
        source = c.get("resource_source") or fields["resource_source"].initial
        code_source = {}
        if c.get("code_source_uri"):
            code_source = {"uri": c["code_source_uri"], "branch": c.get("code_source_branch", "")}
        for key in ("commit", "mount_path"):
            if c.get(f"code_source_{key}"):
                code_source[key] = c[f"code_source_{key}"]
        return JobSpec(
            display_name=c.get("display_name", ""),
            description=c.get("description", ""),
            job_type=c.get("job_type") or JobType.PYTORCH,
            image=c.get("image", ""),
            user_command=c.get("user_command", ""),
            envs=c.get("envs") or {},
            data_sources=list(self.job.data_sources_read),
            code_source=code_source,
            priority=_or(c.get("priority"), 1),
            max_running_time_minutes=c.get("max_running_time_minutes"),
            success_policy=c.get("success_policy") or SuccessPolicy.ALL_WORKERS,
            accessibility=c.get("accessibility") or Accessibility.PUBLIC,
            tags=c.get("tags") or {},
            resource_type=c.get("resource_type") or fields["resource_type"].initial,
            resource_source=source,
            quota=c.get("quota", "") if source == ResourceSource.QUOTA else "",
            idle_mode=c.get("idle_mode") or IdleMode.OFF,
            vpc_id=c.get("vpc_id", ""),
            vswitch_id=c.get("vswitch_id", ""),
            security_group_id=c.get("security_group_id", ""),
            enable_aimaster=bool(c.get("enable_aimaster")),
            max_restarts=_or(c.get("max_restarts"), 3),
            execution_mode=c.get("execution_mode") or ExecutionMode.SYNC,
            hang_seconds=c.get("hang_seconds") if c.get("enable_aimaster") else None,
            enable_easyckpt=bool(c.get("enable_easyckpt")),
            termination_grace_seconds=_or(c.get("termination_grace_seconds"), 30),
            roles=[r.to_spec(resource_source=source) for r in self.enabled_roles],
        )

    def add_spec_errors(self, errors: dict[str, list[str]]) -> None:
        """Show each spec error beside its input; an input that already shows a parse
        error keeps only that one."""
        enabled = self.enabled_roles
        for path, said in errors.items():
            messages = [localized(m) for m in said]  # the spec's words, in the reader's language
            match = SPEC_PATH.match(path)
            name, index, field = (
                (match["name"], match["index"], match["field"]) if match else (path, None, None)
            )
            if path in JOB_PATH_FIELDS:
                _add_errors(self.job, JOB_PATH_FIELDS[path], messages)
                continue
            if match and match["item"] is not None:  # an ElasticSpotSpecs line
                line = gettext("line %(line)s: %(message)s")
                messages = [line % {"line": int(match["item"]) + 1, "message": m} for m in messages]
            if name == "roles" and index is not None and int(index) < len(enabled):
                field = ROLE_FIELD_NAMES.get(field, field)
                _add_errors(enabled[int(index)], field, messages)
            elif name == "roles":
                self.role_errors += messages
            elif JOB_FIELD_NAMES.get(name, name) in self.job.fields:
                if index is not None:  # data_sources[2].uri → "line 3: uri is required"
                    lines = self.job.data_source_lines if name == "data_sources" else []
                    number = lines[int(index)] if int(index) < len(lines) else int(index) + 1
                    if field is None:
                        line = gettext("line %(line)s: %(message)s")
                    else:
                        line = gettext("line %(line)s: %(field)s %(message)s")
                        field = str(DATA_SOURCE_PARTS.get(field, field))
                    messages = [
                        line % {"line": number, "field": field, "message": m} for m in messages
                    ]
                    # one line's problem beside the other lines' (a parse error is another line's)
                    self.job.add_error(name, messages)
                    continue
                _add_errors(self.job, JOB_FIELD_NAMES.get(name, name), messages)
            else:
                self.other_errors += [f"{path}: {m}" for m in messages]


def _add_errors(form: forms.Form, field: str | None, messages: list[str]) -> None:
    if field is None:  # about the role as a whole
        form.add_error(None, messages)
    elif field not in form.fields:
        form.add_error(None, [f"{field}: {m}" for m in messages])
    elif not form.has_error(field):
        form.add_error(field, messages)


def _or(value, default):
    return default if value is None else value


def _scaled(value: Decimal | None, factor: int) -> int | None:
    return None if value is None else int(value * factor)


class JobStatusField(forms.ChoiceField):
    """A job status named in any case (`?status=running`), as ListJobs reads its Status;
    shown (the select's choice) and filtered on as the status it names."""

    def to_python(self, value):
        text = super().to_python(value)
        return job_status_named(text, JobStatus.values) or text

    def bound_data(self, data, initial):
        return self.to_python(data) if isinstance(data, str) else data


class JobFilterForm(forms.Form):
    """The job list's filters, read from the query string."""

    q = forms.CharField(label=_("Name, job id or tag"), required=False)
    status = JobStatusField(
        label=_("Status"), required=False, choices=[("", _("Any status"))] + JobStatus.choices
    )
    payment_type = forms.ChoiceField(
        label=_("Payment"),
        required=False,
        choices=[
            ("", _("Any payment")),
            ("PrePaid", _("PrePaid (quota)")),
            ("PostPaid", _("PostPaid (public, spot)")),
        ],
    )
    quota = forms.ChoiceField(label=_("Quota"), required=False)
    idle_mode = forms.ChoiceField(
        label=_("Idle resources"),
        required=False,
        choices=[("", _("Any idle mode"))] + IdleMode.choices,
    )

    sort = forms.ChoiceField(
        label=_("Sort"), required=False, choices=[(s, s) for s in sorted(JOB_SORTS)]
    )

    def __init__(self, *args, quotas: list[Quota], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["quota"].choices = [("", gettext("Any quota"))] + [
            (q.name, q.name) for q in quotas
        ]

    def filters(self) -> dict:
        """The valid filters; an invalid value (a stale link) is ignored, not an error page."""
        self.is_valid()
        cleaned = getattr(self, "cleaned_data", {})
        return {k: v for k, v in cleaned.items() if v and k != "sort"}

    def order(self) -> str:
        """The valid order (`JOB_SORTS`), else the default: newest first."""
        self.is_valid()
        return getattr(self, "cleaned_data", {}).get("sort") or JOB_SORT_DEFAULT


# --- Clone: the create form filled from an existing job -------------------------------------


@dataclass(frozen=True)
class CloneInitial:
    """Initial values of the create form: the job's fields and one dict per role row."""

    job: dict = field(default_factory=dict)
    roles: list[dict] = field(default_factory=list)
    source: Job | None = None  # the job cloned
    template: JobTemplateVersion | None = None  # or the template (version) used
    roles_left_out: int = 0  # roles beyond the form's ROLE_ROWS rows


def _key_values(text: str, shape: str) -> dict[str, str]:
    """ "KEY=VALUE" lines (blank ones skipped) as a dict; the value is kept as written."""
    pairs, problems = {}, []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.strip().partition("=")
        if not sep or not name.strip():
            problems.append(gettext("line %(line)s: write %(shape)s") % {"line": n, "shape": shape})
            continue
        pairs[name.strip()] = value
    if problems:
        raise forms.ValidationError(problems)
    return pairs


def clone_initial(*, job: Job, roles: list[JobRole]) -> CloneInitial:
    """The create form as `job` was submitted: named "<name>-copy", with its roles (their
    type, pods, instance type or resource config, image, restart policy and bid), quota,
    idle mode, environment, data and code sources, VPC and fault tolerance."""
    longest = JobForm.base_fields["display_name"].max_length - len("-copy")
    spec = job_spec_of(job, roles)
    return spec_initial(spec, display_name=f"{job.display_name[:longest]}-copy", source=job)


def template_initial(version: JobTemplateVersion) -> CloneInitial:
    """The create form filled from a job template's version, named as in the template."""
    return spec_initial(spec_from_json(version.content), template=version)


def spec_initial(
    spec: JobSpec,
    *,
    display_name: str | None = None,
    source: Job | None = None,
    template: JobTemplateVersion | None = None,
) -> CloneInitial:
    """The create form filled from a spec (a job's, or a template's)."""
    code = spec.code_source
    initial = {
        "display_name": spec.display_name if display_name is None else display_name,
        "job_type": spec.job_type,
        "image": spec.image,
        "user_command": spec.user_command,
        # by name: PostgreSQL's jsonb keeps no order of its own
        "envs": "\n".join(f"{key}={value}" for key, value in sorted(spec.envs.items())),
        "data_sources": "\n".join(
            f"{source.get('uri', '')} {source.get('mount_path', '')}"
            for source in spec.data_sources
        ),
        # CreateJob's CodeSourceId, where the form's code source is given (GetJob tells the
        # two alike)
        "code_source_uri": code.get("uri") or code.get("code_source_id", ""),
        "code_source_branch": code.get("branch", ""),
        "code_source_commit": code.get("commit", ""),
        "code_source_mount_path": code.get("mount_path", ""),
        "priority": spec.priority,
        "max_running_time_minutes": spec.max_running_time_minutes,
        "success_policy": spec.success_policy,
        "accessibility": spec.accessibility,
        "tags": "\n".join(f"{key}={value}" for key, value in spec.tags.items()),
        "resource_type": spec.resource_type,
        "resource_source": spec.resource_source,
        "quota": spec.quota,
        "idle_mode": spec.idle_mode,
        "vpc_id": spec.vpc_id,
        "vswitch_id": spec.vswitch_id,
        "security_group_id": spec.security_group_id,
        "enable_aimaster": spec.enable_aimaster,
        "max_restarts": spec.max_restarts,
        "execution_mode": spec.execution_mode,
        "hang_seconds": spec.hang_seconds,
        "enable_easyckpt": spec.enable_easyckpt,
        "description": spec.description,
        "termination_grace_seconds": spec.termination_grace_seconds,
    }
    return CloneInitial(
        job=initial,
        roles=[_role_initial(role, index=i) for i, role in enumerate(spec.roles[:ROLE_ROWS])],
        source=source,
        template=template,
        roles_left_out=max(len(spec.roles) - ROLE_ROWS, 0),
    )


def _role_initial(role: RoleSpec, *, index: int) -> dict:
    initial = {
        "role_type": role.role_type,
        "pod_count": role.pod_count,
        "instance_type": role.instance_type,
        "image": role.image,
        "restart_policy": role.restart_policy,
        "spot_limit_type": "price" if role.spot_price_limit is not None else "discount",
        "spot_discount_limit": _plain(role.spot_discount_limit),
        "spot_price_limit": _plain(role.spot_price_limit),
        "elastic_spot_specs": "\n".join(
            f"{f.instance_type} SpotDiscountLimit={_plain(f.spot_discount_limit)}"
            if f.spot_discount_limit is not None
            else f"{f.instance_type} SpotPriceLimit={_plain(f.spot_price_limit)}"
            for f in role.elastic_spot_specs
        ),
    }
    if index:
        initial["enabled"] = True
    if not role.instance_type:  # a resource config, in the form's units (3 places)
        initial["cpu_cores"] = _plain(Decimal(role.cpu or 0) / 1000, places=3)
        initial["memory_gib"] = _plain(Decimal(role.memory or 0) / 1024, places=3)
        initial["gpus"] = gpu_text(role.gpu or 0, role.gpu_milli)
    return initial


def _plain(value: Decimal | None, *, places: int = 6) -> str | None:
    """0.40 → "0.4", 8.000 → "8": as the form's choices and inputs spell numbers."""
    if value is None:
        return None
    return format(value.quantize(Decimal(1).scaleb(-places)).normalize(), "f")
