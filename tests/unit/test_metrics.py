"""The pure part of pod metrics (apps/agent/metrics.py) and the sampler's readers over
NVML-shaped and kernel-shaped input: no database, no kernel files, no GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apps.agent import metrics, sampler
from apps.agent.metrics import GpuReading, Reading

# --- rates from counters ------------------------------------------------------------------


def test_it_turns_cpu_time_into_cores_over_the_interval():
    before = Reading(at=100.0, cpu_usec=5_000_000)
    after = Reading(at=110.0, cpu_usec=20_000_000)  # 15 CPU-seconds in 10 s
    assert metrics.figures(before, after).cpu_cores == pytest.approx(1.5)


def test_it_gives_rates_per_second_from_byte_counters():
    before = Reading(
        at=0.0, net_rx_bytes=1000, net_tx_bytes=0, disk_read_bytes=0, disk_write_bytes=10
    )
    after = Reading(
        at=4.0, net_rx_bytes=9000, net_tx_bytes=400, disk_read_bytes=4096, disk_write_bytes=10
    )
    got = metrics.figures(before, after)
    assert (got.net_rx_rate, got.net_tx_rate) == (2000.0, 100.0)
    assert (got.disk_read_rate, got.disk_write_rate) == (1024.0, 0.0)


def test_a_counter_that_went_backwards_gives_no_rate_not_a_negative_one():
    before = Reading(at=0.0, cpu_usec=9_000_000, net_rx_bytes=5000, net_tx_bytes=5000)
    after = Reading(at=10.0, cpu_usec=1_000_000, net_rx_bytes=100, net_tx_bytes=6000)
    got = metrics.figures(before, after)
    assert got.cpu_cores is None and got.net_rx_rate is None
    assert got.net_tx_rate == 100.0  # the other counter is unaffected
    # and the next interval counts from the reset value
    later = metrics.figures(after, Reading(at=20.0, cpu_usec=6_000_000))
    assert later.cpu_cores == pytest.approx(0.5)


def test_the_first_reading_has_levels_but_no_rates():
    got = metrics.figures(None, Reading(at=5.0, cpu_usec=10, memory_bytes=123, net_rx_bytes=9))
    assert got.memory_bytes == 123
    assert got.cpu_cores is None and got.net_rx_rate is None and not got.empty


def test_missing_figures_stay_absent_not_zero():
    got = metrics.figures(Reading(at=0.0), Reading(at=10.0))
    assert got.empty
    assert all(getattr(got, m.field) is None for m in metrics.METRIC_TYPES)


def test_no_time_passed_gives_no_rate():
    assert metrics.rate(1, 2, 0.0) is None
    assert metrics.rate(None, 2, 1.0) is None
    assert metrics.rate(2, None, 1.0) is None


@given(
    st.integers(min_value=0, max_value=2**62),
    st.integers(min_value=0, max_value=2**62),
    st.floats(min_value=0.001, max_value=1e6),
)
def test_a_rate_is_never_negative(before, after, seconds):
    got = metrics.rate(before, after, seconds)
    assert (got is None) == (after < before)
    assert got is None or got >= 0


def test_a_sum_over_processes_never_goes_backwards():
    # a process ended between two reads: its bytes are in neither it nor its parent yet
    assert metrics.monotonic_total((100, 50), (80, 60)) == (100, 60)
    assert metrics.monotonic_total(None, (1, 2)) == (1, 2)
    assert metrics.monotonic_total((1, 2), None) is None


# --- kernel text ----------------------------------------------------------------------------

NET_DEV = (  # /proc/net/dev, its columns' spaces squeezed
    "Inter-| Receive | Transmit\n"
    " face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop\n"
    "    lo: 41899 581 0 0 0 0 0 0 41899 581 0 0 0 0 0 0\n"
    "  eth0: 1000 10 0 0 0 0 0 0 250 3 0 0 0 0 0 0\n"
)


def test_it_sums_every_interface_of_the_namespace():
    assert metrics.net_dev_totals(NET_DEV) == (41899 + 1000, 41899 + 250)
    assert metrics.net_dev_totals(NET_DEV.splitlines()[0]) is None
    assert metrics.net_dev_totals("") is None


IO = """rchar: 6976
wchar: 0
syscr: 10
syscw: 0
read_bytes: 4096
write_bytes: 8192
cancelled_write_bytes: 0
"""


def test_it_sums_storage_io_over_the_processes():
    assert metrics.io_totals([IO, IO]) == (8192, 16384)
    assert metrics.io_totals(["garbage", IO]) == (4096, 8192)
    assert metrics.io_totals([]) is None
    assert metrics.io_totals(["rchar: 1\n"]) is None


# --- GPUs: NVML's readings -------------------------------------------------------------------

GIB = 1 << 30
DEVICES = {
    0: GpuReading(index=0, utilization_gpu=90, memory_used=10 * GIB, memory_total=80 * GIB),
    1: GpuReading(index=1, utilization_gpu=30, memory_used=2 * GIB, memory_total=80 * GIB),
    3: GpuReading(index=3, utilization_gpu=0, memory_used=0, memory_total=80 * GIB),
}


def test_a_pods_gpu_figures_are_its_own_gpus_mean_and_sum():
    assert metrics.gpu_figures(DEVICES, "0,1") == (60.0, 12 * GIB)
    assert metrics.gpu_figures(DEVICES, "3") == (0.0, 0)  # idle: a real zero


@pytest.mark.parametrize(
    ("devices", "gpu_ids"),
    [
        (DEVICES, ""),  # a CPU pod
        (None, "0"),  # NVML did not load here
        (DEVICES, "0,2"),  # GPU 2 gave no reading
        (DEVICES, "0,x"),  # not indexes
        ({}, "0"),
    ],
)
def test_gpu_figures_are_absent_where_nvml_cannot_say(devices, gpu_ids):
    assert metrics.gpu_figures(devices, gpu_ids) == (None, None)


class FakeNvml:
    """The pynvml calls the sampler makes, over devices given as (minor, util, used, total);
    a device given as None cannot say (NVMLError_NotSupported)."""

    def __init__(self, devices, *, init_error: Exception | None = None):
        self.devices, self.init_error = devices, init_error

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def _device(self, handle):
        if self.devices[handle] is None:
            raise RuntimeError("Not Supported")
        return self.devices[handle]

    def nvmlDeviceGetMinorNumber(self, handle):
        return self._device(handle)[0]

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=self._device(handle)[1], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        _, _, used, total = self._device(handle)
        return SimpleNamespace(used=used, total=total, free=total - used)


def test_it_keys_nvml_devices_by_minor_number_the_index_a_pod_names():
    # NVML's index 0 is /dev/nvidia1 here: a pod on GPU 1 reads that device
    gpus = sampler.Gpus(FakeNvml([(1, 75, 3 * GIB, 16 * GIB), (0, 5, GIB, 16 * GIB), None]))
    devices = gpus.read()
    assert sorted(devices) == [0, 1]  # the device that cannot say is left out
    assert metrics.gpu_figures(devices, "1") == (75.0, 3 * GIB)
    assert metrics.gpu_figures(devices, "0,1") == (40.0, 4 * GIB)


def test_without_nvml_the_gpu_figures_are_absent():
    gpus = sampler.Gpus(FakeNvml([], init_error=RuntimeError("NVML Shared Library Not Found")))
    assert not gpus.loaded and "Not Found" in gpus.problem
    assert gpus.read() is None
    assert metrics.gpu_figures(gpus.read(), "0") == (None, None)


# --- reading back ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300), ("30s", 30), ("1h", 3600), ("1d", 86400), ("300", 300), (" 15S ", 15)],
)
def test_it_reads_a_time_step(text, seconds):
    assert metrics.parse_time_step(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "0m", "5 m", "-5m", "5w", "1.5m", "５m", "m"])
def test_it_refuses_what_is_not_a_time_step(text):
    with pytest.raises(ValueError):
        metrics.parse_time_step(text)


def test_it_averages_per_step_and_leaves_out_empty_steps():
    points = [(1000.0, 1.0), (1010.0, 3.0), (1065.0, 10.0), (1200.0, 4.0), (990.0, 99.0)]
    assert metrics.downsample(points, start=1000.0, step=60.0) == [
        (1000.0, 2.0),  # 1000 and 1010
        (1060.0, 10.0),
        (1180.0, 4.0),  # 1120–1180 had nothing: no point, not a zero
    ]


@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=1e5), st.floats(min_value=0, max_value=1e6)),
        max_size=200,
    ),
    st.floats(min_value=0.5, max_value=5000),
)
def test_downsampling_keeps_every_point_in_exactly_one_step(points, step):
    out = metrics.downsample(points, start=0.0, step=step)
    assert [t for t, _ in out] == sorted({t for t, _ in out})
    assert len(out) == len({int(t // step) for t, _ in points})
    for t, value in out:
        members = [v for at, v in points if t <= at < t + step]
        assert min(members) - 1e-6 <= value <= max(members) + 1e-6


def test_metric_types_are_pais_names_in_any_case():
    names = [m.name for m in metrics.METRIC_TYPES]
    assert names == [
        "CpuCoreUsage",
        "MemoryUsage",
        "GpuCoreUsage",
        "GpuMemoryUsage",
        "NetworkInputRate",
        "NetworkOutputRate",
        "DiskReadRate",
        "DiskWriteRate",
    ]
    assert metrics.metric_type("cpucoreusage").name == "CpuCoreUsage"
    assert metrics.metric_type("Cpu") is None


# --- the job page's charts ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("unit", "value", "text"),
    [
        ("cores", 1.5, "1.50"),
        ("bytes", 300 * 2**20, "300 MiB"),
        ("bytes", 1.5 * 2**30, "1.5 GiB"),
        ("bytes", 512, "512 B"),
        ("bytes/s", 2048, "2.0 KiB/s"),
        ("percent", 45.4, "45%"),
        ("percent", 0.5, "0.5%"),  # an idle GPU's ticks: not 0%, 0%, 1%
        ("percent", 0, "0%"),
        ("cores", 0.0025, "0.0025"),  # an idle pod's ticks: not 0.00 five times
        ("cores", 0.001, "0.001"),
        ("cores", 0, "0.00"),
    ],
)
def test_it_writes_a_figure_in_its_unit(unit, value, text):
    assert metrics.metric_text(unit, value) == text


def test_a_metric_chart_breaks_its_line_where_samples_are_missing():
    from datetime import UTC, datetime

    from apps.core.charts import metric_chart

    since = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    t0 = since.timestamp()
    points = [(t0 + 15, 1.0), (t0 + 30, 2.0), (t0 + 300, 2.0), (t0 + 315, 0.0)]
    chart = metric_chart(
        [("pod-a", points), ("pod-b", [])],
        since=since,
        until=datetime(2026, 3, 2, 12, 10, tzinfo=UTC),
        gap=45,
    )
    line = chart.lines[0].points.split()
    assert [p[0] for p in line] == ["M", "L", "M", "L"]  # the 270 s without samples: a gap
    assert chart.lines[1].points == ""  # a pod with nothing: no line, not a flat zero
    assert chart.y_ticks[0][1] == "0" and float(chart.y_ticks[-1][1]) >= 2.0  # from zero
    assert chart.lines[0].last == 0


@pytest.mark.parametrize(
    ("unit", "values", "ticks"),
    [
        ("bytes/s", [0.0, 0.0], ["0 B/s", "256 B/s", "512 B/s", "768 B/s", "1.0 KiB/s"]),
        ("bytes", [300 * 2**20], ["0 B", "80.0 MiB", "160 MiB", "240 MiB", "320 MiB"]),
        ("bytes", [3 * 2**30], ["0 B", "819 MiB", "1.6 GiB", "2.4 GiB", "3.2 GiB"]),
    ],
)
def test_a_chart_of_bytes_ticks_round_binary_amounts_that_differ(unit, values, ticks):
    from datetime import UTC, datetime

    from apps.core.charts import metric_chart

    since = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    points = [(since.timestamp() + 15 * (i + 1), v) for i, v in enumerate(values)]
    chart = metric_chart(
        [("pod-a", points)],
        since=since,
        until=datetime(2026, 3, 2, 12, 10, tzinfo=UTC),
        gap=45,
        y_text=lambda v: metrics.metric_text(unit, v),
        binary=True,
    )
    assert [text for _, text in chart.y_ticks] == ticks


def test_a_lone_sample_is_drawn_and_an_idle_pods_ticks_differ():
    from datetime import UTC, datetime

    from apps.core.charts import SERIES_KINDS, metric_chart

    since = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    t0 = since.timestamp()
    chart = metric_chart(
        [("pod-a", [(t0 + 15, 0.002)]), ("pod-b", [(t0 + 15, 0.001), (t0 + 300, 0.003)])],
        since=since,
        until=datetime(2026, 3, 2, 12, 10, tzinfo=UTC),
        gap=45,
        y_text=lambda v: metrics.metric_text("cores", v),
    )
    # a move alone draws nothing: each lone sample is a short dash
    assert all(" h4" in line.points for line in chart.lines), chart.lines
    ticks = [text for _, text in chart.y_ticks]
    assert len(set(ticks)) == 5, ticks
    assert len(SERIES_KINDS) >= 8  # eight pods, eight colours
