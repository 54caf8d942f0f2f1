"""``tfdist mirror``: speed-test package mirrors and switch pip, uv and conda to one, losing nothing.

Thin layer: parse flags, build typed requests, call :mod:`tfdist.mirror`, render. Core modules are imported inside
the commands so ``tfdist --help`` stays fast.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tfdist.cli.common import PathText, emit_json, option
from tfdist.status import ExitStatus

_URL_HELP = "Add an ad-hoc pip/uv mirror as NAME=URL (repeatable)."
_INSECURE_HELP = "Allow plain-http mirror URLs (certificates of https mirrors are always checked)."


def _paths(root: str | None) -> Any:
    from tfdist.mirror.paths import ConfigPaths

    return ConfigPaths.from_env(root=Path(root) if root else None)


def _mirrors(only: str | None, urls: tuple[str, ...], allow_insecure: bool) -> tuple[list[Any], dict[str, Any]]:
    from tfdist.mirror.catalog import get_mirror, load_catalog, parse_adhoc

    extra = parse_adhoc(urls, allow_insecure=allow_insecure)
    if only:
        names = [n.strip().lower() for n in only.split(",") if n.strip()]
        mirrors = list({m.name: m for m in (get_mirror(n, extra) for n in names)}.values())
    else:
        mirrors = [*load_catalog().values(), *extra.values()]
    return mirrors, extra


@click.group(name="mirror")
def command() -> None:
    """Speed-test package mirrors; switch pip, uv and conda to one (with backups and restore)."""


@command.command(name="list", short_help="Show the catalog: indexes, conda channels, notes.")
@option("--json", "as_json", is_flag=True, help="Print the catalog as versioned JSON.")
def list_command(as_json: bool) -> int:
    """Show the known mirrors, their indexes, conda channels and caveats."""
    from tfdist.mirror.catalog import load_catalog
    from tfdist.mirror.render import mirror_rows, print_list

    mirrors = list(load_catalog().values())
    if as_json:
        emit_json("mirror.list", {"mirrors": mirror_rows(mirrors)})
    else:
        print_list(mirrors)
    return ExitStatus.SUCCESS


@command.command(name="test", short_help="Probe mirrors at once and rank them by install time.")
@option("--only", metavar="A,B", help="Probe only these mirrors (comma-separated names).")
@option("--url", "url", multiple=True, metavar="NAME=URL", help=_URL_HELP)
@option("--package", metavar="NAME==VERSION", help="Rank by the time to the first MiB of this exact release's wheel "
        "(the one pip would pick on this machine), e.g. tensorflow==2.21.0.")
@option("--sync-status", "sync", multiple=True, metavar="NAME=FORMAT:URL",
        help="Where an ad-hoc mirror publishes its sync state (FORMAT: tunasync or mirrorz).")
@option("--timeout", type=float, default=5.0, show_default=True, help="Seconds for the whole probe (run concurrently).")
@option("--allow-insecure", is_flag=True, help=_INSECURE_HELP)
@option("--max-bytes", type=click.IntRange(min=1), default=None, hidden=True, help="Download bound per mirror.")
@option("--json", "as_json", is_flag=True, help="Print the ranked results as versioned JSON.")
def test_command(only: str | None, url: tuple[str, ...], package: str | None, sync: tuple[str, ...], timeout: float,
                 allow_insecure: bool, max_bytes: int | None, as_json: bool) -> int:
    """Probe mirrors concurrently (first-byte latency, throughput, sync age, errors) and rank them."""
    from tfdist.mirror import speedtest
    from tfdist.mirror.catalog import parse_sync_specs
    from tfdist.mirror.probe import parse_pin
    from tfdist.mirror.render import print_results, result_rows

    pin = parse_pin(package) if package else None
    mirrors, _ = _mirrors(only, url, allow_insecure)
    config = speedtest.config_for(timeout, allow_insecure, max_bytes, pin)
    report = speedtest.run(mirrors, config, parse_sync_specs(sync, allow_insecure=allow_insecure), live=not as_json)
    if as_json:
        emit_json("mirror.test", {"timeout_s": timeout, "wall_s": round(report.wall_s, 3), "package": package,
                                  "results": result_rows(report.results, report.extra)})
    else:
        print_results(report.results, report.wall_s, report.extra, package=package)
    return ExitStatus.SUCCESS if any(r.usable for r in report.results) else ExitStatus.ERROR


@command.command(name="use", short_help="Switch pip, uv and conda to a mirror (backups first).")
@click.argument("name", metavar="NAME|fastest")
@option("--tool", "tool", metavar="pip,uv,conda", help="Tools to switch (default: pip, uv, and conda if present).")
@option("--scope", type=click.Choice(["user", "global", "site"]), default="user", show_default=True,
        help="Which of each tool's config files to edit.")
@option("--dry-run", is_flag=True, help="Print a diff of each file and write nothing.")
@option("--url", "url", multiple=True, metavar="NAME=URL", help=_URL_HELP)
@option("--only", metavar="A,B", help="With 'fastest': probe only these mirrors.")
@option("--timeout", type=float, default=5.0, show_default=True, help="Seconds for the probe (or the check).")
@option("--allow-insecure", is_flag=True, help=_INSECURE_HELP)
@option("--root", type=PathText(file_okay=False), hidden=True, help="Alternative root for system-wide files.")
@option("--no-check", is_flag=True, help="Switch without first checking that the mirror answers and serves files.")
@option("--no-verify", is_flag=True, help="Do not ask pip, uv and conda themselves afterwards which index they use.")
@option("--json", "as_json", is_flag=True, help="Print what was (or would be) changed as versioned JSON.")
def use_command(name: str, tool: str | None, scope: str, dry_run: bool, url: tuple[str, ...], only: str | None,
                timeout: float, allow_insecure: bool, root: str | None, no_check: bool, no_verify: bool,
                as_json: bool) -> int:
    """Switch pip, uv and conda to mirror NAME (or the fastest one), backing up every file first."""
    from tfdist.errors import TfdistError
    from tfdist.mirror.catalog import check_url, get_mirror, parse_adhoc
    from tfdist.mirror.paths import parse_tools
    from tfdist.mirror.probe import fastest
    from tfdist.mirror.render import print_results, print_switch, result_rows, switch_data
    from tfdist.mirror import speedtest
    from tfdist.mirror.switch import SwitchRequest, apply, plan, verify

    paths = _paths(root)
    wanted_tools = parse_tools(tool)
    probe_rows: list[dict[str, Any]] | None = None
    if name.strip().lower() == "fastest":
        mirrors, extra = _mirrors(only, url, allow_insecure)
        config = speedtest.config_for(timeout, allow_insecure, tools=wanted_tools)
        report = speedtest.run(mirrors, config, live=not as_json)
        if not as_json:
            print_results(report.results, report.wall_s, report.extra)
        probe_rows = result_rows(report.results, report.extra)
        best = fastest(report.results)
        if best is None:
            raise TfdistError("no mirror answered the speed test", hint="check the network or raise --timeout",
                              reference="mirror-none-reachable")
        mirror = get_mirror(best.name, extra)
    else:
        mirror = get_mirror(name, parse_adhoc(url, allow_insecure=allow_insecure))
        if mirror.pip_index:
            check_url(mirror.pip_index, allow_insecure=allow_insecure)
        if not (dry_run or no_check):  # the fastest one has just been probed
            speedtest.check_before_use(mirror, speedtest.config_for(timeout, allow_insecure).timeout, allow_insecure,
                                       wanted_tools)
    request = SwitchRequest(mirror=mirror, tools=wanted_tools, scope=scope, dry_run=dry_run)  # type: ignore[arg-type]
    result = plan(request, paths)
    if not dry_run:
        result = apply(result, paths)
        if root:  # files for another root (an image being built): this machine's tools cannot read them
            from dataclasses import replace

            result = replace(result, unverified=(f"--root {root}: the tools here do not read those files",))
        elif not no_verify:
            result = verify(result, paths)
    if as_json:
        extra = {"probe": probe_rows} if probe_rows is not None else {}
        emit_json("mirror.use", {"dry_run": dry_run, **switch_data(result), **extra})
    else:
        print_switch(result, dry_run=dry_run)
    return ExitStatus.SUCCESS if result.took_effect else ExitStatus.ERROR


@command.command(name="restore", short_help="Put back every file tfdist changed, byte for byte.")
@option("--tool", "tool", metavar="pip,uv,conda", help="Restore only these tools' files.")
@option("--dry-run", is_flag=True, help="Say what would be restored and change nothing.")
@option("--json", "as_json", is_flag=True, help="Print what was restored as versioned JSON.")
def restore_command(tool: str | None, dry_run: bool, as_json: bool) -> int:
    """Put back the original bytes of every file tfdist changed (and remove files it created)."""
    from tfdist.mirror.backup import BackupStore
    from tfdist.mirror.paths import parse_tools
    from tfdist.mirror.render import print_restore

    actions = BackupStore(_paths(None)).restore(parse_tools(tool), dry_run=dry_run)
    if as_json:
        emit_json("mirror.restore", {"dry_run": dry_run, "files": [
            {"tool": a.entry.tool, "path": a.entry.path, "action": a.action, "note": a.note, "kept": a.kept}
            for a in actions]})
    else:
        print_restore(actions, dry_run=dry_run)
    return ExitStatus.SUCCESS


@command.command(name="status", short_help="Show the index pip, uv and conda use, and why.")
@option("--json", "as_json", is_flag=True, help="Print the status as versioned JSON.")
def status_command(as_json: bool) -> int:
    """Show which index pip, uv and conda use now, and the file or variable that sets it."""
    from tfdist.mirror.backup import BackupStore
    from tfdist.mirror.render import print_status, status_data
    from tfdist.mirror.status import all_status

    paths = _paths(None)
    statuses = all_status(paths)
    backups = [e.__dict__ for e in BackupStore(paths).entries().values()]
    if as_json:
        from tfdist.mirror.render import STATUS_SCHEMA_VERSION

        emit_json("mirror.status", status_data(statuses, backups), version=STATUS_SCHEMA_VERSION)
    else:
        print_status(statuses, backups)
    return ExitStatus.SUCCESS


@command.command(name="env", short_help="Print PIP_INDEX_URL etc. for images and CI.")
@click.argument("name")
@option("--dockerfile", is_flag=True, help="Print a Dockerfile ENV instruction instead of shell exports.")
@option("--url", "url", multiple=True, metavar="NAME=URL", help=_URL_HELP)
@option("--allow-insecure", is_flag=True, help=_INSECURE_HELP)
@option("--json", "as_json", is_flag=True, help="Print the variables as versioned JSON.")
def env_command(name: str, dockerfile: bool, url: tuple[str, ...], allow_insecure: bool, as_json: bool) -> int:
    """Print the environment variables (PIP_INDEX_URL, UV_DEFAULT_INDEX, ...) that select mirror NAME."""
    from tfdist.mirror.catalog import get_mirror, parse_adhoc
    from tfdist.mirror.envvars import dockerfile_snippet, mirror_environment, shell_lines

    mirror = get_mirror(name, parse_adhoc(url, allow_insecure=allow_insecure))
    env = mirror_environment(mirror)
    if as_json:
        from tfdist.mirror.urls import mask_data

        emit_json("mirror.env", {"mirror": mirror.name, "environment": mask_data(env)})
    elif dockerfile:
        sys.stdout.write(dockerfile_snippet(mirror, env))
    else:
        sys.stdout.write(shell_lines(env, mirror.title))
    return ExitStatus.SUCCESS
