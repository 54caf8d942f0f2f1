"""``tfdist k8s``: write Kubernetes manifests (JobSet, Indexed Job or TFJob) for a multi-worker job."""
from __future__ import annotations

import sys

import click

from tfdist.cli.common import option
from tfdist.deploy.k8s import DEFAULT_KIND, KINDS


@click.command(name="k8s", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@option("--name", required=True, help="Job name (lower-case DNS label, at most 40 characters).")
@option("--image", required=True, help="Container image with TensorFlow, tfdist and the training code.")
@option("-n", "--workers", type=click.IntRange(min=0), required=True, help="Worker replicas (0 with --chief alone).")
@option("--ps", type=click.IntRange(min=0), default=0, show_default=True, help="Parameter-server replicas.")
@option("--chief", is_flag=True, help="Add a separate chief (default: worker 0 acts as chief).")
@option("--evaluator", is_flag=True, help="Add a side-car evaluator.")
@option("--gpus-per-worker", type=click.IntRange(min=0), default=0, show_default=True,
        help="nvidia.com/gpu limit of the chief and of each worker.")
@option("--kind", type=click.Choice(KINDS), default=DEFAULT_KIND, show_default=True,
        help="jobset: JobSet controller; indexed-job: plain Kubernetes (no parameter servers, no evaluator); "
             "tfjob: Kubeflow Trainer v1 (training-operator), no longer maintained.")
@option("--max-restarts", type=click.IntRange(min=0), default=3, show_default=True,
        help="Restart budget (TFJob backoffLimit, JobSet maxRestarts, Job backoffLimit x pods).")
@option("--checkpoint-pvc", default=None,
        help="ReadWriteMany PersistentVolumeClaim for checkpoints and TensorBoard logs, mounted at /mnt/tfdist "
             "[default: an emptyDir, lost with the pod].")
@option("--namespace", default=None, help="metadata.namespace (default: kubectl's current one).")
@option("--no-probes", is_flag=True, help="No startup/liveness probes (for scripts that do not use tfdist.runtime).")
@option("-o", "--output", default=None, help="Write the manifests here (default: standard output).")
@option("--force", is_flag=True, help="Replace an existing --output (the old one is kept as NAME.bak).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def command(name: str, image: str, workers: int, ps: int, chief: bool, evaluator: bool, gpus_per_worker: int,
            kind: str, max_restarts: int, checkpoint_pvc: str | None, namespace: str | None, no_probes: bool,
            output: str | None, force: bool, command: tuple[str, ...]) -> int:
    """Write Kubernetes manifests that run COMMAND as a multi-worker TensorFlow job.

    Each container starts through `tfdist tf-config --exec` (TF_CONFIG derived from the JobSet / Indexed Job
    index and the headless service, or from the TFJob operator), serves /healthz and /metrics on port 9464
    (TFDIST_METRICS_PORT, probed by a startup and a liveness probe) and keeps checkpoints under
    /mnt/tfdist/NAME (TFDIST_MODEL_DIR).

    \b
        tfdist k8s --name digits --image registry/digits:1 --workers 2 -- python digits.py
    """
    from tfdist.deploy.k8s import TFJOB_NOTE, K8sJobSpec, render_manifests
    from tfdist.output import check_output, write_output
    from tfdist.quote import shell

    spec = K8sJobSpec(name=name, image=image, command=tuple(command), workers=workers, ps=ps, chief=chief,
                      evaluator=evaluator, gpus_per_worker=gpus_per_worker, kind=kind, max_restarts=max_restarts,
                      checkpoint_pvc=checkpoint_pvc, namespace=namespace, probes=not no_probes)
    if output is not None:
        check_output(output, force=force)
    text = render_manifests(spec)
    if kind == "tfjob":
        click.echo(f"tfdist k8s: note: {TFJOB_NOTE}", err=True)
    if checkpoint_pvc is None:
        click.echo("tfdist k8s: note: no --checkpoint-pvc: checkpoints go to an emptyDir and die with each pod, "
                   "so a restarted job starts from scratch", err=True)
    if output is None:
        sys.stdout.write(text)
        return 0
    backup = write_output(output, text, force=force)
    kept = f" (the old one is kept as {shell(str(backup))})" if backup else ""
    click.echo(f"wrote {shell(output)}{kept} ({kind}); apply with: kubectl apply -f {shell(output)}", err=True)
    return 0
