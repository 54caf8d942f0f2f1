"""The package index pip will use, read cheaply from ``PIP_INDEX_URL`` and pip's configuration files (read only:
this never writes or runs pip)."""

from __future__ import annotations

import os
from pathlib import Path

from tfdist.doctor.roots import ProbeRoots


def _config_files(roots: ProbeRoots) -> list[Path]:
    env = roots.env
    home = Path(env.get("HOME", "~")).expanduser()
    xdg_dirs = [d for d in env.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep) if d]
    files = [roots.path(Path(d) / "pip" / "pip.conf") for d in xdg_dirs]
    files.append(roots.path("/etc/pip.conf"))
    files.append(home / ".pip" / "pip.conf")
    files.append(Path(env.get("XDG_CONFIG_HOME", str(home / ".config"))) / "pip" / "pip.conf")
    files.append(Path(roots.prefix) / "pip.conf")
    if env.get("PIP_CONFIG_FILE"):
        files.append(Path(env["PIP_CONFIG_FILE"]))
    return files


def configured_index_url(roots: ProbeRoots) -> tuple[str | None, str | None]:
    """The index URL pip would use if it is not pip's default, and where it was set.

    Returns:
        (url, source): ``source`` is ``"PIP_INDEX_URL"`` or the config file path; ``(None, None)`` when pip uses its
        built-in default index.
    """
    if roots.env.get("PIP_INDEX_URL"):
        return roots.env["PIP_INDEX_URL"], "PIP_INDEX_URL"
    if roots.env.get("PIP_CONFIG_FILE") == os.devnull:
        return None, None
    import configparser  # only for --recommend

    url = source = None
    for path in _config_files(roots):
        parser = configparser.RawConfigParser()
        try:
            if not parser.read(path, encoding="utf-8"):
                continue
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        for section in ("global", "install"):  # later files and the install section override
            if parser.has_option(section, "index-url"):
                url, source = parser.get(section, "index-url").strip(), str(path)
    return url, source
