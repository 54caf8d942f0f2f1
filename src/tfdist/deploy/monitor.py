"""Prometheus scrape configs and a Grafana dashboard for a tfdist job (pure: typed spec in, text out).

Scrape configs:

- ``local``: static targets ``host:port .. host:port+n-1``, the ports ``tfdist launch --metrics-port`` hands out,
  plus the launcher's own port when given;
- ``slurm``: file-based discovery (``file_sd_configs``) from the job's node list: each node serves its tasks on
  ``port + SLURM_LOCALID``; rewrite the targets file for a new allocation and Prometheus reloads it by itself;
- ``k8s``: pod discovery in a namespace, keeping pods matched by a label selector (by default the labels
  ``tfdist k8s`` writes) and their container port named ``metrics``.

Every scrape job sets ``honor_labels: true``: the tasks label their series with the *training* job's name
(``job``), which must win over the scrape job's name Prometheus would otherwise write there.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from tfdist.cluster.address import format_address
from tfdist.errors import UsageError

TARGETS = ("local", "slurm", "k8s")
_DURATION = re.compile(r"^\d+(ms|s|m|h)$")
_REQUIREMENT = r"!?[A-Za-z0-9./_-]+((=|==|!=)[A-Za-z0-9._-]*)?"  # key, !key, key=value, key!=value
_LABEL_SELECTOR = re.compile(rf"^{_REQUIREMENT}(,{_REQUIREMENT})*$")
_JOB = re.compile(r"^[A-Za-z0-9_.:-]+$")


@dataclass(frozen=True)
class ScrapeSpec:
    """What to scrape.

    Args:
        target: ``local``, ``slurm`` or ``k8s``.
        job: the training job's name (``tfdist launch --job-name``); names the scrape job ``tfdist-<job>``.
        interval: scrape interval, a Prometheus duration (``15s``).
        port: first metrics port (local, slurm).
        tasks: number of tasks (local) or tasks per node (slurm).
        host: address the tasks bind (local).
        launcher_port: the launcher's metrics port, if any (local).
        nodes: the job's nodes (slurm), already expanded.
        targets_file: path of the file_sd targets file the config points to (slurm).
        namespace: Kubernetes namespace (k8s).
        selector: Kubernetes label selector for the job's pods (k8s), e.g. ``tfdist.io/job=mnist``.
        port_name: name of the pods' metrics container port (k8s).
    """

    target: str
    job: str = "tfdist"
    interval: str = "15s"
    port: int = 9464
    tasks: int = 1
    host: str = "127.0.0.1"
    launcher_port: int | None = None
    nodes: tuple[str, ...] = ()
    targets_file: str = "tfdist-targets.json"
    namespace: str = "default"
    selector: str = ""
    port_name: str = "metrics"

    def validate(self) -> None:
        """Raise :class:`UsageError` naming the flag that is wrong."""
        if self.target not in TARGETS:
            raise UsageError(f"--target {self.target!r} is not one of {', '.join(TARGETS)}")
        if not _JOB.match(self.job):
            raise UsageError(f"--job {self.job!r} has characters a Prometheus job name cannot carry",
                             hint="use letters, digits, '-', '_' or '.'")
        if not _DURATION.match(self.interval):
            raise UsageError(f"--interval {self.interval!r} is not a Prometheus duration", hint="e.g. 15s or 1m")
        if self.tasks < 1:
            raise UsageError(f"--tasks must be at least 1, not {self.tasks}")
        for flag, port in (("--port", self.port), ("--launcher-port", self.launcher_port)):
            if port is not None and not 1 <= port <= 65535:
                raise UsageError(f"{flag} {port} is not a TCP port")
        if self.port + self.tasks - 1 > 65535:
            raise UsageError(f"--port {self.port} with {self.tasks} tasks runs past port 65535")
        if self.target == "slurm" and not self.nodes:
            raise UsageError("--target slurm needs the job's nodes",
                             hint="pass --nodes 'node[1-4]' or run inside the allocation (SLURM_JOB_NODELIST)")
        if self.selector and not _LABEL_SELECTOR.match(self.selector):
            raise UsageError(f"--selector {self.selector!r} is not a Kubernetes label selector",
                             hint="e.g. tfdist.io/job=mnist")


def k8s_selector(job: str) -> str:
    """The label selector matching the pods ``tfdist k8s`` writes for ``job``."""
    return f"app.kubernetes.io/name={job},app.kubernetes.io/created-by=tfdist"


def local_targets(spec: ScrapeSpec) -> list[str]:
    """``host:port`` of each local task, in the launcher's task order."""
    return [format_address(spec.host, spec.port + i) for i in range(spec.tasks)]


def slurm_targets(spec: ScrapeSpec) -> list[dict[str, Any]]:
    """The file_sd document for a Slurm job: every node's tasks, labelled with the node."""
    return [{"targets": [format_address(node, spec.port + i) for i in range(spec.tasks)],
             "labels": {"slurm_node": node}} for node in spec.nodes]


def scrape_config(spec: ScrapeSpec) -> dict[str, Any]:
    """A complete ``prometheus.yml`` as a mapping; its ``scrape_configs`` entry can be merged into another."""
    spec.validate()
    job: dict[str, Any] = {
        "job_name": f"tfdist-{spec.job}",
        "honor_labels": True,
        "scrape_interval": spec.interval,
        "metrics_path": "/metrics",
    }
    if spec.target == "local":
        static: list[dict[str, Any]] = [{"targets": local_targets(spec), "labels": {"tfdist_role": "task"}}]
        if spec.launcher_port is not None:
            static.append({"targets": [format_address(spec.host, spec.launcher_port)],
                           "labels": {"tfdist_role": "launcher"}})
        job["static_configs"] = static
    elif spec.target == "slurm":
        job["file_sd_configs"] = [{"files": [spec.targets_file], "refresh_interval": "1m"}]
    else:
        sd: dict[str, Any] = {"role": "pod", "namespaces": {"names": [spec.namespace]}}
        if spec.selector:
            sd["selectors"] = [{"role": "pod", "label": spec.selector}]
        job["kubernetes_sd_configs"] = [sd]
        job["relabel_configs"] = [
            # One target per container port: keep only the metrics port of running pods.
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": spec.port_name,
             "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ]
    return {"global": {"scrape_interval": spec.interval, "evaluation_interval": spec.interval},
            "scrape_configs": [job]}


def render_scrape_config(spec: ScrapeSpec) -> str:
    """:func:`scrape_config` as YAML with a header saying how it was made."""
    body = yaml.safe_dump(scrape_config(spec), sort_keys=False, default_flow_style=False)
    header = (f"# Prometheus configuration for tfdist job {spec.job!r} ({spec.target}), written by "
              "`tfdist monitor scrape-config`.\n"
              "# honor_labels keeps the training job's own `job` label on its series.\n")
    return header + body


def render_slurm_targets(spec: ScrapeSpec) -> str:
    """:func:`slurm_targets` as the JSON Prometheus' file discovery reads."""
    return json.dumps(slurm_targets(spec), indent=2) + "\n"


# -- Grafana ------------------------------------------------------------------------------------------------
_PANEL_WIDTH = 8
_PANEL_HEIGHT = 8
_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@lru_cache(maxsize=1)
def dashboard_spec() -> dict[str, Any]:
    """The versioned panel list (``data/grafana/dashboard.json``)."""
    text = resources.files("tfdist").joinpath("data/grafana/dashboard.json").read_text(encoding="utf-8")
    spec = json.loads(text)
    if spec.get("format") != "tfdist.grafana-panels" or spec.get("version") != 1:
        raise ValueError("data/grafana/dashboard.json: unknown format or version")
    return spec


def dashboard_queries() -> list[str]:
    """Every PromQL expression the dashboard runs, in panel order."""
    return [t["expr"] for row in dashboard_spec()["rows"] for p in row["panels"] for t in p["targets"]]


def dashboard(*, title: str | None = None, uid: str | None = None, job: str | None = None) -> dict[str, Any]:
    """A Grafana dashboard (JSON model) with training, checkpoint, host and GPU panels.

    Args:
        title: dashboard title (default from the data file).
        uid: dashboard uid, stable across imports so re-importing replaces it.
        job: preselect this training job in the ``$job`` variable (default: all).
    """
    spec = copy.deepcopy(dashboard_spec())
    panels: list[dict[str, Any]] = []
    next_id = 1
    y = 0
    for row in spec["rows"]:
        panels.append({"id": next_id, "type": "row", "title": row["title"], "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        next_id += 1
        y += 1
        for position, panel in enumerate(row["panels"]):
            x = (position % (24 // _PANEL_WIDTH)) * _PANEL_WIDTH
            if position and x == 0:
                y += _PANEL_HEIGHT
            panels.append({
                "id": next_id, "type": "timeseries", "title": panel["title"], "datasource": _DATASOURCE,
                "gridPos": {"h": _PANEL_HEIGHT, "w": _PANEL_WIDTH, "x": x, "y": y},
                "fieldConfig": {"defaults": {"unit": panel["unit"]}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                            "tooltip": {"mode": "multi", "sort": "none"}},
                "targets": [{"refId": chr(ord("A") + i), "datasource": _DATASOURCE, "expr": t["expr"],
                             "legendFormat": t["legend"]} for i, t in enumerate(panel["targets"])],
            })
            next_id += 1
        y += _PANEL_HEIGHT
    variables: list[dict[str, Any]] = [{
        "name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
        "current": {}, "hide": 0, "refresh": 1,
    }]
    for var in spec["variables"]:
        selected = job if (var["name"] == "job" and job) else "$__all"
        variables.append({
            "name": var["name"], "label": var["label"], "type": "query", "datasource": _DATASOURCE,
            "query": {"query": var["query"], "refId": f"{var['name']}-values"}, "definition": var["query"],
            "refresh": 2, "multi": var["multi"], "includeAll": True, "allValue": ".*", "sort": 1,
            "current": {"text": selected if selected != "$__all" else "All", "value": selected},
        })
    return {
        "title": title or spec["title"], "uid": uid or spec["uid"], "tags": ["tfdist", "tensorflow", "dcgm"],
        "editable": True, "schemaVersion": 39, "version": 1, "refresh": "10s", "timezone": "browser",
        "time": {"from": "now-1h", "to": "now"}, "templating": {"list": variables}, "panels": panels,
        "annotations": {"list": []}, "description": "Generated by `tfdist monitor dashboard`.",
    }


def render_dashboard(**kwargs: Any) -> str:
    """:func:`dashboard` as indented JSON."""
    return json.dumps(dashboard(**kwargs), indent=2) + "\n"
