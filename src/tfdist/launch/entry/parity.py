"""Which ``tfdist launch`` flags mean what across machines: every flag works there with its single-machine meaning,
or is refused by name (exit 2) before anything starts. Never silently dropped.

:data:`ACROSS_MACHINES` is the table, one row per flag (the Click parameter name), with one cell per way in:
``hostfile`` (``--hostfile``/``--hosts``: this machine starts an agent on every host over ssh) and ``rendezvous``
(``--nnodes``/``--rdzv-endpoint``: the same command on every machine). A cell is :data:`WORKS`, or the hint of
the refusal. tests/cli/test_launch_parity.py runs every row through the real command, and fails when a flag of
``tfdist launch`` has no row.
"""
from __future__ import annotations

from typing import Mapping

from tfdist.errors import UsageError
from tfdist.launch.options import CLI_PARAMETER, DEFAULTS, OPTIONS, LaunchOptions

WORKS = None
HOSTFILE, RENDEZVOUS = "hostfile", "rendezvous"
_HOST = "each machine's tasks listen on its own address: give --node-address (rendezvous) or the host file's names"
_RDZV_ONLY = "a host file orders the machines and the launcher serves the rendezvous: drop it, or use --rdzv-endpoint"
_HOSTFILE_ONLY = "it selects hosts of a host file: use it with --hostfile/--hosts"
_FRESH_SECRET = "with a host file every job gets a fresh secret, handed to the agents over ssh"


def _both(cell: str | None) -> dict[str, str | None]:
    return {HOSTFILE: cell, RENDEZVOUS: cell}


ACROSS_MACHINES: dict[str, dict[str, str | None]] = {
    # Single-machine flags.
    "workers": _both(WORKS),  # per machine (a host file's slots= wins for its host)
    "ps": _both(WORKS),  # placed by tfdist.cluster.placement over the machines, in node-rank order
    "chief": _both(WORKS),
    "evaluator": _both(WORKS),
    "max_restarts": _both(WORKS),  # the rendezvous' restart budget for the whole job
    "restart_window": _both(WORKS),
    "backoff": _both(WORKS),  # before the next round after a failure
    "log_dir": _both(WORKS),  # on every machine, one attempt-<round> folder per round
    "tee": _both(WORKS),
    "port_base": _both(WORKS),  # each machine's workers listen on consecutive ports from here
    "host": _both(_HOST),
    "env_pairs": _both(WORKS),
    "gpus_per_task": _both(WORKS),
    "nccl_debug": _both(WORKS),
    "tf_log_level": _both(WORKS),
    "grace_period": _both(WORKS),
    "hang_timeout": _both(WORKS),
    "metrics_port": _both(WORKS),  # worker i (its index in the whole job) serves on this + i, on its machine
    "metrics_host": _both(WORKS),
    "launcher_metrics_port": _both(WORKS),  # each machine's agent serves its own
    "job_name": _both(WORKS),
    "allow_keras3": _both(WORKS),
    "warm_spares": _both(WORKS),
    "thread_caps": _both(WORKS),  # each machine's cores shared among its own workers
    "flight_recorder": _both(WORKS),  # each agent reads its tasks; the serving machine writes the one report
    "firewall": _both(WORKS),  # each agent guards its own machine's task ports
    # The task bootstrap runs in every machine's Python tasks; turning it off, and the single-machine rule on failures
    # after training, are not carried to the agents yet.
    "bootstrap": _both("across machines the task bootstrap always runs in Python tasks: drop --no-bootstrap"),
    "restart_after_training": _both("across machines the rendezvous restarts after any failure, after training "
                                    "too: drop it"),
    "live": {HOSTFILE: "the agents run over ssh without a terminal: run `tfdist status` or `tfdist launch --live` "
                       "on a machine of the job instead (--rdzv-endpoint)", RENDEZVOUS: WORKS},
    "module": _both(WORKS),
    "no_python": _both(WORKS),
    "dry_run": _both(WORKS),
    # Multi-machine flags.
    "hostfile": _both(WORKS),
    "hosts": _both(WORKS),
    "host_discovery_script": _both(WORKS),  # a third way to give the host list (host-file mode)
    "host_cooldown_range": {HOSTFILE: WORKS, RENDEZVOUS: "lost hosts are probed over ssh only in host-file mode: "
                            "use it with --hostfile/--hosts"},
    "include": {HOSTFILE: WORKS, RENDEZVOUS: _HOSTFILE_ONLY},
    "exclude": {HOSTFILE: WORKS, RENDEZVOUS: _HOSTFILE_ONLY},
    "min_nodes": {HOSTFILE: WORKS, RENDEZVOUS: "give the minimum as --nnodes MIN:MAX"},
    "nnodes": {HOSTFILE: _RDZV_ONLY, RENDEZVOUS: WORKS},
    "rdzv_endpoint": {HOSTFILE: _RDZV_ONLY, RENDEZVOUS: WORKS},
    "rdzv_backend": {HOSTFILE: "host-file jobs use the built-in rendezvous of the machine that starts them; "
                                "--rdzv-backend etcd runs with --nnodes/--rdzv-endpoint", RENDEZVOUS: WORKS},
    "rdzv_conf": {HOSTFILE: "it configures --rdzv-backend etcd, which runs with --nnodes/--rdzv-endpoint",
                  RENDEZVOUS: WORKS},
    "rdzv_id": _both(WORKS),
    "rdzv_secret_file": {HOSTFILE: _FRESH_SECRET, RENDEZVOUS: WORKS},
    "rdzv_insecure": {HOSTFILE: _FRESH_SECRET, RENDEZVOUS: WORKS},
    "node_rank": {HOSTFILE: _RDZV_ONLY, RENDEZVOUS: WORKS},
    "node_address": {HOSTFILE: _RDZV_ONLY, RENDEZVOUS: WORKS},
    "node_name": {HOSTFILE: _RDZV_ONLY, RENDEZVOUS: WORKS},
    "node_roles": {HOSTFILE: "pin a host's roles on its host-file line: host slots=2 roles=ps", RENDEZVOUS: WORKS},
    "node_timeout": _both(WORKS),
    "rdzv_timeout": _both(WORKS),
    "rdzv_last_call": _both(WORKS),
    "checkpoint_dir": _both(WORKS),
    "agent_watch_stdin": {HOSTFILE: _RDZV_ONLY, RENDEZVOUS: WORKS},  # hidden: what the launcher passes over ssh
}


def refuse_unsupported(mode: str, given: Mapping[str, str]) -> None:
    """Refuse the first flag in ``given`` (parameter name -> the flag as the user set it, ``--live`` or a config
    key) that does not work in ``mode``.

    Raises:
        UsageError: naming the flag and what to do instead (exit 2).
    """
    for name, shown in given.items():
        # A flag without a row fails the table test (tests/cli/test_launch_parity.py), not a user's job.
        hint = ACROSS_MACHINES.get(name, {}).get(mode)
        if hint is not WORKS:
            how = "with --hostfile/--hosts" if mode == HOSTFILE else "with --nnodes/--rdzv-endpoint"
            raise UsageError(f"{shown} is not supported across machines {how}", hint=hint, reference="launch-flag-not-across-machines")


def changed_flags(options: LaunchOptions) -> dict[str, str]:
    """What a launch driven from Python asks for, as the CLI's set flags: every option that differs from its
    default, as parameter name -> flag. ``live=False`` asks for nothing either (as ``--no-live``)."""
    given = {}
    for spec in OPTIONS:
        value = getattr(options, spec.name)
        if spec.name == "target" or value == getattr(DEFAULTS, spec.name) or (spec.name == "live" and not value):
            continue
        given[CLI_PARAMETER.get(spec.name, spec.name)] = spec.flag
    return given
