"""``tfdist monitor``: a Grafana dashboard and a Prometheus scrape config for a job's metrics endpoints."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from tfdist.cli.common import option

# The port `tfdist k8s` manifests use too (OpenTelemetry exporters' default; free of node_exporter's 9100).
DEFAULT_PORT = 9464


def _write(text: str, output: str, what: str) -> None:
    if output == "-":
        sys.stdout.write(text)
        return
    from tfdist.errors import UsageError

    path = Path(output)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as failed:
        raise UsageError(f"cannot write {what} to {output}: {failed.strerror or failed}",
                         hint="choose another -o path") from None
    click.echo(f"wrote {what}: {path}", err=True)


@click.group(name="monitor")
def command() -> None:
    """Grafana dashboard and Prometheus scrape config for a job's metrics.

    Tasks serve /metrics and /healthz when started with `tfdist launch --metrics-port P` (task i on P+i).
    """


@command.command(name="dashboard")
@option("-o", "--output", default="-", show_default=True, help="Where to write the dashboard JSON ('-': stdout).")
@option("--title", default=None, help="Dashboard title (default 'tfdist training').")
@option("--uid", default=None, help="Dashboard uid; keep it stable so a re-import replaces the dashboard.")
@option("--job", default=None, help="Preselect this training job in the $job variable (default: all jobs).")
def dashboard_command(output: str, title: str | None, uid: str | None, job: str | None) -> int:
    """Write a Grafana dashboard: loss, throughput, step time, checkpoints, restarts, host and GPU panels.

    GPU panels use dcgm-exporter's metric names, so they work on tfdist's own NVML metrics and on a real
    dcgm-exporter alike. Import it in Grafana (Dashboards > New > Import) and pick the Prometheus data source.
    """
    from tfdist.deploy.monitor import render_dashboard

    _write(render_dashboard(title=title, uid=uid, job=job), output, "Grafana dashboard")
    return 0


@command.command(name="scrape-config")
@option("--target", type=click.Choice(["local", "slurm", "k8s"]), required=True,
        help="local: tasks of a `tfdist launch` on one machine; slurm: the nodes of a Slurm job (file discovery); "
             "k8s: the job's pods (pod discovery).")
@option("--job", default="tfdist", show_default=True, help="Training job name (`tfdist launch --job-name`).")
@option("--port", type=int, default=DEFAULT_PORT, show_default=True,
        help="First metrics port (`tfdist launch --metrics-port`): task i serves on port+i (per node on Slurm).")
@option("-n", "--tasks", type=int, default=1, show_default=True,
        help="Number of tasks (local), or tasks per node (slurm).")
@option("--host", default="127.0.0.1", show_default=True, help="Address the tasks bind (local).")
@option("--launcher-port", type=int, default=None, help="The launcher's own metrics port (local), if any.")
@option("--nodes", default=None,
        help="The Slurm job's node list, e.g. 'node[01-04]' (default: $SLURM_JOB_NODELIST).")
@option("--targets-file", default=None,
        help="Slurm: the file_sd targets file to write and point at (default: tfdist-<job>-targets.json next to -o).")
@option("--namespace", default="default", show_default=True, help="Kubernetes namespace of the pods (k8s).")
@option("--selector", default=None,
        help="Kubernetes label selector of the job's pods (default: the labels `tfdist k8s` puts on them, "
             "app.kubernetes.io/name=<job>,app.kubernetes.io/created-by=tfdist).")
@option("--port-name", default="metrics", show_default=True, help="Name of the pods' metrics container port (k8s).")
@option("--interval", default="15s", show_default=True, help="Scrape interval (a Prometheus duration).")
@option("-o", "--output", default="-", show_default=True, help="Where to write prometheus.yml ('-': stdout).")
def scrape_config_command(target: str, job: str, port: int, tasks: int, host: str, launcher_port: int | None,
                          nodes: str | None, targets_file: str | None, namespace: str, selector: str | None,
                          port_name: str, interval: str, output: str) -> int:
    """Write a Prometheus configuration that scrapes every task of a job.

    The scrape job keeps the tasks' own `job` label (honor_labels), so queries select a training job with
    {job="NAME"}. Check it with `promtool check config FILE`; run it with `prometheus --config.file FILE`.
    """
    from tfdist.deploy.monitor import ScrapeSpec, k8s_selector, render_scrape_config, render_slurm_targets

    node_list: tuple[str, ...] = ()
    sd_file = ""
    if target == "slurm":
        from tfdist.cluster.hostlist import expand_hostlist

        nodes = nodes or os.environ.get("SLURM_JOB_NODELIST", "")
        node_list = tuple(expand_hostlist(nodes)) if nodes else ()
        base = Path(output).parent if output != "-" else Path.cwd()
        sd_file = os.path.abspath(targets_file or base / f"tfdist-{job}-targets.json")
    if selector is None:
        selector = k8s_selector(job)
    spec = ScrapeSpec(target=target, job=job, interval=interval, port=port, tasks=tasks, host=host,
                      launcher_port=launcher_port, nodes=node_list, targets_file=sd_file or "tfdist-targets.json",
                      namespace=namespace, selector=selector, port_name=port_name)
    text = render_scrape_config(spec)  # validates the spec before anything is written
    if target == "slurm":
        _write(render_slurm_targets(spec), sd_file, "Slurm targets")
    _write(text, output, "Prometheus config")
    return 0
