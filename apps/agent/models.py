"""What the node agents keep: how each pod runs (one row per launched pod) and which agent
serves which node."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy


class PodProcess(models.Model):
    """One launched pod's process. The launch (in the scheduler's transaction) decides its
    place in the job — rank, world size, master address and port, queue — and the agent
    that claims it fills in where and how it runs, and how it ended."""

    class State(models.TextChoices):
        # pod_start_task is on the node's queue
        QUEUED = "queued", pgettext_lazy("status", "Queued")
        STARTING = "starting", pgettext_lazy("status", "Starting")  # an agent claimed it
        RUNNING = "running", pgettext_lazy("status", "Running")
        EXITED = "exited", pgettext_lazy("status", "Exited")
        # the pod was stopped or preempted before it started
        CANCELLED = "cancelled", pgettext_lazy("status", "Cancelled")

    pod = models.OneToOneField(
        "jobs.Pod", on_delete=models.CASCADE, related_name="process", verbose_name=_("pod")
    )
    state = models.CharField(_("State"), max_length=16, choices=State.choices, default=State.QUEUED)
    queue = models.CharField(_("queue"), max_length=160)
    rank = models.PositiveIntegerField(_("rank"), default=0)
    world_size = models.PositiveIntegerField(_("world size"), default=1)
    master_addr = models.CharField(_("master address"), max_length=255, default="127.0.0.1")
    master_port = models.PositiveIntegerField(_("master port"), default=0)
    agent = models.CharField(
        _("agent"), max_length=255, blank=True, help_text=_("the worker that claimed it")
    )
    host = models.CharField(_("host"), max_length=255, blank=True)
    pid = models.IntegerField(_("PID"), null=True, blank=True)
    sandbox = models.CharField(_("sandbox"), max_length=16, blank=True)
    work_dir = models.CharField(_("work dir"), max_length=1024, blank=True)
    log_path = models.CharField(_("log path"), max_length=1024, blank=True)
    exit_code = models.IntegerField(_("Exit code"), null=True, blank=True)
    queued_at = models.DateTimeField(_("queued at"))
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    exited_at = models.DateTimeField(_("exited at"), null=True, blank=True)
    # when its log last grew, as its agent reported it (every few seconds at most)
    output_at = models.DateTimeField(_("last output at"), null=True, blank=True)

    class Meta:
        verbose_name = _("pod process")
        verbose_name_plural = _("pod processes")
        indexes = [
            models.Index(fields=["agent", "state"]),
            models.Index(fields=["state", "queue"]),
        ]  # an agent's reconcile

    def __str__(self) -> str:
        return f"{self.pod.pod_id} ({self.get_state_display()})"

    @property
    def is_live(self) -> bool:
        return self.state in {self.State.QUEUED, self.State.STARTING, self.State.RUNNING}


class NodeAgent(models.Model):
    """The agent that last reported serving a node (its heartbeat), and how it runs pods."""

    node = models.OneToOneField(
        "cluster.Node", on_delete=models.CASCADE, related_name="agent", verbose_name=_("node")
    )
    worker = models.CharField(
        _("worker"), max_length=255, help_text=_("Celery worker name, e.g. agent@host")
    )
    hostname = models.CharField(_("hostname"), max_length=255)
    address = models.CharField(
        _("address"), max_length=255, help_text=_("where other hosts reach its pods")
    )
    sandbox = models.CharField(_("sandbox"), max_length=255, blank=True)
    pod_cidr = models.CharField(
        _("pod CIDR"),
        max_length=64,
        blank=True,
        help_text=_("the host's pod subnet (POD_CIDR), for multi-host jobs"),
    )
    last_seen = models.DateTimeField(_("last seen"))

    class Meta:
        verbose_name = _("node agent")
        verbose_name_plural = _("node agents")
        ordering = ["node__name"]

    def __str__(self) -> str:
        return f"{self.node} ← {self.worker}"


class PodMetricSample(models.Model):
    """One pod's figures at one sampling moment (every POD_METRICS_SECONDS), as its agent
    read them from the kernel and NVML (apps/agent/sampler.py): levels at the moment, rates
    over the interval since the previous sample. A figure the host cannot give (no GPU, no
    network namespace, the first interval of a rate) is null: absent, not zero. Kept
    POD_METRICS_RETENTION_DAYS; GetJobMetrics and the job page read them."""

    pod = models.ForeignKey(
        "jobs.Pod", on_delete=models.CASCADE, related_name="metric_samples", db_index=False
    )
    at = models.DateTimeField()
    cpu_cores = models.FloatField(null=True)  # CPU time used per second of the interval
    memory_bytes = models.BigIntegerField(null=True)  # working set
    gpu_percent = models.FloatField(null=True)  # mean over the pod's GPUs
    gpu_memory_bytes = models.BigIntegerField(null=True)  # summed over them
    net_rx_rate = models.FloatField(null=True)  # bytes/s, the job's namespace on the host
    net_tx_rate = models.FloatField(null=True)
    disk_read_rate = models.FloatField(null=True)  # bytes/s of storage I/O
    disk_write_rate = models.FloatField(null=True)

    class Meta:
        indexes = [
            models.Index(fields=["pod", "at"]),  # a job's series
            models.Index(fields=["at"]),  # the retention sweep
        ]

    def __str__(self) -> str:
        return f"{self.pod.pod_id} at {self.at:%Y-%m-%d %H:%M:%S}"
