"""``tfdist launch`` on one machine: check everything, then run the supervisor (or print the plan with --dry-run).

Every refusal comes before anything starts: the roles, the GPUs, the address the tasks are reached at, the protected
variables, the log folder and every port (the launcher's own metrics port too).
"""
from __future__ import annotations

import os
import sys

from tfdist.errors import UsageError
from tfdist.launch.console.tflog import LEVEL_VARIABLE
from tfdist.launch.entry.checks import check_gpus_exist, check_ps_has_chief
from tfdist.launch.entry.compose import launch_spec, tf_log_level
from tfdist.launch.local.command_check import check_log_dir, keras_plan, other_python, resolve_command
from tfdist.launch.local.ports import check_ports
from tfdist.launch.local.taskenv import count_tasks
from tfdist.launch.options import LaunchOptions
from tfdist.status import ExitStatus


def run_single(options: LaunchOptions) -> int:
    """One machine: the job's exit status (2 when it could not start)."""
    from tfdist.cluster import is_loopback
    from tfdist.launch.elastic.netaddr import advertised_address
    from tfdist.protocol import refuse_protected

    if options.workers == 0 and not options.chief:
        raise UsageError("-n/--workers 0 needs --chief", hint="start at least one worker or a chief")
    check_ps_has_chief(options)
    environ = {**os.environ, LEVEL_VARIABLE: str(tf_log_level(options.tf_log_level))}
    check_gpus_exist(options.gpus_per_task)
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
        from tfdist.launch.entry.plan_text import print_single_plan

        print(f"every task: TF_CPP_MIN_LOG_LEVEL={environ['TF_CPP_MIN_LOG_LEVEL']} "
              f"(--tf-log-level {options.tf_log_level})")
        return print_single_plan(spec, legacy_keras)
    if spec.log_dir is not None:
        check_log_dir(spec.log_dir)
    check_ports(spec, count_tasks(spec), launcher=True)  # every port, before anything starts
    for flag, address in (("--host", spec.host), ("--metrics-host", spec.metrics_host)):
        if not is_loopback(address):
            print(f"tfdist: warning: {flag} {address} is reachable from other machines: anyone who can reach it can "
                  "talk to the tasks", file=sys.stderr)

    from tfdist.launch.console.task_output import Console, to_terminal
    from tfdist.launch.local.supervisor import Supervisor
    from tfdist.launch.outcome import Cause, render_report, render_success
    from tfdist.launch.process.reaper import become_subreaper

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
    found = other_python(program)
    if found is not None:
        print(f"tfdist: warning: --no-python runs {program} from PATH ({found}), not the Python tfdist runs under "
              f"({sys.executable}); drop --no-python (and {program}) to use tfdist's", file=sys.stderr)
