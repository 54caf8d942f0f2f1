"""Reading and editing ``uv.toml`` with tomlkit, which keeps comments, order and formatting.

uv's default index is the ``[[index]]`` entry with ``default = true``; the legacy top-level ``index-url`` means the
same thing, so it is replaced by the ``[[index]]`` form rather than left to compete with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdist.errors import ConfigFileError


@dataclass(frozen=True)
class UvEdit:
    """The new text and notes for a user."""

    text: str
    notes: tuple[str, ...] = ()


def parse(text: str, path: Path) -> Any:
    """Parse a uv.toml with tomlkit.

    Raises:
        ConfigFileError: invalid TOML (including duplicate keys), or an ``index`` key that is not an array of tables.
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        document = tomlkit.parse(text)
    except (TOMLKitError, ValueError) as error:
        raise ConfigFileError(
            f"{path}: not valid TOML ({str(error).splitlines()[0]}); nothing was changed",
            hint="fix the file by hand (uv would reject it too)",
            reference="mirror-config-invalid-toml",
        ) from None
    index = document.get("index")
    if index is not None and not (isinstance(index, list) and all(isinstance(t, dict) for t in index)):
        raise ConfigFileError(
            f"{path}: 'index' is not an array of tables ([[index]]); nothing was changed",
            hint="fix the file by hand",
            reference="mirror-config-invalid-toml",
        )
    return document


def default_index(text: str, path: Path) -> str | None:
    """Return the default index a uv.toml sets (``[[index]] default = true``, else top-level ``index-url``)."""
    document = parse(text, path)
    for table in document.get("index", []) or []:
        if table.get("default") is True and table.get("url"):
            return str(table["url"])
    legacy = document.get("index-url")
    if legacy:
        return str(legacy)
    pip_table = document.get("pip")
    if isinstance(pip_table, dict) and pip_table.get("index-url"):
        return str(pip_table["index-url"])
    return None


def set_default_index(text: str, url: str, name: str, path: Path) -> UvEdit:
    """Make ``url`` uv's default index, keeping every other setting and comment.

    Raises:
        ConfigFileError: the current file is not valid TOML.
    """
    import tomlkit

    document = parse(text, path)
    notes: list[str] = []
    if "index-url" in document:
        del document["index-url"]
        notes.append("replaced the legacy top-level index-url by an [[index]] entry with default = true")
    indexes = document.get("index")
    taken = {str(t.get("name")) for t in (indexes or []) if t.get("default") is not True and t.get("name")}
    entry_name = name if name not in taken else f"{name}-default"
    target = None
    for table in indexes or []:
        if table.get("default") is True:
            target = table
            break
    if target is None:
        for table in indexes or []:
            if table.get("name") == name:
                target = table  # an existing named entry for this mirror becomes the default
                entry_name = name
                break
    if target is not None:
        target["name"] = entry_name
        target["url"] = url
        target["default"] = True
    else:
        table = tomlkit.table()
        table.add("name", entry_name)
        table.add("url", url)
        table.add("default", True)
        if indexes is None:
            aot = tomlkit.aot()
            aot.append(table)
            document.append("index", aot)
        else:
            last = indexes[-1] if len(indexes) else None
            if last is not None and not last.as_string().endswith("\n\n"):
                last.add(tomlkit.nl())  # keep a blank line between [[index]] tables
            if list(document.keys())[-1] != "index":
                table.add(tomlkit.nl())  # and before the table that follows
            indexes.append(table)
    out = tomlkit.dumps(document)
    if out and not out.endswith("\n"):
        out += "\n"
    return UvEdit(text=out, notes=tuple(notes))
