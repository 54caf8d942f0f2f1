"""conda: ``default_channels`` (what ``defaults`` means), ``custom_channels`` and ``channel_alias`` (where named
channels such as ``conda-forge`` come from), over conda's search path and ``CONDA_*`` variables.

conda merges its files by priority (``conda/base/constants.py`` ``SEARCH_PATH``, lowest first, ``$CONDARC``
last): lists such as ``default_channels`` are concatenated highest priority first, maps such as
``custom_channels`` are merged key by key, scalars such as ``channel_alias`` come from the highest file; variables
(``CONDA_DEFAULT_CHANNELS``, ``CONDA_CHANNEL_ALIAS``) beat every file.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from tfdist.errors import ConfigFileError
from tfdist.mirror import condarc
from tfdist.mirror.recipes.base import BUILT_IN, Context, Edit, Effective, ToolView

if TYPE_CHECKING:
    from tfdist.mirror.catalog import Mirror
    from tfdist.mirror.paths import ConfigPaths, Scope

DEFAULTS, FORGE = "defaults", "conda-forge"
COMMANDS = (DEFAULTS, FORGE)


class CondaRecipe:
    """conda's files, keys and variables."""

    name = "conda"

    def target(self, paths: "ConfigPaths", scope: "Scope") -> Path:
        return paths.conda_file(scope)

    def skip_reason(self, mirror: "Mirror", scope: "Scope", paths: "ConfigPaths") -> str | None:
        if not mirror.has_conda and not mirror.is_official:
            return f"{mirror.name} has no conda channels in the catalog; conda left unchanged"
        return None

    def effective(self, context: Context) -> list[Effective]:
        defaults: tuple[str, str] | None = None
        forge: tuple[str, str] | None = None
        alias: tuple[str, str] | None = None
        for path in reversed(context.paths.conda_search_path()):  # highest priority first
            text = context.text(path)
            if text is None:
                continue
            try:
                summary = condarc.channel_summary(text, path)
            except ConfigFileError as error:
                context.problems.append(error.message)
                continue
            if defaults is None and summary.get("default_channels"):
                defaults = (str(summary["default_channels"][0]), f"{path} default_channels")
            custom = summary.get("custom_channels") or {}
            if forge is None and FORGE in custom:
                forge = (f"{str(custom[FORGE]).rstrip('/')}/{FORGE}", f"{path} custom_channels")
            if alias is None and summary.get("channel_alias"):
                alias = (str(summary["channel_alias"]).rstrip("/"), f"{path} channel_alias")
        env = context.environ
        if env.get("CONDA_DEFAULT_CHANNELS"):
            defaults = (env["CONDA_DEFAULT_CHANNELS"].split(",")[0], "environment variable CONDA_DEFAULT_CHANNELS")
        if env.get("CONDA_CHANNEL_ALIAS"):
            alias = (env["CONDA_CHANNEL_ALIAS"].rstrip("/"), "environment variable CONDA_CHANNEL_ALIAS")
        if forge is None and alias is not None:
            forge = (f"{alias[0]}/{FORGE}", alias[1])
        return [
            Effective("conda", DEFAULTS, *(defaults or (None, f"conda's {BUILT_IN}"))),
            Effective("conda", FORGE, *(forge or (None, f"conda's {BUILT_IN} channel_alias"))),
        ]

    def wanted(self, mirror: "Mirror") -> dict[str, str | None]:
        wanted: dict[str, str | None] = {}
        if mirror.conda_default_channels or mirror.is_official:
            wanted[DEFAULTS] = mirror.conda_default_channels[0] if mirror.conda_default_channels else None
        if FORGE in mirror.conda_custom_channels or mirror.is_official:
            base = mirror.conda_custom_channels.get(FORGE)
            wanted[FORGE] = f"{base.rstrip('/')}/{FORGE}" if base else None
        return wanted

    def edit(self, text: str, bom: bool, mirror: "Mirror", path: Path, context: Context) -> Edit:
        done = condarc.set_mirror(text, mirror, path)
        return Edit(done.text, done.notes, keep_bom=True)

    def ask_tool(self, context: Context) -> ToolView:
        conda = shutil.which("conda", path=context.environ.get("PATH"))
        if conda is None:
            return ToolView(unavailable="conda is not on PATH, so conda's own view was not checked")
        try:
            done = subprocess.run([conda, "config", "--show", "default_channels", "custom_channels", "channel_alias",
                                   "--json"], env=dict(context.environ), cwd=context.cwd, capture_output=True,
                                  text=True, timeout=120, check=False)
            shown = json.loads(done.stdout)
        except (OSError, subprocess.TimeoutExpired, ValueError) as error:
            return ToolView(unavailable=f"'conda config --show' failed ({error})")
        source = "conda config --show"
        channels = shown.get("default_channels") or []
        forge = (shown.get("custom_channels") or {}).get(FORGE)
        alias = shown.get("channel_alias")
        forge_url = f"{str(forge).rstrip('/')}/{FORGE}" if forge else (f"{str(alias).rstrip('/')}/{FORGE}"
                                                                      if alias else None)
        return ToolView(effective=(Effective("conda", DEFAULTS, channels[0] if channels else None, source),
                                   Effective("conda", FORGE, forge_url, source)))

    def followups(self) -> list[str]:
        return [clean_conda_index()]

    def environment(self, mirror: "Mirror") -> dict[str, str]:
        # Conda's channel maps cannot be set from the environment; only what `defaults` means can.
        return {"CONDA_DEFAULT_CHANNELS": ",".join(mirror.conda_default_channels)} if mirror.conda_default_channels \
            else {}


def clean_conda_index() -> str:
    """Run ``conda clean -i -y`` when conda is on PATH; otherwise say that it should be run."""
    conda = shutil.which("conda")
    if conda is None:
        return "conda is not on PATH: run 'conda clean -i' once it is, so conda drops its cached channel index"
    try:
        done = subprocess.run([conda, "clean", "-i", "-y"], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"'conda clean -i' failed ({error}); run it by hand"
    if done.returncode != 0:
        return f"'conda clean -i' exited {done.returncode}; run it by hand"
    return "ran 'conda clean -i' to drop conda's cached channel index"
