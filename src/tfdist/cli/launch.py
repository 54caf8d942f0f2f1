"""``tfdist launch``: start and supervise the tasks of a distributed job, on this machine or across machines."""
from __future__ import annotations

import sys

import click

from tfdist.cli.common import PathText, option
from tfdist.cli.launch_multi import multi_options
from tfdist.constants import TASK_ENVIRONMENT
from tfdist.launch.options import DEFAULTS as D
from tfdist.launch.options import LaunchOptions

# "\b" keeps Click from reflowing the list into one paragraph.
_EPILOG = "Variables set for every task:\n\n\b\n" + "\n".join(f"  {k}: {v}" for k, v in TASK_ENVIRONMENT.items())


@click.command(context_settings={"allow_interspersed_args": False, "ignore_unknown_options": False},
               epilog=_EPILOG)
@option("-n", "--workers", type=click.IntRange(0, 1024), default=D.workers, show_default=True, help="Worker tasks.")
@option("--ps", type=click.IntRange(0, 256), default=D.ps, show_default=True, help="Parameter-server tasks.")
@option("--chief", is_flag=True, help="Add a chief task (else worker 0 plays the chief).")
@option("--evaluator", is_flag=True, help="Add an evaluator task (outside the training cluster).")
@option("--max-restarts", type=click.IntRange(0), default=D.max_restarts, show_default=True,
        help="Restart the whole group this many times after a failure; the same exception at the same line in two "
        "attempts in a row stops it early.")
@option("--restart-after-training", is_flag=True,
        help="Also restart (retraining) after a failure that came once every training task's fit had returned.")
@option("--restart-window", type=click.FloatRange(0), default=D.restart_window, show_default=True,
        help="Seconds after which a restart no longer counts against --max-restarts (0: never).")
@option("--backoff", type=click.FloatRange(0), default=D.backoff, show_default=True,
        help="Seconds before the first restart; doubles each time (capped at 30 s).")
@option("--log-dir", type=PathText(file_okay=False), help="One log file per task and attempt here.")
@option("--tee", is_flag=True, help="With --log-dir, also print task output here.")
@option("--port-base", type=click.IntRange(1, 65535), help="Use consecutive ports from here (default: free ports).")
@option("--host", default=D.host, show_default=True, help="Address the tasks listen on.")
@option("--env", "env_pairs", multiple=True, metavar="KEY=VALUE", help="Extra variable for every task (repeatable).")
@option("--gpus-per-task", type=click.IntRange(1), help="GPUs per training task (default: split evenly).")
@option("--nccl-debug", is_flag=True, help="Set NCCL_DEBUG=INFO for every task.")
@option("--tf-log-level", type=click.Choice(["auto", "info", "warning", "error", "fatal"]), default=D.tf_log_level,
        show_default=True, help="Least severe TensorFlow C++ log line shown (sets TF_CPP_MIN_LOG_LEVEL for the tasks; "
        "log files keep all). auto: an exported TF_CPP_MIN_LOG_LEVEL, else error with GPUs, fatal without.")
@option("--grace-period", type=click.FloatRange(0), default=D.grace_period, show_default=True,
        help="Seconds a stopped or preempted task has to save and exit before SIGKILL.")
@option("--hang-timeout", type=click.FloatRange(0), default=D.hang_timeout, show_default=True,
        help="Restart the group when a training task that sent heartbeats goes silent this long (0: off).")
@option("--metrics-port", type=click.IntRange(1, 65535), help="Task i serves /metrics and /healthz on this + i.")
@option("--metrics-host", default=D.metrics_host, show_default=True, help="Address the metrics endpoints bind.")
@option("--launcher-metrics-port", type=click.IntRange(1, 65535),
        help="Serve the launcher's own metrics (restarts, task states) on this port.")
@option("--job-name", default=D.job_name, show_default=True, help="Label for logs and metrics.")
@option("--allow-keras3", is_flag=True, help="Start a multi-worker job even without tf-keras (custom loops).")
@option("--warm-spares/--no-warm-spares", default=D.warm_spares, show_default=True,
        help="With --max-restarts, keep processes with TensorFlow imported ready for a restart.")
@option("--bootstrap/--no-bootstrap", default=D.bootstrap, show_default=True,
        help="Run tfdist's task bootstrap in Python tasks: a plain tf.distribute script reports step, loss, state "
        "and errors (see docs/runtime.md); off: nothing of tfdist runs in the tasks.")
@option("--thread-caps/--no-thread-caps", default=D.thread_caps, show_default=True,
        help="Cap each task's TensorFlow and OpenMP thread pools to its share of the CPU cores.")
@option("--flight-recorder/--no-flight-recorder", default=D.flight_recorder, show_default=True,
        help="Before a hung or failed group is stopped, read every task's Python stacks, step and last output and "
        "write hang-attempt-N.txt/.json naming the task that stopped first (across machines: one report on the "
        "machine that serves the rendezvous). Off: stop at once, no report.")
@option("--firewall", is_flag=True, default=D.firewall,
        help="Linux, as root: an nftables table admits to the tasks' TensorFlow and metrics ports only the job's "
        "machines of the current round and loopback (TensorFlow's server has no authentication); removed at the end.")
@option("--live/--no-live", default=D.live,
        help="One live line per task and a summary at the end [default: when stderr is a terminal].")
@option("-m", "--module", is_flag=True, help="Run the target as a module (python -m MODULE).")
@option("--no-python", is_flag=True, help="Run the target as a program, not with Python.")
@option("--dry-run", is_flag=True, help="Print every task's TF_CONFIG, environment and command; start nothing.")
@multi_options
@click.argument("target", nargs=-1, type=click.UNPROCESSED, metavar="[--] SCRIPT [ARGS]...")
def command(**params: object) -> int:
    """Start and supervise a distributed TensorFlow job, on this machine or across machines.

    On one machine (the default) it builds each task's TF_CONFIG, starts every task in its own process group with
    its output prefixed and logged, tears the whole group down on the first failure and restarts it, up to
    --max-restarts times (training resumes from its checkpoint; the same error at the same line twice in a row, or a
    failure after training finished, is not retried), and prints a root-cause report if the job fails. The job
    succeeds when the chief (or worker 0) exits 0.

    Across machines, --hostfile/--hosts starts an agent on every host over ssh, and --nnodes with --rdzv-endpoint
    is the same command run on every machine; each machine runs its share of the workers as above, and every flag
    keeps its meaning there or is refused by name.
    """
    from tfdist.launch.entry import run

    _say_where_insecure_came_from(bool(params.get("rdzv_insecure")))
    return run(LaunchOptions.from_params(params), given=_given_flags())


def _say_where_insecure_came_from(insecure: bool) -> None:
    """--rdzv-insecure turns the job's protection off. Typed, it is the user's word; from a config file (checked
    into a repository, shared by a team) or an environment twin (exported long ago, set by a scheduler) nobody
    may have meant it for this job, so it is honoured with a line saying where it came from."""
    from tfdist.cli import settings

    origin = settings.ORIGINS.get("--rdzv-insecure")
    if insecure and origin:
        print(f"tfdist: warning: --rdzv-insecure is set by {origin}, not on the command line: anyone who can "
              "reach the rendezvous can join or disturb this job", file=sys.stderr)


def _given_flags() -> dict[str, str]:
    """The flags set by the user (command line, environment twin or config file) to something other than their
    default, as parameter name -> flag. ``--no-live`` asks for nothing either and is left out."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return {}
    given = {}
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        source = ctx.get_parameter_source(param.name)
        if source in (None, ParameterSource.DEFAULT):
            continue
        if param.name == "live" and not ctx.params.get("live", True):
            continue
        if param.name in ctx.params and ctx.params[param.name] == param.default:
            continue  # set to its default: asks for nothing that could be refused
        given[param.name] = max(param.opts, key=len)
    return given
