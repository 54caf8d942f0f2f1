"""Which configuration file each tool (pip, uv, conda) reads and writes for each scope.

Everything is derived from an injectable :class:`ConfigPaths`, built from the environment by
:meth:`ConfigPaths.from_env`, so tests (and ``--root``) never touch the machine's real ``/etc``.

Rules mirror the tools' own code:

* pip (``pip/_internal/configuration.py``): ``pip config --user`` edits the last user file
  (``$XDG_CONFIG_HOME/pip/pip.conf``) unless ``PIP_CONFIG_FILE`` names an existing file, which it then edits;
  ``--global`` edits the last global file (``/etc/pip.conf``, after ``$XDG_CONFIG_DIRS/pip/pip.conf``);
  ``--site`` edits ``sys.prefix/pip.conf`` of the environment.
* uv: ``UV_CONFIG_FILE`` replaces discovery; user ``$XDG_CONFIG_HOME/uv/uv.toml``; system: the first existing
  ``$XDG_CONFIG_DIRS/uv/uv.toml``, else ``/etc/uv/uv.toml``. uv has no per-environment file.
* conda: user ``$CONDARC`` if set (the highest-priority file), else ``~/.condarc``; global: the conda installation's
  root ``.condarc`` when known, else ``/etc/conda/.condarc``; site: ``$CONDA_PREFIX/.condarc`` (``conda config --env``).
"""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping

from tfdist.errors import UsageError
from tfdist.statedir import state_dir as tfdist_state_dir

Tool = Literal["pip", "uv", "conda"]
Scope = Literal["user", "global", "site"]
TOOLS: tuple[Tool, ...] = ("pip", "uv", "conda")
SCOPES: tuple[Scope, ...] = ("user", "global", "site")


@dataclass(frozen=True)
class ConfigPaths:
    """The directories and overrides that decide where configuration lives.

    Attributes:
        home: the user's home directory.
        xdg_config_home: ``$XDG_CONFIG_HOME`` or ``~/.config``.
        xdg_config_dirs: ``$XDG_CONFIG_DIRS`` split, or ``(/etc/xdg,)``.
        etc_dir: the system configuration directory (``/etc``; a different root under ``--root``).
        prefix: the Python environment whose site file is meant (``$VIRTUAL_ENV`` or ``sys.prefix``).
        pip_config_file: ``$PIP_CONFIG_FILE`` if set.
        uv_config_file: ``$UV_CONFIG_FILE`` if set.
        condarc: ``$CONDARC`` if set.
        conda_prefix: ``$CONDA_PREFIX`` (the active conda environment) if set.
        conda_root: the conda installation's root prefix, if known (``$CONDA_ROOT``, ``$CONDA_EXE``, ``conda`` on PATH).
        state_dir: where tfdist keeps backups and its manifest.
    """

    home: Path
    xdg_config_home: Path
    xdg_config_dirs: tuple[Path, ...]
    etc_dir: Path
    prefix: Path
    pip_config_file: str | None = None
    uv_config_file: Path | None = None
    condarc: Path | None = None
    conda_prefix: Path | None = None
    conda_root: Path | None = None
    state_dir: Path | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, root: Path | None = None) -> "ConfigPaths":
        """Build the paths from environment variables.

        Args:
            environ: the environment to read (default ``os.environ``).
            root: an alternative filesystem root for system-wide files (``/etc`` becomes ``root/etc``), e.g. an image
                being prepared; user files still follow HOME.
        """
        env = os.environ if environ is None else environ
        home = Path(env.get("HOME") or os.path.expanduser("~"))
        xdg_home = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
        etc = (root / "etc") if root else Path("/etc")
        dirs_value = "" if root else env.get("XDG_CONFIG_DIRS", "")
        xdg_dirs = tuple(Path(p) for p in dirs_value.split(os.pathsep) if p) or (etc / "xdg",)
        prefix = Path(env["VIRTUAL_ENV"]) if env.get("VIRTUAL_ENV") else Path(sys.prefix)
        return cls(
            home=home,
            xdg_config_home=xdg_home,
            xdg_config_dirs=xdg_dirs,
            etc_dir=etc,
            prefix=prefix,
            pip_config_file=env.get("PIP_CONFIG_FILE") or None,
            uv_config_file=Path(env["UV_CONFIG_FILE"]) if env.get("UV_CONFIG_FILE") else None,
            condarc=Path(env["CONDARC"]) if env.get("CONDARC") else None,
            conda_prefix=Path(env["CONDA_PREFIX"]) if env.get("CONDA_PREFIX") else None,
            conda_root=_conda_root(env),
            state_dir=tfdist_state_dir(env) / "mirror",
        )

    @property
    def backup_dir(self) -> Path:
        """Directory holding backups and ``manifest.json``."""
        return self.state_dir or (self.home / ".local" / "state" / "tfdist" / "mirror")

    # ---- pip -------------------------------------------------------------------------------------------------
    def pip_global_files(self) -> list[Path]:
        """pip's global files in load order (later ones win)."""
        return [d / "pip" / "pip.conf" for d in self.xdg_config_dirs] + [self.etc_dir / "pip.conf"]

    def pip_user_files(self) -> list[Path]:
        """pip's user files in load order: the legacy ``~/.pip/pip.conf``, then the XDG one."""
        return [self.home / ".pip" / "pip.conf", self.xdg_config_home / "pip" / "pip.conf"]

    def pip_site_file(self) -> Path:
        """The environment's ``pip.conf``."""
        return self.prefix / "pip.conf"

    def pip_env_file(self) -> Path | None:
        """``PIP_CONFIG_FILE`` unless unset or ``os.devnull`` (which disables every file)."""
        if not self.pip_config_file or self.pip_config_file == os.devnull:
            return None
        return Path(self.pip_config_file)

    def pip_file(self, scope: Scope) -> Path:
        """The file ``pip config --<scope> set`` would edit."""
        if self.pip_config_file == os.devnull and scope != "site":
            raise UsageError(
                "PIP_CONFIG_FILE is os.devnull, which disables pip's configuration files",
                hint="unset PIP_CONFIG_FILE, or use 'tfdist mirror env' for environment variables",
                reference="mirror-pip-config-disabled",
            )
        env_file = self.pip_env_file()
        if scope == "user":
            if env_file is not None and env_file.exists():
                return env_file
            return self.pip_user_files()[-1]
        if scope == "global":
            return self.pip_global_files()[-1]
        return self.pip_site_file()

    # ---- uv --------------------------------------------------------------------------------------------------
    def uv_user_file(self) -> Path:
        """uv's user-level ``uv.toml``."""
        return self.xdg_config_home / "uv" / "uv.toml"

    def uv_system_file(self) -> Path:
        """The system ``uv.toml`` uv reads: the first existing XDG one, else ``/etc/uv/uv.toml``."""
        for directory in self.xdg_config_dirs:
            candidate = directory / "uv" / "uv.toml"
            if candidate.is_file():
                return candidate
        return self.etc_dir / "uv" / "uv.toml"

    def uv_file(self, scope: Scope) -> Path:
        """The ``uv.toml`` that makes the setting take effect for ``scope``.

        Raises:
            UsageError: scope ``site``, since uv has no per-environment configuration file.
        """
        if self.uv_config_file is not None:
            return self.uv_config_file  # uv then reads this file only
        if scope == "user":
            return self.uv_user_file()
        if scope == "global":
            return self.uv_system_file()
        raise UsageError(
            "uv has no per-environment configuration file",
            hint="use --scope user or global for uv, or 'tfdist mirror env' for UV_DEFAULT_INDEX",
            reference="mirror-uv-no-site",
        )

    # ---- conda -----------------------------------------------------------------------------------------------
    def conda_file(self, scope: Scope) -> Path:
        """The ``.condarc`` to edit for ``scope``.

        Raises:
            UsageError: scope ``site`` without an active conda environment.
        """
        if scope == "user":
            return self.condarc or (self.home / ".condarc")
        if scope == "global":
            if self.conda_root is not None:
                return self.conda_root / ".condarc"
            return self.etc_dir / "conda" / ".condarc"
        if self.conda_prefix is None:
            raise UsageError(
                "no conda environment is active (CONDA_PREFIX is not set)",
                hint="activate the environment first, or use --scope user",
                reference="mirror-conda-no-env",
            )
        return self.conda_prefix / ".condarc"

    def conda_search_path(self) -> list[Path]:
        """conda's configuration files in increasing priority (conda/base/constants.py ``SEARCH_PATH``)."""
        files: list[Path] = []
        files += [self.etc_dir / "conda" / ".condarc", self.etc_dir / "conda" / "condarc"]
        if self.conda_root is not None:
            files += [self.conda_root / ".condarc", self.conda_root / "condarc"]
        files += [self.xdg_config_home / "conda" / ".condarc", self.xdg_config_home / "conda" / "condarc"]
        files += [self.home / ".conda" / ".condarc", self.home / ".conda" / "condarc", self.home / ".condarc"]
        if self.conda_prefix is not None:
            files += [self.conda_prefix / ".condarc", self.conda_prefix / "condarc"]
        if self.condarc is not None:
            files.append(self.condarc)
        seen: set[Path] = set()
        return [f for f in files if not (f in seen or seen.add(f))]



def _conda_root(env: Mapping[str, str]) -> Path | None:
    if env.get("CONDA_ROOT"):
        return Path(env["CONDA_ROOT"])
    exe = env.get("CONDA_EXE") or shutil.which("conda", path=env.get("PATH"))
    if exe:
        # <root>/bin/conda or <root>/condabin/conda
        return Path(exe).resolve().parent.parent
    return None


def parse_tools(value: str | None) -> tuple[Tool, ...] | None:
    """Parse ``--tool pip,uv`` into a tuple; ``None`` (not given) means "the default set".

    Raises:
        UsageError: an unknown tool name.
    """
    if value is None or not value.strip():
        return None
    tools: list[Tool] = []
    for word in value.replace(" ", ",").split(","):
        word = word.strip().lower()
        if not word:
            continue
        if word not in TOOLS:
            raise UsageError(f"unknown tool {word!r}", hint=f"choose from {', '.join(TOOLS)}")
        if word not in tools:
            tools.append(word)  # type: ignore[arg-type]
    return tuple(tools)
