"""``tfdist launch``: start and supervise the tasks of a distributed job, on this machine or across machines."""
from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

import click

from tfdist.cli.common import PathText, option
from tfdist.cli.launch_multi import multi_options, run_multi
from tfdist.constants import TASK_ENVIRONMENT
from tfdist.errors import UsageError
from tfdist.launch.options import DEFAULTS as D
from tfdist.launch.options import LaunchOptions, Mode
from tfdist.status import ExitStatus

if TYPE_CHECKING:
    from tfdist.launch.spec import LaunchSpec

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
        "and errors (see README); off: nothing of tfdist runs in the tasks.")
@option("--thread-caps/--no-thread-caps", default=D.thread_caps, show_default=True,
        help="Cap each task's TensorFlow and OpenMP thread pools to its share of the CPU cores.")
@option("--flight-recorder/--no-flight-recorder", default=D.flight_recorder, show_default=True,
        help="Before a hung or failed group is stopped, read every task's Python stacks, step and last output and "
        "write hang-attempt-N.txt/.json naming the task that stopped first (across machines: one report on the "
        "machine that serves the rendezvous). Off: stop at once, no report.")
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
    options = LaunchOptions.from_params(params)
    if options.mode is not Mode.SINGLE:
        return run_multi(options)
    return run_single(options)


def run_single(options: LaunchOptions) -> int:
    """One machine: check everything, then run the supervisor (or print the plan with --dry-run)."""
    from tfdist.cluster import is_loopback
    from tfdist.launch.entry.checks import check_gpus_exist, check_ps_has_chief
    from tfdist.launch.entry.compose import launch_spec
    from tfdist.launch.local.command_check import check_log_dir, keras_plan, resolve_command
    from tfdist.launch.local.ports import check_ports
    from tfdist.launch.local.taskenv import count_tasks
    from tfdist.protocol import refuse_protected

    if options.workers == 0 and not options.chief:
        raise UsageError("-n/--workers 0 needs --chief", hint="start at least one worker or a chief")
    check_ps_has_chief(options)
    environ = _with_tf_log_level(options.tf_log_level)
    check_gpus_exist(options.gpus_per_task)
    from tfdist.launch.elastic.netaddr import advertised_address

    # Tasks listen on every interface anyway (gRPC binds the port on all of them); TF_CONFIG needs an address the
    # others can reach, so the wildcard becomes this machine's address and a foreign address is refused.
    host = advertised_address(options.host)
    refuse_protected(name for name, _ in options.env_pairs())
    spec = launch_spec(options, resolve_command(options.target, module=options.module, no_python=options.no_python),
                       host=host)
    legacy_keras = keras_plan(spec, os.environ)
    if options.no_python:
        _warn_other_python(spec.command.program)
    if options.dry_run:
        print(f"every task: TF_CPP_MIN_LOG_LEVEL={environ['TF_CPP_MIN_LOG_LEVEL']} "
              f"(--tf-log-level {options.tf_log_level})")
        return _dry_run(spec, legacy_keras)
    if spec.log_dir is not None:
        check_log_dir(spec.log_dir)
    check_ports(spec, count_tasks(spec), launcher=True)  # every port, before anything starts
    for flag, host in (("--host", spec.host), ("--metrics-host", spec.metrics_host)):
        if not is_loopback(host):
            print(f"tfdist: warning: {flag} {host} is reachable from other machines: anyone who can reach it can "
                  "talk to the tasks", file=sys.stderr)

    from tfdist.launch.outcome import Cause, render_report, render_success
    from tfdist.launch.console.task_output import Console, to_terminal
    from tfdist.launch.process.reaper import become_subreaper
    from tfdist.launch.local.supervisor import Supervisor
    from tfdist.launch.console.tflog import LEVEL_VARIABLE

    become_subreaper()  # before the first child, so every descendant is ours to find
    launcher_metrics = None
    if spec.launcher_metrics_port is not None:
        from tfdist.observability.launcher_metrics import LauncherMetrics

        launcher_metrics = LauncherMetrics(spec.job_name)
        server = launcher_metrics.start(spec.launcher_metrics_port, spec.metrics_host)
        print(f"tfdist: launcher metrics at {server.url}", file=sys.stderr)
    try:
        from tfdist.launch.console.liveview import watch

        supervisor = Supervisor(spec, environ=environ, legacy_keras=legacy_keras, metrics=launcher_metrics,
                                console=Console(enabled=spec.tee or spec.log_dir is None,
                                                tf_log_level=int(environ[LEVEL_VARIABLE])), say=to_terminal)
        with watch(supervisor, live=options.live) as view:  # run record for status/logs; live lines on a terminal
            result = supervisor.run()
        summarised = view.pinned is not None  # the live view printed the job's summary line already
    finally:
        if launcher_metrics is not None:
            launcher_metrics.close()
    if result.succeeded:
        text = render_success(result, headline=not summarised)
        if text:
            print(text, file=sys.stderr)
    elif result.cause is Cause.START_FAILED and result.final is not None and result.final.failure is not None:
        return ExitStatus.USAGE  # the supervisor said it in one line; nothing ran
    else:
        print(render_report(result), file=sys.stderr)
    return result.exit_status


def _warn_other_python(program: str) -> None:
    from tfdist.launch.local.command_check import other_python

    found = other_python(program)
    if found is not None:
        print(f"tfdist: warning: --no-python runs {program} from PATH ({found}), not the Python tfdist runs under "
              f"({sys.executable}); drop --no-python (and {program}) to use tfdist's", file=sys.stderr)


def _with_tf_log_level(flag: str) -> dict[str, str]:
    """The tasks' base environment with the chosen TF_CPP_MIN_LOG_LEVEL (the console filters by the same level)."""
    from tfdist.launch.local.taskenv import visible_gpus
    from tfdist.launch.console.tflog import LEVEL_VARIABLE, choose_level

    has_gpus = flag == "auto" and LEVEL_VARIABLE not in os.environ and bool(visible_gpus(os.environ))
    return {**os.environ, LEVEL_VARIABLE: str(choose_level(flag, os.environ, has_gpus))}


def _dry_run(spec: LaunchSpec, legacy_keras: bool) -> int:
    from tfdist.cli.launch_plan import print_task_plan
    from tfdist.cluster import TfConfig
    from tfdist.launch.local.ports import free_ports, ports_from_base
    from tfdist.launch.local.layout import role_meanings
    from tfdist.launch.local.taskenv import count_tasks, layout_for, plan_tasks, visible_gpus

    n = count_tasks(spec)
    ports = ports_from_base(spec.port_base, n, spec.host) if spec.port_base else free_ports(n, spec.host)
    layout = layout_for(spec, ports)
    plans = plan_tasks(spec, layout, run_id="dry-run", attempt=0, log_dir=spec.log_dir or "<log-dir>",
                       gpus=visible_gpus(os.environ), legacy_keras=legacy_keras, environ=os.environ)
    print("roles:")
    for line in role_meanings(chief=spec.chief, workers=spec.workers, ps=spec.ps, evaluator=spec.evaluator):
        print(f"  {line}")
    for plan in plans:
        print(f"[{plan.name}] {plan.address}")
        print_task_plan(plan, json.dumps(TfConfig.parse(plan.tf_config).to_dict(), sort_keys=True))
    print(f"dry run: {len(plans)} task(s) planned, none started")
    return ExitStatus.SUCCESS
