"""CUDA runtime, cuBLAS, cuDNN, NCCL and driver libraries: where they are, their versions, and whether the dynamic
loader can find them by name (``LD_LIBRARY_PATH``, the ``ldconfig`` cache) or only through a package's own path."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tfdist.compat import tables as compat
from tfdist.doctor.facts import Library, LibraryFacts
from tfdist.doctor.roots import ProbeRoots

_LDCONFIG_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$")


def _prefixes() -> tuple[str, ...]:
    return tuple(compat.load_data("cuda_libs")["report_prefixes"])


def _interesting(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def file_version(path: Path) -> str | None:
    """Version in the real file name behind ``path``: ``libcudnn.so.9`` -> ``libcudnn.so.9.1.0`` -> ``"9.1.0"``."""
    try:
        real = os.path.basename(os.path.realpath(path))
    except OSError:
        return None
    _, sep, suffix = real.partition(".so.")
    return suffix if sep and "." in suffix else None


def _scan_dir(folder: Path, origin: str, on_loader_path: bool, prefixes: tuple[str, ...]) -> list[Library]:
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [
        Library(n, str(folder / n), file_version(folder / n), origin, on_loader_path)
        for n in names
        if _interesting(n, prefixes)
    ]


def _ldconfig_entries(roots: ProbeRoots, prefixes: tuple[str, ...]) -> tuple[str | None, list[Library]]:
    ldconfig = roots.which("ldconfig", extra_dirs=("/sbin", "/usr/sbin"))
    if ldconfig is None:
        return None, []
    try:
        done = subprocess.run(
            [ldconfig, "-p"], capture_output=True, text=True, timeout=roots.timeout_s, env=dict(roots.env)
        )
    except (OSError, subprocess.TimeoutExpired):
        return ldconfig, []
    foreign = "x86-64" if roots.machine == "x86_64" else None
    found = []
    for line in done.stdout.splitlines():
        match = _LDCONFIG_LINE.match(line)
        if not match:
            continue
        name, flags, target = match.groups()
        if not _interesting(name, prefixes):
            continue
        if foreign and foreign not in flags:
            continue  # a 32-bit copy in a multiarch system: not what a 64-bit Python loads
        path = roots.path(target)
        found.append(Library(name, str(path), file_version(path), "ld-cache", True))
    return ldconfig, found


def pip_component(dist: str) -> str | None:
    """The site-packages folder: ``nvidia-cudnn-cu12`` -> ``cudnn``, ``nvidia-cuda-runtime-cu12`` -> ``cuda_runtime``.

    Returns ``None`` for names that are not CUDA component wheels.
    """
    match = re.fullmatch(r"nvidia-(.+?)-cu\d+", dist)
    return match.group(1).replace("-", "_") if match else None


def probe_libraries(roots: ProbeRoots, nvidia_wheels: dict[str, str]) -> LibraryFacts:
    """Collect the CUDA-related libraries of this machine and of pip's ``nvidia-*`` wheels.

    Args:
        roots: the machine.
        nvidia_wheels: installed ``nvidia-*`` distribution -> version, to date the wheel libraries.
    """
    prefixes = _prefixes()
    libraries: list[Library] = []
    ld_dirs = [p for p in roots.env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    for folder in ld_dirs:
        libraries += _scan_dir(Path(folder), "LD_LIBRARY_PATH", True, prefixes)
    ldconfig, cached = _ldconfig_entries(roots, prefixes)
    libraries += cached
    loader_dirs = {os.path.realpath(os.path.dirname(lib.path)) for lib in libraries}

    by_component = {pip_component(d): (d, v) for d, v in nvidia_wheels.items() if pip_component(d)}
    pip_ptxas = None
    for site in roots.site_dirs:
        base = site / "nvidia"
        try:
            components = sorted(os.listdir(base))
        except OSError:
            continue
        for component in components:
            dist, version = by_component.get(component, (None, None))
            origin = f"pip:{dist}" if dist else "pip"
            for lib in _scan_dir(base / component / "lib", origin, False, prefixes):
                libraries.append(Library(lib.name, lib.path, lib.version or version, origin, lib.on_loader_path))
            if component == "cuda_nvcc" and (base / component / "bin" / "ptxas").exists():
                pip_ptxas = str(base / component / "bin" / "ptxas")

    toolkits = []
    try:
        local = sorted(p for p in roots.path("/usr/local").iterdir() if p.name.startswith("cuda"))
    except OSError:
        local = []
    for toolkit in local:
        toolkits.append(str(toolkit))
        for sub in ("lib64", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            folder = toolkit / sub
            visible = os.path.realpath(folder) in loader_dirs
            libraries += _scan_dir(folder, "cuda-toolkit", visible, prefixes)
    wsl = roots.path("/usr/lib/wsl/lib")
    libraries += _scan_dir(wsl, "wsl", os.path.realpath(wsl) in loader_dirs, prefixes)
    conda = roots.env.get("CONDA_PREFIX")
    if conda:
        libraries += _scan_dir(
            Path(conda) / "lib", "conda", os.path.realpath(Path(conda) / "lib") in loader_dirs, prefixes
        )

    # The same folder is often reachable twice (/usr/local/cuda -> cuda-13.0): one entry per real folder and name.
    unique: dict[tuple[str, str], Library] = {}
    for lib in libraries:
        unique.setdefault((os.path.realpath(os.path.dirname(lib.path)), lib.name), lib)
    return LibraryFacts(
        libraries=tuple(unique.values()),
        toolkits=tuple(toolkits),
        ptxas=roots.which("ptxas"),
        pip_ptxas=pip_ptxas,
        ldconfig=ldconfig,
    )
