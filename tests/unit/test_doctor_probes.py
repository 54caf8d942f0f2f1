"""Parsers and rules of the doctor, checked against real artefacts: build_info.py bodies of 30 official wheels,
captured nvidia-smi and /proc text, TensorFlow log lines quoted in issues."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tfdist.compat import tables as compat
from tfdist.doctor.pipconf import configured_index_url
from tfdist.doctor.probe_libs import _interesting, _prefixes, file_version, pip_component
from tfdist.doctor.probe_nvidia import _HEADER_CUDA, _HEADER_DRIVER, kernel_module_version, parse_query
from tfdist.doctor.probe_packages import installed_distributions, parse_build_info
from tfdist.doctor.recommend import cc_support, install_command, officially_unsupported
from tfdist.doctor.roots import ProbeRoots
from tfdist.doctor.verify import findings_from, match_log
from tfdist.compat.versions import at_least, minor_of, vtuple

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "doctor"
BODIES = json.loads((FIXTURES / "build_info_bodies.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("wheel", sorted(BODIES))
def test_build_info_of_every_official_wheel(wheel: str) -> None:
    shape, info = parse_build_info(BODIES[wheel]["body"])
    version = vtuple(wheel.split("-")[1])
    expected_shape = "module-assignments" if version < (2, 3) else ("dict" if version < (2, 4) else "ordered-dict")
    if wheel.startswith("tensorflow_cpu"):
        expected_shape = "ordered-dict"
    assert shape == expected_shape
    cpu_only = wheel.startswith("tensorflow_cpu") or wheel.startswith("tensorflow-2.0.0")
    assert info["is_cuda_build"] is (not cpu_only)
    if not cpu_only:
        build = compat.tf_build(minor_of(wheel.split("-")[1]))
        assert str(info["cuda_version"]) == build.cuda_full  # the data file agrees with the wheel itself
        assert tuple(info.get("cuda_compute_capabilities", ())) == build.compute_capabilities


def test_build_info_that_is_not_one_is_rejected() -> None:
    with pytest.raises(ValueError):
        parse_build_info("x = 1 +")  # not even Python
    with pytest.raises(ValueError):
        parse_build_info("import os\nprint('hello')\n")


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ((FIXTURES / "proc" / "open_580.95.05.txt").read_text(), "580.95.05"),
        ((FIXTURES / "proc" / "proprietary_510.60.02.txt").read_text(), "510.60.02"),
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.135  Fri Jan 10 20:00:00 UTC 2025", "550.135"),
        ("", None),
        (None, None),
    ],
)
def test_kernel_module_version(text: str | None, version: str | None) -> None:
    assert kernel_module_version(text) == version


@pytest.mark.parametrize(
    ("capture", "driver", "cuda"),
    [
        ("h200_580.95.05.txt", "580.95.05", "13.0"),
        ("a100_550.127.08.txt", "550.127.08", "12.4"),
        ("rtx4090_550.90.07.txt", "550.90.07", "12.4"),
        ("rtx5090_610.43.02.txt", "610.43.02", "13.3"),  # R610 header: "KMD Version" / "CUDA UMD Version"
        ("wsl_rtx5090_581.80.txt", "581.80", "13.0"),  # WSL2: the Windows driver's version
        ("rtx3090_455.23.05.txt", "455.23.05", "11.1"),
    ],
)
def test_nvidia_smi_headers(capture: str, driver: str, cuda: str) -> None:
    text = (FIXTURES / "nvidia-smi" / capture).read_text()
    match_driver, match_cuda = _HEADER_DRIVER.search(text), _HEADER_CUDA.search(text)
    assert match_driver and match_driver.group(1) == driver
    assert match_cuda and match_cuda.group(1) == cuda


def test_query_output_with_and_without_compute_capability() -> None:
    gpus = parse_query("0, NVIDIA H200, 580.95.05, 9.0, 143771\n1, NVIDIA H200, 580.95.05, 9.0, 143771\n")
    assert [(g.index, g.name, g.compute_capability, g.cc_source, g.memory_mib) for g in gpus] == [
        (0, "NVIDIA H200", "9.0", "nvidia-smi", 143771),
        (1, "NVIDIA H200", "9.0", "nvidia-smi", 143771),
    ]
    old = parse_query("0, Tesla K80, 470.82.01, 11441\n")  # R470: no compute_cap column, the name table fills it
    assert (old[0].compute_capability, old[0].cc_source) == ("3.7", "name-table")
    assert parse_query('Field "compute_cap" is not a valid field to query.\n') == []


@pytest.mark.parametrize(
    ("cc", "tf", "support"),
    [
        ("9.0", "2.21", "ptx"),  # Hopper: compute_90 PTX only
        ("8.0", "2.17", "sass"),
        ("8.6", "2.21", "sass"),  # sm_80 code runs on 8.6
        ("8.0", "2.15", "ptx"),  # 2.15 has no sm_80, only compute_80
        ("7.5", "2.16", "sass"),  # sm_70 runs on Turing
        ("3.7", "2.15", "none"),  # Kepler dropped in 2.15
        ("3.7", "2.14", "sass"),
        ("5.2", "2.17", "none"),  # Maxwell dropped in 2.17
        ("6.0", "2.0", "unknown"),  # not recorded in 2.0's build_info
    ],
)
def test_compute_capability_support(cc: str, tf: str, support: str) -> None:
    assert cc_support(cc, compat.tf_build(tf).compute_capabilities) == support


def test_blackwell_is_officially_unsupported_up_to_221() -> None:
    assert officially_unsupported("12.0", "2.21") and officially_unsupported("10.0", "2.20.0")
    assert not officially_unsupported("9.0", "2.21")
    assert not officially_unsupported("12.0", "2.22")  # a later release is not prejudged


def test_install_commands() -> None:
    assert install_command("2.21", gpu=True) == "pip install 'tensorflow[and-cuda]==2.21.*' 'tf-keras==2.21.*'"
    assert install_command("2.15.1", gpu=True) == "pip install 'tensorflow[and-cuda]==2.15.*'"
    assert install_command("2.13", gpu=True) == "pip install 'tensorflow==2.13.*'"
    assert install_command("2.0", gpu=True) == "pip install 'tensorflow-gpu==2.0.*'"
    assert install_command("2.20", gpu=False, index_url="https://mirror.example/simple") == (
        "pip install --index-url https://mirror.example/simple 'tensorflow==2.20.*' 'tf-keras==2.20.*'"
    )


def test_dist_info_names(tmp_path: Path) -> None:
    for name in (
        "tf_nightly-2.22.0.dev20260101.dist-info",
        "tensorflow_cpu-2.16.1.dist-info",
        "nvidia_cudnn_cu12-9.3.0.75.dist-info",
        "tf_keras-2.21.0.dist-info",
        "README.txt",
    ):
        (tmp_path / name).mkdir()
    found = installed_distributions((tmp_path,))
    assert found["tf-nightly"].version == "2.22.0.dev20260101"
    assert found["tensorflow-cpu"].version == "2.16.1"
    assert found["nvidia-cudnn-cu12"].version == "9.3.0.75"
    assert set(found) == {"tf-nightly", "tensorflow-cpu", "nvidia-cudnn-cu12", "tf-keras"}


def test_library_versions_and_pip_folders(tmp_path: Path) -> None:
    (tmp_path / "libcudnn.so.9.1.0").write_bytes(b"")
    os.symlink("libcudnn.so.9.1.0", tmp_path / "libcudnn.so.9")
    (tmp_path / "libcudart.so.12").write_bytes(b"")
    assert file_version(tmp_path / "libcudnn.so.9") == "9.1.0"
    assert file_version(tmp_path / "libcudart.so.12") is None  # a pip wheel's file: the dist-info dates it
    assert pip_component("nvidia-cuda-runtime-cu12") == "cuda_runtime"
    assert pip_component("nvidia-cudnn-cu11") == "cudnn"
    assert pip_component("nvidia-ml-py") is None


@pytest.mark.parametrize("name, reported", [
    ("libcudnn.so", True), ("libcudnn.so.9", True), ("libcudnn.so.9.1.0", True), ("libcuda.so.1", True),
    ("libcudart.so.12.4.127", True), ("libnvidia-ml.so.1", True),
    ("libcudnn_ops.so.9", False), ("libcudnn.soX", False), ("libcudnn.s", False), ("xlibcuda.so.1", False),
    ("libcuda.so1", False), ("libcublasLt.so.12", True), ("libcublas.so.12", True), ("", False),
])
def test_reported_library_names(name: str, reported: bool) -> None:
    # The report's names from the data file, matched as the exact name or the name and a dotted version.
    names = compat.load_data("cuda_libs")["report_prefixes"]
    assert any(name == p or name.startswith(p + ".") for p in names) is reported  # the rule, spelled out
    assert _interesting(name, _prefixes()) is reported


def test_versions() -> None:
    assert vtuple("555.42.06") == (555, 42, 6) and vtuple("2.21.0rc1") == (2, 21, 0) and vtuple(None) == ()
    assert at_least("580.65.06", "580") and not at_least("525.60.12", "525.60.13") and not at_least(None, "1")


def test_wsl_driver_floor_is_windows_numbering() -> None:
    assert compat.min_driver_for_cuda("12.2", minor_compat=True, windows=True) == "527.41"
    assert compat.wsl_windows_driver_min() == "528.33"


def test_pip_index_from_environment_and_config(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = home / ".config" / "pip" / "pip.conf"
    config.parent.mkdir(parents=True)
    config.write_text("[global]\nindex-url = https://mirror.example/pypi/simple\n", encoding="utf-8")
    roots = ProbeRoots(sys_root=tmp_path / "root", env={"HOME": str(home)}, prefix=str(tmp_path / "venv"))
    assert configured_index_url(roots) == ("https://mirror.example/pypi/simple", str(config))
    env_roots = ProbeRoots(
        sys_root=tmp_path / "root", env={"HOME": str(home), "PIP_INDEX_URL": "https://other.example/simple"}
    )
    assert configured_index_url(env_roots) == ("https://other.example/simple", "PIP_INDEX_URL")
    off = ProbeRoots(sys_root=tmp_path / "root", env={"HOME": str(home), "PIP_CONFIG_FILE": os.devnull})
    assert configured_index_url(off) == (None, None)
    bare = ProbeRoots(sys_root=tmp_path / "root", env={"HOME": str(tmp_path / "nobody")}, prefix=str(tmp_path / "venv"))
    assert configured_index_url(bare) == (None, None)


# Lines as TensorFlow prints them (quoted in tensorflow/tensorflow#60913, #43718, #46933, #70960 and the docs).
TF_LOG = """\
2025-01-10 10:00:00.000001: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting to register factory for plugin cuDNN when one has already been registered
2025-01-10 10:00:00.000002: I tensorflow/core/platform/cpu_feature_guard.cc:210] This TensorFlow binary is optimized to use available CPU instructions in performance-critical operations.
2025-01-10 10:00:01.000003: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:535] Loaded runtime CuDNN library: 9.1.0 but source was compiled with: 9.3.0.  CuDNN library needs to have matching major version and equal or higher minor version.
2025-01-10 10:00:01.000004: W tensorflow/core/framework/op_kernel.cc:1841] OP_REQUIRES failed at xla_ops.cc:577 : FAILED_PRECONDITION: DNN library initialization failed.
"""


def test_tensorflow_log_lines_map_to_causes() -> None:
    matches = match_log(TF_LOG)
    assert [m.cause for m in matches] == ["noise", "cudnn-too-old", "dnn-init-failed"]
    findings = findings_from(matches, gpu_expected=True, gpus_seen=1, ran=True, tail="")
    assert [(f.id, f.severity) for f in findings] == [
        ("tf-log-cudnn-too-old", "error"),
        ("tf-log-dnn-init-failed", "error"),
    ]
    assert "nvidia-cudnn-cu12" in (findings[0].fix or "")


def test_gpu_log_lines_are_information_without_a_gpu() -> None:
    line = "I0000 00:00:1700000000.1 12345 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used."
    findings = findings_from(match_log(line), gpu_expected=False, gpus_seen=0, ran=True, tail="")
    assert [(f.id, f.severity, f.fix) for f in findings] == [("tf-log-cudart-not-loaded", "info", None)]
    failed = findings_from(
        [], gpu_expected=False, gpus_seen=0, ran=False, tail="ImportError: libcudart.so.11.0: cannot open"
    )
    assert failed[0].id == "tensorflow-import-failed" and "libcudart" in failed[0].evidence[-1]
