"""Small helpers shared by the command modules (no heavy imports here)."""
from __future__ import annotations

import json
import sys
from typing import Any, Callable, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

JSON_SCHEMA_VERSION = 1


def option(*names: str, **kwargs: Any) -> Callable[[F], F]:
    """``click.option`` that shows its ``TFDIST_*`` environment twin in ``--help``."""
    kwargs.setdefault("show_envvar", True)
    return click.option(*names, **kwargs)


def emit_json(kind: str, payload: dict[str, Any], *, version: int = JSON_SCHEMA_VERSION) -> None:
    """Print a versioned JSON document: ``{"schema": "tfdist.<kind>", "schema_version": N, ...}``."""
    document = {"schema": f"tfdist.{kind}", "schema_version": version, **payload}
    json.dump(document, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")
