"""``tfdist logs``: print or follow the task logs of a ``tfdist launch`` run."""
from __future__ import annotations

import os
import sys

import click

from tfdist.cli.common import option


@click.command(name="logs")
@option("-f", "--follow", is_flag=True, help="Keep printing new output, across restarts, until the job ends.")
@option("--attempt", type=click.IntRange(0), default=None, help="Show this attempt (default: the latest).")
@option("--tail", type=click.IntRange(0), default=None, help="Start with the last N lines of each log.")
@click.argument("words", nargs=-1, metavar="[RUN] [TASK]")
def command(follow: bool, attempt: int | None, tail: int | None, words: tuple[str, ...]) -> int:
    """Print the logs of TASK (default: every task, each line prefixed) of RUN (default: the most recent run).

    RUN is a run id or prefix (see `tfdist status --list`) or a run folder; TASK is worker:1, chief:0, ps:0,
    evaluator:0 (worker-1 works too).

    \b
        tfdist logs -f              # every task of the latest run, as it happens
        tfdist logs 3f2a worker:1 --tail 50
    """
    from tfdist.errors import TfdistError, UsageError
    from tfdist.launch.console import logtail, runs

    if len(words) > 2:
        raise UsageError(f"unexpected argument {words[2]!r}", hint="give at most a run and a task")
    run_ref, task = None, None
    for word in words:
        named = logtail.parse_task(word)
        if named is not None and task is None:
            task = named
        elif run_ref is None and named is None:
            run_ref = word
        else:
            raise UsageError(f"{word!r}: expected [RUN] [TASK], e.g. 3f2a worker:1",
                             hint="a task is chief:0, worker:N, ps:N or evaluator:0")
    if follow and attempt is not None:
        raise UsageError("--attempt and --follow do not go together", hint="follow shows the latest attempt onwards")
    record = runs.find_run(run_ref, os.environ)
    if not os.path.isdir(record.log_dir):
        why = ("it was a temporary folder, removed when the job ended (launch with --log-dir to keep the logs)"
               if record.temporary else "it was moved or deleted")
        raise TfdistError(f"the logs of run {record.run_id} are gone: {record.log_dir} no longer exists ({why})")
    out = sys.stdout.buffer
    if not follow:
        logtail.show(record.log_dir, attempt, task, out, tail=tail)
        return 0

    def run_over() -> bool:
        latest = runs.reload(record, os.environ)
        return latest.ended or runs.launcher_alive(latest) is False

    try:
        logtail.follow(record.log_dir, task, out, run_over=run_over, tail=tail)
    except KeyboardInterrupt:
        return 0
    return 0
