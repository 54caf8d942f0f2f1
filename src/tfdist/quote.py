"""Quoting for each language tfdist writes, through the language's real serialiser where one exists.

Validate first (:mod:`tfdist.validate`), then quote where the value is embedded:

- shell (bash scripts, printed commands): :func:`shell` / :func:`shell_words`, ``shlex.quote``;
- shell or Dockerfile comments: :func:`comment`, which refuses what would end the comment line;
- Dockerfile exec form (``CMD``, ``ENTRYPOINT``, ``RUN``, ``SHELL``): :func:`dockerfile_exec`, a JSON array;
- YAML: :func:`yaml_scalar` (one double-quoted scalar), whole documents through ``yaml.safe_dump``;
- TOML: :func:`toml_string`, through tomlkit;
- INI (pip.conf): :func:`ini_value`, which refuses what configparser would change or split.
"""
from __future__ import annotations

import json
import shlex
from typing import Iterable

from tfdist import validate


def shell(value: str, flag: str = "value") -> str:
    """One shell word that bash reads back as exactly ``value`` (NUL, which no argument can hold, is refused)."""
    if "\0" in value:
        raise validate.refuse(flag, value, "contains a NUL character", "remove it")
    return shlex.quote(value)


def shell_words(words: Iterable[str], flag: str = "value") -> str:
    """Several shell words, each quoted, joined by spaces."""
    return " ".join(shell(word, flag) for word in words)


def comment(value: str, flag: str = "value") -> str:
    """Text for a ``#`` comment line (shell, Dockerfile, YAML, INI, TOML): it must not end the line."""
    return validate.one_line(value, flag, allow_empty=True)


def dockerfile_exec(words: Iterable[str], flag: str = "value") -> str:
    """A Dockerfile exec-form array (``["a", "b"]``), read by Docker as JSON; no variable expansion happens."""
    words = list(words)
    for word in words:
        if "\0" in word:
            raise validate.refuse(flag, word, "contains a NUL character", "remove it")
    return json.dumps(words, ensure_ascii=True)


def yaml_scalar(value: str) -> str:
    """A double-quoted YAML scalar on one line that ``yaml.safe_load`` reads back as ``value``."""
    import yaml

    text: str = yaml.safe_dump(value, default_style='"', width=float("inf"), allow_unicode=False)
    return text.rstrip("\n")


def toml_string(value: str) -> str:
    """A TOML basic string (escaped by tomlkit) that ``tomllib`` reads back as ``value``."""
    import tomlkit

    return tomlkit.string(value).as_string()


def ini_value(value: str, flag: str = "value") -> str:
    """A value for ``key = value`` in an INI file (pip.conf): one line, no surrounding spaces (configparser strips
    them), not empty. pip reads its files without interpolation, so ``%`` stays literal."""
    return validate.one_line(value, flag, allow_outer_space=False)
