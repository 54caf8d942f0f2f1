"""The active conda environment: its CUDA, cuDNN and NCCL packages (``$CONDA_PREFIX/conda-meta/*.json``) and the
activation scripts (``$CONDA_PREFIX/etc/conda/activate.d/*.sh``) that put folders on ``LD_LIBRARY_PATH``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tfdist.compat import tables as compat
from tfdist.doctor.facts import ActivationScript, CondaFacts, CondaPackage
from tfdist.doctor.roots import ProbeRoots

# `export LD_LIBRARY_PATH=...` or `LD_LIBRARY_PATH=...` (an assignment, not a mere mention).
_LD_ASSIGNMENT = re.compile(r"\s*(?:export\s+)?LD_LIBRARY_PATH=(.*)")
# The variable's own previous value in its usual spellings: $LD_LIBRARY_PATH, ${LD_LIBRARY_PATH},
# ${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}} and ${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}.
_SELF_REFERENCE = re.compile(
    r"\$\{LD_LIBRARY_PATH:[-+]:?(?:\$\{LD_LIBRARY_PATH\}|\$LD_LIBRARY_PATH)\}|\$\{?LD_LIBRARY_PATH\}?"
)
_SUBDIR = re.compile(r"noarch|(?:linux|osx|win|emscripten|wasi|zos)-[a-z0-9_]+")


def conda_prefix(roots: ProbeRoots) -> Path | None:
    """The environment's prefix: ``CONDA_PREFIX``, else this interpreter's prefix when it holds ``conda-meta``."""
    value = roots.env.get("CONDA_PREFIX")
    if value and os.path.isdir(os.path.join(value, "conda-meta")):
        return Path(value)
    if os.path.isdir(os.path.join(roots.prefix, "conda-meta")):
        return Path(roots.prefix)
    return None


def _channel(record: dict[str, object]) -> str:
    # "conda-forge", or a channel URL ending in ".../<channel>/<subdir>": keep the channel's own name.
    raw = str(record.get("schannel") or record.get("channel") or "")
    parts = [p for p in raw.rstrip("/").split("/") if p]
    if len(parts) >= 2 and _SUBDIR.fullmatch(parts[-1]):
        return parts[-2]
    return parts[-1] if parts else ""


def _wanted(file_name: str, prefixes: tuple[str, ...]) -> bool:
    # conda-meta names files "<name>-<version>-<build>.json"; the name may itself contain dashes.
    return file_name.endswith(".json") and any(file_name.startswith(p) for p in prefixes)


def read_packages(prefix: Path) -> tuple[CondaPackage, ...]:
    """The CUDA-related package records of ``prefix`` (only the files whose names can match are parsed)."""
    data = compat.load_data("cuda_libs")
    prefixes = tuple(data["conda"]["read_prefixes"])
    lib_prefixes = tuple(data["report_prefixes"])
    try:
        names = sorted(os.listdir(prefix / "conda-meta"))
    except OSError:
        return ()
    packages = []
    for file_name in names:
        if not _wanted(file_name, prefixes):
            continue
        try:
            record = json.loads((prefix / "conda-meta" / file_name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or not record.get("name") or not record.get("version"):
            continue
        files = record.get("files") or []
        libraries = tuple(
            str(f)
            for f in files
            if isinstance(f, str) and any(os.path.basename(f).startswith(p + ".") for p in lib_prefixes)
        )
        packages.append(
            CondaPackage(
                name=str(record["name"]),
                version=str(record["version"]),
                build=str(record.get("build") or ""),
                channel=_channel(record),
                libraries=libraries,
            )
        )
    return tuple(packages)


def _expand(value: str, prefix: Path, env: dict[str, str]) -> list[str]:
    folders = []
    value = _SELF_REFERENCE.sub("", value.split("#", 1)[0].strip().replace("'", "").replace('"', ""))
    for part in value.split(":"):
        part = part.strip()
        if not part:
            continue
        expanded = re.sub(r"\$\{?CONDA_PREFIX\}?", str(prefix), part)
        expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), expanded)
        if "$" in expanded:
            continue  # a command substitution ($(python -c ...)) cannot be evaluated without running it
        folders.append(os.path.normpath(expanded))
    return folders


def read_activation_scripts(prefix: Path, env: dict[str, str]) -> tuple[ActivationScript, ...]:
    """Scripts in ``etc/conda/activate.d`` that assign ``LD_LIBRARY_PATH``, and whether that took effect here."""
    folder = prefix / "etc" / "conda" / "activate.d"
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".sh"))
    except OSError:
        return ()
    current = {os.path.normpath(p) for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p}
    scripts = []
    for name in names:
        try:
            text = (folder / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        lines, folders = [], []
        for line in text.splitlines():
            match = _LD_ASSIGNMENT.fullmatch(line)
            if match:
                lines.append(line.strip())
                folders += _expand(match.group(1), prefix, env)
        if lines:
            scripts.append(
                ActivationScript(
                    path=str(folder / name),
                    lines=tuple(lines),
                    folders=tuple(dict.fromkeys(folders)),
                    applied=all(f in current for f in folders),
                )
            )
    return tuple(scripts)


def probe_conda(roots: ProbeRoots) -> CondaFacts:
    """Collect the conda environment's CUDA packages and activation scripts; empty outside conda."""
    prefix = conda_prefix(roots)
    if prefix is None:
        return CondaFacts()
    return CondaFacts(
        prefix=str(prefix),
        packages=read_packages(prefix),
        activation_scripts=read_activation_scripts(prefix, dict(roots.env)),
    )
