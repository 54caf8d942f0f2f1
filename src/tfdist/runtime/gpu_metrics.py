"""GPU metrics read through NVML, exported under NVIDIA dcgm-exporter's metric names and labels.

Keeping the ``DCGM_FI_*`` names and the ``gpu``/``UUID``/``pci_bus_id``/``device``/``modelName``/``Hostname`` labels
means the dcgm-exporter Grafana dashboard (grafana.com 12239) and any alert rules written for it work unchanged on
a task's ``/metrics``. Those names break Prometheus' naming conventions on purpose; tfdist's own metrics follow them.
``promtool check metrics`` therefore reports, for these series only, what it reports for dcgm-exporter itself:
camelCase label names (``UUID``, ``modelName``, ``Hostname``...) and a ``counter`` in ``PCIE_REPLAY_COUNTER``.

NVML is read at scrape time only (nothing runs between scrapes) through the ``pynvml`` module of nvidia-ml-py, or
any object with the same function surface (the tests pass NVML-shaped fixtures). Each field is read on its own:
a field the GPU does not support (``NVMLError_NotSupported``) is left out, never reported as 0.

Not exported, because NVML has no cheap classic call for them: ``DCGM_FI_PROF_*`` engine activity (DCP/GPM),
``DCGM_FI_DEV_XID_ERRORS`` (needs an event set), ``DCGM_FI_DEV_MEMORY_TEMP`` and NVLink bandwidth (field-value API).
"""
from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

# NVML's "value not available" (-1 as an unsigned int / long long) and DCGM's blank sentinels (>= 2**63 - 14).
_NOT_AVAILABLE = {2**32 - 1, 2**64 - 1}
_DCGM_BLANK_FLOOR = 9223372036854775794
_MIB = 1024 * 1024

# Label names exactly as dcgm-exporter writes them (see operations.md §1.1).
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")


@dataclass(frozen=True)
class GpuField:
    """One exported DCGM field and how to read it from NVML.

    Attributes:
        name: the DCGM field name used as metric name.
        kind: ``gauge``, or ``counter`` for dcgm-exporter's counters (exposed untyped, see ``_family``).
        help: help text, with the unit dcgm-exporter uses.
        read: ``read(nvml, handle) -> number | None``; raises ``nvml.NVMLError`` (or returns None) when the
            field is unsupported.
    """

    name: str
    kind: str
    help: str
    read: Callable[[Any, Any], float | None]


def _memory(nvml: Any, handle: Any) -> Any:
    # The v2 structure also carries `reserved`; older drivers only answer the v1 call.
    try:
        return nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    except (nvml.NVMLError, AttributeError, TypeError):
        return nvml.nvmlDeviceGetMemoryInfo(handle)


def _reserved_mib(nvml: Any, handle: Any) -> float | None:
    # Only the v2 structure has `reserved`; None leaves the field out.
    reserved = getattr(_memory(nvml, handle), "reserved", None)
    return None if reserved is None else reserved / _MIB


FIELDS: tuple[GpuField, ...] = (
    GpuField("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).",
             lambda n, h: n.nvmlDeviceGetUtilizationRates(h).gpu),
    GpuField("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
             lambda n, h: n.nvmlDeviceGetUtilizationRates(h).memory),
    GpuField("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).",
             lambda n, h: n.nvmlDeviceGetEncoderUtilization(h)[0]),
    GpuField("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).",
             lambda n, h: n.nvmlDeviceGetDecoderUtilization(h)[0]),
    GpuField("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
             lambda n, h: _memory(n, h).free / _MIB),
    GpuField("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
             lambda n, h: _memory(n, h).used / _MIB),
    GpuField("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).",
             lambda n, h: _reserved_mib(n, h)),
    GpuField("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).",
             lambda n, h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
    GpuField("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).",
             lambda n, h: n.nvmlDeviceGetPowerUsage(h) / 1000.0),  # NVML reports mW
    GpuField("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).",
             lambda n, h: n.nvmlDeviceGetTotalEnergyConsumption(h)),
    GpuField("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).",
             lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
    GpuField("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).",
             lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
    GpuField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.",
             lambda n, h: n.nvmlDeviceGetPcieReplayCounter(h)),
    GpuField("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors",
             lambda n, h: n.nvmlDeviceGetRemappedRows(h)[0]),
    GpuField("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
             "Number of remapped rows for uncorrectable errors",
             lambda n, h: n.nvmlDeviceGetRemappedRows(h)[1]),
    GpuField("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed",
             lambda n, h: n.nvmlDeviceGetRemappedRows(h)[3]),
    # NVML samples PCIe throughput over 20 ms and reports KB/s; DCGM's profiling fields are bytes/s.
    GpuField("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus (bytes/s).",
             lambda n, h: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES) * 1024.0),
    GpuField("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus (bytes/s).",
             lambda n, h: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES) * 1024.0),
)


def _text(value: Any) -> str:
    # nvidia-ml-py returns str from some calls and bytes from others, depending on its version.
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_gpus(environ: Mapping[str, str]) -> tuple[frozenset[int], tuple[str, ...]] | None:
    """Which GPUs this task may use, from ``CUDA_VISIBLE_DEVICES``.

    Returns:
        ``None`` when the variable is unset (all GPUs), else ``(indices, uuid_prefixes)``; both empty means none.
        Indices are NVML's (PCI bus order), which match CUDA's only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
    """
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    indices: set[int] = set()
    uuids: list[str] = []
    for token in (t.strip() for t in raw.split(",")):
        if token.isascii() and token.isdigit() and len(token) <= 9:  # no '²', no 5000-digit int()
            indices.add(int(token))
        elif token.startswith("GPU-"):
            uuids.append(token)
        else:
            break  # CUDA stops at the first invalid entry ("-1", "NoDevFiles", "")
    return frozenset(indices), tuple(uuids)


@dataclass(frozen=True)
class _Device:
    handle: Any
    labels: tuple[str, ...]


class NvmlCollector(Collector):
    """A Prometheus collector reading the task's GPUs through NVML at each scrape.

    Args:
        nvml: the ``pynvml`` module (or an object with its functions, constants and ``NVMLError``), initialised.
        hostname: the ``Hostname`` label.
        visible: from :func:`visible_gpus`; ``None`` exports every GPU NVML lists.
    """

    def __init__(self, nvml: Any, *, hostname: str | None = None,
                 visible: tuple[frozenset[int], tuple[str, ...]] | None = None) -> None:
        self._nvml = nvml
        hostname = hostname or socket.gethostname()
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            driver = ""
        self._devices: list[_Device] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            if visible is not None and index not in visible[0] and not any(uuid.startswith(p) for p in visible[1]):
                continue
            try:
                device = f"nvidia{nvml.nvmlDeviceGetMinorNumber(handle)}"
            except nvml.NVMLError:
                device = f"nvidia{index}"
            try:
                bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            except nvml.NVMLError:
                bus_id = ""
            name = _text(nvml.nvmlDeviceGetName(handle))
            self._devices.append(_Device(handle, (str(index), uuid, bus_id, device, name, hostname, driver)))

    @property
    def device_count(self) -> int:
        """How many GPUs this collector exports."""
        return len(self._devices)

    def collect(self) -> Iterator[Metric]:
        """Read every field of every device; leave out what the device does not support."""
        for field in FIELDS:
            family = _family(field)
            for device in self._devices:
                try:
                    raw = field.read(self._nvml, device.handle)
                except self._nvml.NVMLError as unsupported:
                    log.debug("%s unsupported on GPU %s: %s", field.name, device.labels[0], unsupported)
                    continue
                if raw is None:
                    continue
                value = float(raw)
                if value in _NOT_AVAILABLE or value >= _DCGM_BLANK_FLOOR:
                    continue
                family.add_sample(field.name, dict(zip(GPU_LABELS, device.labels)), value)
            if family.samples:
                yield family


def _family(field: GpuField) -> Metric:
    # dcgm-exporter's counters have no `_total` suffix; the Python client's text writer would append one to a
    # counter's TYPE line, so they are exposed untyped, which keeps the names Grafana queries identical.
    return Metric(field.name, field.help, "gauge" if field.kind == "gauge" else "unknown")


def nvml_collector(environ: Mapping[str, str], *, hostname: str | None = None) -> NvmlCollector | None:
    """An :class:`NvmlCollector` for the GPUs this task sees, or ``None`` where NVML or a GPU is missing."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as missing:  # no driver / no libnvidia-ml: a CPU machine
        log.debug("NVML unavailable: %s", missing)
        return None
    try:
        collector = NvmlCollector(pynvml, hostname=hostname, visible=visible_gpus(environ))
    except pynvml.NVMLError as failure:
        log.warning("NVML initialised but listing GPUs failed: %s", failure)
        return None
    return collector if collector.device_count else None
