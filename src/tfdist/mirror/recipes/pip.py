"""pip: ``[global]`` then the command's own section, over global, user, site and ``PIP_CONFIG_FILE`` files, then
``PIP_*`` variables.

The rules are pip's own (``pip/_internal/configuration.py`` and ``cli/parser.py``): files load in the order global
(``$XDG_CONFIG_DIRS/pip/pip.conf`` then ``/etc/pip.conf``), user (legacy ``~/.pip/pip.conf`` then
``$XDG_CONFIG_HOME/pip/pip.conf``; skipped when ``PIP_CONFIG_FILE`` names an existing file), site
(``<prefix>/pip.conf``), ``PIP_CONFIG_FILE``; a later file overrides a key of an earlier one (an empty value
included, which then means "unset"); options then apply section by section: ``[global]``, the command's section
(``[install]``...), then ``PIP_INDEX_URL``. So ``[install] index-url`` in ``/etc/pip.conf`` beats ``[global]
index-url`` in the user file for ``pip install``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tfdist.mirror import pipconf
from tfdist.mirror.recipes.base import BUILT_IN, Context, Edit, Effective, ToolView, index_environment

if TYPE_CHECKING:
    from tfdist.mirror.catalog import Mirror
    from tfdist.mirror.paths import ConfigPaths, Scope

COMMANDS = ("install", "download", "wheel", "index")
ENV_INDEX = "PIP_INDEX_URL"

# Run by the target Python: pip's own option parser, with its config files and environment, for each command.
_ASK_PIP = """
import json, sys
sys.prefix = sys.argv[1]  # pip's site file is <sys.prefix>/pip.conf: the environment being configured
from pip._internal.commands import create_command
out = {}
for name in sys.argv[2:]:
    options, _ = create_command(name).parse_args([])
    out[name] = options.index_url
print(json.dumps(out))
"""


class PipRecipe:
    """pip's files, sections and variables."""

    name = "pip"

    def target(self, paths: "ConfigPaths", scope: "Scope") -> Path:
        return paths.pip_file(scope)

    def skip_reason(self, mirror: "Mirror", scope: "Scope", paths: "ConfigPaths") -> str | None:
        return None if mirror.pip_index else f"{mirror.name} has no PyPI mirror"

    def files(self, context: Context) -> list[Path]:
        """Every file pip loads, lowest priority first."""
        paths = context.paths
        if paths.pip_config_file == os.devnull:
            return []
        env_file = paths.pip_env_file()
        files = list(paths.pip_global_files())
        if not (env_file is not None and (env_file.exists() or env_file in context.overlay)):
            files += paths.pip_user_files()
        files.append(paths.pip_site_file())
        if env_file is not None:
            files.append(env_file)
        return files

    def _settings(self, context: Context, skip: Path | None = None) -> dict[str, tuple[str, str]]:
        """``{section: (value, "file:line")}`` after pip's file merge (later files win, empty values included)."""
        merged: dict[str, tuple[str, str]] = {}
        for path in self.files(context):
            if skip is not None and path == skip:
                continue
            text = context.text(path)
            if text is None:
                continue
            try:
                found = pipconf.index_lines(text, path)
            except Exception as error:  # noqa: BLE001 - ConfigFileError; pip would fail on the file too
                context.problems.append(getattr(error, "message", str(error)))
                continue
            for section, (value, line) in found.items():
                merged[section] = (value.strip(), f"{path}:{line}")
        return merged

    def effective(self, context: Context) -> list[Effective]:
        from tfdist.mirror.catalog import official_pypi_index

        env_value = context.environ.get(ENV_INDEX, "")
        merged = self._settings(context)
        result = []
        for command in COMMANDS:
            if env_value:
                result.append(Effective("pip", command, env_value, f"environment variable {ENV_INDEX}"))
                continue
            for section in (command, "global"):
                value, source = merged.get(section, ("", ""))
                if value:
                    result.append(Effective("pip", command, value, f"{source} [{section}]"))
                    break
            else:
                result.append(Effective("pip", command, official_pypi_index(), f"pip's {BUILT_IN}"))
        return result

    def wanted(self, mirror: "Mirror") -> dict[str, str | None]:
        return {command: mirror.pip_index for command in COMMANDS}

    def edit(self, text: str, bom: bool, mirror: "Mirror", path: Path, context: Context) -> Edit:
        # A command section set in any other file pip loads would beat our [global]; setting the same section in
        # our file wins wherever our file is loaded later (same key, later file).
        others = self._settings(context, skip=path)
        sections = tuple(s for s, (value, _) in others.items() if s in COMMANDS and value)
        done = pipconf.set_index(text, mirror.pip_index or "", path, command_sections=sections)
        notes = list(done.notes)
        if bom:
            notes.append("removed the UTF-8 byte-order mark, which pip cannot read")
        return Edit(done.text, tuple(notes), keep_bom=False)

    def ask_tool(self, context: Context) -> ToolView:
        # pip's configuration rules are the same in every recent pip; the pip beside tfdist is asked, told that
        # sys.prefix is the environment being configured (whose python may have no pip at all).
        python = Path(sys.executable)
        env = dict(context.environ)
        try:
            done = subprocess.run([str(python), "-c", _ASK_PIP, str(context.paths.prefix), *COMMANDS], env=env,
                                  cwd=context.cwd, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            return ToolView(unavailable=f"could not run {python} to ask pip ({error})")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return ToolView(unavailable=f"pip ({python}) could not report its settings: {last}")
        try:
            answer = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return ToolView(unavailable="pip's answer was not readable")
        return ToolView(effective=tuple(Effective("pip", c, answer.get(c), f"pip's option parser ({python})")
                                        for c in COMMANDS))

    def followups(self) -> list[str]:
        return []

    def environment(self, mirror: "Mirror") -> dict[str, str]:
        return index_environment(mirror, ENV_INDEX, "PIP_TRUSTED_HOST")
