"""Who installed each CUDA library: a pip ``nvidia-*`` wheel, a conda package, a Debian package, the WSL2 driver
share, or a toolkit with no package record. A finding names the owner so the user knows what to remove or upgrade."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

from tfdist.compat import tables as compat
from tfdist.doctor.facts import CondaFacts, Library
from tfdist.doctor.roots import ProbeRoots


def _conda_owners(conda: CondaFacts) -> dict[str, str]:
    """Absolute real path -> "conda <name> <version> (<channel>)" for the libraries conda-meta lists."""
    if conda.prefix is None:
        return {}
    owners = {}
    for package in conda.packages:
        label = f"conda {package.name} {package.version}" + (f" ({package.channel})" if package.channel else "")
        for relative in package.libraries:
            owners[os.path.normpath(os.path.join(conda.prefix, relative))] = label
    return owners


def _dpkg_owners(roots: ProbeRoots) -> dict[str, str]:
    """Path -> "dpkg <package> <version>" from ``/var/lib/dpkg/info/*.list`` of CUDA-looking packages only."""
    info = roots.path("/var/lib/dpkg/info")
    try:
        names = os.listdir(info)
    except OSError:
        return {}
    pattern = re.compile(compat.load_data("cuda_libs")["dpkg_owner_pattern"])
    lists = [n for n in names if n.endswith(".list") and pattern.search(n)]
    if not lists:
        return {}
    versions = _dpkg_versions(roots, {n[:-5].split(":")[0] for n in lists})
    owners = {}
    for name in lists:
        package = name[:-5].split(":")[0]
        label = f"dpkg {package} {versions.get(package, '')}".rstrip()
        try:
            text = (info / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if ".so" in line:
                owners[line.strip()] = label
    return owners


def _dpkg_versions(roots: ProbeRoots, packages: set[str]) -> dict[str, str]:
    try:
        text = roots.path("/var/lib/dpkg/status").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    versions = {}
    for stanza in text.split("\n\n"):
        name = re.search(r"^Package: (\S+)", stanza, re.MULTILINE)
        if name and name.group(1) in packages:
            version = re.search(r"^Version: (\S+)", stanza, re.MULTILINE)
            if version:
                versions[name.group(1)] = version.group(1)
    return versions


def _system_path(roots: ProbeRoots, path: str) -> str:
    """``path`` as the machine itself names it (strip the test root prefix)."""
    if roots.is_host:
        return path
    root = str(roots.sys_root)
    return "/" + os.path.relpath(path, root) if path.startswith(root + os.sep) else path


def attribute_owners(roots: ProbeRoots, libraries: list[Library], conda: CondaFacts) -> list[Library]:
    """``libraries`` with :attr:`Library.owner` filled in where a package record (or the layout) says who owns it."""
    conda_owners = _conda_owners(conda)
    dpkg_owners: dict[str, str] | None = None
    result = []
    for lib in libraries:
        owner = lib.owner
        if owner is None and lib.origin.startswith("pip"):
            dist = lib.origin.partition(":")[2]
            owner = f"pip {dist} {lib.version or ''}".rstrip() if dist else "pip wheel"
        if owner is None and conda_owners:
            for candidate in (lib.path, os.path.realpath(lib.path)):
                owner = conda_owners.get(os.path.normpath(candidate))
                if owner:
                    break
        if owner is None and (lib.origin == "wsl" or "/usr/lib/wsl/lib/" in _system_path(roots, lib.path)):
            owner = "Windows NVIDIA driver (WSL2 share /usr/lib/wsl/lib)"
        if owner is None and not lib.origin.startswith("pip"):
            if dpkg_owners is None:
                dpkg_owners = _dpkg_owners(roots)
            if dpkg_owners:
                for candidate in (lib.path, os.path.realpath(lib.path)):
                    owner = dpkg_owners.get(_system_path(roots, candidate))
                    if owner:
                        break
        real = _system_path(roots, os.path.realpath(lib.path))
        if owner is None and real.startswith("/usr/local/cuda"):
            owner = "CUDA toolkit " + "/".join(Path(real).parts[:4]).replace("//", "/")  # /usr/local/cuda-13.0
        result.append(replace(lib, owner=owner) if owner != lib.owner else lib)
    return result
