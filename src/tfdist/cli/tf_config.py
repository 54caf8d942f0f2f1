"""``tfdist tf-config``: print the TF_CONFIG this process resolves to (or export it and exec a command)."""
from __future__ import annotations

import json
import os
import sys

import click

from tfdist.cli.common import emit_json, option


@click.command(name="tf-config", context_settings={"ignore_unknown_options": True,
                                                   "allow_interspersed_args": False})
@option("--from", "source", type=click.Choice(["auto", "env", "slurm", "k8s"]), default="auto", show_default=True,
        help="Where the cluster comes from: TF_CONFIG (env), Slurm's SLURM_* variables (slurm), a tfdist "
             "Kubernetes pod (k8s); auto takes TF_CONFIG if set, then Slurm, then Kubernetes.")
@option("--json", "as_json", is_flag=True, help="Print a versioned document with the source instead of bare TF_CONFIG.")
@option("--exec", "do_exec", is_flag=True, hidden=True,
        help="Internal (used by the sbatch script and the Kubernetes manifests): export TF_CONFIG, "
             "TFDIST_TASK_TYPE/INDEX, TF_USE_LEGACY_KERAS=1 (when tf_keras is installed), gRPC keep-alive "
             "(TF_GRPC_DEFAULT_OPTIONS, when the cluster has parameter servers and it is not set) and, under Slurm "
             "with TFDIST_SLURM_METRICS_PORT, this task's TFDIST_METRICS_PORT/HOST, then exec COMMAND.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(source: str, as_json: bool, do_exec: bool, command: tuple[str, ...]) -> int:
    """Print the TF_CONFIG this process resolves to, as JSON.

    An explicit TF_CONFIG wins; under Slurm (inside srun) the cluster comes from SLURM_STEP_NODELIST,
    SLURM_STEP_TASKS_PER_NODE and SLURM_PROCID; in pods written by `tfdist k8s` from the Indexed Job / JobSet
    index and the headless service. Exit status 1 when nothing describes a cluster.

    \b
        export TF_CONFIG="$(tfdist tf-config --from slurm)"
    """
    from tfdist.errors import TfdistError, UsageError
    from tfdist.cluster import detect_source, resolve_tf_config
    from tfdist.validate import shown

    if command and not do_exec:
        raise UsageError(f"unexpected argument {shown(command[0])}",
                         hint="tfdist tf-config takes no arguments (run a command with --exec -- COMMAND)")
    if do_exec:
        if not command:
            raise UsageError("--exec needs a command after --", hint="tfdist tf-config --exec -- python train.py")
        return _exec(list(command), source)

    resolved = resolve_tf_config(os.environ, source)
    used = (detect_source(os.environ) if source == "auto" else source) if resolved is not None else None
    if as_json:
        emit_json("tf-config", {"source": used, "tf_config": resolved})
    if resolved is None:
        if not as_json:
            raise TfdistError("nothing here describes a cluster (no TF_CONFIG, no Slurm task, no tfdist pod)",
                              hint="run it inside srun or a tfdist pod, or set TF_CONFIG")
        return 1
    if not as_json:
        sys.stdout.write(json.dumps(resolved, separators=(",", ":")) + "\n")
    return 0


def _exec(argv: list[str], source: str) -> int:
    """Replace this process with ``argv``, its environment completed by :func:`task_environment`."""
    from tfdist.cluster import task_environment
    from tfdist.compat.keras import tf_keras_available
    from tfdist.errors import TfdistError, UsageError
    from tfdist.cluster.slurm_metrics import metrics_environment, resolve_host
    from tfdist.validate import shown

    bad = next((word for word in argv if "\0" in word), None)
    if bad is not None:  # no program can receive it; execvpe would raise ValueError
        raise UsageError(f"COMMAND word {shown(bad)} contains a NUL character", hint="remove it")
    env = task_environment(os.environ, source, legacy_keras_available=tf_keras_available())
    env.update(metrics_environment(env, resolve_host))  # Slurm: each task its own port (base + SLURM_LOCALID)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as failed:
        raise TfdistError(f"cannot run {shown(argv[0])}: {failed.strerror}",
                          hint="check the command after -- (is it installed on this node?)") from None
    return 1  # not reached: exec replaced the process
