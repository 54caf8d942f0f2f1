"""``mirror env``: the environment variables that point pip, uv and conda at a mirror, for CI and containers,
where editing per-user config files is the wrong tool."""
from __future__ import annotations

from tfdist import quote
from tfdist.errors import UsageError
from tfdist.mirror.catalog import Mirror
from tfdist.mirror.urls import has_credentials


def mirror_environment(mirror: Mirror) -> dict[str, str]:
    """Return the variables (in a stable order) that make pip, uv and conda use ``mirror``; each tool's variables
    come from its recipe.

    ``PIP_TRUSTED_HOST`` and ``UV_INSECURE_HOST`` are only added for a plain-http index (given with
    ``--allow-insecure``); certificate checks are never turned off for https.
    Conda takes channels from ``.condarc`` (its maps cannot be set from the environment), so only
    ``CONDA_DEFAULT_CHANNELS`` is given when the mirror carries the default channels.
    """
    from tfdist.mirror.recipes import RECIPES

    env: dict[str, str] = {}
    for recipe in RECIPES.values():
        env.update(recipe.environment(mirror))
    return env


def comment_line(text: str) -> str:
    """A ``#`` comment line; text that would end the line early (newline, CR, other controls) is refused."""
    return f"# {quote.comment(text, 'mirror title')}\n"


def shell_lines(env: dict[str, str], title: str | None = None) -> str:
    """``export NAME=value`` lines (every value quoted for POSIX shells), after an optional one-line comment."""
    head = comment_line(title) if title is not None else ""
    return head + "".join(f"export {name}={quote.shell(value, name)}\n" for name, value in env.items())


def _dockerfile_value(value: str) -> str:
    """A double-quoted Dockerfile word: backslash, quote and ``$`` (variable expansion) escaped; no line breaks."""
    if any(c in value for c in "\r\n") or any(ord(c) < 0x20 for c in value):
        raise UsageError("a mirror value contains a line break or control character",
                         hint="give a URL without them", reference="mirror-url-invalid")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def dockerfile_snippet(mirror: Mirror, env: dict[str, str]) -> str:
    """A Dockerfile ``ENV`` instruction setting ``env`` (one instruction, one layer)."""
    if not env:
        return comment_line(f"{mirror.name}: nothing to set")
    if any(has_credentials(value) for value in env.values()):
        raise UsageError("the index URL holds a password, which an ENV instruction would keep in every image layer",
                         hint="pass it at build time as a secret (RUN --mount=type=secret) instead of --dockerfile",
                         reference="mirror-dockerfile-secret")
    items = [f"{name}={_dockerfile_value(value)}" for name, value in env.items()]
    body = " \\\n    ".join(items)
    return comment_line(f"Package mirror: {mirror.title} (tfdist mirror env {mirror.name} --dockerfile)") + \
        f"ENV {body}\n"
