"""Reproducible TensorFlow environments: a hash-pinned requirements lock resolved for the *target* machine.

The lock is resolved by uv's ``pip compile`` (the resolver from the ``uv`` package) for the target Python version and
manylinux platform rather than for this machine, with ``--generate-hashes`` so that ``pip install --require-hashes``
refuses any file that differs. Combinations the compatibility data says cannot work (a Python outside the TF
release's range, a glibc below its wheel's floor, a GPU lock for a TF without the ``[and-cuda]`` extra) are refused
before resolving, with the reason.

A mirror is used only to *resolve*: the lock's text never names an index. uv writes the index URL into its header
(the command line) and, when configured to, as ``--index-url`` lines or ``# from`` annotations; tfdist writes its own
header, strips those lines, and refuses to write a lock in which the mirror's address still appears.

GPU locks pin ``tensorflow[and-cuda]`` (the CUDA and cuDNN libraries come as ``nvidia-*`` wheels) and the matching
``tf-keras``. CPU locks pin ``tensorflow-cpu``; because ``tf-keras`` declares a dependency on ``tensorflow``, the
resolver also pins ``tensorflow`` at the same version, so that plain ``pip install --require-hashes -r`` accepts the
file (pip has no way to let ``tensorflow-cpu`` stand in for ``tensorflow``).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from packaging.version import InvalidVersion, Version

from tfdist.errors import TfdistError, UsageError

Flavour = Literal["gpu", "cpu"]

# `--platform` -> uv's platform prefix; glibc versions uv accepts for manylinux targets.
PLATFORMS: dict[str, str] = {"linux-x86_64": "x86_64", "linux-aarch64": "aarch64"}
GLIBC_CHOICES: tuple[str, ...] = ("2.17", "2.28", "2.31", "2.32", "2.33", "2.34", "2.35", "2.36", "2.37", "2.38",
                                  "2.39", "2.40")
# manylinux_2_28 covers Debian 10+, Ubuntu 18.10+, RHEL 8+ and the python:*-slim and nvidia/cuda images.
DEFAULT_GLIBC = "2.28"
DEFAULT_PYTHON = "3.11"
HEADER_MARK = "# tfdist-lock: "
LOCK_SCHEMA_VERSION = 1
# tf-keras (Keras 2 for multi-worker fit) exists as a separate package from TF 2.16 on; earlier TF bundles Keras 2.
TF_KERAS_SINCE = Version("2.16")
_OPTION_LINES = re.compile(r"^\s*(-i|--index-url|--extra-index-url|-f|--find-links|--trusted-host|--no-index)\b")
_FROM_ANNOTATION = re.compile(r"^\s*#\s*from\s+\S+://")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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
    """

    tf: str
    flavour: Flavour = "gpu"
    python: str = DEFAULT_PYTHON
    platform: str = "linux-x86_64"
    glibc: str = DEFAULT_GLIBC
    mirror_index: str | None = None
    extra_requirements: tuple[Path, ...] = ()

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


@dataclass(frozen=True)
class LockResult:
    """A resolved lock.

    Attributes:
        text: the lock file's full content.
        pins: package name -> pinned version, in file order.
        seconds: wall time of the resolver run.
    """

    text: str
    pins: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


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
            hint=f"target a newer system (--glibc {floor} or later) or an older TensorFlow",
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


def _version_spec(tf: str) -> str:
    release = Version(tf).release
    return f"=={tf}.*" if len(release) == 2 else f"=={tf}"


def top_level_requirements(spec: LockSpec) -> list[str]:
    """The requirements tfdist adds for TF itself (before the user's extra files)."""
    wanted = [f"tensorflow[and-cuda]{_version_spec(spec.tf)}" if spec.flavour == "gpu"
              else f"tensorflow-cpu{_version_spec(spec.tf)}"]
    if _minor(spec.tf) >= TF_KERAS_SINCE:
        wanted.append(f"tf-keras=={_minor(spec.tf)}.*")
    return wanted


def read_extra_requirements(paths: Sequence[Path]) -> list[str]:
    """Requirement lines from the user's files; options that would redirect resolution are refused.

    Raises:
        UsageError: unreadable file, or an option line (``-r``, ``-i``, ``--hash`` ...) that tfdist cannot carry.
    """
    lines: list[str] = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as failure:
            raise UsageError(f"cannot read {path}: {failure.strerror}", hint="check the -r path") from None
        for number, raw in enumerate(text.splitlines(), start=1):
            line = re.sub(r"(^|\s)#.*$", "", raw).strip()
            if not line:
                continue
            if line.startswith("-"):
                raise UsageError(
                    f"{path}:{number}: option line {line.split()[0]!r} is not supported in -r files",
                    hint="list plain requirements only; choose the index with --mirror",
                    reference="lock-extra-option",
                )
            lines.append(line)
    return lines


def command_line(spec: LockSpec, output: str = "requirements.lock") -> str:
    """The ``tfdist lock`` command that reproduces a lock (no mirror: the result does not depend on it)."""
    words = ["tfdist", "lock", "--tf", spec.tf, f"--{spec.flavour}", "--python", spec.python,
             "--platform", spec.platform, "--glibc", spec.glibc]
    for path in spec.extra_requirements:
        words += ["-r", Path(path).name]
    return " ".join(words + ["-o", output])


def render_header(spec: LockSpec, output: str = "requirements.lock") -> str:
    """The comment block tfdist puts on top of every lock; it carries the target as one JSON line."""
    info = {"schema_version": LOCK_SCHEMA_VERSION, "tf": spec.tf, "flavour": spec.flavour, "python": spec.python,
            "platform": spec.platform, "glibc": spec.glibc}
    lines = [
        f"# {output}: written by tfdist; regenerate instead of editing:",
        f"#   {command_line(spec, output)}",
        f"# Target: TensorFlow {spec.tf} ({spec.flavour}), CPython {spec.python}, {spec.uv_platform}.",
        f"# Install: pip install --require-hashes -r {output}",
    ]
    if spec.flavour == "cpu" and _minor(spec.tf) >= TF_KERAS_SINCE:
        lines.append("# Note: tf-keras requires `tensorflow`, so it is pinned next to tensorflow-cpu at the same version.")
    lines.append(HEADER_MARK + json.dumps(info, sort_keys=True))
    return "\n".join(lines) + "\n"


def parse_header(text: str) -> LockInfo:
    """Read the target back from a lock written by :func:`resolve`.

    Raises:
        UsageError: the file has no tfdist header (not made by ``tfdist lock``).
    """
    for line in text.splitlines():
        if line.startswith(HEADER_MARK):
            data = json.loads(line[len(HEADER_MARK):])
            return LockInfo(tf=data["tf"], flavour=data["flavour"], python=data["python"],
                            platform=data["platform"], glibc=data["glibc"])
    raise UsageError("the lock file has no tfdist header", hint="create it with tfdist lock",
                     reference="lock-no-header")


def find_uv() -> str:
    """Path of the uv binary: the one from the ``uv`` Python package, else ``uv`` on PATH.

    Raises:
        TfdistError: uv is not installed.
    """
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
    raise TfdistError("the uv resolver is not installed", hint="pip install uv", reference="lock-no-uv")


def uv_arguments(spec: LockSpec, input_name: str = "requirements.in") -> list[str]:
    """Arguments for ``uv pip compile`` (without the binary)."""
    args = ["pip", "compile", input_name, "--python-version", spec.python, "--python-platform", spec.uv_platform,
            "--generate-hashes", "--no-header", "--quiet",
            # The target is given by --python-version/--python-platform; naming the running interpreter spares uv
            # a search for a local Python of the target version (seconds, e.g. through pyenv shims) and a download.
            "--python", sys.executable, "--no-python-downloads"]
    if spec.mirror_index:
        args += ["--default-index", spec.mirror_index]
    return args


def scrub(text: str, mirror_index: str | None) -> str:
    """Remove index lines and ``# from <url>`` annotations; refuse if the mirror still shows.

    Raises:
        TfdistError: the mirror's address remains somewhere in the text.
    """
    kept = [line for line in text.splitlines()
            if not _OPTION_LINES.match(line) and not _FROM_ANNOTATION.match(line)]
    result = "\n".join(kept).strip("\n") + "\n"
    if mirror_index:
        host = re.sub(r"^[a-z]+://", "", mirror_index).split("/")[0]
        if host and host in result:
            raise TfdistError(f"the resolver wrote the mirror {host} into the lock",
                              hint="report this; the lock was not written", reference="lock-mirror-leak")
    return result


def pins(text: str) -> dict[str, str]:
    """``name -> version`` for each ``name==version`` entry of a requirements text."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s\\;]+)", text, re.MULTILINE):
        found[match.group(1).lower()] = match.group(2)
    return found


def _uv_failure(stderr: str) -> str:
    lines = [_ANSI.sub("", line).strip() for line in stderr.splitlines()]
    lines = [line for line in lines if line and not line.startswith("hint:")]
    return " ".join(lines[:6])[:600] or "uv failed without a message"


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def resolve(spec: LockSpec, *, output_name: str = "requirements.lock", runner: Runner = subprocess.run,
            uv: str | None = None, timeout: float = 900) -> LockResult:
    """Check the target, resolve with uv, and return the lock text (header + pins with hashes).

    Args:
        spec: what to lock.
        output_name: file name shown in the header's regenerate/install lines.
        runner: ``subprocess.run`` or a stand-in with the same signature (tests).
        uv: path of the uv binary; found with :func:`find_uv` when None.
        timeout: seconds before the resolver is stopped.

    Raises:
        UsageError: an impossible combination (see :func:`check_target`).
        TfdistError: the resolver failed (its message is included) or the mirror leaked.
    """
    check_target(spec)
    requirements = top_level_requirements(spec) + read_extra_requirements(spec.extra_requirements)
    binary = uv or find_uv()
    with tempfile.TemporaryDirectory(prefix="tfdist-lock-") as workdir:
        # A fixed file name in a fixed directory keeps uv's `# via -r requirements.in` annotations reproducible.
        Path(workdir, "requirements.in").write_text("\n".join(requirements) + "\n", encoding="utf-8")
        started = time.monotonic()
        try:
            done = runner([binary, *uv_arguments(spec)], cwd=workdir, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ), check=False)
        except subprocess.TimeoutExpired:
            raise TfdistError(f"the resolver did not finish within {timeout:.0f} s",
                              hint="check the network or try --mirror", reference="lock-timeout") from None
        seconds = time.monotonic() - started
    if done.returncode != 0:
        raise TfdistError(f"uv could not resolve TensorFlow {spec.tf} ({spec.flavour}) for Python {spec.python} "
                          f"on {spec.uv_platform}: {_uv_failure(done.stderr)}",
                          hint="check the -r requirements and the index", reference="lock-resolution-failed")
    body = scrub(done.stdout, spec.mirror_index)
    text = render_header(spec, output_name) + body
    return LockResult(text=text, pins=pins(body), seconds=seconds)


def requirement_entries(lock_text: str) -> list[str]:
    """Each requirement of a lock as one line (continuations joined, comments dropped)."""
    joined = re.sub(r"\\\n\s*", " ", lock_text)
    entries = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            entries.append(re.sub(r"\s+", " ", line))
    return entries


def render_conda(lock_text: str, info: LockInfo, lock_name: str = "requirements.lock") -> str:
    """An ``environment.yml`` with the target Python from conda-forge and the lock as its pip section.

    The entries keep their hashes, so pip (which conda runs on the section) checks them as it would for the lock.
    """
    lines = [
        f"# environment.yml: written by tfdist together with {lock_name}; regenerate both together.",
        f"# conda env create -f environment.yml   (TensorFlow {info.tf}, {info.flavour}, Python {info.python})",
        f"name: tf{info.tf.replace('.', '')}-{info.flavour}-py{info.python.replace('.', '')}",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python={info.python}",
        "  - pip",
        "  - pip:",
    ]
    lines += [f"      - {json.dumps(entry)}" for entry in requirement_entries(lock_text)]
    return "\n".join(lines) + "\n"
