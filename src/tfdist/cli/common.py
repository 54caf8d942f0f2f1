"""Small helpers shared by the command modules (no heavy imports here)."""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

JSON_SCHEMA_VERSION = 1


class TwinOption(click.Option):
    """An option whose environment twin is ``TFDIST_<COMMAND>_<FLAG>``, named after the flag as typed.

    Click names the automatic variable after the Python parameter (``--json`` stored as ``as_json`` would read
    ``..._AS_JSON``); this class names it after the flag, in ``--help`` and when reading it, and records where a
    value came from so that an error about it names the variable or the config file rather than the flag.
    """

    def resolve_envvar_value(self, ctx: click.Context) -> str | None:
        from tfdist.cli.settings import twin_name

        if self.envvar is not None or not self.allow_from_autoenv:
            return super().resolve_envvar_value(ctx)
        name = twin_name(ctx, self)
        return os.environ.get(name) or None if name else None

    def get_help_extra(self, ctx: click.Context) -> Any:
        from tfdist.cli.settings import twin_name

        extra = super().get_help_extra(ctx)
        if self.show_envvar and self.envvar is None and "envvars" in extra:
            extra["envvars"] = (twin_name(ctx, self),)
        return extra

    def consume_value(self, ctx: click.Context, opts: Any) -> Any:
        from tfdist.cli.settings import remember_origin

        value, source = super().consume_value(ctx, opts)
        remember_origin(ctx, self, source)
        return value, source


def option(*names: str, **kwargs: Any) -> Callable[[F], F]:
    """``click.option`` that shows its ``TFDIST_<COMMAND>_<FLAG>`` environment twin in ``--help``."""
    kwargs.setdefault("show_envvar", True)
    kwargs.setdefault("cls", TwinOption)
    return click.option(*names, **kwargs)


def flag_of(param: click.Parameter | None) -> str:
    """How an error names a parameter: its longest flag (``--output``), or an argument's metavar (``FOLDER``)."""
    if param is None:
        return "value"
    if isinstance(param, click.Option) and param.opts:
        return max(param.opts, key=len)
    return param.human_readable_name.upper()


class PathText(click.Path):
    """``click.Path`` that first refuses what no path may hold: NUL, control and format characters, line breaks,
    components over 255 bytes (:func:`tfdist.validate.path_text`), as the usual one-line exit-2 error naming the flag.

    click's own type hands the value to ``os.stat``, which raises ``ValueError: embedded null byte`` (a traceback).
    """

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from tfdist.validate import path_text, refuse

        text = os.fsdecode(value) if isinstance(value, (bytes, os.PathLike)) else str(value)
        path_text(text, flag_of(param))
        if not self.dir_okay and text.endswith("/"):  # a Path would silently drop the '/' and name a file
            raise refuse(flag_of(param), text, "ends in '/', which names a folder", "give a file name")
        return super().convert(value, param, ctx)


def emit_json(kind: str, payload: dict[str, Any], *, version: int = JSON_SCHEMA_VERSION) -> None:
    """Print a versioned JSON document: ``{"schema": "tfdist.<kind>", "schema_version": N, ...}``."""
    document = {"schema": f"tfdist.{kind}", "schema_version": version, **payload}
    json.dump(document, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")
