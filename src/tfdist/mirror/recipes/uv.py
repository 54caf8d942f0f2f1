"""uv: ``UV_DEFAULT_INDEX`` / ``UV_INDEX_URL``, then the project's ``uv.toml`` or ``pyproject.toml [tool.uv]``,
the user's and the system's ``uv.toml``.

uv's documented precedence (docs.astral.sh/uv/concepts/configuration-files): the project file is the nearest
``uv.toml`` or ``pyproject.toml`` with a ``[tool.uv]`` table in the working directory or a parent (``uv.toml`` wins
in the same directory); then ``$XDG_CONFIG_HOME/uv/uv.toml``; then the first of ``$XDG_CONFIG_DIRS/uv/uv.toml`` and
``/etc/uv/uv.toml``. ``UV_CONFIG_FILE`` replaces them all, ``UV_NO_CONFIG`` disables them; environment variables
beat files. Arrays (``[[index]]``) are merged, project first, and uv uses the first ``default = true`` entry; the
``[[index]]`` entries of every file come before the legacy ``index-url`` settings. ``UV_DEFAULT_INDEX`` comes first
everywhere; ``UV_INDEX_URL`` comes first for ``uv pip`` but, for project commands (``uv lock``/``sync``), only
replaces the legacy ``index-url`` after every ``[[index]]`` default. (Checked against uv's own ``--show-settings``
for both interfaces and against which loopback index ``uv pip compile`` contacts, in the tests.)
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfdist.errors import ConfigFileError
from tfdist.mirror import uvconf
from tfdist.mirror.urls import mask_secrets
from tfdist.mirror.recipes.base import BUILT_IN, Context, Edit, Effective, ToolView, index_environment

if TYPE_CHECKING:
    from tfdist.mirror.catalog import Mirror
    from tfdist.mirror.paths import ConfigPaths, Scope

PIP_INTERFACE = "uv pip"
PROJECT = "uv lock/sync"
COMMANDS = (PIP_INTERFACE, PROJECT)
ENV_DEFAULT, ENV_LEGACY = "UV_DEFAULT_INDEX", "UV_INDEX_URL"


def project_file(cwd: Path) -> Path | None:
    """The project configuration uv reads from ``cwd``: the nearest uv.toml, or pyproject.toml with [tool.uv]."""
    for directory in (cwd, *cwd.parents):
        if (directory / "uv.toml").is_file():
            return directory / "uv.toml"
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file():
            try:
                import tomllib

                if "uv" in tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}):
                    return pyproject
            except (OSError, ValueError):
                continue
    return None


def _table(text: str, path: Path) -> Any:
    document = uvconf.parse(text, path)
    if path.name == "pyproject.toml":
        return document.get("tool", {}).get("uv", {})
    return document


def _line(text: str, pattern: str) -> int:
    match = re.search(pattern, text, flags=re.MULTILINE)
    return text[: match.start()].count("\n") + 1 if match else 0


class UvRecipe:
    """uv's files and variables."""

    name = "uv"

    def target(self, paths: "ConfigPaths", scope: "Scope") -> Path:
        return paths.uv_file(scope)

    def skip_reason(self, mirror: "Mirror", scope: "Scope", paths: "ConfigPaths") -> str | None:
        if not mirror.pip_index:
            return f"{mirror.name} has no PyPI mirror"
        if scope == "site" and paths.uv_config_file is None:
            return "uv has no per-environment config file"
        return None

    def files(self, context: Context) -> list[Path]:
        """The files uv reads, highest priority first."""
        env, paths = context.environ, context.paths
        if env.get("UV_NO_CONFIG"):
            return []
        if paths.uv_config_file is not None:
            return [paths.uv_config_file]
        project = project_file(context.cwd)
        return [*([project] if project else []), paths.uv_user_file(), paths.uv_system_file()]

    def effective(self, context: Context) -> list[Effective]:
        from tfdist.mirror.catalog import official_pypi_index

        env = context.environ
        if env.get(ENV_DEFAULT):
            return [Effective("uv", c, env[ENV_DEFAULT], f"environment variable {ENV_DEFAULT}") for c in COMMANDS]
        from_env = (env[ENV_LEGACY], f"environment variable {ENV_LEGACY}") if env.get(ENV_LEGACY) else None
        defaults: list[tuple[str, str]] = []
        legacy: dict[str, tuple[str, str]] = {}  # key -> value, source (highest-priority file wins)
        for path in self.files(context):
            text = context.text(path)
            if text is None:
                continue
            try:
                table = _table(text, path)
            except ConfigFileError as error:
                context.problems.append(error.message)
                continue
            for entry in table.get("index", []) or []:
                if entry.get("default") is True and entry.get("url"):
                    url = str(entry["url"])
                    defaults.append((url, f"{path}:{_line(text, re.escape(url))} [[index]]"))
            if table.get("index-url") and "index-url" not in legacy:
                legacy["index-url"] = (str(table["index-url"]), f"{path}:{_line(text, r'^index-url')} index-url")
            pip_table = table.get("pip")
            if isinstance(pip_table, dict) and pip_table.get("index-url") and "pip" not in legacy:
                header = _line(text, r"^\[pip\]")
                below = "\n".join(text.split("\n")[header:]) if header else text
                line = header + _line(below, r"^\s*index-url") if header else 0
                legacy["pip"] = (str(pip_table["index-url"]), f"{path}:{line} [pip] index-url")
        if from_env is not None:
            legacy["index-url"] = from_env  # the variable replaces the files' legacy index-url
        result = []
        for command in COMMANDS:
            # `uv pip` puts UV_INDEX_URL first; project commands treat it as the legacy setting, after every
            # [[index]] default (both read from uv's own --show-settings).
            candidates = [from_env] if command == PIP_INTERFACE and from_env is not None else []
            candidates += defaults
            if command == PIP_INTERFACE and "pip" in legacy:
                candidates.append(legacy["pip"])
            if "index-url" in legacy:
                candidates.append(legacy["index-url"])
            if candidates:
                result.append(Effective("uv", command, *candidates[0]))
            else:
                result.append(Effective("uv", command, official_pypi_index(), f"uv's {BUILT_IN}"))
        return result

    def wanted(self, mirror: "Mirror") -> dict[str, str | None]:
        return {command: mirror.pip_index for command in COMMANDS}

    def edit(self, text: str, bom: bool, mirror: "Mirror", path: Path, context: Context) -> Edit:
        done = uvconf.set_default_index(text, mirror.pip_index or "", mirror.name, path)
        notes = list(done.notes)
        extras = extra_indexes(self.files(context), context, path, done.text)
        if extras:
            listed = mask_secrets(", ".join(extras))
            notes.append(f"uv also has extra index{'es' if len(extras) > 1 else ''} {listed}, asked before "
                         f"{mirror.name}: uv takes each package from the first index that has it, so a stale one "
                         "breaks installs (Comfy-Desktop#184); check or remove it")
        if bom:
            notes.append("removed the UTF-8 byte-order mark, which TOML does not allow")
        return Edit(done.text, tuple(notes), keep_bom=False)

    def ask_tool(self, context: Context) -> ToolView:
        from tfdist.mirror.catalog import official_pypi_index

        uv = shutil.which("uv", path=context.environ.get("PATH")) or str(Path(sys.executable).parent / "uv")
        if not Path(uv).exists():
            return ToolView(unavailable="uv is not installed here, so uv's own view was not checked")
        found = []
        # --show-settings prints the resolved settings and exits: nothing is resolved, locked or written.
        for command, argv in ((PIP_INTERFACE, ["pip", "compile", "--show-settings", "/dev/null"]),
                              (PROJECT, ["lock", "--show-settings"])):
            try:
                done = subprocess.run([uv, *argv], env=dict(context.environ), cwd=context.cwd, capture_output=True,
                                      text=True, timeout=60, check=False)
            except (OSError, subprocess.TimeoutExpired) as error:
                return ToolView(unavailable=f"could not run uv ({error})")
            index = parse_show_settings(done.stdout)
            if done.returncode != 0 or index is False:
                return ToolView(unavailable=f"uv did not report its settings (uv {' '.join(argv)})")
            found.append(Effective("uv", command, index or official_pypi_index(), f"uv {' '.join(argv)}"))
        return ToolView(effective=tuple(found))

    def followups(self) -> list[str]:
        return []

    def environment(self, mirror: "Mirror") -> dict[str, str]:
        return index_environment(mirror, ENV_DEFAULT, "UV_INSECURE_HOST")


def extra_indexes(files: list[Path], context: Context, edited: Path, edited_text: str) -> list[str]:
    """The indexes uv consults before its default one: non-default, non-explicit ``[[index]]`` entries and the
    legacy ``extra-index-url`` of every file it reads (``edited`` as it will be), then ``UV_INDEX`` and
    ``UV_EXTRA_INDEX_URL`` (uv's docs: indexes are asked in order, the default last, and with the default
    ``--index-strategy first-index`` a package comes only from the first index that has it)."""
    found: list[str] = []
    for path in files:
        text = edited_text if path == edited else context.text(path)
        if text is None:
            continue
        try:
            table = _table(text, path)
        except ConfigFileError:
            continue  # effective() reports it
        for entry in table.get("index", []) or []:
            if isinstance(entry, dict) and entry.get("url") and not entry.get("default") and not entry.get("explicit"):
                found.append(str(entry["url"]))
        pip_table = table.get("pip") if isinstance(table.get("pip"), dict) else {}
        for value in (table.get("extra-index-url"), pip_table.get("extra-index-url")):
            found += [str(v) for v in ([value] if isinstance(value, str) else value or [])]
    env = context.environ
    for word in env.get("UV_INDEX", "").split():
        found.append(word.split("=", 1)[1] if re.match(r"^[A-Za-z0-9._-]+=", word) else word)
    found += env.get("UV_EXTRA_INDEX_URL", "").split()
    return list(dict.fromkeys(found))


def parse_show_settings(text: str) -> str | None | bool:
    """The default index in uv's ``--show-settings`` output: the first ``Index`` with ``default: true``;
    ``None`` when there is none (uv's built-in default), ``False`` when the output has no index settings."""
    start = text.find("index_locations: IndexLocations {")
    if start < 0:
        return False
    block = text[start:]
    block = block[: block.find("flat_index:")]
    for entry in re.split(r"\n\s*Index \{", block)[1:]:
        given = re.search(r'given: Some\(\s*"((?:[^"\\]|\\.)*)"', entry)
        if re.search(r"\n\s*default: true", entry) and given:
            return given.group(1)
    return None
