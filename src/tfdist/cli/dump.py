"""``tfdist dump``: the flight recorder on demand: every task's Python stacks, step, process state and last lines of
output, with a verdict, for a running job."""
from __future__ import annotations

import os

import click

from tfdist.cli.common import emit_json, option

DUMP_SCHEMA_VERSION = 1


@click.command(name="dump")
@option("--json", "as_json", is_flag=True, help="Print the report as versioned JSON (schema tfdist.hang).")
@option("--dumper", type=click.Choice(["auto", "py-spy", "faulthandler"]), default="auto", show_default=True,
        help="How stacks are read: py-spy (reads stopped tasks too), the tasks' faulthandler, or auto (py-spy "
             "when installed).")
@option("--attempt", type=click.IntRange(0), default=None, help="Look at this attempt (default: the latest).")
@click.argument("run", required=False)
def command(as_json: bool, dumper: str, attempt: int | None, run: str | None) -> int:
    """Dump the stacks of every task of RUN (default: the most recent run) and say which task stopped first.

    RUN is a run id (or a unique prefix of one) from `tfdist status --list`, or a run folder (--log-dir). The
    report is printed and kept in the run folder as hang-dump-<time>-attempt-<n>.txt (and .json). Nothing is
    stopped or restarted.

    \b
        tfdist dump                # the latest run
        tfdist dump 3f2a --json
    """
    from tfdist.errors import TfdistError
    from tfdist.launch.console import runs
    from tfdist.launch.flight import report
    from tfdist.launch.flight.collect import targets_from_folder
    from tfdist.launch.flight.recorder import record

    found = runs.find_run(run, os.environ)
    if not os.path.isdir(found.log_dir):
        raise TfdistError(f"run {found.run_id} has no folder any more ({found.log_dir}): nothing to dump")
    numbers = runs.attempts(found.log_dir)
    if not numbers:
        raise TfdistError(f"run {found.run_id} has started no task yet (no attempt in {found.log_dir})")
    if attempt is not None and attempt not in numbers:
        raise TfdistError(f"run {found.run_id} has no attempt {attempt} (it has {', '.join(map(str, numbers))})")
    number = numbers[-1] if attempt is None else attempt
    result, path = record(targets_from_folder(found.log_dir, number), run_id=found.run_id, attempt=number,
                          reason=report.ON_DEMAND, folder=found.log_dir, dumper=dumper)
    if as_json:
        payload = report.to_json(result)
        payload.pop("schema", None)
        payload.pop("schema_version", None)
        emit_json("hang", {**payload, "report": path}, version=DUMP_SCHEMA_VERSION)
    else:
        click.echo(report.render_text(result), nl=False)
        if path:
            click.echo(f"report: {path}")
    return 0
