"""Reading and editing ``pip.conf`` without losing comments, order or unrelated keys.

``configparser`` cannot write a file back with its comments, so edits are made line by line. Before editing, the
file is parsed with the same parser pip uses (``RawConfigParser`` with pip's key normalisation): a file pip would
reject (duplicate keys or sections, text before the first section, lines that are not ``key = value``) is reported
instead of being "repaired".
"""
from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from pathlib import Path
from tfdist import quote
from tfdist.errors import ConfigFileError
from tfdist.mirror.urls import trusted_host

_SECTION = re.compile(r"\[(?P<header>.+)\]")  # configparser.RawConfigParser.SECTCRE
_OPTION = re.compile(r"(?P<option>.*?)\s*(?P<vi>[=:])\s*(?P<value>.*)")  # configparser.OPTCRE (fullmatch)


def normalize_key(name: str) -> str:
    """pip's key normalisation: ``Index_URL`` and ``index-url`` are the same key."""
    return name.strip().lower().replace("_", "-")


class _PipParser(configparser.RawConfigParser):
    def optionxform(self, optionstr: str) -> str:
        return normalize_key(optionstr)


def parse(text: str, path: Path) -> dict[str, dict[str, str]]:
    """Parse ``text`` exactly as pip would and return ``{section: {key: value}}``.

    Raises:
        ConfigFileError: pip itself could not load this file.
    """
    parser = _PipParser()
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as error:
        first = str(error).strip().splitlines()[0]
        raise ConfigFileError(
            f"{path}: pip cannot parse this file ({first}); nothing was changed",
            hint="fix the file by hand (pip would fail on it too)",
            reference="mirror-config-invalid-ini",
        ) from None
    return {section: dict(parser.items(section)) for section in parser.sections()}


@dataclass
class _Line:
    kind: str  # "blank", "comment", "section", "option", "continuation"
    text: str
    section: str | None = None
    key: str | None = None  # normalised option name (also set on its continuation lines)


def _classify(text: str) -> list[_Line]:
    lines: list[_Line] = []
    section: str | None = None
    key: str | None = None
    for raw in text.split("\n"):
        stripped = raw.strip()
        if not stripped:
            lines.append(_Line("blank", raw, section))
            continue
        if stripped[0] in "#;":
            lines.append(_Line("comment", raw, section))
            continue
        indented = raw[:1].isspace()
        if indented and key is not None:
            lines.append(_Line("continuation", raw, section, key))
            continue
        header = _SECTION.match(stripped)
        if header:
            section, key = header.group("header"), None
            lines.append(_Line("section", raw, section))
            continue
        option = _OPTION.fullmatch(stripped)
        key = normalize_key(option.group("option")) if option else None
        lines.append(_Line("option", raw, section, key))
    return lines


def _option_line(line: str, value: str) -> str:
    """Replace the value of ``key = value`` keeping the key's spelling, indentation and delimiter spacing."""
    match = re.match(r"(?P<head>\s*[^=:]*?\s*[=:][ \t]*)", line)
    head = match.group("head") if match else ""
    return f"{head}{value}"


@dataclass(frozen=True)
class PipEdit:
    """The result of editing a pip.conf: the new text and what a user should know."""

    text: str
    notes: tuple[str, ...] = ()


def index_lines(text: str, path: Path) -> dict[str, tuple[str, int]]:
    """``{section: (index-url value, 1-based line)}`` for every section of a pip.conf that sets ``index-url``.

    Raises:
        ConfigFileError: pip could not parse the file.
    """
    values = parse(text, path)
    found: dict[str, tuple[str, int]] = {}
    for number, line in enumerate(_classify(text), start=1):
        if line.kind == "option" and line.key == "index-url" and line.section is not None:
            found[line.section] = (values[line.section]["index-url"], number)
    return found


def set_index(text: str, url: str, path: Path, command_sections: tuple[str, ...] = ()) -> PipEdit:
    """Set ``[global] index-url`` to ``url`` (and ``trusted-host`` for a plain-http URL), keeping everything else.

    Args:
        text: the file's current text (``\\n`` line endings, no BOM).
        url: the new index URL.
        path: the file, for messages.
        command_sections: command sections (``install``, ``download``...) whose ``index-url`` must be set too,
            because pip reads a command's own section after ``[global]``, from every file.

    Raises:
        ConfigFileError: pip could not parse the current file.
    """
    url = quote.ini_value(url, "index-url")  # validated already; refuse anything configparser would change
    values = parse(text, path)
    notes: list[str] = []
    sections = {s for s, options in values.items() if s != "global" and "index-url" in options}
    sections |= set(command_sections)
    lines = _classify(text) if text else []
    lines = _set_option(lines, "index-url", url)
    for section in sorted(sections):
        lines = _set_option(lines, "index-url", url, section)
        notes.append(f"set [{section}] index-url too: pip reads it after [global] for 'pip {section}'")
    host = trusted_host(url)
    if host:
        trusted = values.get("global", {}).get("trusted-host", "")
        hosts = trusted.split()
        if host not in hosts:
            lines = _set_option(lines, "trusted-host", " ".join([*hosts, host]))
            notes.append(f"added {host} to trusted-host because the index uses plain http")
    return PipEdit(text=_join(lines, text), notes=tuple(notes))


def _set_option(lines: list[_Line], key: str, value: str, section: str = "global") -> list[_Line]:
    out: list[_Line] = []
    done = False
    for line in lines:
        if line.section == section and line.key == key and line.kind in ("option", "continuation"):
            if line.kind == "option" and not done:
                out.append(_Line("option", _option_line(line.text, value), section, key))
                done = True
            continue  # drop continuation lines of the old value (and any later duplicate, impossible after parse)
        out.append(line)
    if done:
        return out
    new = _Line("option", f"{key} = {value}", section, key)
    headers = [i for i, line in enumerate(out) if line.kind == "section" and line.section == section]
    if not headers:
        # Like `pip config set`: a new section at the end, separated by a blank line.
        while out and out[-1].kind == "blank" and out[-1].text == "":
            out.pop()
        if out:
            out.append(_Line("blank", "", None))
        out += [_Line("section", f"[{section}]", section), new]
        return out
    start = headers[0]
    last = start
    for index in range(start + 1, len(out)):
        line = out[index]
        if line.kind == "section":
            break
        if line.kind in ("option", "continuation"):
            last = index
    out.insert(last + 1, new)
    return out


def _join(lines: list[_Line], original: str) -> str:
    text = "\n".join(line.text for line in lines)
    if not text.endswith("\n"):
        text += "\n"
    return text
