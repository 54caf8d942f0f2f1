"""The NVML path of the driver probe. No GPU here, so NVML itself is replaced by a stand-in module with the
functions and error shape of nvidia-ml-py's ``pynvml`` (13.615.71); the library it would load is a real one."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from tfdist.doctor.probe_nvidia import probe_driver
from tfdist.doctor.roots import ProbeRoots


class _Error(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _fake_pynvml(*, init_error: int | None = None) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    module.NVMLError = _Error  # type: ignore[attr-defined]
    calls: list[str] = []

    def init() -> None:
        calls.append("init")
        if init_error is not None:
            raise _Error(init_error)

    memory = types.SimpleNamespace(total=143771 * 1024 * 1024)
    module.nvmlInit = init  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    module.nvmlSystemGetDriverVersion = lambda: "580.95.05"  # type: ignore[attr-defined]
    module.nvmlSystemGetCudaDriverVersion_v2 = lambda: 13000  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    module.nvmlDeviceGetName = lambda h: b"NVIDIA H200"  # type: ignore[attr-defined]
    module.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)  # type: ignore[attr-defined]
    module.nvmlDeviceGetMemoryInfo = lambda h: memory  # type: ignore[attr-defined]
    module.calls = calls  # type: ignore[attr-defined]
    return module


def _a_real_library() -> str:
    for candidate in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6",
                      "/usr/lib64/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"):
        if Path(candidate).exists():
            return candidate
    pytest.skip("no libc.so.6 at a known path to stand in for libnvidia-ml")


def test_nvml_answers_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    roots = ProbeRoots(proc=tmp_path, sys_root=tmp_path, env={"PATH": ""}, nvml_library=_a_real_library())
    driver = probe_driver(roots)
    assert (driver.state, driver.source, driver.driver_version, driver.cuda_driver_version) == (
        "ok", "nvml", "580.95.05", "13.0")
    assert [(g.name, g.compute_capability, g.cc_source, g.memory_mib) for g in driver.gpus] == [
        ("NVIDIA H200", "9.0", "nvml", 143771)] * 2
    assert fake.calls == ["init", "shutdown"]


def test_nvml_driver_not_loaded_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(init_error=9))  # NVML_ERROR_DRIVER_NOT_LOADED
    roots = ProbeRoots(proc=tmp_path, sys_root=tmp_path, env={"PATH": ""}, nvml_library=_a_real_library())
    driver = probe_driver(roots)
    assert driver.state == "not-loaded" and "code 9" in (driver.nvml_error or "")


def test_nvml_version_mismatch_with_proc_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(init_error=18))  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
    (tmp_path / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  510.60.02  Wed Mar 16 11:24:05 UTC 2022\n")
    roots = ProbeRoots(proc=tmp_path, sys_root=tmp_path, env={"PATH": ""}, nvml_library=_a_real_library())
    driver = probe_driver(roots)
    assert (driver.state, driver.kernel_module_version) == ("mismatch", "510.60.02")


def test_an_nvidia_smi_that_cannot_run_is_reported_not_raised(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_bytes(b"\x7fELF\x02\x01\x01 not a real program")
    smi.chmod(0o755)
    roots = ProbeRoots(proc=tmp_path, sys_root=tmp_path, env={"PATH": str(bindir)}, nvml_library=None)
    driver = probe_driver(roots)
    assert driver.state == "error" and driver.nvidia_smi == str(smi) and driver.nvidia_smi_error


def test_driver_loaded_but_no_devices(tmp_path: Path) -> None:
    from tfdist.doctor.core import DoctorConfig, run_doctor

    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n", encoding="utf-8")
    smi.chmod(0o755)
    device = tmp_path / "root" / "sys" / "bus" / "pci" / "devices" / "0000:3b:00.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "class").write_text("0x030200\n")
    roots = ProbeRoots(proc=tmp_path / "proc", sys_root=tmp_path / "root", env={"PATH": str(bindir)}, nvml_library=None,
                       site_dirs=())
    report = run_doctor(DoctorConfig(roots=roots))
    assert report.facts.driver.state == "no-devices"
    found = {f.id: f for f in report.findings}
    assert found["driver-sees-no-gpu"].severity == "error" and found["driver-sees-no-gpu"].fix == "sudo reboot"
    assert report.verdict.exit_status == 1
