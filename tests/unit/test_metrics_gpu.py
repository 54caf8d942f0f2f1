"""The NVML collector against NVML-shaped fixtures, and against the real NVML where a GPU exists."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.fixtures.nvml.fake_nvml import FakeNvml
from tfdist.deploy.monitor import dashboard_queries
from tfdist.runtime import gpu_metrics as g

H100 = {"gpu": "0", "UUID": "GPU-5e0b3c4d-9f1a-4e6b-8a7c-1d2e3f405162", "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu-node-1",
        "DCGM_FI_DRIVER_VERSION": "570.124.06"}
V100 = {**H100, "gpu": "1", "UUID": "GPU-a1b2c3d4-0000-1111-2222-333344445555", "pci_bus_id": "00000000:86:00.0",
        "device": "nvidia3", "modelName": "Tesla V100-SXM2-16GB"}


def _registry(collector: g.NvmlCollector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    return registry


@pytest.fixture
def registry() -> CollectorRegistry:
    return _registry(g.NvmlCollector(FakeNvml(), hostname="gpu-node-1"))


def test_dcgm_names_labels_and_units(registry: CollectorRegistry) -> None:
    value = registry.get_sample_value
    assert value("DCGM_FI_DEV_GPU_UTIL", H100) == 87
    assert value("DCGM_FI_DEV_MEM_COPY_UTIL", H100) == 41
    assert value("DCGM_FI_DEV_FB_USED", H100) == 73014444032 / 2**20  # bytes -> MiB, as DCGM reports it
    assert value("DCGM_FI_DEV_FB_FREE", H100) == 10240
    assert value("DCGM_FI_DEV_FB_RESERVED", H100) == 1688
    assert value("DCGM_FI_DEV_POWER_USAGE", H100) == pytest.approx(612.345)  # mW -> W
    assert value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", H100) == 987654321012  # mJ, as DCGM
    assert value("DCGM_FI_DEV_GPU_TEMP", H100) == 64
    assert value("DCGM_FI_DEV_SM_CLOCK", H100) == 1980 and value("DCGM_FI_DEV_MEM_CLOCK", H100) == 2619
    assert value("DCGM_FI_PROF_PCIE_TX_BYTES", H100) == 20480 * 1024  # KB/s -> bytes/s
    assert value("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", H100) == 1
    assert value("DCGM_FI_DEV_ENC_UTIL", H100) == 0 and value("DCGM_FI_DEV_DEC_UTIL", H100) == 3
    assert value("DCGM_FI_DEV_GPU_UTIL", V100) == 5  # bytes/str answers decoded, minor number -> device


def test_unsupported_fields_are_left_out_not_zero(registry: CollectorRegistry) -> None:
    value = registry.get_sample_value
    for name in ("DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
                 "DCGM_FI_DEV_FB_RESERVED",  # no v2 memory call on the old driver
                 "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"):  # NVML's "not available" value
        assert value(name, V100) is None, name
    assert value("DCGM_FI_DEV_FB_USED", V100) == 1024  # the v1 memory call still answers


def test_every_series_carries_exactly_the_dcgm_labels(registry: CollectorRegistry) -> None:
    families = list(registry.collect())
    assert {f.name for f in families} == {f.name for f in g.FIELDS}
    for family in families:
        for sample in family.samples:
            assert tuple(sorted(sample.labels)) == tuple(sorted(g.GPU_LABELS)), sample


def test_visible_devices_limit_what_a_task_exports() -> None:
    assert g.visible_gpus({}) is None
    assert g.visible_gpus({"CUDA_VISIBLE_DEVICES": "1,0"}) == (frozenset({0, 1}), ())
    assert g.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == (frozenset(), ())
    assert g.visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,1"}) == (frozenset({0}), ())  # CUDA stops at -1
    second = g.visible_gpus({"CUDA_VISIBLE_DEVICES": "1"})
    only_second = g.NvmlCollector(FakeNvml(), hostname="gpu-node-1", visible=second)
    assert only_second.device_count == 1
    reg = _registry(only_second)
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_UTIL", V100) == 5
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_UTIL", H100) is None
    by_uuid = g.NvmlCollector(FakeNvml(), visible=g.visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-5e0b3c4d"}))
    assert by_uuid.device_count == 1
    assert g.NvmlCollector(FakeNvml(), visible=g.visible_gpus({"CUDA_VISIBLE_DEVICES": ""})).device_count == 0


def test_nvml_is_read_at_scrape_time_only() -> None:
    nvml = FakeNvml()
    collector = g.NvmlCollector(nvml, hostname="gpu-node-1")
    assert nvml.calls == []  # construction reads identity only
    nvml.data["devices"][0]["utilization"]["gpu"] = 12
    assert _registry(collector).get_sample_value("DCGM_FI_DEV_GPU_UTIL", H100) == 12


def test_dashboard_gpu_panels_query_exported_names() -> None:
    exported = {f.name for f in g.FIELDS}
    gpu_queries = [q for q in dashboard_queries() if "DCGM_" in q]
    assert gpu_queries
    for query in gpu_queries:
        names = set(re.findall(r"DCGM_[A-Z_]+", query))
        assert names <= exported, query
        # The filter of dcgm-exporter's own dashboard (12239), so one dashboard serves both exporters.
        assert 'instance=~"$instance", gpu=~"$gpu"' in query


@pytest.mark.prometheus
def test_promtool_reports_only_the_dcgm_naming_it_must_keep(registry: CollectorRegistry) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian package prometheus, installed by .ci/system-deps.sh) is not installed")
    result = subprocess.run([promtool, "check", "metrics"], input=generate_latest(registry), capture_output=True,
                            timeout=30)
    findings = [line for line in (result.stdout + result.stderr).decode().splitlines() if line.strip()]
    assert findings, "expected the camelCase DCGM labels to be reported"
    allowed = re.compile(r"^DCGM_FI_[A-Z_]+ (label names should be written in 'snake_case' not 'camelCase'|"
                         r"metric name should not include type 'counter')$")
    assert [line for line in findings if not allowed.match(line)] == []
    # Without GPUs the page is clean: that case is covered in test_metrics.py.


def test_real_nvml() -> None:
    """On a GPU machine the collector reads the real device; elsewhere nvml_collector answers None, not an error."""
    import pynvml

    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError:
        assert g.nvml_collector({}) is None
        pytest.skip("no NVIDIA driver here (NVML cannot initialise); checked that the collector stays off")
    collector = g.nvml_collector({})
    assert collector is not None and collector.device_count == count
    text = generate_latest(_registry(collector)).decode()
    assert re.search(r'^DCGM_FI_DEV_FB_USED\{.*gpu="0".*\} \d', text, re.M), text
    assert 'UUID="GPU-' in text
