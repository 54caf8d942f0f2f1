"""``tfdist monitor``: a Grafana dashboard and a Prometheus scrape config for a job's metrics endpoints."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from tfdist.cli.common import option

# The port `tfdist k8s` manifests use too (OpenTelemetry exporters' default; free of node_exporter's 9100).
DEFAULT_PORT = 9464


def _write(outputs: list[tuple[str, str, str, str]], force: bool) -> None:
    """Write each (text, path, flag, what); '-' is stdout. Every file is checked before the first is written, so a
    refusal (missing folder, existing file without --force) writes nothing."""
    from tfdist.output import check_output, write_output
    from tfdist.quote import shell

    for _, path, flag, _ in outputs:
        if path == "-":
            continue
        check_output(path, force=force, flag=flag)
    for text, path, flag, what in outputs:
        if path == "-":
            sys.stdout.write(text)
            continue
        backup = write_output(path, text, force=force, flag=flag)
        kept = f" (the old one is kept as {shell(str(backup))})" if backup else ""
        click.echo(f"wrote {what}: {shell(path)}{kept}", err=True)


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
@option("--force", is_flag=True, help="Replace an existing -o file (the old one is kept as NAME.bak).")
def dashboard_command(output: str, title: str | None, uid: str | None, job: str | None, force: bool) -> int:
    """Write a Grafana dashboard: loss, throughput, step time, checkpoints, restarts, host and GPU panels.

    GPU panels use dcgm-exporter's metric names, so they work on tfdist's own NVML metrics and on a real
    dcgm-exporter alike. Import it in Grafana (Dashboards > New > Import) and pick the Prometheus data source.
    """
    from tfdist.deploy.monitor import render_dashboard

    _write([(render_dashboard(title=title, uid=uid, job=job), output, "--output", "Grafana dashboard")], force)
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
@option("--force", is_flag=True, help="Replace an existing -o or --targets-file (the old one is kept as NAME.bak).")
def scrape_config_command(target: str, job: str, port: int, tasks: int, host: str, launcher_port: int | None,
                          nodes: str | None, targets_file: str | None, namespace: str, selector: str | None,
                          port_name: str, interval: str, output: str, force: bool) -> int:
    """Write a Prometheus configuration that scrapes every task of a job.

    The scrape job keeps the tasks' own `job` label (honor_labels), so queries select a training job with
    {job="NAME"}. Check it with `promtool check config FILE`; run it with `prometheus --config.file FILE`.
    """
    from tfdist.deploy.monitor import ScrapeSpec, check_job, k8s_selector, render_scrape_config, render_slurm_targets
    from tfdist.errors import UsageError
    from tfdist.validate import one_line, path_text

    check_job(job)  # it names the default targets file and selector
    for value, flag in ((output, "--output"), (targets_file, "--targets-file")):
        if value is not None:
            path_text(value, flag)

    node_list: tuple[str, ...] = ()
    sd_file = ""
    if target == "slurm":
        from tfdist.cluster.hostlist import expand_hostlist

        source = "--nodes" if nodes else "SLURM_JOB_NODELIST"
        nodes = nodes or os.environ.get("SLURM_JOB_NODELIST", "")
        if nodes:  # exact: the host-list parser would quietly drop white space around it
            one_line(nodes, source, allow_outer_space=False)
        node_list = tuple(expand_hostlist(nodes)) if nodes else ()
        base = Path(output).parent if output != "-" else Path.cwd()
        sd_file = os.path.abspath(targets_file or base / f"tfdist-{job}-targets.json")
    if selector is None:
        selector = k8s_selector(job)
    elif not selector:  # it would select every pod of the namespace
        raise UsageError("--selector '' is empty", hint="leave it out for the pods tfdist k8s labels, or give one")
    spec = ScrapeSpec(target=target, job=job, interval=interval, port=port, tasks=tasks, host=host,
                      launcher_port=launcher_port, nodes=node_list, targets_file=sd_file or "tfdist-targets.json",
                      namespace=namespace, selector=selector, port_name=port_name)
    text = render_scrape_config(spec)  # validates the spec before anything is written
    slurm = [(render_slurm_targets(spec), sd_file, "--targets-file", "Slurm targets")] if target == "slurm" else []
    _write([*slurm, (text, output, "--output", "Prometheus config")], force)
    return 0
