"""Scrape-config and dashboard generators; the configs are checked by Prometheus' own promtool."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.fixtures.nvml.fake_nvml import FakeNvml
from tfdist.deploy import monitor
from tfdist.errors import UsageError
from tfdist.observability.launcher_metrics import LauncherMetrics
from tfdist.observability.labels import TaskLabels
from tfdist.runtime import gpu_metrics, metrics
from tfdist.runtime.host_metrics import HostCollector


def _job(spec: monitor.ScrapeSpec) -> dict:
    config = monitor.scrape_config(spec)
    assert len(config["scrape_configs"]) == 1
    return config["scrape_configs"][0]


def test_local_targets_follow_the_launchers_port_rule() -> None:
    job = _job(monitor.ScrapeSpec("local", job="mnist", port=9600, tasks=3, launcher_port=9599, interval="5s"))
    assert job["job_name"] == "tfdist-mnist"
    assert job["honor_labels"] is True  # the tasks' own job label must win
    assert job["scrape_interval"] == "5s"
    tasks, launcher = job["static_configs"]
    assert tasks["targets"] == ["127.0.0.1:9600", "127.0.0.1:9601", "127.0.0.1:9602"]
    assert launcher == {"targets": ["127.0.0.1:9599"], "labels": {"tfdist_role": "launcher"}}
    ipv6 = _job(monitor.ScrapeSpec("local", host="::1", port=9600))
    assert ipv6["static_configs"][0]["targets"] == ["[::1]:9600"]


def test_slurm_uses_file_discovery_with_every_nodes_tasks() -> None:
    spec = monitor.ScrapeSpec("slurm", job="big", port=9700, tasks=2, nodes=("node9", "node10"),
                              targets_file="/shared/big-targets.json")
    job = _job(spec)
    assert job["file_sd_configs"] == [{"files": ["/shared/big-targets.json"], "refresh_interval": "1m"}]
    targets = json.loads(monitor.render_slurm_targets(spec))
    assert targets == [
        {"targets": ["node9:9700", "node9:9701"], "labels": {"slurm_node": "node9"}},
        {"targets": ["node10:9700", "node10:9701"], "labels": {"slurm_node": "node10"}},
    ]


def test_k8s_discovers_pods_by_selector_and_port_name() -> None:
    job = _job(monitor.ScrapeSpec("k8s", job="mnist", namespace="ml", selector="tfdist.io/job=mnist"))
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["ml"]},
                                             "selectors": [{"role": "pod", "label": "tfdist.io/job=mnist"}]}]
    keep = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics",
            "action": "keep"} in keep
    assert "selectors" not in _job(monitor.ScrapeSpec("k8s"))["kubernetes_sd_configs"][0]


@pytest.mark.parametrize(("changes", "flag"), [
    ({"target": "nomad"}, "--target"),
    ({"interval": "15"}, "--interval"),
    ({"job": "my job"}, "--job"),
    ({"tasks": 0}, "--tasks"),
    ({"port": 0}, "--port"),
    ({"port": 65535, "tasks": 2}, "--port"),
    ({"launcher_port": 70000}, "--launcher-port"),
    ({"target": "slurm"}, "--target slurm"),
    ({"target": "k8s", "selector": "a b"}, "--selector"),
    ({"job": "mnist\n"}, "--job"),  # "$" anchors used to accept a trailing newline
    ({"interval": "15s\n"}, "--interval"),
    ({"target": "k8s", "selector": "a=b\n"}, "--selector"),
])
def test_bad_specs_name_the_flag(changes: dict, flag: str) -> None:
    spec = monitor.ScrapeSpec(**{"target": "local", **changes})
    with pytest.raises(UsageError, match=re.escape(flag)):
        monitor.scrape_config(spec)


def test_rendered_yaml_round_trips() -> None:
    spec = monitor.ScrapeSpec("local", job="mnist", tasks=2)
    text = monitor.render_scrape_config(spec)
    assert text.startswith("# Prometheus configuration for tfdist job 'mnist'")
    assert yaml.safe_load(text) == monitor.scrape_config(spec)


def _exported_names() -> set[str]:
    """Every series name the task, launcher and GPU collectors can expose (histograms with their suffixes)."""
    labels = TaskLabels("j", "worker", 0, "h")
    training = metrics.TrainingMetrics(labels, collectors=[HostCollector(labels),
                                                           gpu_metrics.NvmlCollector(FakeNvml())])
    launcher = LauncherMetrics("j")
    launcher.set_task_state("worker", 0, "running")
    return {s.name for reg in (training.registry, launcher.registry) for fam in reg.collect() for s in fam.samples}


def test_dashboard_queries_only_what_tfdist_exports() -> None:
    exported = _exported_names()
    promql_words = {"sum", "by", "rate", "histogram_quantile", "max", "time", "le", "job", "host", "task_type",
                    "task_index", "instance", "gpu", "mode", "idle", "__rate_interval"}
    for query in monitor.dashboard_queries():
        names = {w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.sub(r'"[^"]*"', "", query))
                 if w not in promql_words}
        assert names and names <= exported, (query, names - exported)


def test_dashboard_layout_and_variables() -> None:
    board = monitor.dashboard(job="mnist", uid="abc", title="Mine")
    assert (board["title"], board["uid"]) == ("Mine", "abc")
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:  # no two panels overlap on Grafana's 24-column grid
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & mine, panel["title"]
        cells |= mine
    graphs = [p for p in panels if p["type"] == "timeseries"]
    assert all(p["targets"] and p["datasource"]["uid"] == "${datasource}" for p in graphs)
    titles = " ".join(p["title"] for p in graphs)
    for topic in ("Loss", "Throughput", "Step time", "GPU utilization", "framebuffer", "Restarts", "checkpoint"):
        assert topic.lower() in titles.lower(), topic
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert set(variables) == {"datasource", "job", "instance", "gpu"}
    assert variables["job"]["current"]["value"] == "mnist"
    assert monitor.dashboard()["templating"]["list"][1]["current"]["value"] == "$__all"
    json.loads(monitor.render_dashboard())


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian package prometheus, installed by .ci/system-deps.sh) is not installed")
    return promtool


def _check_config(promtool: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.prometheus
def test_promtool_accepts_local_and_slurm_configs(tmp_path: Path) -> None:
    promtool = _promtool()
    local = tmp_path / "local.yml"
    local.write_text(monitor.render_scrape_config(monitor.ScrapeSpec("local", tasks=2, launcher_port=9499)))
    result = _check_config(promtool, local)
    assert result.returncode == 0, result.stdout + result.stderr
    targets = tmp_path / "targets.json"
    spec = monitor.ScrapeSpec("slurm", nodes=("n1", "n2"), tasks=2, targets_file=str(targets))
    targets.write_text(monitor.render_slurm_targets(spec))
    slurm = tmp_path / "slurm.yml"
    slurm.write_text(monitor.render_scrape_config(spec))
    result = _check_config(promtool, slurm)
    assert result.returncode == 0, result.stdout + result.stderr
    # promtool also reads the file_sd targets: a broken one must fail, so the check above means something.
    targets.write_text('[{"targets": 5}]')
    assert _check_config(promtool, slurm).returncode != 0


@pytest.mark.prometheus
def test_promtool_accepts_the_k8s_config(tmp_path: Path) -> None:
    promtool = _promtool()
    config = monitor.scrape_config(monitor.ScrapeSpec("k8s", namespace="ml", selector="tfdist.io/job=mnist"))
    # The relabelling rules, checked on every Prometheus build: same job with static targets in place of discovery.
    static = json.loads(json.dumps(config))
    del static["scrape_configs"][0]["kubernetes_sd_configs"]
    static["scrape_configs"][0]["static_configs"] = [{"targets": ["127.0.0.1:9500"]}]
    (tmp_path / "relabel.yml").write_text(yaml.safe_dump(static))
    result = _check_config(promtool, tmp_path / "relabel.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    (tmp_path / "k8s.yml").write_text(yaml.safe_dump(config))
    result = _check_config(promtool, tmp_path / "k8s.yml")
    if "kubernetes_sd_configs not found" in result.stdout + result.stderr:
        pytest.skip("this promtool is built without Kubernetes discovery (Debian strips it); relabelling checked")
    assert result.returncode == 0, result.stdout + result.stderr
