"""Every flag or argument that takes a path refuses a NUL or a line break as one line, exit 2.

click's own ``Path`` type hands the value to ``os.stat``, which raises ``ValueError: embedded null byte`` (a
traceback). ``tfdist.cli.common.PathText`` checks first; this test walks every command and fails on a path parameter
of plain ``click.Path``, so a new flag cannot bring the traceback back.
"""
from __future__ import annotations

from typing import Iterator

import click
import pytest

from tfdist.cli.common import PathText
from tfdist.cli.main import cli, main

# Commands another branch is rewriting this round; each entry says what the lead applies when merging.
NOT_YET: dict[tuple[str, str], str] = {}


def _commands(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                                    click.Command]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _commands(command, click.Context(command, info_name=name, parent=ctx), (*path, name))
        elif command is not None:
            yield (*path, name), command


def _path_params() -> list[tuple[tuple[str, ...], click.Parameter]]:
    ctx = click.Context(cli, info_name="tfdist")
    return [(path, param) for path, command in _commands(cli, ctx) for param in command.params
            if isinstance(param.type, click.Path)]


def _flag(param: click.Parameter) -> str:
    return max(param.opts, key=len) if isinstance(param, click.Option) else param.human_readable_name.upper()


def test_the_walk_finds_the_path_flags() -> None:
    found = {(" ".join(path), _flag(param)) for path, param in _path_params()}
    assert {("lock", "--output"), ("lock", "--requirement"), ("example", "--output"), ("init", "FOLDER"),
            ("tensorboard", "--logdir")} <= found


def test_every_path_parameter_uses_path_text() -> None:
    plain = {(" ".join(path), _flag(param)) for path, param in _path_params() if not isinstance(param.type, PathText)}
    assert plain == set(NOT_YET), "use tfdist.cli.common.PathText for path flags (or drop a stale NOT_YET entry)"


@pytest.mark.parametrize("bad", ["a\0b", "a\nb", "\x1b[2J"])
def test_every_path_parameter_refuses_control_characters_in_one_line(bad: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    checked = 0
    for path, param in _path_params():
        if not isinstance(param.type, PathText):
            continue
        value = [bad] if not isinstance(param, click.Option) else [max(param.opts, key=len), bad]
        # The bad value comes first: click converts it before any other parameter, and nothing runs.
        assert main([*path, *(["--"] if not isinstance(param, click.Option) else []), *value]) == 2, (path, param.name)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and _flag(param) in err and "control character" in err, (path, err)
        checked += 1
    assert checked >= 8
