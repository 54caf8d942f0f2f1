"""``tfdist config show``: every flag's effective default and where it comes from."""
from __future__ import annotations

import os
from typing import Any, Iterator

import click

from tfdist.cli.common import emit_json, option

# Commands whose flags are settings; the helpers that only print or write files are left out.
_SKIP = {"config", "completion", "example", "init"}


@click.group(name="config")
def command() -> None:
    """Settings from tfdist.toml (or [tool.tfdist] in pyproject.toml) in the working folder.

    Precedence for every flag: the command line, then its TFDIST_<COMMAND>_<FLAG> variable, then the file, then the
    built-in default.
    """


def _leaves(group: click.Group, ctx: click.Context, only: tuple[str, ...]) -> Iterator[tuple[click.Context, Any]]:
    for name in group.list_commands(ctx):
        if (not ctx.parent and name in _SKIP) or (only and name != only[0]):
            continue
        sub = group.get_command(ctx, name)
        if sub is None:
            continue
        sub_ctx = click.Context(sub, info_name=name, parent=ctx,
                                default_map=(ctx.default_map or {}).get(name))
        if isinstance(sub, click.Group):
            yield from _leaves(sub, sub_ctx, only[1:])
        else:
            yield sub_ctx, sub


def effective(root: click.Group, default_map: dict[str, Any] | None, only: tuple[str, ...] = ()) -> list[dict]:
    """One row per flag of every command (or of ``only``): value, and its source (variable, file or default)."""
    from tfdist.cli import settings

    ctx = click.Context(root, info_name="tfdist", auto_envvar_prefix="TFDIST", default_map=default_map)
    rows = []
    for leaf_ctx, leaf in _leaves(root, ctx, only):
        for param in settings._options(leaf):  # noqa: SLF001 (same package)
            twin = settings.twin_name(leaf_ctx, param)
            flag = max((o for o in param.opts if o.startswith("--")), key=len, default=param.opts[0])
            row = {"command": leaf_ctx.command_path, "flag": flag, "variable": twin}
            if twin and os.environ.get(twin):
                row.update(value=os.environ[twin], source=f"env {twin}")
            elif leaf_ctx.default_map and param.name in leaf_ctx.default_map:
                dotted = leaf_ctx.command_path.split(" ", 1)[1].replace(" ", ".") + "." + flag[2:]
                row.update(value=leaf_ctx.default_map[param.name], source=settings.ACTIVE.where(dotted))
            else:
                default = param.get_default(leaf_ctx, call=True)
                unset = default is None or repr(default).startswith("Sentinel.")  # Click's "no default" marker
                row.update(value=None if unset else default, source="default")
            rows.append(row)
    return rows


@command.command(name="show")
@click.argument("command_words", nargs=-1, metavar="[COMMAND [SUBCOMMAND]]")
@option("--json", "as_json", is_flag=True, help="Print a versioned JSON document.")
@click.pass_context
def show(ctx: click.Context, command_words: tuple[str, ...], as_json: bool) -> int:
    """Print each flag's effective value (without flags given here) and where it comes from."""
    from tfdist.cli import settings
    from tfdist.validate import bad_character

    root = ctx.find_root()
    _check_words(root, command_words)
    rows = effective(root.command, root.default_map, command_words)  # type: ignore[arg-type]
    config = str(settings.ACTIVE.path) if settings.ACTIVE.path else None
    if as_json:
        emit_json("config", {"file": config, "settings": rows})
        return 0
    print(f"config file: {config or 'none (tfdist.toml or [tool.tfdist] in pyproject.toml, in this folder)'}")
    width = max((len(f"{r['command']} {r['flag']}") for r in rows), default=0)
    for row in rows:
        value = "" if row["value"] is None else row["value"]
        if isinstance(value, (list, tuple)):
            value = " ".join(map(str, value))
        if bad_character(str(value)):  # a value from a variable or the file: one line, no terminal escapes
            value = repr(str(value))
        print(f"{row['command'] + ' ' + row['flag']:<{width}}  {value!s:<24} {row['source']}")
    return 0


def _check_words(root: click.Context, words: tuple[str, ...]) -> None:
    """Each word must name a command with settings, the next a subcommand of it (no word is ignored)."""
    from tfdist.errors import UsageError
    from tfdist.validate import shown

    current: click.Command = root.command
    for position, word in enumerate(words):
        typed = " ".join(words[:position + 1])
        if not isinstance(current, click.Group):
            raise UsageError(f"tfdist {' '.join(words[:position])} has no subcommand {shown(word)}",
                             hint="see tfdist config show --help")
        found = current.get_command(root, word)
        if found is None or (position == 0 and word in _SKIP):
            raise UsageError(f"no command with settings named {shown(typed)}", hint="see tfdist --help")
        current = found
