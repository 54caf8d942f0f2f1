"""Training and launcher metrics and /healthz rules (no TensorFlow, loopback only); the server's own rules are in
test_observability_server.py."""
from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import urllib.error
import urllib.request

import pytest

from tfdist.errors import TfdistError, UsageError
from tfdist.observability.launcher_metrics import LauncherMetrics
from tfdist.observability import health as h
from tfdist.observability.labels import TaskLabels
from tfdist.runtime import metrics as m
from tfdist.runtime.host_metrics import HostCollector

LABELS = TaskLabels(job="mnist", task_type="worker", task_index=1, host="node-a")
SERIES = {"job": "mnist", "task_type": "worker", "task_index": "1", "host": "node-a"}


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def training(clock: Clock):
    metrics = m.TrainingMetrics(LABELS, health=h.HealthPolicy(stall_seconds=10, startup_seconds=60), clock=clock)
    yield metrics
    metrics.close()


def test_labels_from_launcher_environment() -> None:
    env = {"TFDIST_JOB_NAME": "mnist", "TFDIST_TASK_TYPE": "chief", "TFDIST_TASK_INDEX": "0"}
    labels = TaskLabels.from_env(env)
    assert (labels.job, labels.task_type, labels.task_index) == ("mnist", "chief", 0)
    assert labels.host == socket.gethostname()


def test_labels_fall_back_to_tf_config_then_defaults() -> None:
    tf_config = json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}})
    assert TaskLabels.from_env({"TF_CONFIG": tf_config}).values()[:3] == ("tfdist", "worker", "1")
    assert TaskLabels.from_env({}).values()[:3] == ("tfdist", "worker", "0")
    with pytest.raises(UsageError, match="TFDIST_TASK_INDEX"):
        TaskLabels.from_env({"TFDIST_TASK_TYPE": "worker", "TFDIST_TASK_INDEX": "one"})


def test_health_policy_from_environment() -> None:
    assert h.HealthPolicy.from_env({}) == h.HealthPolicy(h.DEFAULT_STALL_SECONDS, h.DEFAULT_STARTUP_SECONDS)
    policy = h.HealthPolicy.from_env({h.HEALTH_STALL_SECONDS: "2.5"})
    assert policy.stall_seconds == 2.5 and policy.startup_seconds == h.DEFAULT_STARTUP_SECONDS
    # A stall threshold longer than the default grace stretches the grace with it.
    assert h.HealthPolicy.from_env({h.HEALTH_STALL_SECONDS: "5000"}).startup_seconds == 5000
    assert h.HealthPolicy.from_env({h.HEALTH_STARTUP_SECONDS: "30"}).startup_seconds == 30
    for bad in ("0", "-1", "soon"):
        with pytest.raises(UsageError, match=h.HEALTH_STALL_SECONDS):
            h.HealthPolicy.from_env({h.HEALTH_STALL_SECONDS: bad})


def test_health_grace_before_first_step_then_stall_rule(training: m.TrainingMetrics, clock: Clock) -> None:
    healthy, details = training.health()
    assert healthy and details["status"] == "starting"
    clock.now += 61  # past the start-up grace without any step
    healthy, details = training.health()
    assert not healthy and details["status"] == "stalled" and details["steps"] == 0
    training.step_done(32, 0.9, 0.1)
    assert training.health() == (True, {"status": "ok", "steps": 1, "seconds_since_last_step": 0.0,
                                        "stall_seconds": 10})
    clock.now += 10  # exactly at the threshold still counts as progress
    assert training.health()[0]
    clock.now += 0.5
    healthy, details = training.health()
    assert not healthy and details["status"] == "stalled" and details["seconds_since_last_step"] == 10.5
    training.step_done(32, 0.8, 0.1)
    assert training.health()[0]


def test_step_done_updates_the_labelled_series(training: m.TrainingMetrics) -> None:
    reg = training.registry
    training.step_done(32, 0.5, 0.02)
    training.step_done(0, None, 0.2, steps=4)  # unknown examples and loss: counted as steps only
    assert reg.get_sample_value("tfdist_train_steps_total", SERIES) == 5
    assert reg.get_sample_value("tfdist_train_examples_total", SERIES) == 32
    assert reg.get_sample_value("tfdist_train_step_duration_seconds_count", SERIES) == 2
    assert reg.get_sample_value("tfdist_train_step_duration_seconds_sum", SERIES) == pytest.approx(0.22)
    assert reg.get_sample_value("tfdist_train_step_duration_seconds_bucket", {**SERIES, "le": "0.025"}) == 1
    assert reg.get_sample_value("tfdist_train_loss", SERIES) == 0.5  # None keeps the last known loss


def test_loss_is_converted_only_when_scraped(training: m.TrainingMetrics) -> None:
    class Tensor:
        """Stands for a scalar tensor: converting it is the costly device sync."""

        conversions = 0

        def __float__(self) -> float:
            Tensor.conversions += 1
            return 0.25

    assert math.isnan(training.registry.get_sample_value("tfdist_train_loss", SERIES))
    for _ in range(100):
        training.step_done(8, Tensor(), 0.01)
    assert Tensor.conversions == 0
    assert training.registry.get_sample_value("tfdist_train_loss", SERIES) == 0.25
    assert Tensor.conversions == 1


def test_checkpoint_saved(training: m.TrainingMetrics) -> None:
    training.checkpoint_saved(1200, 3.5)
    reg = training.registry
    assert reg.get_sample_value("tfdist_checkpoint_last_step", SERIES) == 1200
    assert reg.get_sample_value("tfdist_checkpoint_duration_seconds_count", SERIES) == 1
    assert reg.get_sample_value("tfdist_checkpoint_duration_seconds_bucket", {**SERIES, "le": "5.0"}) == 1
    assert reg.get_sample_value("tfdist_checkpoint_duration_seconds_bucket", {**SERIES, "le": "2.5"}) == 0
    assert reg.get_sample_value("tfdist_checkpoint_last_timestamp_seconds", SERIES) > 1.7e9


def test_host_collector_reports_task_and_host() -> None:
    metrics = m.TrainingMetrics(LABELS, collectors=[HostCollector(LABELS)])
    reg = metrics.registry
    assert reg.get_sample_value("tfdist_task_cpu_seconds_total", SERIES) > 0
    assert reg.get_sample_value("tfdist_task_resident_memory_bytes", SERIES) > 1024 * 1024
    total = reg.get_sample_value("tfdist_host_memory_total_bytes", SERIES)
    assert 0 < reg.get_sample_value("tfdist_host_memory_available_bytes", SERIES) <= total
    assert reg.get_sample_value("tfdist_host_cpu_seconds_total", {**SERIES, "mode": "idle"}) > 0


def test_server_serves_metrics_and_healthz_on_one_port(training: m.TrainingMetrics, clock: Clock) -> None:
    server = training.start(0)
    assert server.host == "127.0.0.1" and server.port > 0
    training.step_done(16, 1.5, 0.05)
    status, body = _get(server.url + "/metrics")
    assert status == 200
    assert 'tfdist_train_steps_total{host="node-a",job="mnist",task_index="1",task_type="worker"} 1.0' in body.decode()
    status, body = _get(server.url + "/healthz")
    assert status == 200 and json.loads(body)["status"] == "ok"
    clock.now += 11
    status, body = _get(server.url + "/healthz")
    assert status == 503 and json.loads(body)["status"] == "stalled"
    port = server.port
    training.close()
    with pytest.raises(ConnectionRefusedError):  # nothing listens there any more
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    with socket.socket() as probe:  # and a restarted task can bind it again at once
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))


def test_busy_port_is_one_clear_error(training: m.TrainingMetrics) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(TfdistError, match=r"cannot serve metrics on 127\.0\.0\.1:\d+"):
            training.start(holder.getsockname()[1])


def test_start_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert m.start_from_env({}) is None
    assert m.start_from_env({"TFDIST_METRICS_PORT": ""}) is None
    with pytest.raises(UsageError, match="TFDIST_METRICS_PORT"):
        m.start_from_env({"TFDIST_METRICS_PORT": "70000"})
    env = {"TFDIST_METRICS_PORT": "0", "TFDIST_JOB_NAME": "env-job", "TFDIST_TASK_TYPE": "worker",
           "TFDIST_TASK_INDEX": "3", "TFDIST_HEALTH_STALL_SECONDS": "42"}
    try:
        metrics = m.start_from_env(env)
        assert metrics is not None and metrics.server is not None
        assert metrics.server.host == "127.0.0.1"  # loopback unless TFDIST_METRICS_HOST says otherwise
        assert metrics.health_policy.stall_seconds == 42
        assert m.start_from_env(env) is metrics  # idempotent: one server per process
        status, body = _get(metrics.server.url + "/metrics")
        assert status == 200 and 'job="env-job"' in body.decode() and 'task_index="3"' in body.decode()
        assert "tfdist_task_resident_memory_bytes" in body.decode()
    finally:
        m._stop_active()


def test_launcher_metrics() -> None:
    launcher = LauncherMetrics("mnist")
    try:
        launcher.set_task_state("worker", 0, "running")
        launcher.set_task_state("worker", 1, "running")
        launcher.set_task_state("worker", 1, "failed")
        launcher.restart()
        launcher.restart()
        server = launcher.start(0)
        status, body = _get(server.url + "/metrics")
        text = body.decode()
        assert status == 200
        assert f'tfdist_restarts_total{{host="{socket.gethostname()}",job="mnist"}} 2.0' in text
        reg = launcher.registry
        w1 = {"job": "mnist", "task_type": "worker", "task_index": "1", "host": socket.gethostname()}
        assert reg.get_sample_value("tfdist_task_state", {**w1, "state": "failed"}) == 1
        assert reg.get_sample_value("tfdist_task_state", {**w1, "state": "running"}) == 0
        assert reg.get_sample_value("tfdist_task_state", {**w1, "task_index": "0", "state": "running"}) == 1
        assert _get(server.url + "/healthz")[0] == 200
    finally:
        launcher.close()


@pytest.mark.prometheus
def test_promtool_finds_the_exposition_clean(training: m.TrainingMetrics) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian package prometheus, installed by .ci/system-deps.sh) is not installed")
    from prometheus_client import generate_latest

    training.registry.register(HostCollector(LABELS))
    training.step_done(32, 0.5, 0.02)
    training.checkpoint_saved(10, 1.0)
    launcher = LauncherMetrics("mnist")
    launcher.set_task_state("worker", 0, "running")
    launcher.restart()
    for registry in (training.registry, launcher.registry):
        text = generate_latest(registry)
        result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
        assert result.returncode == 0, (result.stdout + result.stderr).decode()
