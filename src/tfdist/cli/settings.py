"""Where each flag's value comes from: the command line, its environment twin, a config file, or the default.

Every option's twin is ``TFDIST_<COMMAND>_<FLAG>``, named after the flag as typed (``--json`` -> ``..._JSON``), not
after the Python parameter behind it. A config file, ``tfdist.toml`` in the working folder or else ``[tool.tfdist]``
in its ``pyproject.toml``, gives defaults: one table per command (``[launch]``, ``[mirror.test]``), one key per flag
(``max-restarts`` or ``max_restarts``). It becomes Click's ``default_map``, which Click consults after the command
line and the environment and before the built-in default; so the precedence is flag > twin > file > default.
Unknown tables or keys, and values of the wrong type, are refused with the file and key named.
"""
from __future__ import annotations

import re
import sys
from dataclasses import field
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from tfdist.errors import ConfigFileError
from tfdist.frozen import frozen

CONFIG_NAME = "tfdist.toml"

# "--flag" -> where its value came from when not from the command line (for error messages), this process only.
ORIGINS: dict[str, str] = {}


@frozen
class ConfigFile:
    """A loaded config file: its path, the prefix its keys are shown with, and its tables."""

    path: Path | None = None
    prefix: str = ""
    table: dict[str, Any] = field(default_factory=dict)

    def where(self, dotted: str) -> str:
        return f"{self.path} ({self.prefix}{dotted})"


ACTIVE = ConfigFile()


# Command tables nest three deep ([mirror.test] holds lists of strings); anything far deeper is not a tfdist config,
# and a parser or a walk that recurses through it would overflow the stack.
MAX_NESTING = 16


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as failure:
        raise ConfigFileError(f"cannot read {path}: {getattr(failure, 'strerror', None) or failure}",
                              hint="fix or remove the file") from None


def _parse(path: Path, text: str) -> dict[str, Any]:
    try:
        table = _parse_text(path, text)
    except RecursionError:  # tomllib and tomlkit recurse once per level of nesting
        table = None
    if table is None or _nesting(table) > MAX_NESTING:
        raise ConfigFileError(f"{path} nests tables or arrays more than {MAX_NESTING} deep",
                              hint="fix the file; a tfdist config is a few flat tables") from None
    return table


def _parse_text(path: Path, text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as failure:
            raise ConfigFileError(f"{path} is not valid TOML: {failure}", hint="fix the file") from None
    import tomlkit

    try:
        return dict(tomlkit.parse(text).unwrap())
    except RecursionError:
        raise
    except Exception as failure:  # tomlkit raises several parse error types
        raise ConfigFileError(f"{path} is not valid TOML: {failure}", hint="fix the file") from None


def _nesting(value: Any) -> int:
    """How deep tables and arrays nest in ``value``, measured without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_NESTING:
            break
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return deepest


# Every way TOML can open the tool.tfdist table: a [tool.tfdist...] header (or [[...]]), a [tool] header (tfdist
# then comes as a key inside it), or a root-level `tool.` / `tool =` key; each name bare, "quoted" or 'quoted',
# with blanks around the dots. Matching more (a `tool =` line inside another table, text in a multi-line string)
# only costs a parse; a \u escape could spell either name, so a file with one is always parsed.
_TOOL, _TFDIST = r"""(?:tool|"tool"|'tool')""", r"""(?:tfdist|"tfdist"|'tfdist')"""
_TOOL_TFDIST = rf"^[ \t]*(?:\[\[?[ \t]*{_TOOL}[ \t]*(?:\]|\.[ \t]*{_TFDIST}[ \t]*[\].])|{_TOOL}[ \t]*[.=])"


def may_hold_tool_tfdist(text: str) -> bool:
    """Whether the TOML ``text`` can define ``[tool.tfdist]``; ``False`` only when it certainly does not."""
    if "\\u" in text or "\\U" in text:
        return True
    return "tfdist" in text and re.search(_TOOL_TFDIST, text, re.MULTILINE) is not None


def find_config(folder: Path) -> ConfigFile:
    """``tfdist.toml`` in ``folder``, else ``[tool.tfdist]`` of its ``pyproject.toml``, else an empty config."""
    own = folder / CONFIG_NAME
    if own.is_file():
        return ConfigFile(own, "", _parse(own, _read(own)))
    pyproject = folder / "pyproject.toml"
    if pyproject.is_file():
        text = _read(pyproject)
        # A project's pyproject.toml is other tools' file: one that cannot hold [tool.tfdist] is neither parsed
        # (tomllib costs every command ~4 ms) nor judged (a broken [tool.black] is not tfdist's business).
        if not may_hold_tool_tfdist(text):
            return ConfigFile()
        tool = _parse(pyproject, text).get("tool", {})
        section = tool.get("tfdist") if isinstance(tool, dict) else None
        if isinstance(section, dict):
            return ConfigFile(pyproject, "tool.tfdist.", section)
    return ConfigFile()


def flag_word(param: click.Parameter) -> str:
    """The flag as typed, for the twin's name: ``--json`` -> ``JSON``, ``--gpu/--cpu`` -> ``GPU``."""
    longs = [opt for opt in param.opts if opt.startswith("--")]
    word = max(longs, key=len)[2:] if longs else (param.name or "")
    return word.upper().replace("-", "_")


def twin_name(ctx: click.Context, param: click.Parameter) -> str | None:
    """The environment variable that sets ``param`` in ``ctx`` (an explicit ``envvar`` wins)."""
    if isinstance(param.envvar, str):
        return param.envvar
    if ctx.auto_envvar_prefix is None:
        return None
    return f"{ctx.auto_envvar_prefix}_{flag_word(param)}"


def _options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option) and p.name and p.name != "help"
            and not p.hidden]


def _match_option(command: click.Command, key: str) -> click.Option | None:
    wanted = key.replace("_", "-")
    for option in _options(command):
        if wanted in [opt[2:] for opt in (*option.opts, *option.secondary_opts) if opt.startswith("--")] \
                or key.replace("-", "_") == option.name:
            return option
    return None


def _convert(command: click.Command, ctx: click.Context, table: dict[str, Any], config: ConfigFile,
             dotted: str) -> dict[str, Any]:
    """The default_map for ``command`` from its table, checked against its flags and their types."""
    result: dict[str, Any] = {}
    for key, value in table.items():
        where = f"{dotted}.{key}" if dotted else key
        if isinstance(command, click.Group) and isinstance(value, dict):
            sub = command.get_command(ctx, key)
            if sub is None:
                raise ConfigFileError(f"{config.path}: unknown key {config.prefix}{where!s} (no command "
                                      f"'{ctx.command_path} {key}')", hint="remove it; see tfdist --help")
            sub_ctx = click.Context(sub, info_name=key, parent=ctx)
            result[key] = _convert(sub, sub_ctx, value, config, where)
            continue
        option = _match_option(command, key)
        if option is None:
            raise ConfigFileError(f"{config.path}: unknown key {config.prefix}{where} ({ctx.command_path} has no "
                                  f"flag --{key.replace('_', '-')})", hint=f"see {ctx.command_path} --help")
        if option.multiple and not isinstance(value, list):
            value = [value]
        try:
            option.type_cast_value(ctx, value)
        except click.BadParameter as bad:
            raise ConfigFileError(f"{config.path}: {config.prefix}{where} = {value!r}: {bad.format_message()}",
                                  hint="fix the value in the file") from None
        result[option.name] = value  # type: ignore[index]
    return result


def default_map(config: ConfigFile, root: click.Group) -> dict[str, Any] | None:
    """Click's default_map for the whole command tree, or None without a config file.

    Raises:
        ConfigFileError: an unknown table or key, or a value of the wrong type (the file and key are named).
    """
    if config.path is None:
        return None
    ctx = click.Context(root, info_name="tfdist", auto_envvar_prefix="TFDIST")
    return _convert(root, ctx, config.table, config, "")


def remember_origin(ctx: click.Context, param: click.Parameter, source: ParameterSource | None) -> None:
    """Note where a flag's value came from when it was not typed, so an error about it can say so."""
    if not param.opts or source not in (ParameterSource.ENVIRONMENT, ParameterSource.DEFAULT_MAP):
        return
    flag = max(param.opts, key=len)
    if source is ParameterSource.ENVIRONMENT:
        ORIGINS[flag] = twin_name(ctx, param) or flag
    else:
        path = [ctx.info_name or ""]
        parent = ctx.parent
        while parent is not None and parent.parent is not None:
            path.insert(0, parent.info_name or "")
            parent = parent.parent
        ORIGINS[flag] = f"{ACTIVE.path}: {ACTIVE.prefix}{'.'.join(path)}.{flag.lstrip('-')}"


def name_origins(message: str) -> str:
    """Replace each flag in an error message whose value came from a variable or the file with that source."""
    def swap(match: re.Match[str]) -> str:
        return ORIGINS.get(match.group(1), match.group(1))

    return re.sub(r"(?<![\w-])(--?[A-Za-z][\w-]*)", swap, message)


# Flags of other launchers a user may bring along (torchrun, mpirun), and what tfdist calls them.
FOREIGN_FLAGS: dict[str, str] = {
    "--nproc_per_node": "--workers", "--nproc-per-node": "--workers", "--np": "--workers",
    "--nnodes": "--hosts", "--max_restarts": "--max-restarts", "--master_port": "--port-base",
    "--master-port": "--port-base", "--master_addr": "--host", "--master-addr": "--host",
}


def suggest_option(typed: str, ctx: click.Context | None) -> list[str]:
    """The flags worth suggesting for an unknown one: the same words with dashes, a known foreign alias, or a close
    spelling (stricter than Click's, which offered --grace-period for --nproc_per_node)."""
    import difflib

    if ctx is None:
        return []
    known = [opt for param in ctx.command.params for opt in (*param.opts, *param.secondary_opts)
             if opt.startswith("--")]
    dashed = typed.replace("_", "-")
    if dashed in known:
        return [dashed]
    if FOREIGN_FLAGS.get(typed) in known:
        return [FOREIGN_FLAGS[typed]]
    return difflib.get_close_matches(typed, known, n=2, cutoff=0.75)
