"""The XLA toolchain probe and checks: XLA_FLAGS parsing, the candidate roots per TensorFlow release (matched to the
lists users posted), ``ptxas --version`` against hostile binaries, and the pure ptxas/libdevice rules."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tfdist.doctor.checks.xla import check_xla
from tfdist.doctor.context import build_context
from tfdist.doctor.facts import (
    CudaRoot,
    Distribution,
    DriverFacts,
    Facts,
    Gpu,
    LibraryFacts,
    Ptxas,
    SystemFacts,
    TensorFlowFacts,
    XlaFacts,
)
from tfdist.doctor.probe_xla import candidate_roots, parse_xla_flags, run_version
from tfdist.doctor.roots import ProbeRoots
from tfdist.doctor.verify import xla_findings


@pytest.mark.parametrize(
    "text, value, error",
    [
        (None, None, False),
        ("", None, False),
        ("--xla_gpu_cuda_data_dir=/usr/local/cuda-12.3", "/usr/local/cuda-12.3", False),
        ("--xla_gpu_cuda_data_dir /opt/cuda --xla_dump_to=/tmp/x", "/opt/cuda", False),
        ("--xla_gpu_cuda_data_dir='/home/me/my env'", "/home/me/my env", False),
        ("--xla_gpu_cuda_data_dir=/a --xla_gpu_cuda_data_dir=/b", "/b", False),  # the last one wins
        ("--xla_gpu_autotune_level=0", None, False),
        ('--xla_gpu_cuda_data_dir="/a', "/a", True),  # unbalanced quote: reported, still read
    ],
)
def test_parse_xla_flags(text: str | None, value: str | None, error: bool) -> None:
    got, problem = parse_xla_flags(text)
    assert got == value
    assert (problem is not None) is error


def _script(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_ptxas_version_from_real_output(tmp_path: Path) -> None:
    path = _script(tmp_path, "ptxas", "echo 'ptxas: NVIDIA (R) Ptx optimizing assembler'\n"
                   "echo 'Cuda compilation tools, release 12.5, V12.5.82'")
    assert run_version(path, 5.0, dict(os.environ)) == ("12.5.82", None)


@pytest.mark.parametrize(
    "body, reason",
    [
        ("sleep 30", "no answer within"),
        ("exec >&-; sleep 30", "no answer within"),  # closes its output, then hangs
        ("yes V1.2.3", "KiB of output"),  # endless output, even with a version in it
        ("head -c 2000 /dev/urandom", "no version in its output"),
        ("echo V12.0.1; exit 3", "exit status 3"),
        ("echo 'release 12.5'", "no version in its output"),  # XLA wants V<major>.<minor>.<patch>
    ],
)
def test_ptxas_version_survives_hostile_binaries(tmp_path: Path, body: str, reason: str) -> None:
    version, why = run_version(_script(tmp_path, "ptxas", body), 1.0, dict(os.environ))
    assert version is None and why is not None and reason in why
    assert all(c.isprintable() for c in why)


def test_ptxas_that_is_not_a_program(tmp_path: Path) -> None:
    path = tmp_path / "ptxas"
    path.write_bytes(b"\x7fELF")
    path.chmod(0o755)
    version, why = run_version(str(path), 1.0, dict(os.environ))
    assert version is None and why is not None and why.startswith("could not run it")


# The "Searched for CUDA in the following directories" lists users posted, per release (see xla_toolchain.json).
@pytest.mark.parametrize(
    "tf, cuda, expected",
    [
        ("2.11.0", "11.2", ["./cuda_sdk_lib", "/usr/local/cuda-11.2", "/usr/local/cuda", "."]),  # tensorflow#58859
        ("2.12.0", "11.8", ["./cuda_sdk_lib", "/usr/local/cuda-11.8", "/usr/local/cuda", "."]),  # tensorflow#60790
        (
            "2.15.0",
            "12.2",  # iot-salzburg/gpu-jupyter#129
            ["./cuda_sdk_lib", "/usr/local/cuda-12.2", "/usr/local/cuda", "{site}/nvidia/cuda_nvcc", "{lib}/nvidia/cuda_nvcc", "."],
        ),
        (
            "2.18.0",
            "12.5.1",  # conda-forge/tensorflow-feedstock#420 (its runfiles entries are relative to the working dir)
            ["./cuda_sdk_lib", "/usr/local/cuda", "{site}/nvidia/cuda_nvcc", "{lib}/nvidia/cuda_nvcc", "{site}/tensorflow/cuda", "."],
        ),
        (
            "2.21.0",
            "12.5.1",  # tsl cuda_root_path.cc and the strings of the 2.21 wheel
            [
                "./cuda_sdk_lib", "/usr/local/cuda", "/opt/cuda", "{site}/nvidia/cuda_nvcc", "{lib}/nvidia/cuda_nvcc",
                "{site}/tensorflow/cuda", "{prefix}", "{above}", ".",
            ],
        ),
    ],
)
def test_candidate_roots_follow_each_release(tf: str, cuda: str, expected: list[str]) -> None:
    site = "/opt/conda/lib/python3.11/site-packages"
    roots = ProbeRoots(sys_root=Path("/"))
    got = [path for path, _ in candidate_roots(roots, tf, f"{site}/tensorflow", cuda, None)]
    names = {"{site}": site, "{lib}": "/opt/conda/lib/python3.11", "{prefix}": "/opt/conda", "{above}": "/opt"}
    want = []
    for item in expected:
        for key, value in names.items():
            item = item.replace(key, value)
        want.append(item)
    assert got == want


def test_xla_flags_dir_comes_first() -> None:
    got = candidate_roots(ProbeRoots(), "2.21.0", "/x/tensorflow", "12.5", "/data/cuda")
    assert got[0] == ("/data/cuda", "XLA_FLAGS --xla_gpu_cuda_data_dir") and got[-1][0] == "."


def _facts(*, tf: str = "2.18.0", cuda: str = "12.5.1", driver_cuda: str | None = "12.4", gpus: bool = True,
           xla: XlaFacts) -> Facts:
    return Facts(
        system=SystemFacts(platform="linux", machine="x86_64", python_version="3.11.9"),
        driver=DriverFacts(
            state="ok" if gpus else "absent",
            driver_version="550.90.07" if gpus else None,
            cuda_driver_version=driver_cuda if gpus else None,
            gpus=(Gpu(0, "NVIDIA GeForce RTX 4090", "8.9", "nvml"),) if gpus else (),
        ),
        libraries=LibraryFacts(),
        tensorflow=TensorFlowFacts(
            dists=(Distribution("tensorflow", tf, "/site"),),
            package_dir="/site/tensorflow",
            build_info={"is_cuda_build": True, "cuda_version": cuda},
        ),
        xla=xla,
    )


_WHEEL = CudaRoot("/site/nvidia/cuda_nvcc", "wheel", True, True, True)


def _ids(facts: Facts, **kwargs: bool) -> dict[str, str]:
    return {f.id: f.severity for f in check_xla(build_context(facts, **kwargs))}


@pytest.mark.parametrize(
    "ptxas, driver_cuda, expected",
    [
        ("12.5.82", "12.8", {}),  # healthy
        ("12.5.82", "12.4", {"xla-ptxas-newer-than-driver": "warning"}),  # XLA disables parallel compilation
        ("13.0.88", "12.8", {"xla-ptxas-newer-than-driver": "error"}),  # another CUDA major: the driver cannot load it
        ("12.5.82", "11.4", {}),  # the driver cannot run TF 2.18 at all: the driver check's finding
        ("11.5.119", "12.8", {"xla-ptxas-too-old": "error"}),  # CUDA 11 ptxas, CUDA 12 PTX
    ],
)
def test_ptxas_rules(ptxas: str, driver_cuda: str, expected: dict[str, str]) -> None:
    xla = XlaFacts(probed=True, roots=(_WHEEL,), libdevice_root=_WHEEL.path,
                   ptxas=Ptxas("/usr/bin/ptxas", "PATH", ptxas, "ptxas --version"))
    assert _ids(_facts(driver_cuda=driver_cuda, xla=xla)) == expected


def test_missing_libdevice_is_information_without_a_gpu_and_an_error_with_one() -> None:
    empty = CudaRoot("/usr/local/cuda", "/usr/local/cuda")
    xla = XlaFacts(probed=True, roots=(CudaRoot("./cuda_sdk_lib", "default"), empty, CudaRoot(".", "cwd")))
    assert _ids(_facts(gpus=False, xla=xla)) == {"xla-libdevice-missing": "info"}
    assert _ids(_facts(gpus=False, xla=xla), expect_gpu=True)["xla-libdevice-missing"] == "error"
    assert _ids(_facts(xla=xla))["xla-libdevice-missing"] == "error"
    # Before 2.11 Keras does not compile with XLA by default: only jit_compile=True code breaks.
    assert _ids(_facts(tf="2.10.0", cuda="11.2", xla=xla))["xla-libdevice-missing"] == "warning"


def test_libdevice_fix_names_a_folder_that_has_it() -> None:
    elsewhere = CudaRoot("/usr/local/cuda-12.6", "installed CUDA toolkits", True, True, True)
    xla = XlaFacts(probed=True, roots=(CudaRoot("./cuda_sdk_lib", "default"), CudaRoot(".", "cwd")), elsewhere=(elsewhere,),
                   xla_flags="--xla_gpu_autotune_level=0")
    finding = check_xla(build_context(_facts(xla=xla)))[0]
    assert finding.fix == "export XLA_FLAGS='--xla_gpu_autotune_level=0 --xla_gpu_cuda_data_dir=/usr/local/cuda-12.6'"
    assert any("jit_compile=False" in a for a in finding.alternatives)  # Keras 3 (TF >= 2.16) workaround


def test_xla_flags_naming_the_libdevice_folder_itself() -> None:
    data = CudaRoot("/usr/local/cuda/nvvm/libdevice", "XLA_FLAGS --xla_gpu_cuda_data_dir")
    xla = XlaFacts(probed=True, data_dir=data.path, roots=(data, CudaRoot(".", "cwd")))
    finding = check_xla(build_context(_facts(xla=xla)))[0]
    assert finding.id == "xla-flags-data-dir-no-libdevice"
    assert finding.fix == "export XLA_FLAGS=--xla_gpu_cuda_data_dir=/usr/local/cuda"


def test_verify_reports_xla_outcome_next_to_the_prediction() -> None:
    predicted = ("error xla-libdevice-missing: XLA on TensorFlow 2.18.0 finds no libdevice",)
    failed = xla_findings({"ran": True, "ok": False, "error": "libdevice not found at ./libdevice.10.bc"}, predicted)
    assert failed[0].id == "xla-compile-failed" and failed[0].severity == "error"
    assert any("doctor predicted: error xla-libdevice-missing" in e for e in failed[0].evidence)
    assert xla_findings({"ran": True, "ok": True}, predicted)[0].id == "xla-prediction-wrong"
    assert xla_findings({"ran": True, "ok": True}, ()) == []
    assert xla_findings({"ran": False, "reason": "TensorFlow lists no GPU"}, predicted) == []


def test_fix_line_survives_a_folder_with_spaces() -> None:
    import shlex

    elsewhere = CudaRoot("/opt/my cuda", "$CUDA_HOME", True, True, True)
    xla = XlaFacts(probed=True, roots=(CudaRoot("./cuda_sdk_lib", "default"), CudaRoot(".", "cwd")), elsewhere=(elsewhere,))
    fix = check_xla(build_context(_facts(xla=xla)))[0].fix or ""
    assert shlex.split(fix) == ["export", "XLA_FLAGS=--xla_gpu_cuda_data_dir=/opt/my cuda"]


def _builder():  # the scenario builder (tests/fixtures/doctor/builder.py)
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "fixtures" / "doctor" / "builder.py"
    spec = importlib.util.spec_from_file_location("doctor_fixture_builder_xla", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("tf, wheel, picked", [("2.15.0", "tensorflow-2.15.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "/usr/bin/ptxas"),
                                               ("2.18.0", "tensorflow-2.18.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "cuda_nvcc/bin/ptxas")])
def test_newer_xla_skips_a_ptxas_older_than_11_8(tmp_path: Path, tf: str, wheel: str, picked: str) -> None:
    from tfdist.doctor.core import collect_facts

    machine = {
        "ptxas": {"/usr/bin/ptxas": "11.5.119"},
        "env": {"PATH": "{root}/usr/bin"},
        "site": {"dists": {"tensorflow": tf, "nvidia-cuda-nvcc-cu12": "12.5.82"}, "build_info": wheel,
                 "nvidia_libs": {"cuda_nvcc": ["ptxas", "nvvm/libdevice/libdevice.10.bc"]}},
    }
    facts = collect_facts(_builder().build_machine(tmp_path, "ptxas-order", machine))
    ptxas = facts.xla.ptxas
    assert ptxas is not None and ptxas.path.endswith(picked)
    assert bool(ptxas.skipped) == (tf == "2.18.0")  # 2.18+ says why it passed over /usr/bin/ptxas


def test_nvcc_package_for_another_cuda_major() -> None:
    from dataclasses import replace

    from tfdist.doctor.facts import CondaFacts, CondaPackage

    xla = XlaFacts(probed=True, roots=(_WHEEL,), libdevice_root=_WHEEL.path,
                   ptxas=Ptxas("/site/nvidia/cuda_nvcc/bin/ptxas", "wheel", "12.5.82", "ptxas --version"))
    facts = _facts(driver_cuda="12.8", xla=xla)
    assert _ids(facts) == {}
    pip_cu11 = replace(facts, tensorflow=replace(facts.tensorflow, nvidia_wheels={"nvidia-cuda-nvcc-cu11": "11.8.89"}))
    finding = check_xla(build_context(pip_cu11))[0]
    assert finding.id == "xla-nvcc-wheel-mismatch" and finding.fix == (
        "pip uninstall -y nvidia-cuda-nvcc-cu11 && pip install 'nvidia-cuda-nvcc-cu12==12.5.82'"
    )
    conda_cu11 = replace(facts, conda=CondaFacts(prefix="/env", packages=(CondaPackage("cuda-nvcc", "11.3.58", channel="nvidia"),)))
    assert _ids(conda_cu11) == {"xla-nvcc-wheel-mismatch": "warning"}
