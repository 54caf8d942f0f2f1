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
``tf-keras``. CPU locks pin exactly one TensorFlow distribution: ``tensorflow`` itself from 2.16 on, because
``tf-keras`` declares a dependency on ``tensorflow`` (a ``tensorflow-cpu`` pin would bring both, overwriting each
other's files); the Linux ``tensorflow`` wheel runs on the CPU when no CUDA libraries are installed. Before 2.16
(no tf-keras) CPU locks pin the smaller ``tensorflow-cpu``. Every lock pins TensorBoard (the runtime's callbacks
write summaries; TF 2.21 no longer depends on it) and tfdist itself: from the index, or from a wheel built from a
checkout, written as ``./tfdist-X-py3-none-any.whl --hash=...`` and installed from the lock's folder.
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
from typing import Callable, Sequence

from tfdist import quote

# Re-exported: callers (docker, the CLI, tests) know the lock by this module; the target is defined there.
from tfdist.deploy.lock_target import (  # noqa: F401
    DEFAULT_PYTHON,
    Flavour,
    LockInfo,
    LockSpec,
    check_target,
    default_tfdist_wheel,
    load_tf_build,
    mirror_index,
    self_requirement,
    tf_distribution,
    top_level_requirements,
)
from tfdist.errors import TfdistError, UsageError

HEADER_MARK = "# tfdist-lock: "
LOCK_SCHEMA_VERSION = 1
_OPTION_LINES = re.compile(r"^\s*(-i|--index-url|--extra-index-url|-f|--find-links|--trusted-host|--no-index)\b")
_FROM_ANNOTATION = re.compile(r"^\s*#\s*from\s+\S+://")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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


def local_wheel_line(body: str, wheel: Path) -> str:
    """Point uv's ``tfdist @ file:///abs/path.whl`` entry at ``./NAME.whl`` so the lock works from its folder."""
    return re.sub(r"^tfdist @ file://\S+", f"./{Path(wheel).name}", body, count=1, flags=re.MULTILINE)


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
            line = re.sub(r"(^|\s)#.*", "", raw).strip()
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


def command_line(spec: LockSpec, output: str = "requirements.lock", *, force: bool = False) -> str:
    """The ``tfdist lock`` command that reproduces a lock (no mirror: the result does not depend on it), each word
    shell-quoted; ``force`` adds ``--force`` (the header's command replaces the lock it is written in)."""
    words = ["tfdist", "lock", "--tf", spec.tf, f"--{spec.flavour}", "--python", spec.python,
             "--platform", spec.platform, "--glibc", spec.glibc]
    for path in spec.extra_requirements:
        words += ["-r", Path(path).name]
    if spec.tfdist_wheel is not None:
        words += ["--tfdist-wheel", Path(spec.tfdist_wheel).name]
    elif not spec.include_tfdist:
        words.append("--no-tfdist")
    return quote.shell_words(words + ["-o", output] + (["--force"] if force else []), "--output")


def render_header(spec: LockSpec, output: str = "requirements.lock") -> str:
    """The comment block tfdist puts on top of every lock; it carries the target as one JSON line."""
    info = {"schema_version": LOCK_SCHEMA_VERSION, "tf": spec.tf, "flavour": spec.flavour, "python": spec.python,
            "platform": spec.platform, "glibc": spec.glibc}
    if spec.tfdist_wheel is not None:
        info["tfdist_wheel"] = Path(spec.tfdist_wheel).name
    lines = [
        f"# {quote.comment(output, '--output')}: written by tfdist; regenerate instead of editing:",
        f"#   {quote.comment(command_line(spec, output, force=True), '--output')}",
        f"# Target: TensorFlow {spec.tf} ({spec.flavour}), CPython {spec.python}, {spec.uv_platform}.",
        f"# Install: pip install --require-hashes -r {quote.shell(output, '--output')}"
        + (f"  (from this folder, next to {quote.shell(Path(spec.tfdist_wheel).name)})" if spec.tfdist_wheel else ""),
    ]
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
                            platform=data["platform"], glibc=data["glibc"], tfdist_wheel=data.get("tfdist_wheel"))
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
    for match in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s\\;]+)"
                             r"|^\./([A-Za-z0-9_.]+)-([^-\s]+)-[^\s]*\.whl", text, re.MULTILINE):
        if match.group(1):
            found[match.group(1).lower()] = match.group(2)
        else:  # a local wheel, ./NAME-VERSION-TAGS.whl (tfdist built from a checkout)
            found[match.group(3).lower().replace("_", "-")] = match.group(4)
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
    own = self_requirement(spec)
    requirements = top_level_requirements(spec) + read_extra_requirements(spec.extra_requirements)
    requirements += [own] if own else []
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
    if done.returncode != 0 and own and own.startswith("tfdist==") and _names_tfdist(done.stderr):
        raise TfdistError(f"{own.replace('==', ' ')} is not on the package index, so the lock cannot pin it",
                          hint="build its wheel (make dist) and pass --tfdist-wheel dist/"
                          f"tfdist-{own.split('==')[1]}-py3-none-any.whl, or leave it out with --no-tfdist",
                          reference="lock-tfdist-unpublished")
    if done.returncode != 0:
        raise TfdistError(f"uv could not resolve TensorFlow {spec.tf} ({spec.flavour}) for Python {spec.python} "
                          f"on {spec.uv_platform}: {_uv_failure(done.stderr)}",
                          hint="check the -r requirements and the index", reference="lock-resolution-failed")
    body = scrub(done.stdout, spec.mirror_index)
    if spec.tfdist_wheel is not None:
        body = local_wheel_line(body, spec.tfdist_wheel)
    text = render_header(spec, output_name) + body
    return LockResult(text=text, pins=pins(body), seconds=seconds)


def _names_tfdist(stderr: str) -> bool:
    """uv's message says the resolution failed because of tfdist itself (not published, or not that version)."""
    text = _ANSI.sub("", stderr)
    return bool(re.search(r"\btfdist\b[^\n]*(not found|no version|not available)|no version of tfdist", text))


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

