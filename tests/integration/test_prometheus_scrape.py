"""A real Prometheus server scrapes a real 2-worker ``tfdist launch`` job through the generated scrape config.

Checks, on one running job (TensorFlow start-up dominates the cost, so it is paid once):

- PromQL over Prometheus' HTTP API shows ``tfdist_train_steps_total`` increasing for both tasks;
- ``promtool check metrics`` finds each task's live ``/metrics`` clean;
- every query of the generated Grafana dashboard parses and runs; the training ones return data;
- ``/healthz``: 200 while training; SIGSTOP on worker 1 blocks worker 0 in its all-reduce and worker 0's
  ``/healthz`` turns 503 (the stopped task answers nothing at all); after SIGCONT both recover.

Everything started here (launcher, its tasks, Prometheus) is stopped at the end, and the test checks it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import REPO_ROOT
from tfdist.cli.main import main
from tfdist.deploy.monitor import dashboard_queries

pytestmark = [pytest.mark.slow, pytest.mark.prometheus, pytest.mark.tf]

STALL_SECONDS = 2.0


def _free_block(count: int) -> int:
    """First of ``count`` consecutive free loopback ports."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no block of free ports")


def start_prometheus(binary: str, config: Path, folder: Path, port: int) -> subprocess.Popen[bytes]:
    """A real Prometheus server on 127.0.0.1:``port``, its data and log under ``folder``."""
    with open(folder / "prometheus.log", "wb") as log:
        return subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=log, stderr=subprocess.STDOUT)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _get(url: str, timeout: float = 3.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _wait(what: str, check: Callable[[], Any], timeout: float, every: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, ValueError) as error:  # not up yet
            last = error
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def _query(prom: str, expr: str) -> dict[str, Any]:
    status, body = _get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10)
    answer = json.loads(body)
    assert status == 200 and answer["status"] == "success", (expr, answer)
    return answer["data"]


def _steps(prom: str, job: str) -> dict[str, float]:
    data = _query(prom, f'tfdist_train_steps_total{{job="{job}"}}')
    return {r["metric"]["task_index"]: float(r["value"][1]) for r in data["result"]}


def _alive(process) -> bool:
    """True while ``process`` runs and is not a zombie; one that exits while being asked counts as gone."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _task_pid(launcher: subprocess.Popen[bytes], task_type: str, index: int) -> int:
    import psutil

    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            env = child.environ()
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        if env.get("TFDIST_TASK_TYPE") == task_type and env.get("TFDIST_TASK_INDEX") == str(index):
            return child.pid
    raise AssertionError(f"no process for {task_type}:{index}")


def _healthz(base: str) -> tuple[int, dict[str, Any]]:
    status, body = _get(base + "/healthz", timeout=1.0)
    return status, json.loads(body)


def test_prometheus_scrapes_a_two_worker_job(tmp_path: Path) -> None:
    prometheus = shutil.which("prometheus")
    promtool = shutil.which("promtool")
    if prometheus is None or promtool is None:
        pytest.skip("Debian's prometheus package (installed by .ci/system-deps.sh) is not installed")
    import psutil

    job = f"it-{os.getpid()}"
    metrics_port = _free_block(2)
    prom_port = _free_block(1)
    config = tmp_path / "prometheus.yml"
    assert main(["monitor", "scrape-config", "--target", "local", "-n", "2", "--port", str(metrics_port),
                 "--job", job, "--interval", "1s", "-o", str(config)]) == 0

    prom = start_prometheus(prometheus, config, tmp_path, prom_port)
    launch_log = open(tmp_path / "launch.log", "wb")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--metrics-port", str(metrics_port),
         "--job-name", job, "--log-dir", str(tmp_path / "logs"), "--grace-period", "3",
         "--env", f"TFDIST_HEALTH_STALL_SECONDS={STALL_SECONDS}",
         "--", str(REPO_ROOT / "src" / "tfdist" / "examples" / "digits.py"), "--epochs", "1", "--steps-per-epoch", "100000",
         "--step-delay", "0.02", "--model-dir", str(tmp_path / "model")],
        stdout=launch_log, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    tasks = [f"http://127.0.0.1:{metrics_port + i}" for i in range(2)]
    promurl = f"http://127.0.0.1:{prom_port}"
    stopped: int | None = None
    descendants: list[psutil.Process] = []
    try:
        _wait("Prometheus to be ready", lambda: _get(promurl + "/-/ready")[0] == 200, 60)
        for base in tasks:
            _wait(f"a training step on {base}", lambda b=base: _healthz(b)[1].get("steps", 0) > 0, 150)
        descendants = psutil.Process(launcher.pid).children(recursive=True)

        # Prometheus sees both tasks, and their step counters grow between scrapes.
        first = _wait("both tasks in Prometheus", lambda: (s := _steps(promurl, job)).keys() == {"0", "1"} and s, 30)
        later = _wait("the step counters to grow",
                      lambda: (s := _steps(promurl, job)) and all(s[k] > first[k] for k in first) and s, 30)
        assert set(later) == {"0", "1"}
        rates = _query(promurl, f'rate(tfdist_train_steps_total{{job="{job}"}}[5s]) > 0')["result"]
        assert sorted(r["metric"]["task_index"] for r in rates) == ["0", "1"]
        # `up` carries the scrape job's name; the tasks' own series carry the training job's (honor_labels).
        targets = _query(promurl, f'up{{job="tfdist-{job}"}}')["result"]
        assert sorted(float(t["value"][1]) for t in targets) == [1.0, 1.0]

        # The live exposition passes Prometheus' own linter.
        for base in tasks:
            status, body = _get(base + "/metrics")
            lint = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
            assert status == 200 and lint.returncode == 0, (lint.stdout + lint.stderr).decode()

        # Every dashboard query runs; the training panels have data for this job.
        for expr in dashboard_queries():
            concrete = (expr.replace("$__rate_interval", "10s").replace("$job", job)
                        .replace("$instance", ".*").replace("$gpu", ".*"))
            data = _query(promurl, concrete)
            if "tfdist_train_" in expr:
                assert data["result"], f"no data for dashboard query {concrete}"

        # Health: stop worker 1; worker 0 then waits in the all-reduce and stops making progress.
        assert _healthz(tasks[0])[0] == 200 and _healthz(tasks[1])[0] == 200
        stopped = _task_pid(launcher, "worker", 1)
        os.kill(stopped, signal.SIGSTOP)
        status, details = _wait("worker 0 /healthz to turn 503", lambda: (h := _healthz(tasks[0]))[0] == 503 and h,
                                STALL_SECONDS + 20)
        assert details["status"] == "stalled" and details["seconds_since_last_step"] > STALL_SECONDS
        with pytest.raises(OSError):  # the stopped task cannot answer at all (a probe counts that as failed)
            _get(tasks[1] + "/healthz", timeout=1.0)
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        for base in tasks:
            _wait(f"{base} /healthz back to 200", lambda b=base: _healthz(b)[0] == 200, 30)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)  # the launcher stops its tasks (grace period 3 s)
            try:
                launcher.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(launcher.pid, signal.SIGKILL)
                launcher.wait()
        stop_process(prom)
        launch_log.close()
    alive = [p.pid for p in descendants if _alive(p)]
    assert alive == [], f"task processes left running: {alive}"
    for base in tasks:
        with pytest.raises(OSError):
            _get(base + "/healthz", timeout=1.0)
