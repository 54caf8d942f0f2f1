"""``tfdist status``: how a running or finished ``tfdist launch`` job is doing, read from its run folder."""
from __future__ import annotations

import os
import time
from typing import Any

import click

from tfdist.cli.common import emit_json, option
from tfdist.validate import printable

# Version 1 grows by new keys only (a reader ignores keys it does not know): "hang_report"; "chosen" (which run a
# `tfdist status` given no RUN shows, and why) and each listed run's "current_state".
STATUS_SCHEMA_VERSION = 1


@click.command(name="status")
@option("--json", "as_json", is_flag=True, help="Print a versioned JSON document (schema tfdist.status).")
@option("--list", "list_runs", is_flag=True, help="List the recorded runs, newest first.")
@click.argument("run", required=False)
def command(as_json: bool, list_runs: bool, run: str | None) -> int:
    """Show each task's state, step, loss and log of RUN (default: the run running now, wherever it was started;
    of several, the one started from this folder; none running: the latest started from this folder, else the latest
    of all; the first line says which). Several running and none of them alone started here: they are listed, exit 2.

    RUN is a run id (or a unique prefix of one) from `tfdist status --list`, or a run folder (--log-dir).
    Runs are recorded under $XDG_STATE_HOME/tfdist/runs (default ~/.local/state/tfdist/runs).

    \b
        tfdist status              # the run running now, else the latest started here
        tfdist status 3f2a --json
    """
    from tfdist.launch.console import progress, runs
    from tfdist.launch.flight.report import latest

    environ = os.environ
    if list_runs:
        records = runs.list_records(environ)
        states = [progress.run_state(record, runs.launcher_alive(record)) for record in records]
        if as_json:
            listed = [{**_record_json(r), "current_state": state} for r, state in zip(records, states)]
            emit_json("runs", {"runs": listed}, version=STATUS_SCHEMA_VERSION)
        else:
            for record, state in zip(records, states):
                click.echo(_list_line(record, state))
        return 0
    cwd = os.getcwd()
    pick = None if run is not None else runs.choose(environ, cwd)
    record = runs.find_run(run, environ, cwd) if pick is None else pick.record
    status = progress.run_status(record, hang_report=latest(record.log_dir))
    because = None if pick is None else runs.chosen_because(pick.record, cwd, pick.running)
    if as_json:
        chosen = None if pick is None else {"by": pick.by, "reason": because,
                                            "also_running": [r.run_id for r in pick.also_running]}
        emit_json("status", {**_status_json(status), "chosen": chosen}, version=STATUS_SCHEMA_VERSION)
    else:
        if because is not None:
            click.echo(printable(because, 1200))
        click.echo("\n".join(render_status(status, now=time.time())))
    return 0


def _ago(seconds: float) -> str:
    from tfdist.launch.console.liveview import format_duration

    return f"{format_duration(max(0.0, seconds))} ago"


def _list_line(record: Any, state: str) -> str:
    from tfdist.launch.console.liveview import format_duration

    ran = format_duration((record.ended_at or time.time()) - record.started_at)
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.started_at))
    return f"{record.run_id}  {started}  {printable(state):<11}  {ran:>7}  {printable(record.log_dir, 400)}"


def render_status(status: Any, *, now: float) -> list[str]:
    """The text report: the run, its folder, its summary, then one line per task of the latest attempt."""
    from tfdist.launch.console.liveview import Row, format_duration, format_number, render_rows

    record = status.record
    if record.ended:
        when = f"ended {_ago(now - record.ended_at)}, ran {format_duration(record.ended_at - record.started_at)}"
    else:
        when = (f"started {_ago(now - record.started_at)}, launcher pid {record.launcher_pid} on "
                f"{printable(record.host)}")
    # A record may come from another machine's launcher: its names are shown, never interpreted by the terminal.
    lines = [f"run {record.run_id} ({printable(record.job_name)}): {printable(status.state)} ({when})",
             f"  command: {printable(' '.join(record.command), 2000)}"]
    if status.folder_exists:
        lines.append(f"  folder:  {printable(record.log_dir, 400)}")
    elif record.temporary:
        lines.append(f"  folder:  {printable(record.log_dir, 400)} is gone: it was a temporary folder, removed when "
                     "the job ended (launch with --log-dir to keep the logs)")
    else:
        lines.append(f"  folder:  {printable(record.log_dir, 400)} is gone (moved or deleted)")
    if status.hang_report:
        lines.append(f"  hang:    {printable(status.hang_report, 400)} (the flight recorder: which task stopped first, "
                     "and where)")
    summary = record.summary
    if summary:
        parts = [f"{summary['steps']:,} steps" if summary.get("steps") is not None else None,
                 f"{summary['steps_per_s']:.1f} steps/s" if summary.get("steps_per_s") else None,
                 f"{summary.get('restarts', 0)} restart(s)",
                 f"final loss {format_number(summary['loss'])}" if summary.get("loss") is not None else None]
        lines.append("  summary: " + ", ".join(p for p in parts if p))
    if status.state == "lost":
        lines.append("  the launcher is gone without recording an end (killed, or its machine restarted)")
    if status.tasks:
        lines.append(f"attempt {status.attempt}:")
        rows = [Row(task=t.name, state=t.state, step=t.beat.step if t.beat else None,
                    total_steps=t.beat.total_steps if t.beat else None, loss=t.beat.loss if t.beat else None,
                    restarts=status.attempt or 0) for t in status.tasks]
        for task, line in zip(status.tasks, render_rows(rows)):
            age = f"  last beat {_ago(now - task.beat.time)}" if task.beat and task.state == "training" else ""
            lines.append(f"  {line}{age}")
            if task.error:
                lines.append(f"    error: {task.error}")
            lines.append(f"    log: {task.log_path}")
    return lines


def _record_json(record: Any) -> dict[str, Any]:
    data = record.to_json()
    data.pop("schema", None)
    data.pop("schema_version", None)
    return data


def _status_json(status: Any) -> dict[str, Any]:
    now = time.time()
    return {
        "run": _record_json(status.record), "state": status.state, "folder_exists": status.folder_exists,
        "hang_report": status.hang_report,
        "attempt": status.attempt,
        "tasks": [{"task": t.name, "attempt": t.attempt, "pid": t.pid, "state": t.state,
                   "step": t.beat.step if t.beat else None, "total_steps": t.beat.total_steps if t.beat else None,
                   "loss": t.beat.loss if t.beat else None, "examples": t.beat.examples if t.beat else None,
                   "seconds_since_beat": round(now - t.beat.time, 3) if t.beat else None,
                   "log": t.log_path, "error": t.error} for t in status.tasks],
    }
