"""Hostile values for every valued flag of `tfdist monitor dashboard` and `tfdist monitor scrape-config`.

Accepted dashboards are read back with json, scrape configs with PyYAML (and the Slurm targets file with json), and
each value must sit exactly where it belongs; promtool (Prometheus' own checker) reads every distinct config.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tfdist.cluster.hostlist import expand_hostlist
from tfdist.validate import bad_character
from tests.hostile.corpus import Accepted, confirm, distinct, feed, tool

DASHBOARD = {"--title": "MNIST", "--uid": "tfdist-mnist", "--job": "mnist", "--output": "board.json"}
# flag -> (base value, --target it needs)
SCRAPE = {
    "--job": ("mnist", "local"), "--host": ("127.0.0.1", "local"), "--port": ("9464", "local"),
    "--tasks": ("2", "local"), "--launcher-port": ("9400", "local"), "--interval": ("15s", "local"),
    "--nodes": ("node[1-2]", "slurm"), "--targets-file": ("targets.json", "slurm"), "--namespace": ("ml", "k8s"),
    "--selector": ("tfdist.io/job=x", "k8s"), "--port-name": ("metrics", "k8s"),
    "--output": ("prometheus.yml", "local"),
}
PATHS = {"--output", "--targets-file"}


def _printable(item: Accepted) -> None:
    assert [line for line in (item.outcome.out + item.outcome.err).splitlines() if bad_character(line)] == []


@pytest.mark.parametrize("flag", list(DASHBOARD))
def test_every_dashboard_flag(flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def argv(flag: str, value: str) -> list[str]:
        return ["monitor", "dashboard", *(["-o", "board.json"] if flag != "--output" else []), flag, value]

    def check(item: Accepted) -> None:
        output = item.value if flag == "--output" else "board.json"
        board = json.loads((item.folder / output).read_text(encoding="utf-8"))
        if flag == "--title":
            assert board["title"] == item.value
        if flag == "--uid":
            assert board["uid"] == item.value
        if flag == "--job":
            job = next(v for v in board["templating"]["list"] if v["name"] == "job")
            assert job["current"]["value"] == item.value
        _printable(item)

    accepted = feed("monitor dashboard", flag, DASHBOARD[flag], argv, tmp_path, capsys, relative=flag in PATHS)
    confirm("monitor dashboard", flag, accepted, check)


def _scrape_check(flag: str, target: str):  # type: ignore[no-untyped-def]
    def check(item: Accepted) -> None:
        output = item.value if flag == "--output" else "prometheus.yml"
        config = yaml.safe_load((item.folder / output).read_text(encoding="utf-8"))
        job = config["scrape_configs"][0]
        if flag == "--job":
            assert job["job_name"] == f"tfdist-{item.value}"
        if flag == "--interval":
            assert job["scrape_interval"] == item.value == config["global"]["scrape_interval"]
        if flag in ("--host", "--port", "--tasks"):
            host = item.value if flag == "--host" else "127.0.0.1"
            host = f"[{host}]" if ":" in host else host
            port = int(item.value) if flag == "--port" else 9464
            tasks = int(item.value) if flag == "--tasks" else 1
            assert job["static_configs"][0]["targets"] == [f"{host}:{port + i}" for i in range(tasks)]
        if flag == "--launcher-port":
            assert job["static_configs"][1]["targets"] == [f"127.0.0.1:{int(item.value)}"]
        if target == "slurm":
            files = job["file_sd_configs"][0]["files"]
            default = "tfdist-tfdist-targets.json"  # next to -o, named after the default --job
            expected = item.folder / (item.value if flag == "--targets-file" else default)
            assert files == [os.path.abspath(expected)]
            nodes = json.loads(Path(files[0]).read_text(encoding="utf-8"))
            given = item.value if flag == "--nodes" else "a,b"
            assert [n["labels"]["slurm_node"] for n in nodes] == expand_hostlist(given)
        if target == "k8s":
            sd = job["kubernetes_sd_configs"][0]
            assert sd["namespaces"]["names"] == [item.value if flag == "--namespace" else "default"]
            if flag == "--selector":
                assert sd["selectors"][0]["label"] == item.value
            if flag == "--port-name":
                assert job["relabel_configs"][0]["regex"] == item.value
        _printable(item)
    return check


@pytest.mark.parametrize("flag", list(SCRAPE))
def test_every_scrape_config_flag(flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, target = SCRAPE[flag]

    def argv(flag: str, value: str) -> list[str]:
        words = ["monitor", "scrape-config", "--target", target]
        words += ["--nodes", "a,b"] if target == "slurm" and flag != "--nodes" else []
        words += ["-o", "prometheus.yml"] if flag != "--output" else []
        return words + [flag, value]

    accepted = feed("monitor scrape-config", flag, base, argv, tmp_path, capsys, relative=flag in PATHS)
    confirm("monitor scrape-config", flag, accepted, _scrape_check(flag, target))
    # promtool over every distinct config (Debian's promtool has no Kubernetes discovery: a k8s job's discovery
    # block is swapped for a static target there, so its relabelling rules are what promtool checks).
    for config in distinct([item.folder / (item.value if flag == "--output" else "prometheus.yml")
                            for item in accepted]):
        document = yaml.safe_load(config.read_text(encoding="utf-8"))
        job = document["scrape_configs"][0]
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = [{"targets": ["127.0.0.1:9500"]}]
            config = config.with_name("promtool-" + config.name)
            config.write_text(yaml.safe_dump(document), encoding="utf-8")
        done = subprocess.run([tool("promtool"), "check", "config", str(config)], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
