"""``tfdist monitor`` and ``tfdist tensorboard`` in-process: files written, output, exit statuses."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from tfdist.cli.main import main


def test_dashboard_to_stdout_and_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "dashboard"]) == 0
    board = json.loads(capsys.readouterr().out)
    assert board["uid"] == "tfdist-training" and board["panels"]
    out = tmp_path / "dashboard.json"
    assert main(["monitor", "dashboard", "-o", str(out), "--job", "mnist", "--title", "MNIST"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and f"wrote Grafana dashboard: {out}" in captured.err
    board = json.loads(out.read_text())
    assert board["title"] == "MNIST"
    assert [v for v in board["templating"]["list"] if v["name"] == "job"][0]["current"]["value"] == "mnist"


def test_scrape_config_local(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["monitor", "scrape-config", "--target", "local", "-n", "2", "--port", "9600", "--job", "mnist",
               "--launcher-port", "9599"])
    assert rc == 0
    job = yaml.safe_load(capsys.readouterr().out)["scrape_configs"][0]
    assert job["job_name"] == "tfdist-mnist" and job["honor_labels"] is True
    assert job["static_configs"][0]["targets"] == ["127.0.0.1:9600", "127.0.0.1:9601"]
    assert job["static_configs"][1]["targets"] == ["127.0.0.1:9599"]


def test_scrape_config_slurm_reads_the_allocation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[08-10]")
    out = tmp_path / "prometheus.yml"
    assert main(["monitor", "scrape-config", "--target", "slurm", "--job", "big", "-o", str(out)]) == 0
    targets_file = tmp_path / "tfdist-big-targets.json"
    job = yaml.safe_load(out.read_text())["scrape_configs"][0]
    assert job["file_sd_configs"][0]["files"] == [str(targets_file)]
    targets = json.loads(targets_file.read_text())
    assert [t["targets"] for t in targets] == [["gpu08:9464"], ["gpu09:9464"], ["gpu10:9464"]]
    err = capsys.readouterr().err
    assert "wrote Slurm targets" in err and "wrote Prometheus config" in err


def test_scrape_config_slurm_explicit_nodes_and_targets_file(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    sd = tmp_path / "sd" / "t.json"
    sd.parent.mkdir()
    rc = main(["monitor", "scrape-config", "--target", "slurm", "--nodes", "a,b", "-n", "2", "--port", "9000",
               "--targets-file", str(sd)])
    assert rc == 0
    assert yaml.safe_load(capsys.readouterr().out)["scrape_configs"][0]["file_sd_configs"][0]["files"] == [str(sd)]
    assert json.loads(sd.read_text())[1]["targets"] == ["b:9000", "b:9001"]


def test_scrape_config_k8s_selects_the_pods_tfdist_k8s_writes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "scrape-config", "--target", "k8s", "--job", "mnist"]) == 0
    sd = yaml.safe_load(capsys.readouterr().out)["scrape_configs"][0]["kubernetes_sd_configs"][0]
    assert sd["selectors"] == [{"role": "pod",
                                "label": "app.kubernetes.io/name=mnist,app.kubernetes.io/created-by=tfdist"}]


def test_scrape_config_k8s(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["monitor", "scrape-config", "--target", "k8s", "--namespace", "ml", "--selector", "tfdist.io/job=x"])
    assert rc == 0
    sd = yaml.safe_load(capsys.readouterr().out)["scrape_configs"][0]["kubernetes_sd_configs"][0]
    assert sd["namespaces"]["names"] == ["ml"] and sd["selectors"][0]["label"] == "tfdist.io/job=x"


@pytest.mark.parametrize(("argv", "needle"), [
    (["--target", "slurm"], "--target slurm needs the job's nodes"),
    (["--target", "local", "--interval", "5x"], "--interval '5x' is not a Prometheus duration"),
    (["--target", "slurm", "--nodes", "n[1-"], "unclosed '['"),
    (["--target", "mesos"], "Invalid value for '--target'"),
])
def test_scrape_config_bad_input_is_one_line_exit_2(argv: list[str], needle: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.yml"
    assert main(["monitor", "scrape-config", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_unwritable_output_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["monitor", "dashboard", "-o", str(blocker / "d.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["dashboard"], ["scrape-config", "--target", "local"],
                                  ["scrape-config", "--target", "slurm", "--nodes", "a,b"]])
def test_outputs_are_never_overwritten_without_force(argv: list[str], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no" / "out"
    assert main(["monitor", *argv, "-o", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err and list(tmp_path.rglob("*")) == []
    out = tmp_path / "out"
    out.write_text("mine\n")
    assert main(["monitor", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and len(err.splitlines()) == 1
    assert out.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing else
    assert main(["monitor", *argv, "-o", str(out), "--force"]) == 0
    assert (tmp_path / "out.bak").read_text() == "mine\n" and out.read_text() != "mine\n"


def test_env_twins(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TFDIST_MONITOR_SCRAPE_CONFIG_TARGET", "local")
    monkeypatch.setenv("TFDIST_MONITOR_SCRAPE_CONFIG_PORT", "9300")
    assert main(["monitor", "scrape-config"]) == 0
    assert "127.0.0.1:9300" in capsys.readouterr().out


def test_tensorboard_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tensorboard", "--logdir", str(tmp_path), "--port", "7007", "--host", "0.0.0.0", "--dry-run"]) == 0
    argv = shlex.split(capsys.readouterr().out)
    assert argv == [sys.executable, "-m", "tensorboard.main", "--logdir", str(tmp_path), "--port", "7007",
                    "--host", "0.0.0.0"]


def test_help_imports_nothing_heavy() -> None:
    import subprocess

    code = ("import sys; from tfdist.cli.main import main; main(['monitor', '--help']); "
            "main(['tensorboard', '--help']); "
            "print(sorted(m for m in ('tensorflow', 'prometheus_client', 'pynvml', 'yaml') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
