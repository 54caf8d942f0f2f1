"""``tfdist slurm``: write an sbatch script that runs a training script on Slurm."""
from __future__ import annotations

import sys

import click

from tfdist.cli.common import option


@click.command(name="slurm", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@option("-N", "--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Nodes to allocate.")
@option("-T", "--tasks-per-node", type=click.IntRange(min=1), default=1, show_default=True,
        help="TensorFlow tasks per node (one process each).")
@option("--gpus-per-task", type=click.IntRange(min=0), default=0, show_default=True,
        help="GPUs per task (Slurm binds them; tfdist does not touch CUDA_VISIBLE_DEVICES).")
@option("--cpus-per-task", type=click.IntRange(min=0), default=0, help="CPUs per task (0: Slurm's default).")
@option("-p", "--partition", default=None, help="Slurm partition.")
@option("-t", "--time", "time_limit", default=None, help="Time limit, e.g. 04:00:00 (default: the partition's).")
@option("--max-restarts", type=click.IntRange(min=0), default=3, show_default=True,
        help="Start the whole step again this often after a task fails; training resumes from the checkpoint.")
@option("--log-dir", default="logs", show_default=True, help="Per-task logs (relative to the submit directory).")
@option("--model-dir", default=None,
        help="Checkpoints and TensorBoard logs on a shared file system; exported as TFDIST_MODEL_DIR "
             "[default: checkpoints/<job name>].")
@option("-J", "--job-name", default=None, help="Slurm job name [default: the script's name].")
@option("--grace", type=click.IntRange(min=10), default=60, show_default=True,
        help="Seconds before the time limit at which the tasks get SIGTERM to save and stop (then requeue).")
@option("--port-base", type=click.IntRange(min=1024, max=65535), default=None,
        help="First TensorFlow port on each node [default: 20000 + 10 x (job id mod 1000)].")
@option("--chief", is_flag=True, help="Rank 0 is a separate chief (default: worker 0 acts as chief).")
@option("--ps", type=click.IntRange(min=0), default=0, help="This many ranks are parameter servers.")
@option("--evaluator", is_flag=True, help="The last rank is a side-car evaluator.")
@option("--metrics-port", type=click.IntRange(min=1, max=65535), default=None,
        help="Serve /metrics and /healthz from every task: the task with SLURM_LOCALID k on port P+k of its node "
             "(what `tfdist monitor scrape-config --target slurm --port P -n TASKS_PER_NODE` scrapes).")
@option("--metrics-host", default=None,
        help="Address the tasks bind their metrics on [default: the node's address, or 0.0.0.0 when the node's "
             "name resolves only to loopback].")
@option("--python", default=None, help="Python with tfdist installed on the nodes [default: this one].")
@option("-o", "--output", default=None, help="Write the script here (default: standard output).")
@option("--force", is_flag=True, help="Replace an existing --output (the old one is kept as NAME.bak).")
@click.argument("script")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(nodes: int, tasks_per_node: int, gpus_per_task: int, cpus_per_task: int, partition: str | None,
            time_limit: str | None, max_restarts: int, log_dir: str, model_dir: str | None, job_name: str | None,
            grace: int, port_base: int | None, chief: bool, ps: int, evaluator: bool, metrics_port: int | None,
            metrics_host: str | None, python: str | None,
            output: str | None, force: bool, script: str, args: tuple[str, ...]) -> int:
    """Write an sbatch script that runs SCRIPT [ARGS...] as a multi-worker TensorFlow job.

    Each task starts through `srun --kill-on-bad-exit=1` and `tfdist tf-config --exec`, which derives
    TF_CONFIG from Slurm's variables. A failed step is restarted up to --max-restarts times (training resumes
    from the checkpoint under --model-dir), SIGTERM before the time limit lets the tasks save and the job is
    requeued, and every task writes its own log under --log-dir.

    \b
        tfdist slurm -N 2 -T 4 --gpus-per-task 1 -t 04:00:00 -o train.sbatch train.py --epochs 10
        sbatch train.sbatch
    """
    import os
    import re
    from pathlib import Path

    from tfdist.deploy.slurm import SlurmJobSpec, render_sbatch
    from tfdist.output import check_output, write_output
    from tfdist.quote import shell

    try:
        script_found = Path(script).is_file()
    except OSError:  # a name too long for the file system (is_file only hides "not found")
        script_found = False
    if not script_found:
        from tfdist.errors import UsageError
        from tfdist.validate import shown

        raise UsageError(f"SCRIPT {shown(script)} does not exist here", hint="give its path as seen from the folder "
                         "you run sbatch in, which becomes the job's working folder", reference="slurm-no-script")
    name = job_name or re.sub(r"[^A-Za-z0-9._-]", "-", Path(script).stem)[:64] or "tfdist"
    spec = SlurmJobSpec(
        script=script, args=tuple(args), nodes=nodes, tasks_per_node=tasks_per_node, job_name=name,
        python=python or sys.executable, gpus_per_task=gpus_per_task, cpus_per_task=cpus_per_task,
        partition=partition, time=time_limit, max_restarts=max_restarts, log_dir=log_dir,
        model_dir=model_dir or "", grace_seconds=grace, port_base=port_base, chief=chief, ps=ps,
        evaluator=evaluator, metrics_port=metrics_port, metrics_host=metrics_host)
    if output is not None:
        check_output(output, force=force)
    text = render_sbatch(spec, script_name=os.path.basename(output) if output else "job.sbatch")
    if output is None:
        sys.stdout.write(text)
        return 0
    backup = write_output(output, text, force=force, mode=0o755)
    kept = f" (the old one is kept as {shell(str(backup))})" if backup else ""
    click.echo(f"wrote {shell(output)}{kept} ({spec.total_tasks} tasks on {nodes} node(s)); "
               f"submit with: sbatch {shell(output)}", err=True)
    if metrics_port is not None:
        click.echo(f"scrape its metrics with: tfdist monitor scrape-config --target slurm --job {name} "
                   f"--port {metrics_port} -n {tasks_per_node} --nodes NODELIST", err=True)
    return 0
