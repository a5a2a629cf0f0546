"""Jobs, their roles (JobSpecs) and pods, and the record of what happened to them."""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable
from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from apps.cluster.models import ResourceType


def gpu_text(gpu: int, gpu_milli: int = 0) -> str:
    """GPUs as people write them: "2", a share of one GPU, "0.5", or a job's in all, "2.5"."""
    milli = gpu * 1000 + gpu_milli
    if milli % 1000 == 0:
        return str(milli // 1000)
    return format((Decimal(milli) / 1000).normalize(), "f")


def gpu_hours_text(gpu_seconds: float) -> str:
    """Work (lost at an interruption) in GPU-hours as the console and the API write it: two
    decimals, "5.33"; work under 0.005 GPU-hours that is not nothing with the places that
    show it (10 GPU-seconds: "0.0028"), never "0.00" beside a message saying 10 GPU-seconds
    were lost. Nothing lost is "0.00"."""
    hours = float(gpu_seconds) / 3600
    places = 2
    if 0 < hours < 0.005:
        places = 1 - math.floor(math.log10(hours))
    return f"{hours:,.{places}f}"


def gpu_indexes(ids: str) -> tuple[int, ...]:
    """A pod's GPU indexes from its `gpu_ids` ("0,3"); empty when not named yet."""
    return tuple(int(i) for i in ids.split(",") if i.strip().isdigit())


def new_job_id() -> str:
    return "dlc" + secrets.token_hex(7)


class JobStatus(models.TextChoices):
    CREATING = "Creating", pgettext_lazy("status", "Creating")
    QUEUING = "Queuing", pgettext_lazy("status", "Queuing")
    BIDDING = "Bidding", pgettext_lazy("status", "Bidding")
    ENV_PREPARING = "EnvPreparing", pgettext_lazy("status", "EnvPreparing")
    SANITY_CHECKING = "SanityChecking", pgettext_lazy("status", "SanityChecking")
    RUNNING = "Running", pgettext_lazy("status", "Running")
    RESTARTING = "Restarting", pgettext_lazy("status", "Restarting")
    STOPPING = "Stopping", pgettext_lazy("status", "Stopping")
    SUCCEEDED = "Succeeded", pgettext_lazy("status", "Succeeded")
    FAILED = "Failed", pgettext_lazy("status", "Failed")
    STOPPED = "Stopped", pgettext_lazy("status", "Stopped")


# The statuses DLC documents, as ListJobs filters on them: paiweb's, and SucceededReserving and
# FailedReserving, which it accepts and never produces.
DOCUMENTED_STATUSES = (*JobStatus.values, "SucceededReserving", "FailedReserving")


def job_status_named(name: str, statuses: Iterable[str] = DOCUMENTED_STATUSES) -> str | None:
    """The status of `statuses` that `name` names in any case ("running" → "Running"), as
    the API and the console's job list read a status filter; None if it names none."""
    folded = name.strip().lower()
    return next((s for s in statuses if s.lower() == folded), None)


FINISHED_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED})
PENDING_STATUSES = frozenset({JobStatus.CREATING, JobStatus.QUEUING, JobStatus.BIDDING})
ACTIVE_STATUSES = frozenset(
    {JobStatus.ENV_PREPARING, JobStatus.RUNNING, JobStatus.RESTARTING, JobStatus.STOPPING}
)


class JobType(models.TextChoices):
    PYTORCH = "PyTorchJob", "PyTorchJob"
    TF = "TFJob", "TFJob"
    MPI = "MPIJob", "MPIJob"
    XGBOOST = "XGBoostJob", "XGBoostJob"
    RAY = "RayJob", "RayJob"


class ResourceSource(models.TextChoices):
    QUOTA = "quota", _("Resource quota")
    PUBLIC = "public", _("Public resources (pay-as-you-go)")
    SPOT = "spot", _("Spot")


class IdleMode(models.TextChoices):
    OFF = "off", _("Off")
    ACCEPTABLE = "acceptable", _("Acceptable")
    ONLY_IDLE = "only_idle", _("Only Idle Resources")


class SuccessPolicy(models.TextChoices):
    ALL_WORKERS = "AllWorkers", "AllWorkers"
    CHIEF_WORKER = "ChiefWorker", "ChiefWorker"


class Accessibility(models.TextChoices):
    PUBLIC = "PUBLIC", _("Public: every member of the workspace")
    PRIVATE = "PRIVATE", _("Private: its owner and the workspace's administrators")


class ExecutionMode(models.TextChoices):
    SYNC = "Sync", _("Sync (restart the whole job)")
    ASYNC = "Async", _("Async (restart failed pods only)")


class Job(models.Model):
    job_id = models.CharField(
        _("job id"), max_length=32, unique=True, default=new_job_id, editable=False
    )
    workspace = models.ForeignKey(
        "workspaces.Workspace",
        on_delete=models.PROTECT,
        related_name="jobs",
        verbose_name=_("workspace"),
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="jobs",
        verbose_name=_("user"),
    )

    # Basics
    display_name = models.CharField(_("Display name"), max_length=256)
    job_type = models.CharField(
        _("Job type"), max_length=16, choices=JobType.choices, default=JobType.PYTORCH
    )
    image = models.CharField(_("Image"), max_length=512, blank=True)
    user_command = models.TextField(_("User command"))
    envs = models.JSONField(_("Environment variables"), default=dict, blank=True)
    # [{"uri":…, "mount_path":…}]
    data_sources = models.JSONField(_("Data sources"), default=list, blank=True)
    # {"uri":…, "branch":…, "mount_path":…}
    code_source = models.JSONField(_("Code source"), default=dict, blank=True)
    priority = models.PositiveSmallIntegerField(_("Priority"), default=1)
    max_running_time_minutes = models.PositiveIntegerField(
        _("Max running time (minutes)"), null=True, blank=True
    )
    success_policy = models.CharField(
        _("Success policy"),
        max_length=16,
        choices=SuccessPolicy.choices,
        default=SuccessPolicy.ALL_WORKERS,
    )

    # Resource information
    resource_type = models.CharField(
        _("Resource type"), max_length=16, choices=ResourceType.choices, default=ResourceType.ECS
    )
    resource_source = models.CharField(
        _("Resource source"), max_length=16, choices=ResourceSource.choices
    )
    quota = models.ForeignKey(
        "cluster.Quota",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="jobs",
        verbose_name=_("Quota"),
    )
    idle_mode = models.CharField(
        _("Idle resources"), max_length=16, choices=IdleMode.choices, default=IdleMode.OFF
    )
    vpc_id = models.CharField(_("VPC id"), max_length=64, blank=True)
    vswitch_id = models.CharField(_("vSwitch id"), max_length=64, blank=True)
    security_group_id = models.CharField(_("Security group id"), max_length=64, blank=True)

    # Fault tolerance and diagnosis
    enable_aimaster = models.BooleanField(_("Automatic fault tolerance (AIMaster)"), default=False)
    max_restarts = models.PositiveSmallIntegerField(_("Max restarts"), default=3)
    execution_mode = models.CharField(
        _("Execution mode"), max_length=8, choices=ExecutionMode.choices, default=ExecutionMode.SYNC
    )
    # AIMaster's hang detection: restart when no pod has written output for this long
    hang_seconds = models.PositiveIntegerField(_("Hang detection (seconds)"), null=True, blank=True)
    enable_easyckpt = models.BooleanField(_("EasyCkpt checkpoints"), default=False)
    termination_grace_seconds = models.PositiveIntegerField(
        _("termination grace period (seconds)"), default=30
    )
    description = models.TextField(_("Description"), blank=True)
    accessibility = models.CharField(
        _("Visibility"), max_length=8, choices=Accessibility.choices, default=Accessibility.PUBLIC
    )

    # State
    status = models.CharField(
        _("Status"), max_length=20, choices=JobStatus.choices, default=JobStatus.CREATING
    )
    sub_status = models.CharField(_("sub-status"), max_length=64, blank=True)
    reason_code = models.CharField(_("Reason code"), max_length=64, blank=True)
    reason_message = models.TextField(_("Reason message"), blank=True)
    restart_times = models.PositiveSmallIntegerField(_("restart times"), default=0)
    # The work (GPU-seconds since the last checkpoint) lost by the interruption that ended
    # the job, when one did (a preemption, a reclaim or a pod failure with no AIMaster
    # restart left); None when none did. Those that requeued it are its JobRestarts.
    ended_lost_gpu_seconds = models.FloatField(
        _("work lost at the end (GPU-seconds)"), null=True, blank=True
    )
    attempt = models.PositiveSmallIntegerField(
        _("attempt"), default=0, help_text=_("current pod generation")
    )
    # the moment it was submitted (job_submit gives its `now`), as its first status began
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    submitted_at = models.DateTimeField(
        _("submitted at"), help_text=_("queue order key; kept across requeues")
    )
    status_changed_at = models.DateTimeField(_("status changed at"))
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    not_before = models.DateTimeField(
        _("not before"), null=True, blank=True, help_text=_("requeue backoff")
    )
    last_checkpoint_at = models.DateTimeField(_("last checkpoint at"), null=True, blank=True)
    pending_reason = models.CharField(_("pending reason"), max_length=256, blank=True)
    queue_position = models.PositiveIntegerField(_("queue position"), null=True, blank=True)
    queue_size = models.PositiveIntegerField(_("queue size"), null=True, blank=True)
    # Disk use of the job's directory under POD_WORK_ROOT (apps/agent/housekeeping.py), and
    # when housekeeping removed its work dirs and data after the retention period.
    disk_bytes = models.BigIntegerField(_("disk use (bytes)"), null=True, blank=True)
    disk_measured_at = models.DateTimeField(_("disk measured at"), null=True, blank=True)
    work_swept_at = models.DateTimeField(_("work dirs removed at"), null=True, blank=True)

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("training jobs")
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["workspace", "status"]),
            models.Index(fields=["status", "priority", "submitted_at"]),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(priority__gte=1) & Q(priority__lte=9), name="job_priority_1_9"
            ),
            models.CheckConstraint(
                condition=~Q(resource_source="quota") | Q(quota__isnull=False),
                name="quota_job_has_quota",
            ),
            models.CheckConstraint(
                condition=Q(resource_source="quota") | Q(idle_mode="off"),
                name="idle_mode_only_with_quota",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.display_name} ({self.job_id})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def is_spot(self) -> bool:
        return self.resource_source == ResourceSource.SPOT

    @property
    def restart_budget(self) -> str:
        """Restarts spent of those AIMaster may spend, as DLC's RestartTimes reads: "1/3";
        none may be without AIMaster ("0/0"), whatever max restarts was given."""
        return f"{self.restart_times}/{self.max_restarts if self.enable_aimaster else 0}"

    @property
    def payment_type(self) -> str:
        """DLC's PaymentType: quota jobs are prepaid; public and spot are postpaid."""
        return "PrePaid" if self.resource_source == ResourceSource.QUOTA else "PostPaid"

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at is None:
            return None
        from django.utils import timezone

        end = self.finished_at or timezone.now()
        return max((end - self.started_at).total_seconds(), 0.0)


class SpotStrategy(models.TextChoices):
    PRICE_LIMIT = "SpotWithPriceLimit", "SpotWithPriceLimit"


class JobRole(models.Model):
    """A JobSpec: one role (Worker, Master, PS, Chief…) with its pods' resources and bid."""

    class RoleType(models.TextChoices):
        WORKER = "Worker", "Worker"
        MASTER = "Master", "Master"
        PS = "PS", "PS"
        CHIEF = "Chief", "Chief"
        EVALUATOR = "Evaluator", "Evaluator"
        LAUNCHER = "Launcher", "Launcher"
        HEAD = "Head", "Head"

    class RestartPolicy(models.TextChoices):
        NEVER = "Never", "Never"
        ON_FAILURE = "OnFailure", "OnFailure"
        ALWAYS = "Always", "Always"
        EXIT_CODE = "ExitCode", "ExitCode"

    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="roles", verbose_name=_("job")
    )
    role_type = models.CharField(_("role type"), max_length=16, choices=RoleType.choices)
    pod_count = models.PositiveIntegerField(_("pod count"), default=1)
    image = models.CharField(_("Image"), max_length=512, blank=True)
    instance_type = models.ForeignKey(
        "cluster.InstanceType",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        verbose_name=_("Instance type"),
    )
    # Resolved resources of one pod (from the instance type, or the resource config).
    cpu = models.PositiveIntegerField(_("CPU"), help_text=_("millicores"))
    memory = models.PositiveIntegerField(_("Memory"), help_text=_("MiB"))
    gpu = models.PositiveIntegerField(_("GPUs"), default=0)
    # A share of one GPU, 1..999 milli-GPUs (gpu then 0): the pod runs on one GPU that other
    # shared pods may use too. Quota jobs only; 0 for whole GPUs.
    gpu_milli = models.PositiveSmallIntegerField(_("GPU share (milli-GPUs)"), default=0)
    restart_policy = models.CharField(
        _("Restart policy"),
        max_length=16,
        choices=RestartPolicy.choices,
        default=RestartPolicy.ON_FAILURE,
    )
    spot_strategy = models.CharField(
        _("spot strategy"), max_length=32, choices=SpotStrategy.choices, blank=True
    )
    spot_discount_limit = models.DecimalField(
        _("spot discount limit"), max_digits=3, decimal_places=2, null=True, blank=True
    )
    spot_price_limit = models.DecimalField(
        _("spot price limit"),
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text=_("CNY per instance-minute, as the DLC API documents it"),
    )

    class Meta:
        verbose_name = _("job role")
        verbose_name_plural = _("job roles")
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(pod_count__gte=1), name="role_pod_count_ge_1"),
            models.UniqueConstraint(fields=["job", "role_type"], name="one_role_type_per_job"),
            models.CheckConstraint(
                condition=Q(spot_discount_limit__isnull=True) | Q(spot_price_limit__isnull=True),
                name="role_at_most_one_spot_limit",
            ),
            models.CheckConstraint(
                condition=Q(gpu_milli=0) | (Q(gpu=0) & Q(gpu_milli__lt=1000)),
                name="role_gpu_share_below_one_gpu",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role_type}×{self.pod_count}"

    @property
    def gpus(self) -> Decimal:
        """GPUs per pod: whole, or the share of one (0.5)."""
        return Decimal(self.gpu_milli) / 1000 if self.gpu_milli else Decimal(self.gpu)

    @property
    def gpu_text(self) -> str:
        """GPUs per pod as people write them: "2", "0.5"."""
        return gpu_text(self.gpu, self.gpu_milli)


class ElasticSpotSpec(models.Model):
    """A further instance type a spot role may run on, with its own bid (DLC's
    JobSpecs[i].ElasticSpotSpecs[j]): the market tries the role's own instance type and bid
    first, then these in `position` order, and starts the job on the first that its bid
    and the stock allow (`apps.core.pricing.spot_choice`)."""

    role = models.ForeignKey(
        JobRole, on_delete=models.CASCADE, related_name="elastic_spot_specs", verbose_name=_("Role")
    )
    position = models.PositiveSmallIntegerField(
        _("position"), help_text=_("0 is tried first, after the role's own")
    )
    instance_type = models.ForeignKey(
        "cluster.InstanceType",
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name=_("Instance type"),
    )
    spot_strategy = models.CharField(
        _("spot strategy"),
        max_length=32,
        choices=SpotStrategy.choices,
        default=SpotStrategy.PRICE_LIMIT,
    )
    spot_discount_limit = models.DecimalField(
        _("spot discount limit"), max_digits=3, decimal_places=2, null=True, blank=True
    )
    spot_price_limit = models.DecimalField(
        _("spot price limit"),
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text=_("CNY per instance-minute, as SpotSpec's"),
    )

    class Meta:
        verbose_name = _("elastic spot spec")
        verbose_name_plural = _("elastic spot specs")
        ordering = ["role_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["role", "position"], name="elastic_spot_position"),
            models.UniqueConstraint(fields=["role", "instance_type"], name="elastic_spot_type"),
            models.CheckConstraint(
                condition=(Q(spot_discount_limit__isnull=True) & Q(spot_price_limit__isnull=False))
                | (Q(spot_discount_limit__isnull=False) & Q(spot_price_limit__isnull=True)),
                name="elastic_spot_one_limit",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} → {self.instance_type_id}"


class PodStatus(models.TextChoices):
    PENDING = "Pending", pgettext_lazy("status", "Pending")
    RUNNING = "Running", pgettext_lazy("status", "Running")
    SUCCEEDED = "Succeeded", pgettext_lazy("status", "Succeeded")
    FAILED = "Failed", pgettext_lazy("status", "Failed")
    PREEMPTED = "Preempted", pgettext_lazy("status", "Preempted")
    STOPPED = "Stopped", pgettext_lazy("status", "Stopped")


# Pods that hold room (a node's, or the public pool's instances) until they end.
LIVE_POD_STATUSES = (PodStatus.PENDING, PodStatus.RUNNING)


class Pod(models.Model):
    """One pod of one attempt; pods of earlier attempts stay as history pods."""

    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="pods", verbose_name=_("job")
    )
    role = models.ForeignKey(
        JobRole, on_delete=models.CASCADE, related_name="pods", verbose_name=_("Role")
    )
    index = models.PositiveIntegerField(_("index"))
    attempt = models.PositiveSmallIntegerField(_("attempt"), default=0)
    pod_id = models.CharField(_("pod id"), max_length=96, unique=True)
    node = models.ForeignKey(
        "cluster.Node",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="pods",
        verbose_name=_("node"),
    )
    # The public pool's instance type the pod runs on (pay-as-you-go and spot pods): its
    # role's, or for spot the ElasticSpotSpecs type the market started the job on. Billing
    # and the market's stock count it. None for quota pods (they run on a node).
    instance_type = models.ForeignKey(
        "cluster.InstanceType",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name=_("Instance type"),
    )
    in_quota = models.BooleanField(_("In quota"), null=True, blank=True)
    status = models.CharField(
        _("Status"), max_length=16, choices=PodStatus.choices, default=PodStatus.PENDING
    )
    reason = models.CharField(_("Reason"), max_length=64, blank=True)
    message = models.TextField(_("Message"), blank=True)
    exit_code = models.IntegerField(_("Exit code"), null=True, blank=True)
    gpu_ids = models.CharField(_("GPU ids"), max_length=64, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)

    class Meta:
        verbose_name = _("pod")
        verbose_name_plural = _("pods")
        ordering = ["-attempt", "role_id", "index"]
        indexes = [models.Index(fields=["status", "node"])]

    def __str__(self) -> str:
        return self.pod_id

    @property
    def is_history(self) -> bool:
        return self.attempt < self.job.attempt


def pod_instance_type(prefix: str = "") -> Coalesce:
    """A query expression: the id of the instance type a pod runs on, its own
    (`Pod.instance_type`) or else its role's. `prefix` reaches the pod from another model
    ("pod__")."""
    return Coalesce(f"{prefix}instance_type_id", f"{prefix}role__instance_type_id")


class JobTag(models.Model):
    """One of the submitter's labels on a job, key → value (Settings.Tags; checked by
    `apps.jobs.specs.tags_problems`). A row each, so ListJobs filters by them on any
    database with an index."""

    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="tags", verbose_name=_("job")
    )
    key = models.CharField(_("key"), max_length=128)
    value = models.CharField(_("value"), max_length=128, blank=True)

    class Meta:
        verbose_name = _("job tag")
        verbose_name_plural = _("job tags")
        ordering = ["key"]
        constraints = [models.UniqueConstraint(fields=["job", "key"], name="job_tag_key_unique")]
        indexes = [models.Index(fields=["key", "value"])]

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


class StatusTransition(models.Model):
    """One entry of StatusHistory: a status the job held, from start to end, and why."""

    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="status_history", verbose_name=_("job")
    )
    status = models.CharField(_("Status"), max_length=20, choices=JobStatus.choices)
    reason_code = models.CharField(_("Reason code"), max_length=64, blank=True)
    reason_message = models.TextField(_("Reason message"), blank=True)
    started_at = models.DateTimeField(_("started at"))
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True)

    class Meta:
        verbose_name = _("status transition")
        verbose_name_plural = _("status transitions")
        ordering = ["started_at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.status}"


class JobEvent(models.Model):
    """Something that happened to a job or one of its pods, in words a user can read."""

    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="events", verbose_name=_("job")
    )
    pod = models.ForeignKey(
        Pod, null=True, blank=True, on_delete=models.CASCADE, verbose_name=_("pod")
    )
    at = models.DateTimeField(_("at"))
    kind = models.CharField(_("kind"), max_length=32)  # Submitted, Dequeued, Scheduled, Preempted…
    message = models.TextField(_("Message"))

    class Meta:
        verbose_name = _("job event")
        verbose_name_plural = _("job events")
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class Checkpoint(models.Model):
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="checkpoints", verbose_name=_("job")
    )
    step = models.PositiveBigIntegerField(_("Step"))
    path = models.CharField(_("path"), max_length=512, blank=True)
    size_bytes = models.PositiveBigIntegerField(_("size (bytes)"), default=0)
    created_at = models.DateTimeField(_("created at"))
    # when the agent found its file gone (EasyCkpt keeps only the latest, the job's own code
    # or the work-dir sweep removed it): the row stays, for the job's history
    removed_at = models.DateTimeField(_("removed at"), null=True, blank=True)
    # when a restarted attempt's EasyCkpt load passed over its file as damaged (its SHA-256
    # or its pickle did not check): no later restart is said to resume from it
    damaged_at = models.DateTimeField(_("found damaged at"), null=True, blank=True)

    class Meta:
        verbose_name = _("checkpoint")
        verbose_name_plural = _("checkpoints")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.job_id} step {self.step}"


class JobRestart(models.Model):
    """An interruption that started a new attempt of the job, with its cause and cost: a
    restart AIMaster made after a failure of the job's own (a pod failed or hung), which
    spends one of its restarts (`counted`), or one that spends none: a preemption or a spot
    reclaim (AIMaster requeues those whatever its budget) or a platform interruption (a node
    lost or drained, an agent restarted)."""

    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="restarts", verbose_name=_("job")
    )
    # The job's n-th interruption, which started attempt n: counted or not, so each attempt
    # names the interruption that ended the one before. A counted row's place in AIMaster's
    # budget is the number of counted rows up to it (`apps.jobs.selectors.job_restarts`).
    number = models.PositiveSmallIntegerField(_("number"))
    at = models.DateTimeField(_("at"))
    # JobPreempted, SpotReclaimed, PodFailed, NodeLost
    cause = models.CharField(_("Cause"), max_length=64)
    message = models.TextField(_("Message"), blank=True)
    lost_gpu_seconds = models.FloatField(_("work lost (GPU-seconds)"), default=0)
    counted = models.BooleanField(
        _("counted"),
        default=True,
        help_text=_(
            "spent one of AIMaster's restarts (False: a preemption, a reclaim or the platform's)"
        ),
    )

    class Meta:
        verbose_name = _("job restart")
        verbose_name_plural = _("job restarts")
        ordering = ["number"]

    def __str__(self) -> str:
        return f"{self.job_id} restart {self.number}: {self.cause}"


class JobTemplate(models.Model):
    """A job's settings saved under a name in a workspace, to create jobs from (the console's
    Templates; PAI's JobTemplate), in numbered versions: jobs are created from the default
    one unless a version is named."""

    workspace = models.ForeignKey(
        "workspaces.Workspace",
        on_delete=models.CASCADE,
        related_name="job_templates",
        verbose_name=_("workspace"),
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="job_templates",
        verbose_name=_("user"),
    )
    name = models.CharField(_("name"), max_length=128)
    description = models.TextField(_("Description"), blank=True)
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)
    default_version = models.PositiveIntegerField(_("default version"), default=1)
    modified_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("modified by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)

    class Meta:
        verbose_name = _("job template")
        verbose_name_plural = _("job templates")
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="one_template_name_per_ws")
        ]

    def __str__(self) -> str:
        return self.name


class JobTemplateVersion(models.Model):
    """One version of a template: `content` is a `JobSpec` as `specs.spec_to_json` writes
    it; `constraints` maps a CreateJob field to locked, overridable or required."""

    template = models.ForeignKey(
        JobTemplate, on_delete=models.CASCADE, related_name="versions", verbose_name=_("template")
    )
    version = models.PositiveIntegerField(_("version"))
    content = models.JSONField(_("content"))
    constraints = models.JSONField(_("constraints"), default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("job template version")
        verbose_name_plural = _("job template versions")
        ordering = ["version"]
        constraints = [
            models.UniqueConstraint(fields=["template", "version"], name="one_template_version")
        ]

    def __str__(self) -> str:
        return f"{self.template.name} v{self.version}"
