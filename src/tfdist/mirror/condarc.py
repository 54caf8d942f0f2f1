"""Reading and editing ``.condarc`` with ruamel.yaml's round-trip mode (comments and key order survive).

A switch sets ``default_channels`` (what ``defaults`` means), the ``custom_channels`` the mirror really carries, and
``show_channel_urls``; it adds ``channels`` only when the file has none. Channels that a previous switch pointed at a
catalog mirror but the new mirror does not carry are removed, so they fall back to their official location instead
of silently staying on the old mirror.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdist.errors import ConfigFileError
from tfdist.mirror.catalog import Mirror, known_conda_bases


@dataclass(frozen=True)
class CondaEdit:
    """The new text and notes for a user."""

    text: str
    notes: tuple[str, ...] = ()


def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.allow_duplicate_keys = False
    yaml.indent(mapping=2, sequence=4, offset=2)  # the "  - item" layout every mirror help page uses
    yaml.width = 4096
    return yaml


def parse(text: str, path: Path) -> Any:
    """Parse a .condarc (an empty file is an empty mapping).

    Raises:
        ConfigFileError: invalid YAML, duplicate keys, or a top level that is not a mapping.
    """
    from ruamel.yaml import YAMLError
    from ruamel.yaml.comments import CommentedMap

    try:
        data = _yaml().load(text) if text.strip() else None
    except (YAMLError, ValueError) as error:
        first = " ".join(str(error).split())[:160]
        raise ConfigFileError(
            f"{path}: not valid YAML ({first}); nothing was changed",
            hint="fix the file by hand (conda would reject it too)",
            reference="mirror-config-invalid-yaml",
        ) from None
    if data is None:
        return CommentedMap()
    if not isinstance(data, dict):
        raise ConfigFileError(
            f"{path}: the top level is not a mapping of settings; nothing was changed",
            hint="a .condarc holds 'key: value' lines",
            reference="mirror-config-invalid-yaml",
        )
    for key in ("default_channels", "channels"):
        if key in data and data[key] is not None and not isinstance(data[key], list):
            raise ConfigFileError(f"{path}: '{key}' is not a list; nothing was changed", hint="fix the file by hand",
                                  reference="mirror-config-invalid-yaml")
    if "custom_channels" in data and data["custom_channels"] is not None and not isinstance(data["custom_channels"], dict):
        raise ConfigFileError(f"{path}: 'custom_channels' is not a mapping; nothing was changed",
                              hint="fix the file by hand", reference="mirror-config-invalid-yaml")
    return data


def _is_mirror_url(url: Any, bases: set[str]) -> bool:
    if not isinstance(url, str):
        return False
    clean = url.rstrip("/")
    return any(clean == base or clean.startswith(base + "/") for base in bases)


def set_mirror(text: str, mirror: Mirror, path: Path) -> CondaEdit:
    """Point conda at ``mirror`` (for ``official``: remove catalog-mirror entries), keeping everything else.

    Raises:
        ConfigFileError: the current file is not a valid .condarc.
    """
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    data = parse(text, path)
    bases = known_conda_bases()
    notes: list[str] = []
    if mirror.conda_default_channels:
        data["default_channels"] = CommentedSeq(list(mirror.conda_default_channels))
    elif "default_channels" in data:
        current = data["default_channels"] or []
        if all(_is_mirror_url(url, bases) for url in current):
            del data["default_channels"]
            if not mirror.is_official:
                notes.append(f"{mirror.name} does not mirror Anaconda's default channels; 'defaults' now uses "
                             "the official ones")
        else:
            notes.append("kept default_channels: they do not point at a catalog mirror")
    custom = data.get("custom_channels")
    if custom is None:
        custom = CommentedMap()
    for name in list(custom):
        if name not in mirror.conda_custom_channels and _is_mirror_url(custom[name], bases):
            del custom[name]
    for name, base in mirror.conda_custom_channels.items():
        custom[name] = base
    if custom:
        data["custom_channels"] = custom
    elif "custom_channels" in data:
        del data["custom_channels"]
    if not mirror.is_official:
        if "channels" not in data or not data["channels"]:
            if mirror.conda_default_channels:
                data["channels"] = CommentedSeq(["defaults"])
            elif "conda-forge" in mirror.conda_custom_channels:
                data["channels"] = CommentedSeq(["conda-forge"])
        data["show_channel_urls"] = True
    buffer = io.StringIO()
    _yaml().dump(data, buffer)
    out = buffer.getvalue()
    if out.strip() in ("{}", ""):
        out = ""
    return CondaEdit(text=out, notes=tuple(notes))


def channel_summary(text: str, path: Path) -> dict[str, Any]:
    """Return the channel-related settings of a .condarc as plain data."""
    data = parse(text, path)
    result: dict[str, Any] = {}
    for key in ("channels", "default_channels", "custom_channels", "channel_alias", "show_channel_urls"):
        if key in data:
            value = data[key]
            if isinstance(value, dict):
                value = {str(k): v for k, v in value.items()}
            elif isinstance(value, list):
                value = list(value)
            result[key] = value
    return result
