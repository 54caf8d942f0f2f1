"""Where the probes look. Every path, variable and interpreter fact the doctor reads comes through
:class:`ProbeRoots`, so a test can point the whole doctor at a fake machine (a temporary root with ``/proc`` text,
library files, dist-info folders and a fake ``nvidia-smi`` on ``PATH``) and run it end to end."""

from __future__ import annotations

import os
import sys
from dataclasses import field
from pathlib import Path
from typing import Mapping

from tfdist.frozen import frozen

_NVML_LIBRARY = "libnvidia-ml.so.1"


def _glibc() -> str | None:
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"; cheaper than platform.libc_ver()
    except (AttributeError, ValueError, OSError):
        return None
    if value and value.startswith("glibc "):
        return value.split()[1]
    return None


def _site_dirs() -> tuple[Path, ...]:
    return tuple(Path(p) for p in sys.path if p and os.path.isdir(p))


@frozen
class ProbeRoots:
    """The machine the doctor inspects.

    Attributes:
        proc: the ``/proc`` folder (``driver/nvidia/version``, ``version``, ``1/cgroup``).
        sys_root: prefix for absolute system paths: ``/etc``, ``/usr/local/cuda*``, ``/sys/bus/pci``, ``/dev``,
            ``/usr/lib/wsl``, ``/sbin/ldconfig``, and the paths ``ldconfig -p`` prints.
        env: environment variables (``PATH``, ``LD_LIBRARY_PATH``, ``CUDA_VISIBLE_DEVICES``, ``VIRTUAL_ENV``...).
        site_dirs: import path folders searched for distributions and packages, in ``sys.path`` order.
        python_version: the interpreter version, ``"3.11.9"``.
        platform: ``sys.platform`` of the machine (``linux``, ``win32``, ``darwin``).
        machine: CPU architecture (``x86_64``).
        glibc: the C library version, ``None`` when not glibc.
        prefix / base_prefix: ``sys.prefix`` and ``sys.base_prefix`` (a venv when they differ).
        nvml_library: the NVML library to try first; ``None`` skips NVML (then ``nvidia-smi`` on PATH is used).
        timeout_s: limit for each external command.
        python_executable: the interpreter whose environment is inspected (and used by ``--verify``).
    """

    proc: Path = Path("/proc")
    sys_root: Path = Path("/")
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    site_dirs: tuple[Path, ...] = field(default_factory=_site_dirs)
    python_version: str = field(default_factory=lambda: ".".join(str(p) for p in sys.version_info[:3]))
    platform: str = sys.platform
    machine: str = field(default_factory=lambda: os.uname().machine if hasattr(os, "uname") else "")
    glibc: str | None = field(default_factory=_glibc)
    prefix: str = sys.prefix
    base_prefix: str = sys.base_prefix
    nvml_library: str | None = _NVML_LIBRARY
    timeout_s: float = 10.0
    python_executable: str = sys.executable

    @property
    def is_host(self) -> bool:
        """Whether this describes the real machine (system paths are used as they are)."""
        return self.sys_root == Path("/")

    def path(self, absolute: str | os.PathLike[str]) -> Path:
        """Map an absolute system path into :attr:`sys_root` (identity on the real machine)."""
        text = os.fspath(absolute)
        return self.sys_root / text.lstrip("/") if not self.is_host else Path(text)

    def which(self, program: str, *, extra_dirs: tuple[str, ...] = ()) -> str | None:
        """Find ``program`` on this machine's ``PATH`` (and ``extra_dirs`` under :attr:`sys_root`)."""
        search = [p for p in self.env.get("PATH", "").split(os.pathsep) if p]
        search += [str(self.path(d)) for d in extra_dirs]
        # A plain loop instead of shutil.which: importing shutil pulls in compression modules (start-up time).
        suffixes = [""]
        if self.platform == "win32":
            suffixes += [e.lower() for e in self.env.get("PATHEXT", ".EXE;.BAT;.CMD").split(";") if e]
        for folder in search:
            for suffix in suffixes:
                candidate = os.path.join(folder, program + suffix)
                if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                    return candidate
        return None


def machine_roots() -> ProbeRoots:
    """The machine this process runs on: what ``tfdist doctor`` inspects (tests substitute a built machine here)."""
    return ProbeRoots()
