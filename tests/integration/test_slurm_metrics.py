"""`tfdist slurm --metrics-port` on the real Slurm, scraped by the real Prometheus through the generated config.

Two tasks on one node each serve the runtime's real metrics server on the base port + their SLURM_LOCALID, bound
to the node's address (here the node's name resolves to loopback, so: all interfaces); Prometheus, configured by
`tfdist monitor scrape-config --target slurm`, finds both targets up and both tasks' step counters growing.
"""
from __future__ import annotations

import shutil
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.test_prometheus_scrape import (
    _free_block, _get, _query, _wait, start_prometheus, stop_process,
)
from tests.integration.test_slurm_jobs import _batch_log, _task_logs, _write_job, slurm  # noqa: F401 (fixture)
from tfdist.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.prometheus]

# A training task without TensorFlow: the runtime's metrics server, a step every 20 ms until told to stop.
TASK = textwrap.dedent('''
    import os, sys, time
    from tfdist.runtime.metrics import start_from_env
    metrics = start_from_env()
    print("serving", os.environ["TFDIST_METRICS_HOST"], os.environ["TFDIST_METRICS_PORT"], flush=True)
    step, deadline = 0, time.monotonic() + 300
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        step += 1
        metrics.step_done(examples=32, loss=1.0 / step, duration_s=0.02)
        time.sleep(0.02)
    metrics.close()
''')


def _listening(port: int) -> set[str]:
    return {c.laddr.ip for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def _steps(prom: str, job: str) -> dict[str, float]:
    data = _query(prom, f'tfdist_train_steps_total{{job="{job}"}}')
    return {r["metric"]["task_index"]: float(r["value"][1]) for r in data["result"]}


def test_prometheus_scrapes_two_slurm_tasks_on_one_node(slurm, tmp_path, capsys):  # noqa: F811 (fixture)
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("Debian's prometheus package (installed by .ci/system-deps.sh) is not installed")
    script = tmp_path / "task.py"
    script.write_text(TASK)
    stop = tmp_path / "stop"
    port = _free_block(2)
    prom_port = _free_block(1)
    job_name = "metrics-two"
    job = _write_job(tmp_path, capsys, "-N", "1", "-T", "2", "-J", job_name, "--max-restarts", "0",
                     "--metrics-port", str(port), str(script), str(stop))
    assert f"export TFDIST_SLURM_METRICS_PORT={port}" in job.read_text()
    config = tmp_path / "prometheus.yml"
    assert main(["monitor", "scrape-config", "--target", "slurm", "--job", job_name, "--port", str(port), "-n", "2",
                 "--nodes", slurm.hostname, "--interval", "1s", "-o", str(config)]) == 0
    job_id = slurm.submit(job, cwd=tmp_path)
    prom = start_prometheus(prometheus, config, tmp_path, prom_port)
    promurl = f"http://127.0.0.1:{prom_port}"
    try:
        _wait("both tasks serving", lambda: _listening(port) and _listening(port + 1), 90)
        # The node's name resolves to loopback here, which no Prometheus server elsewhere could reach.
        assert _listening(port) == {"0.0.0.0"} and _listening(port + 1) == {"0.0.0.0"}
        _wait("Prometheus to be ready", lambda: _get(promurl + "/-/ready")[0] == 200, 60)
        first = _wait("both tasks in Prometheus",
                      lambda: (s := _steps(promurl, job_name)).keys() == {"0", "1"} and s, 60)
        _wait("both step counters to grow",
              lambda: (s := _steps(promurl, job_name)) and all(s[k] > first[k] for k in first), 30)
        targets = _query(promurl, f'up{{job="tfdist-{job_name}"}}')["result"]
        assert sorted((t["metric"]["instance"], t["value"][1]) for t in targets) == [
            (f"{slurm.hostname}:{port}", "1"), (f"{slurm.hostname}:{port + 1}", "1")]
        assert {t["metric"]["slurm_node"] for t in targets} == {slurm.hostname}
    finally:
        stop.touch()
        stop_process(prom)
    record = slurm.wait(job_id, timeout=60)
    logs = _task_logs(tmp_path, job_id)
    assert record["JobState"] == "COMPLETED", (_batch_log(tmp_path, job_id), logs)
    assert sorted(log.split()[-1] for log in (logs[(0, 0)].splitlines()[0], logs[(0, 1)].splitlines()[0])) == [
        str(port), str(port + 1)]
    deadline = time.monotonic() + 10
    while (_listening(port) or _listening(port + 1)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _listening(port) and not _listening(port + 1)
