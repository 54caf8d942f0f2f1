"""Write a bash script that prepares a bare Debian/Ubuntu machine for GPU TensorFlow.

The script adds NVIDIA's CUDA apt repository through the ``cuda-keyring`` package (the supported replacement for
``apt-key``) and installs one driver branch that the chosen TensorFlow build's CUDA can run on. It installs no CUDA
toolkit and no cuDNN: ``tensorflow[and-cuda]`` brings those as pip wheels, and a second copy on the system is a
common source of version clashes.

Driver choice: the TF build's CUDA gives two numbers (compat data): the *floor* (minor-version compatibility, e.g.
525.60.13 for any CUDA 12) and the *recommended* minimum (the toolkit's own driver, e.g. 555.42.06 for CUDA 12.5, which
PTX JIT needs). The default branch is the oldest long-lived branch at or above the recommended one; ``--driver``
may pick another branch, which is refused below the floor and flagged below the recommendation.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from string import Template
from typing import Any

from tfdist.errors import UsageError

DEFAULT_TF = "2.21"


@dataclass(frozen=True)
class SetupGpuSpec:
    """What to generate.

    Args:
        os: target system key, one of :func:`supported_systems` (``ubuntu22.04``, ``ubuntu24.04``, ``debian12``).
        tf: TensorFlow version (``2.21`` or ``2.21.0``) whose CUDA the driver must run.
        driver: driver branch chosen by the user (e.g. ``570``), or None to pick one from the compat data.
        script_name: file name shown in the script's usage line.
    """

    os: str
    tf: str = DEFAULT_TF
    driver: int | None = None
    script_name: str = "setup_gpu.sh"


@dataclass(frozen=True)
class DriverChoice:
    """The driver branch the script installs, and why.

    Attributes:
        branch: the driver branch, e.g. 570.
        package: the apt metapackage pinned to that branch, e.g. ``cuda-drivers-570``.
        cuda: CUDA version the TF build was made with.
        floor: lowest driver that runs that CUDA at all (minor-version compatibility).
        recommended: the CUDA toolkit's own driver (needed for PTX JIT of that toolkit's PTX).
        warning: set when a user-chosen branch is between the floor and the recommendation.
    """

    branch: int
    package: str
    cuda: str
    floor: str
    recommended: str
    warning: str | None = None

    @property
    def reason(self) -> str:
        """One sentence for the script header and the CLI summary."""
        return (
            f"Branch {self.branch} runs CUDA {self.cuda}: that needs driver >= {self.floor} "
            f"(>= {self.recommended} recommended)."
        )


@lru_cache(maxsize=1)
def _targets() -> dict[str, Any]:
    text = resources.files("tfdist.deploy").joinpath("templates/setup_gpu/targets.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def supported_systems() -> tuple[str, ...]:
    """The ``--os`` values a script can be written for."""
    return tuple(_targets()["systems"])


def _major(driver_version: object) -> int:
    return int(str(driver_version).split(".")[0])


def choose_driver(tf: str, driver: int | None = None) -> DriverChoice:
    """Pick the driver branch for a TF version, or check the user's branch against it.

    Raises:
        UsageError: unknown TF version, a TF without a CUDA build, or a branch below the CUDA floor.
    """
    from tfdist.deploy.lock import load_tf_build  # shared refusal wording for unknown versions

    build = load_tf_build(tf)
    from tfdist.compat import tables as compat

    if not build.cuda:
        raise UsageError(f"TensorFlow {tf} has no CUDA build in the compatibility data", hint="pick another --tf",
                         reference="setup-gpu-no-cuda")
    # The exact CUDA of the wheel (12.5.1) when known: its toolkit driver is the one PTX JIT needs.
    cuda = str(getattr(build, "cuda_full", None) or build.cuda)
    floor = compat.min_driver_for_cuda(cuda, minor_compat=True)
    recommended = compat.min_driver_for_cuda(cuda, minor_compat=False)
    branches = [int(b) for b in _targets()["driver_branches"]]
    fitting = [b for b in branches if b >= _major(recommended)]
    if driver is None:
        if not fitting:  # newer CUDA than any listed branch: the data needs a new row
            raise UsageError(
                f"no known driver branch reaches {recommended}, which CUDA {cuda} (TF {tf}) needs",
                hint="pass --driver BRANCH explicitly",
                reference="setup-gpu-no-branch",
            )
        return DriverChoice(fitting[0], f"cuda-drivers-{fitting[0]}", cuda, floor, recommended)
    if driver < _major(floor):
        suggestion = f"leave --driver out to get branch {fitting[0]}" if fitting else f"use a branch >= {floor}"
        raise UsageError(
            f"driver branch {driver} cannot run TF {tf}, which was built with CUDA {cuda} and needs driver >= {floor}",
            hint=suggestion,
            reference="setup-gpu-driver-too-old",
        )
    warning = None
    if driver < _major(recommended):
        warning = (
            f"branch {driver} is below {recommended}, the driver of CUDA {cuda}: it runs TF {tf} through CUDA "
            "minor-version compatibility, without PTX JIT for newer PTX (GPUs newer than the wheel's kernels)"
        )
    return DriverChoice(driver, f"cuda-drivers-{driver}", cuda, floor, recommended, warning)


def render_script(spec: SetupGpuSpec) -> tuple[str, DriverChoice]:
    """Return the script text and the driver choice it embeds.

    Raises:
        UsageError: unsupported ``--os``, or see :func:`choose_driver`.
    """
    targets = _targets()
    system = targets["systems"].get(spec.os)
    if system is None:
        raise UsageError(
            f"unsupported --os {spec.os!r}",
            hint="choose one of " + ", ".join(supported_systems()),
            reference="setup-gpu-unsupported-os",
        )
    choice = choose_driver(spec.tf, spec.driver)
    template = Template(resources.files("tfdist.deploy").joinpath("templates/setup_gpu/setup_gpu.sh.tmpl")
                        .read_text("utf-8"))
    text = template.substitute(
        os_title=f"{system['title']}, TensorFlow {spec.tf}",
        os_id=system["id"],
        os_version_id=system["version_id"],
        repo_distro=system["repo_distro"],
        repo_base=targets["repo_base"],
        keyring_file=targets["keyring_file"],
        driver_branch=choice.branch,
        driver_package=choice.package,
        driver_reason=choice.reason,
        script_name=spec.script_name,
    )
    return text, choice
