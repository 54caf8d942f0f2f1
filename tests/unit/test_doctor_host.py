"""The doctor on this very machine, compared with what the machine really is (found independently of tfdist's
probes: importlib.metadata for the installed distributions, the filesystem for the NVIDIA driver)."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import stat
from pathlib import Path

import pytest

from tfdist.doctor.core import DoctorConfig, run_doctor
from tfdist.doctor.roots import ProbeRoots

HAS_NVIDIA = (
    os.path.exists("/proc/driver/nvidia/version")
    or shutil.which("nvidia-smi") is not None
    or os.path.exists("/dev/nvidia0")
)
TF_DISTS = {"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tf-nightly"}


def _installed_tf_dists() -> set[str]:
    names = set()
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name in TF_DISTS:
            names.add(name)
    return names


@pytest.mark.skipif(HAS_NVIDIA, reason="this machine has an NVIDIA driver; the CPU-only verdict does not apply")
def test_this_machine_runs_tensorflow_on_the_cpu() -> None:
    report = run_doctor(DoctorConfig())
    assert report.facts.driver.state == "absent" and report.facts.driver.gpus == ()
    assert {d.name for d in report.facts.tensorflow.dists} == _installed_tf_dists()
    errors = [f for f in report.findings if f.severity == "error"]
    if _installed_tf_dists():
        assert report.verdict.status == "cpu-only", report.verdict
        assert "CPU" in report.verdict.summary
    else:
        assert report.verdict.status == "no-tensorflow"
    assert errors == [] and report.verdict.exit_status == 0
    # A missing GPU is information here, never a problem.
    gpu_notes = [f for f in report.findings if f.id in ("no-nvidia-gpu", "no-gpu-in-container")]
    assert gpu_notes and all(f.severity == "info" for f in gpu_notes)
    if len(_installed_tf_dists()) > 1:  # e.g. tensorflow-cpu plus the tensorflow that tf-keras pulls in
        assert any(f.id == "several-tensorflow-distributions" for f in report.findings)


@pytest.mark.skipif(HAS_NVIDIA, reason="this machine has an NVIDIA driver")
def test_this_machine_with_expect_gpu_is_a_problem() -> None:
    report = run_doctor(DoctorConfig(expect_gpu=True))
    assert report.verdict.status == "problems" and report.verdict.exit_status == 1
    assert any(f.id in ("no-nvidia-gpu", "no-gpu-in-container") and f.severity == "error" for f in report.findings)


def test_without_nvml_the_doctor_falls_back_to_nvidia_smi_on_path(tmp_path: Path) -> None:
    """NVML is tried with the real library name; where it cannot be loaded, the nvidia-smi found on PATH answers."""
    roots = ProbeRoots()
    from tfdist.doctor.probe_nvidia import _probe_nvml

    nvml, _ = _probe_nvml(roots, None)
    if nvml is not None and "driver" in nvml:
        pytest.skip("NVML works on this machine, so there is nothing to fall back from")
    smi = tmp_path / "nvidia-smi"
    header = Path(__file__).resolve().parents[1] / "fixtures" / "doctor" / "nvidia-smi" / "a100_550.127.08.txt"
    smi.write_text(
        "#!/bin/sh\ncase \"$*\" in\n  *--query-gpu=*) echo '0, NVIDIA A100-SXM4-80GB, 550.127.08, 8.0, 81920';;\n"
        f"  *) /bin/cat '{header}';;\nesac\n",
        encoding="utf-8",
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    report = run_doctor(DoctorConfig(roots=ProbeRoots(env=env)))
    driver = report.facts.driver
    assert driver.source == "nvidia-smi" and driver.nvidia_smi == str(smi)
    assert driver.nvml_error  # why NVML was not used is on record
    assert (driver.driver_version, driver.cuda_driver_version) == ("550.127.08", "12.4")
    assert [(g.name, g.compute_capability) for g in driver.gpus] == [("NVIDIA A100-SXM4-80GB", "8.0")]
