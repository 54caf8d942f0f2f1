"""Version facts about TensorFlow builds, CUDA drivers and GPUs, read from ``tfdist/data/compat/*.json``.

Other commands (``lock``, ``docker``, ``setup-gpu``) use this module too, so its public functions are stable:
:func:`tf_build`, :func:`known_tf_versions`, :func:`min_driver_for_cuda`. The data files are read on first use
and cached for the life of the process.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import field
from pathlib import Path
from typing import Any

from tfdist.compat.versions import at_least, minor_of, vtuple
from tfdist.errors import UsageError
from tfdist.frozen import frozen

# Read from the package folder directly: importlib.resources costs start-up time and the data is plain files.
_DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "compat"


@functools.lru_cache(maxsize=None)
def load_data(name: str) -> dict[str, Any]:
    """Parsed content of ``tfdist/data/compat/<name>.json`` (cached)."""
    text = (_DATA_DIR / f"{name}.json").read_text(encoding="utf-8")
    return json.loads(text)


@frozen
class TfBuild:
    """What one official TensorFlow minor release (Linux x86_64 wheel) was built with and requires.

    Attributes:
        version: the minor release, e.g. ``"2.21"``.
        python_min: oldest supported Python minor, e.g. ``"3.10"``.
        python_max: newest supported Python minor, e.g. ``"3.13"``.
        cuda: CUDA toolkit of the GPU build (``"12.5"``), ``None`` if none.
        cudnn: cuDNN of the GPU build (``"9.3"``), ``None`` if none.
        compute_capabilities: architectures compiled into the wheel, e.g. ``("sm_60", ..., "compute_90")``;
            empty where the wheel does not record them (2.0-2.2).
        glibc_min: glibc floor from the wheel's manylinux tag.
        and_cuda_pins: ``nvidia-*`` requirement name -> specifier of ``tensorflow[and-cuda]`` (empty before 2.14).
        cuda_full: the CUDA version recorded in the wheel's build_info (``"12.5.1"``).
        gpu_dist: the distribution that carries the GPU build (``tensorflow-gpu`` for 2.0, else ``tensorflow``).
        windows_native_gpu: whether a native-Windows CUDA build exists for this release (<= 2.10).
        platform_tag: the wheel's Linux platform tag.
    """

    version: str
    python_min: str
    python_max: str
    cuda: str | None
    cudnn: str | None
    compute_capabilities: tuple[str, ...]
    glibc_min: str
    and_cuda_pins: dict[str, str] = field(default_factory=dict, hash=False)
    cuda_full: str | None = None
    gpu_dist: str = "tensorflow"
    windows_native_gpu: bool = False
    platform_tag: str = ""

    @property
    def cudnn_major(self) -> str | None:
        """cuDNN major version (``"9"``), the part that must match at run time."""
        return self.cudnn.split(".")[0] if self.cudnn else None

    def supports_python(self, python: str) -> bool:
        """Whether ``python`` (``"3.11"`` or ``"3.11.4"``) is inside this build's Python range."""
        minor = vtuple(python)[:2]
        return vtuple(self.python_min)[:2] <= minor <= vtuple(self.python_max)[:2]


@functools.lru_cache(maxsize=None)
def _builds() -> dict[str, TfBuild]:
    builds: dict[str, TfBuild] = {}
    for row in load_data("tf_builds")["builds"]:
        builds[row["version"]] = TfBuild(
            version=row["version"],
            python_min=row["python_min"],
            python_max=row["python_max"],
            cuda=row["cuda"],
            cudnn=row["cudnn"],
            compute_capabilities=tuple(row["compute_capabilities"]),
            glibc_min=row["glibc_min"],
            and_cuda_pins=dict(row["and_cuda_pins"]),
            cuda_full=row.get("build_info_cuda_version") or row["cuda"],
            gpu_dist=row.get("gpu_dist", "tensorflow"),
            windows_native_gpu=bool(row.get("windows_native_gpu")),
            platform_tag=row.get("platform_tag", ""),
        )
    return builds


def known_tf_versions() -> list[str]:
    """Minor releases with data, ascending: ``["2.0", "2.1", ..., "2.21"]``."""
    return sorted(_builds(), key=vtuple)


def tf_build(version: str) -> TfBuild:
    """Build facts of a TensorFlow release.

    Args:
        version: ``"2.21"``, ``"2.21.0"`` or a pre-release such as ``"2.21.0rc1"`` (its minor is used).

    Raises:
        UsageError: the version is not in the data file.
    """
    minor = minor_of(version.strip())
    build = _builds().get(minor)
    if build is None:
        known = known_tf_versions()
        raise UsageError(
            f"no build data for TensorFlow {version!r}",
            hint=f"known releases: {known[0]} to {known[-1]}",
            reference="doctor-unknown-tf-version",
        )
    return build


def _cuda_key(cuda: str) -> tuple[int, ...]:
    parts = vtuple(cuda)
    if not parts:
        raise UsageError(f"not a CUDA version: {cuda!r}", hint="write it as MAJOR.MINOR, e.g. 12.5")
    return parts if len(parts) >= 2 else (parts[0], 0)


def min_driver_for_cuda(cuda: str, *, minor_compat: bool = False, windows: bool = False) -> str:
    """Minimum NVIDIA driver for software built with CUDA ``cuda``.

    Args:
        cuda: ``"12.5"`` (the GA release), ``"12.5.1"`` (that update) or ``"12"``.
        minor_compat: return the CUDA minor-version-compatibility floor of the family (what a framework built
            against CUDA X.y strictly needs, e.g. ``"525.60.13"`` for 12.x) instead of the toolkit's own driver
            (needed for PTX JIT of that toolkit's PTX). Families before 11.1 have no minor compatibility.
        windows: the Windows x86_64 driver instead of Linux.

    Raises:
        UsageError: no data for that CUDA version (or no Windows driver in the table).
    """
    key = _cuda_key(cuda)
    data = load_data("cuda_drivers")
    column = "windows" if windows else "linux"
    if minor_compat:
        for row in data["minor_compat"]:
            family = vtuple(row["family"])
            if key[: len(family)] == family and at_least(cuda, row.get("min_cuda", row["family"])):
                if row[column] is None:
                    break
                return str(row[column])
    family_rows = [r for r in data["toolkit"] if vtuple(r["cuda"])[:2] == key[:2]]
    if not family_rows:
        raise UsageError(
            f"no driver data for CUDA {cuda}", hint="known: CUDA 8.0 to 13.x", reference="doctor-unknown-cuda"
        )
    family_rows.sort(key=lambda r: vtuple(r["cuda"]))
    if len(key) >= 3:
        eligible = [r for r in family_rows if vtuple(r["cuda"]) <= key] or family_rows[:1]
        row = eligible[-1]
    else:
        row = family_rows[0]
    value = row[column]
    if value is None:
        raise UsageError(f"no {column} driver listed for {row['label']}", hint="the toolkit no longer bundles one")
    return str(value)


def wsl_windows_driver_min() -> str:
    """Windows driver floor for CUDA under WSL2 quoted by TensorFlow's install docs (``"528.33"``)."""
    return str(load_data("cuda_drivers")["wsl_windows_driver_min"])


@frozen
class GpuModel:
    """A GPU family matched from its product name."""

    cc: str
    arch: str


@functools.lru_cache(maxsize=None)
def _gpu_patterns() -> list[tuple[re.Pattern[str], GpuModel]]:
    return [(re.compile(r["pattern"], re.IGNORECASE), GpuModel(r["cc"], r["arch"])) for r in load_data("gpus")["gpus"]]


def gpu_model(name: str) -> GpuModel | None:
    """Compute capability and architecture of a GPU from its product name, or ``None`` if not known."""
    for pattern, model in _gpu_patterns():
        if pattern.search(name):
            return model
    return None


def architecture_of(cc: str) -> str:
    """Architecture family name for a compute capability (``"9.0"`` -> ``"Hopper"``)."""
    major = str(vtuple(cc)[0]) if vtuple(cc) else ""
    return str(load_data("gpus")["architectures"].get(major, "unknown"))


def cuda_libraries(cuda: str, cudnn_major: str | None) -> dict[str, str]:
    """Component -> soname a CUDA build of TF opens (``"cudart": "libcudart.so.12"``, ``"cudnn": "libcudnn.so.9"``)."""
    families: dict[str, dict[str, str]] = load_data("cuda_libs")["families"]
    parts = vtuple(cuda)
    candidates = [f"{parts[0]}.{parts[1] if len(parts) > 1 else 0}", str(parts[0])]
    for key in candidates:
        if key in families:
            libs = dict(families[key])
            break
    else:
        return {}
    if cudnn_major:
        libs["cudnn"] = f"libcudnn.so.{cudnn_major}"
    return libs
