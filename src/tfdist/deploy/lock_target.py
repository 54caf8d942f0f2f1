"""What a lock is for: the target machine, the checks the compatibility data makes, and the top-level requirements
(one TensorFlow distribution, tf-keras, TensorBoard and tfdist itself). :mod:`tfdist.deploy.lock` resolves them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from tfdist import validate
from tfdist.errors import TfdistError, UsageError

Flavour = Literal["gpu", "cpu"]
# `--platform` -> uv's platform prefix; glibc versions uv accepts for manylinux targets.
PLATFORMS: dict[str, str] = {"linux-x86_64": "x86_64", "linux-aarch64": "aarch64"}
GLIBC_CHOICES: tuple[str, ...] = ("2.17", "2.28", "2.31", "2.32", "2.33", "2.34", "2.35", "2.36", "2.37", "2.38",
                                  "2.39", "2.40")
# manylinux_2_28 covers Debian 10+, Ubuntu 18.10+, RHEL 8+ and the python:*-slim and nvidia/cuda images.
DEFAULT_GLIBC = "2.28"
DEFAULT_PYTHON = "3.11"
# tf-keras (Keras 2 for multi-worker fit) exists as a separate package from TF 2.16 on; earlier TF bundles Keras 2.
TF_KERAS_SINCE = Version("2.16")


@dataclass(frozen=True)
class LockSpec:
    """What to lock.

    Args:
        tf: TensorFlow version, ``2.21`` (newest patch) or ``2.21.0``.
        flavour: ``gpu`` (``tensorflow[and-cuda]``) or ``cpu`` (``tensorflow-cpu``).
        python: target Python ``X.Y``.
        platform: ``linux-x86_64`` or ``linux-aarch64``.
        glibc: the target's glibc (manylinux level), e.g. ``2.28``.
        mirror_index: simple-index URL used for resolving only; None uses uv's own configuration.
        extra_requirements: more requirement files whose entries join the lock.
        tfdist_wheel: lock tfdist from this wheel (built from a checkout) instead of from the index.
        include_tfdist: False leaves tfdist out of the lock.
    """

    tf: str
    flavour: Flavour = "gpu"
    python: str = DEFAULT_PYTHON
    platform: str = "linux-x86_64"
    glibc: str = DEFAULT_GLIBC
    mirror_index: str | None = None
    extra_requirements: tuple[Path, ...] = ()
    tfdist_wheel: Path | None = None
    include_tfdist: bool = True

    def __post_init__(self) -> None:
        # Both land in the lock's header comment, uv's arguments and (read back) a Dockerfile: full-match only.
        # packaging's Version would accept "3.12\n" (it strips white space), so the rule comes first.
        validate.version(self.tf, "--tf")
        validate.version(self.python, "--python")

    @property
    def uv_platform(self) -> str:
        """The ``--python-platform`` value uv understands, e.g. ``x86_64-manylinux_2_28``."""
        return f"{PLATFORMS[self.platform]}-manylinux_{self.glibc.replace('.', '_')}"


@dataclass(frozen=True)
class LockInfo:
    """The target a lock was made for, as recorded in its header (read back by ``tfdist docker``)."""

    tf: str
    flavour: Flavour
    python: str
    platform: str
    glibc: str
    tfdist_wheel: str | None = None  # file name of a local tfdist wheel the lock installs from its folder


def load_tf_build(tf: str) -> Any:
    """The compat data's build record for a TF version, or a :class:`UsageError` naming the known ones."""
    from tfdist.compat import tables as compat

    try:
        Version(tf)
    except InvalidVersion:
        raise UsageError(f"--tf {tf!r} is not a version", hint="use e.g. --tf 2.21") from None
    try:
        return compat.tf_build(tf)
    except TfdistError:
        raise
    except (KeyError, LookupError, ValueError):
        known = ", ".join(str(v) for v in compat.known_tf_versions())
        raise UsageError(f"TensorFlow {tf} is not in the compatibility data", hint=f"known: {known}",
                         reference="tf-version-unknown") from None


def _minor(version: str) -> Version:
    parts = Version(version).release
    return Version(f"{parts[0]}.{parts[1] if len(parts) > 1 else 0}")


def check_target(spec: LockSpec) -> Any:
    """Refuse combinations the compatibility data rules out; return the TF build record.

    Raises:
        UsageError: with the reason and a fix.
    """
    if spec.platform not in PLATFORMS:
        raise UsageError(f"unsupported --platform {spec.platform!r}", hint="use " + " or ".join(PLATFORMS))
    if spec.glibc not in GLIBC_CHOICES:
        raise UsageError(f"unsupported --glibc {spec.glibc!r}", hint="use one of " + ", ".join(GLIBC_CHOICES))
    try:
        python = _minor(spec.python)
    except InvalidVersion:
        raise UsageError(f"--python {spec.python!r} is not a version", hint="use e.g. --python 3.11") from None
    build = load_tf_build(spec.tf)
    low, high = _minor(str(build.python_min)), _minor(str(build.python_max))
    if not low <= python <= high:
        raise UsageError(
            f"TensorFlow {spec.tf} has no wheels for Python {spec.python}: it supports Python {low}-{high}",
            hint=f"use --python {high} or a TensorFlow release that supports {spec.python}",
            reference="tf-python-unsupported",
        )
    floor = str(build.glibc_min)
    if Version(spec.glibc) < Version(floor):
        raise UsageError(
            f"TensorFlow {spec.tf} wheels need glibc >= {floor}, but the target has glibc {spec.glibc}",
            hint=f"target a newer system (--glibc {_first_glibc_from(floor)} or later) or an older TensorFlow",
            reference="tf-glibc-too-old",
        )
    if spec.flavour == "gpu" and not build.and_cuda_pins:
        raise UsageError(
            f"TensorFlow {spec.tf} has no [and-cuda] extra (it exists from 2.14 on), so a GPU lock cannot carry "
            "CUDA and cuDNN",
            hint="use --tf 2.14 or newer, or --cpu",
            reference="tf-no-and-cuda",
        )
    return build


def _first_glibc_from(floor: str) -> str:
    """The lowest ``--glibc`` choice at or above a wheel floor (2.27 is no manylinux level uv knows: 2.28)."""
    return next((c for c in GLIBC_CHOICES if Version(c) >= Version(floor)), GLIBC_CHOICES[-1])


def _version_spec(tf: str) -> str:
    release = Version(tf).release
    return f"=={tf}.*" if len(release) == 2 else f"=={tf}"


def top_level_requirements(spec: LockSpec) -> list[str]:
    """The requirements tfdist adds for TF itself (before the user's extra files): one TensorFlow distribution."""
    wanted = [f"{tf_distribution(spec)}{'[and-cuda]' if spec.flavour == 'gpu' else ''}{_version_spec(spec.tf)}"]
    if _minor(spec.tf) >= TF_KERAS_SINCE:
        wanted.append(f"tf-keras=={_minor(spec.tf)}.*")
    wanted.append("tensorboard")
    return wanted


def tf_distribution(spec: LockSpec) -> str:
    """The one TensorFlow distribution a lock pins (see the module docstring for why CPU locks use ``tensorflow``)."""
    if spec.flavour == "cpu" and _minor(spec.tf) < TF_KERAS_SINCE:
        return "tensorflow-cpu"
    return "tensorflow"


def self_requirement(spec: LockSpec) -> str | None:
    """tfdist's own line in ``requirements.in``: the running version from the index, or the given wheel."""
    if not spec.include_tfdist:
        return None
    if spec.tfdist_wheel is not None:
        return f"tfdist @ {Path(spec.tfdist_wheel).resolve().as_uri()}"
    from tfdist import __version__

    return f"tfdist=={__version__}"


def mirror_index(name: str) -> str:
    """The simple-index URL of a catalog mirror, for ``lock --mirror`` and ``docker --mirror``.

    Raises:
        UsageError: unknown name (listing the catalog's names: these commands take no ``--url``), or no PyPI index.
    """
    from tfdist.mirror.catalog import get_mirror, load_catalog

    try:
        chosen = get_mirror(name)
    except UsageError:
        raise UsageError(f"unknown mirror {validate.shown(name)}",
                         hint="known mirrors: " + ", ".join(load_catalog()),
                         reference="mirror-unknown") from None
    if not chosen.pip_index:
        raise UsageError(f"mirror {name!r} has no PyPI index", hint="pick another with tfdist mirror list")
    return chosen.pip_index


def default_tfdist_wheel(folder: Path) -> Path | None:
    """``dist/tfdist-<this version>-*.whl`` under ``folder`` (what ``make dist`` builds in a checkout), if present."""
    from tfdist import __version__

    found = sorted(Path(folder, "dist").glob(f"tfdist-{__version__}-*.whl"))
    return found[-1] if found else None
