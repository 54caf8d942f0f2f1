"""``mirror env``: the environment variables that point pip, uv and conda at a mirror, for CI and containers,
where editing per-user config files is the wrong tool."""
from __future__ import annotations

import shlex
from urllib.parse import urlsplit

from tfdist.mirror.catalog import Mirror


def mirror_environment(mirror: Mirror) -> dict[str, str]:
    """Return the variables (in a stable order) that make pip and uv use ``mirror``'s index.

    ``PIP_TRUSTED_HOST`` and ``UV_INSECURE_HOST`` are only added for a plain-http index (given with
    ``--allow-insecure``); certificate checks are never turned off for https.
    Conda takes channels from ``.condarc`` (its maps cannot be set from the environment), so only
    ``CONDA_DEFAULT_CHANNELS`` is given when the mirror carries the default channels.
    """
    env: dict[str, str] = {}
    if mirror.pip_index:
        env["PIP_INDEX_URL"] = mirror.pip_index
        env["UV_DEFAULT_INDEX"] = mirror.pip_index
        parts = urlsplit(mirror.pip_index)
        if parts.scheme == "http" and parts.hostname:
            host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
            env["PIP_TRUSTED_HOST"] = host
            env["UV_INSECURE_HOST"] = host
    if mirror.conda_default_channels:
        env["CONDA_DEFAULT_CHANNELS"] = ",".join(mirror.conda_default_channels)
    return env


def shell_lines(env: dict[str, str]) -> str:
    """``export NAME=value`` lines, quoted for POSIX shells."""
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())


def dockerfile_snippet(mirror: Mirror, env: dict[str, str]) -> str:
    """A Dockerfile ``ENV`` instruction setting ``env`` (one instruction, one layer)."""
    if not env:
        return f"# {mirror.name}: nothing to set\n"
    items = [f'{name}="{value}"' for name, value in env.items()]
    body = " \\\n    ".join(items)
    return f"# Package mirror: {mirror.title} (tfdist mirror env {mirror.name} --dockerfile)\nENV {body}\n"
