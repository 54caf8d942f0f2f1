"""``mirror status``: which index each tool uses now, and which file or variable says so.

The lookup follows each tool's own precedence (see :mod:`tfdist.mirror.paths`); files tfdist cannot parse are
reported rather than guessed at.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tfdist.errors import ConfigFileError
from tfdist.mirror import condarc, pipconf, uvconf
from tfdist.mirror.catalog import identify, known_conda_bases, load_catalog, official_pypi_index
from tfdist.mirror.fileio import read_text_file
from tfdist.mirror.paths import ConfigPaths


@dataclass(frozen=True)
class ToolStatus:
    """The effective setting of one tool."""

    tool: str
    index: str | None
    mirror: str | None
    source: str
    problems: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)


def _read(path: Path, problems: list[str]) -> str | None:
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return read_text_file(path).text
    except ConfigFileError as error:
        problems.append(error.message)
        return None


def pip_status(paths: ConfigPaths, environ: Mapping[str, str]) -> ToolStatus:
    """pip's effective ``index-url`` and its source."""
    problems: list[str] = []
    if environ.get("PIP_INDEX_URL"):
        url = environ["PIP_INDEX_URL"]
        return ToolStatus("pip", url, identify(url), "environment variable PIP_INDEX_URL")
    index, source = official_pypi_index(), "pip's built-in default"
    if paths.pip_config_file == os.devnull:
        return ToolStatus("pip", index, "official", "PIP_CONFIG_FILE=os.devnull disables config files")
    env_file = paths.pip_env_file()
    files = list(paths.pip_global_files())
    if not (env_file is not None and env_file.exists()):
        files += paths.pip_user_files()
    files.append(paths.pip_site_file())
    if env_file is not None:
        files.append(env_file)
    for path in files:
        text = _read(path, problems)
        if text is None:
            continue
        try:
            value = pipconf.global_index(text, path)
        except ConfigFileError as error:
            problems.append(error.message)
            continue
        if value:
            index, source = value.strip(), str(path)
    return ToolStatus("pip", index, identify(index), source, tuple(problems))


def uv_status(paths: ConfigPaths, environ: Mapping[str, str], cwd: Path | None = None) -> ToolStatus:
    """uv's effective default index and its source (project ``uv.toml`` in ``cwd`` included)."""
    problems: list[str] = []
    for name in ("UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        if environ.get(name):
            return ToolStatus("uv", environ[name], identify(environ[name]), f"environment variable {name}")
    if environ.get("UV_NO_CONFIG"):
        files: list[Path] = []
    elif paths.uv_config_file is not None:
        files = [paths.uv_config_file]
    else:
        files = [(cwd or Path.cwd()) / "uv.toml", paths.uv_user_file(), paths.uv_system_file()]
    for path in files:  # highest priority first
        text = _read(path, problems)
        if text is None:
            continue
        try:
            value = uvconf.default_index(text, path)
        except ConfigFileError as error:
            problems.append(error.message)
            continue
        if value:
            return ToolStatus("uv", value, identify(value), str(path), tuple(problems))
    index = official_pypi_index()
    return ToolStatus("uv", index, "official", "uv's built-in default", tuple(problems))


def conda_status(paths: ConfigPaths) -> ToolStatus:
    """conda's ``default_channels`` and ``custom_channels`` merged over its search path."""
    problems: list[str] = []
    defaults: list[str] | None = None
    defaults_source = None
    custom: dict[str, str] = {}
    sources: list[str] = []
    for path in paths.conda_search_path():  # lowest priority first
        text = _read(path, problems)
        if text is None:
            continue
        try:
            summary = condarc.channel_summary(text, path)
        except ConfigFileError as error:
            problems.append(error.message)
            continue
        if summary.get("default_channels"):
            defaults, defaults_source = [str(u) for u in summary["default_channels"]], str(path)
        if isinstance(summary.get("custom_channels"), dict):
            custom.update({k: str(v) for k, v in summary["custom_channels"].items()})
        if summary:
            sources.append(str(path))
    mirror = _conda_mirror(defaults, custom)
    first = defaults[0] if defaults else (next(iter(custom.values())) if custom else None)
    source = defaults_source or (sources[-1] if sources else "conda's built-in defaults")
    return ToolStatus("conda", first, mirror, source, tuple(problems),
                      {"default_channels": defaults, "custom_channels": custom, "files": sources})


def _conda_mirror(defaults: list[str] | None, custom: dict[str, str]) -> str | None:
    urls = [*(defaults or []), *custom.values()]
    if not urls:
        return "official"
    bases = known_conda_bases()
    for mirror in load_catalog().values():
        own = {u.rstrip("/") for u in [*mirror.conda_default_channels, *mirror.conda_custom_channels.values()]}
        if own and all(u.rstrip("/") in own for u in urls):
            return mirror.name
    if any(u.rstrip("/") in bases for u in urls):
        return "mixed"
    return None


def all_status(paths: ConfigPaths, environ: Mapping[str, str] | None = None) -> list[ToolStatus]:
    """Status of pip, uv and conda."""
    env = os.environ if environ is None else environ
    return [pip_status(paths, env), uv_status(paths, env), conda_status(paths)]
