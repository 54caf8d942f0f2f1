"""Operating system, distribution, kernel, glibc, WSL2, container, Python and its environment."""

from __future__ import annotations

import os
from pathlib import Path

from tfdist.doctor.facts import SystemFacts
from tfdist.doctor.roots import ProbeRoots


def read_text(path: Path, limit: int = 65536) -> str | None:
    """File content, or ``None`` when it cannot be read (missing, permission, not text)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(limit)
    except OSError:
        return None


def _os_release(roots: ProbeRoots) -> str | None:
    for candidate in ("/etc/os-release", "/usr/lib/os-release"):
        text = read_text(roots.path(candidate))
        if text is None:
            continue
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        name = fields.get("PRETTY_NAME") or fields.get("NAME")
        if name:
            return name.strip().strip('"')
    return None


def _container(roots: ProbeRoots) -> str | None:
    if roots.env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if roots.path("/.dockerenv").exists():
        return "docker"
    if roots.path("/run/.containerenv").exists():
        return "podman"
    cgroup = read_text(roots.proc / "1" / "cgroup") or ""
    for marker in ("kubepods", "docker", "containerd", "lxc"):
        if marker in cgroup:
            return "kubernetes" if marker == "kubepods" else marker
    return None


def container_kind(roots: ProbeRoots) -> str | None:
    """The container this machine runs in (docker, podman, kubernetes, containerd, lxc), or None: the doctor's probe,
    also used by ``tfdist setup-gpu``, whose driver must go on the host."""
    return _container(roots) if roots.platform.startswith("linux") else None


def _environment(roots: ProbeRoots) -> tuple[str, str | None]:
    conda = roots.env.get("CONDA_PREFIX")
    if conda and roots.prefix.rstrip("/") == conda.rstrip("/"):
        return "conda", conda
    if roots.prefix != roots.base_prefix:
        return "venv", roots.prefix
    if (Path(roots.prefix) / "conda-meta").is_dir():
        return "conda", roots.prefix
    return "system", None


def probe_system(roots: ProbeRoots, python_executable: str) -> SystemFacts:
    """Collect the OS, kernel, WSL/container and interpreter facts."""
    kernel = (read_text(roots.proc / "sys" / "kernel" / "osrelease") or "").strip() or None
    proc_version = read_text(roots.proc / "version") or ""
    wsl = "microsoft" in proc_version.lower() or bool(roots.env.get("WSL_DISTRO_NAME"))
    environment, prefix = _environment(roots)
    ld_path = tuple(p for p in roots.env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p)
    return SystemFacts(
        platform=roots.platform,
        machine=roots.machine,
        os_name=_os_release(roots) if roots.platform.startswith("linux") else None,
        kernel=kernel,
        glibc=roots.glibc,
        wsl=wsl,
        container=container_kind(roots),
        python_version=roots.python_version,
        python_executable=python_executable,
        environment=environment,
        environment_prefix=prefix,
        cuda_visible_devices=roots.env.get("CUDA_VISIBLE_DEVICES"),
        ld_library_path=ld_path,
        tf_use_legacy_keras=roots.env.get("TF_USE_LEGACY_KERAS"),
    )
