"""The compatibility API read from the packaged data files, checked against the reference tables."""

from __future__ import annotations

import pytest

from tfdist.compat import tables as compat
from tfdist.errors import UsageError


def test_tf_221_build_facts_match_the_wheel() -> None:
    build = compat.tf_build("2.21")
    assert build == compat.tf_build("2.21.0")
    assert (build.python_min, build.python_max) == ("3.10", "3.13")
    assert (build.cuda, build.cudnn, build.cuda_full) == ("12.5", "9.3", "12.5.1")
    assert build.compute_capabilities == ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90")
    assert build.glibc_min == "2.27"
    assert build.and_cuda_pins["nvidia-cudnn-cu12"] == ">=9.3.0.75,<10.0"
    assert build.cudnn_major == "9"
    assert build.supports_python("3.13.1") and not build.supports_python("3.9")


@pytest.mark.parametrize(
    ("version", "cuda", "cudnn", "glibc", "pin"),
    [
        ("2.20.0", "12.5", "9.3", "2.17", ">=9.3.0.75,<10.0"),
        ("2.17.1", "12.3", "8.9", "2.17", "==8.9.7.29"),
        ("2.15", "12.2", "8.9", "2.17", "==8.9.4.25"),
        ("2.8", "11.2", "8.1", "2.12", None),
        ("2.0", "10.0", "7.4", "2.12", None),
    ],
)
def test_older_builds(version: str, cuda: str, cudnn: str, glibc: str, pin: str | None) -> None:
    build = compat.tf_build(version)
    assert (build.cuda, build.cudnn, build.glibc_min) == (cuda, cudnn, glibc)
    assert build.and_cuda_pins.get("nvidia-cudnn-cu12") == pin


def test_tf_20_gpu_build_lives_in_tensorflow_gpu_and_cc_unrecorded() -> None:
    build = compat.tf_build("2.0")
    assert build.gpu_dist == "tensorflow-gpu"
    assert build.compute_capabilities == ()


def test_known_versions_ascending_and_complete() -> None:
    versions = compat.known_tf_versions()
    assert versions[0] == "2.0" and versions[-1] == "2.21"
    assert versions == [f"2.{i}" for i in range(22)]


def test_unknown_version_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="2.99"):
        compat.tf_build("2.99")


@pytest.mark.parametrize(
    ("cuda", "minor_compat", "expected"),
    [
        ("12.5", False, "555.42.02"),
        ("12.5.1", False, "555.42.06"),
        ("12.5.1", True, "525.60.13"),
        ("12.0", True, "525.60.13"),
        ("11.8", False, "520.61.05"),
        ("11.8", True, "450.80.02"),
        ("11.2", False, "460.27.03"),
        ("11.0", True, "450.36.06"),
        ("10.1", True, "418.39"),
        ("10", False, "410.48"),
        ("13.0", False, "580.65.06"),
        ("13.1.1", False, "590.48.01"),
        ("13.0", True, "580"),
    ],
)
def test_min_driver_for_cuda(cuda: str, minor_compat: bool, expected: str) -> None:
    assert compat.min_driver_for_cuda(cuda, minor_compat=minor_compat) == expected


def test_min_driver_windows_and_unknown() -> None:
    assert compat.min_driver_for_cuda("12.0.1", windows=True) == "528.33"
    with pytest.raises(UsageError):
        compat.min_driver_for_cuda("7.5")
    with pytest.raises(UsageError):
        compat.min_driver_for_cuda("13.2", windows=True)


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        ("NVIDIA H200", "9.0"),
        ("NVIDIA H100 80GB HBM3", "9.0"),
        ("NVIDIA A100-SXM4-80GB", "8.0"),
        ("NVIDIA GeForce RTX 4090", "8.9"),
        ("NVIDIA GeForce RTX 5090", "12.0"),
        ("NVIDIA GeForce RTX 3090", "8.6"),
        ("Tesla T4", "7.5"),
        ("Tesla K80", "3.7"),
        ("Tesla V100-SXM2-16GB", "7.0"),
        ("NVIDIA L4", "8.9"),
        ("NVIDIA B200", "10.0"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"),
        ("NVIDIA RTX 6000 Ada Generation", "8.9"),
        ("Matrox G200eW", None),
    ],
)
def test_gpu_name_to_compute_capability(name: str, cc: str | None) -> None:
    model = compat.gpu_model(name)
    assert (model.cc if model else None) == cc


def test_cuda_libraries_for_builds() -> None:
    libs = compat.cuda_libraries("12.5.1", "9")
    assert libs["cudart"] == "libcudart.so.12" and libs["cudnn"] == "libcudnn.so.9"
    assert compat.cuda_libraries("11.0", "8")["cusolver"] == "libcusolver.so.10"
    assert compat.cuda_libraries("11.2", "8")["cusolver"] == "libcusolver.so.11"


@pytest.mark.parametrize("version", compat.known_tf_versions())
def test_every_build_has_driver_floors(version: str) -> None:
    build = compat.tf_build(version)
    floor = compat.min_driver_for_cuda(build.cuda_full or "", minor_compat=True)
    toolkit = compat.min_driver_for_cuda(build.cuda_full or "")
    assert tuple(map(int, floor.split("."))) <= tuple(map(int, toolkit.split(".")))
    assert build.supports_python(build.python_min) and build.supports_python(build.python_max)
