"""The User-Agent each tool sends, so the probe asks a mirror as pip and uv will (issue 35 item 6).

Mirrors filter on it: TUNA's firewall answered pip 26's full User-Agent with HTTP 403 while a bare ``pip/26.1.2`` or
curl got 200 (tuna/issues#2603, #2605: the rule matched ``"implementation":{"name":...,"version":...}`` in the JSON),
and pip then reports "from versions: none". A probe with its own User-Agent would rank such a mirror first.

The formats, as the tools build them:
- pip (``pip._internal.network.session.user_agent``): ``pip/<version> `` + compact JSON with sorted keys:
  installer, python, implementation {name, version}, distro (Linux: name, version, id, libc), system {name,
  release}, cpu, openssl_version, setuptools_version, rustc_version (``rustc --version`` when rustc is on PATH),
  ci (``true`` or ``null``), user_data from ``PIP_USER_AGENT_USER_DATA``. Fields pip leaves out when empty are left
  out here too.
- uv (``crates/uv-client`` ``base_client.rs`` and ``linehaul.rs``): ``uv/<version> `` + serde's JSON of its LineHaul
  struct in field order, nulls kept: installer {name "uv", version, subcommand (uv 0.13: ``["pip", "install"]``
  for ``uv pip install``)}, python, implementation, distro, system, cpu,
  and null openssl_version, setuptools_version, rustc_version; ci is ``true`` or ``null``.

- conda (``conda/base/context.py`` ``Context.user_agent``): ``conda/<version> requests/<version>
  <implementation>/<python> <system>/<release> <distro id>/<version> glibc/<version>`` and, with the libmamba solver
  (conda's default since 23.10), ``solver/libmamba conda-libmamba-solver/<version> libmambapy/<version>``. The
  versions are those of the conda installation's own packages (its ``conda-meta``), not this interpreter's.

Versions are read from the installed tools at run time; the builders are pure.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import shutil
import ssl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

_CI_VARIABLES = ("BUILD_BUILDID", "BUILD_ID", "CI", "PIP_IS_CI")  # pip's looks_like_ci(), copied by uv


@dataclass(frozen=True)
class ClientFacts:
    """What pip and uv put in their User-Agent about the machine and the interpreter."""

    python: str
    implementation: str  # CPython, PyPy
    implementation_version: str
    system: str = ""  # Linux
    release: str = ""  # kernel release
    cpu: str = ""
    distro_name: str = ""  # /etc/os-release NAME
    distro_version: str = ""  # VERSION_ID
    distro_id: str = ""  # VERSION_CODENAME
    libc: tuple[str, str] = ("", "")  # ("glibc", "2.35")
    openssl: str = ""
    setuptools: str | None = None
    rustc: str | None = None
    ci: bool = False
    user_data: str | None = None  # PIP_USER_AGENT_USER_DATA


@dataclass(frozen=True)
class ToolAgent:
    """A tool whose requests the probe imitates."""

    tool: str  # pip, uv
    version: str
    user_agent: str


def pip_user_agent(version: str, facts: ClientFacts) -> str:
    """pip's User-Agent for ``facts``."""
    data: dict[str, Any] = {
        "installer": {"name": "pip", "version": version},
        "python": facts.python,
        "implementation": {"name": facts.implementation, "version": facts.implementation_version},
    }
    if facts.system == "Linux":
        distro = {k: v for k, v in (("name", facts.distro_name), ("version", facts.distro_version),
                                    ("id", facts.distro_id)) if v}
        libc = {k: v for k, v in zip(("lib", "version"), facts.libc) if v}
        if libc:
            distro["libc"] = libc
        if distro:
            data["distro"] = distro
    system = {k: v for k, v in (("name", facts.system), ("release", facts.release)) if v}
    if system:
        data["system"] = system
    if facts.cpu:
        data["cpu"] = facts.cpu
    if facts.openssl:
        data["openssl_version"] = facts.openssl
    if facts.setuptools:
        data["setuptools_version"] = facts.setuptools
    if facts.rustc:
        data["rustc_version"] = facts.rustc
    data["ci"] = True if facts.ci else None
    if facts.user_data is not None:
        data["user_data"] = facts.user_data
    return f"pip/{version} {json.dumps(data, separators=(',', ':'), sort_keys=True)}"


def uv_user_agent(version: str, facts: ClientFacts) -> str:
    """uv's User-Agent for ``facts`` (its LineHaul struct, serialised in field order with nulls)."""
    distro = None
    if facts.system == "Linux":
        lib, libc_version = facts.libc
        distro = {"name": facts.distro_name or "Linux", "version": facts.distro_version, "id": facts.distro_id or None,
                  "libc": {"lib": lib, "version": libc_version} if lib else None}
    data = {
        "installer": {"name": "uv", "version": version, "subcommand": ["pip", "install"]},
        "python": facts.python,
        "implementation": {"name": facts.implementation, "version": facts.python},
        "distro": distro,
        "system": {"name": facts.system, "release": facts.release},
        "cpu": facts.cpu,
        "openssl_version": None,
        "setuptools_version": None,
        "rustc_version": None,
        "ci": True if facts.ci else None,
    }
    return f"uv/{version} {json.dumps(data, separators=(',', ':'))}"


@dataclass(frozen=True)
class CondaInstall:
    """The versions conda's User-Agent names, from the installation's ``conda-meta``."""

    conda: str
    requests: str = "unknown"
    python: str = ""
    libmamba_solver: str | None = None  # conda-libmamba-solver
    libmambapy: str | None = None


def conda_user_agent(install: CondaInstall, facts: ClientFacts, distro_id: str = "") -> str:
    """conda's User-Agent for its installation ``install`` on the machine ``facts`` describes."""
    words = [f"conda/{install.conda} requests/{install.requests}", f"CPython/{install.python or facts.python}",
             f"{facts.system}/{facts.release}", f"{distro_id or facts.distro_name}/{facts.distro_version}"]
    if facts.libc[0]:
        words.append(f"{facts.libc[0]}/{facts.libc[1]}")
    if install.libmamba_solver:
        words.append(f"solver/libmamba conda-libmamba-solver/{install.libmamba_solver} "
                     f"libmambapy/{install.libmambapy or 'unknown'}")
    return " ".join(words)


BUILDERS = {"pip": pip_user_agent, "uv": uv_user_agent}


# ---------------------------------------------------------------------------------------------- this machine


def _os_release(path: Path = Path("/etc/os-release")) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            found[key.strip()] = value.strip().strip("\"'")
    return found


def client_facts(environ: Mapping[str, str] | None = None) -> ClientFacts:
    """This interpreter and machine, as pip would describe them."""
    env = os.environ if environ is None else environ
    implementation = platform.python_implementation()
    version = platform.python_version()
    if implementation == "PyPy":
        info = sys.pypy_version_info  # type: ignore[attr-defined]
        implementation_version = ".".join(str(x) for x in (info[:3] if info.releaselevel == "final" else info))
    else:
        implementation_version = version
    release = _os_release() if sys.platform.startswith("linux") else {}
    try:
        setuptools: str | None = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        setuptools = None
    lib, libc_version = platform.libc_ver()
    rustc = _version_of(shutil.which("rustc", path=env.get("PATH")), r"^rustc (\S+)", timeout=0.5)  # as pip does
    return ClientFacts(
        python=version, implementation=implementation, implementation_version=implementation_version,
        system=platform.system(), release=platform.release(), cpu=platform.machine(),
        distro_name=release.get("NAME", ""), distro_version=release.get("VERSION_ID", ""),
        distro_id=release.get("VERSION_CODENAME", ""), libc=(lib, libc_version), openssl=ssl.OPENSSL_VERSION,
        setuptools=setuptools, rustc=rustc, ci=any(name in env for name in _CI_VARIABLES),
        user_data=env.get("PIP_USER_AGENT_USER_DATA"),
    )


def _version_of(program: str | None, pattern: str, timeout: float = 5.0) -> str | None:
    """``<program> --version``, parsed with ``pattern``; ``None`` when it is absent or does not answer."""
    if not program:
        return None
    try:
        done = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(pattern, done.stdout)
    return match.group(1) if done.returncode == 0 and match else None


def installed_version(tool: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The version of ``tool`` a user here would run: pip of this interpreter (else the one on PATH), the uv on
    PATH (else the one next to this interpreter, else the ``uv`` package's)."""
    path = (os.environ if environ is None else environ).get("PATH")
    if tool == "pip":
        try:
            return importlib.metadata.version("pip")
        except importlib.metadata.PackageNotFoundError:
            return _version_of(shutil.which("pip", path=path), r"^pip (\S+)")
    if tool == "uv":
        beside = Path(sys.executable).parent / "uv"
        program = shutil.which("uv", path=path) or (str(beside) if beside.exists() else None)
        found = _version_of(program, r"^uv (\S+)")
        if found:
            return found
        try:
            return importlib.metadata.version("uv")
        except importlib.metadata.PackageNotFoundError:
            return None
    return None


def conda_install(root: Path | None) -> CondaInstall | None:
    """The conda installation at ``root`` (its ``conda-meta`` records), ``None`` when there is none."""
    if root is None:
        return None
    try:
        records = [p.name for p in (root / "conda-meta").glob("*.json")]
    except OSError:
        return None

    def version(name: str) -> str | None:
        for record in sorted(records):
            rest = record[len(name) + 1:] if record.startswith(name + "-") else ""
            if rest[:1].isdigit():  # conda-libmamba-solver-24.7.0-... is not conda's own record
                return rest.split("-", 1)[0]
        return None

    conda = version("conda")
    if conda is None:
        return None
    return CondaInstall(conda, version("requests") or "unknown", version("python") or "",
                        version("conda-libmamba-solver"), version("libmambapy"))


def agents_for(tools: Sequence[str] = ("pip", "uv"), environ: Mapping[str, str] | None = None,
               conda_root: Path | None = None) -> tuple[ToolAgent, ...]:
    """The User-Agents of the installed ``tools`` (pip first: it answers the speed probe); conda's from the
    installation at ``conda_root``."""
    facts = client_facts(environ)
    agents = []
    for tool in tools:
        builder = BUILDERS.get(tool)
        version = installed_version(tool, environ) if builder else None
        if builder and version:
            agents.append(ToolAgent(tool, version, builder(version, facts)))
        install = conda_install(conda_root) if tool == "conda" else None
        if install is not None:
            distro_id = _os_release().get("ID", "") if facts.system == "Linux" else ""
            agents.append(ToolAgent("conda", install.conda, conda_user_agent(install, facts, distro_id)))
    return tuple(agents)
