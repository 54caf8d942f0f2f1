"""Prometheus metrics, ``/healthz`` and TensorBoard scalars for a training task, and the launcher's own metrics.

What a training script gets (the runtime wires it up when ``tfdist launch --metrics-port`` is used)::

    metrics = start_from_env()              # None unless TFDIST_METRICS_PORT is set
    callbacks.append(keras_callback(metrics, examples_per_step=batch_size))
    ...
    metrics.checkpoint_saved(step, duration_s)

One HTTP server per task serves ``/metrics`` (Prometheus text format) and ``/healthz`` on the same port, from a
daemon thread, bound to ``TFDIST_METRICS_HOST`` (default 127.0.0.1). ``/healthz`` answers 200 while a step has
completed within ``TFDIST_HEALTH_STALL_SECONDS`` (and during a start-up grace before the first step), else 503.
It is what a Kubernetes liveness probe and the launcher's hang watchdog read. A stopped or wedged process cannot
answer at all, which a probe also counts as a failure; its peers, blocked in collectives, turn 503.
Anything between two training steps that lasts longer than the threshold (a long validation pass, a slow
checkpoint save) also reads as a stall: size the threshold for the longest legitimate pause.

Every series carries the labels ``job``, ``task_type``, ``task_index`` and ``host``. Because Prometheus sets its
own ``job`` label on scrape, the generated scrape configs use ``honor_labels: true`` so the training job's name
wins. GPU series use dcgm-exporter's names and labels instead (see :mod:`tfdist.runtime.gpu_metrics`).

Nothing here imports TensorFlow at module level: the launcher imports this module too.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tfdist import constants
from tfdist.errors import TfdistError, UsageError

log = logging.getLogger(__name__)

HEALTH_STALL_SECONDS = "TFDIST_HEALTH_STALL_SECONDS"
HEALTH_STARTUP_SECONDS = "TFDIST_HEALTH_STARTUP_SECONDS"
DEFAULT_STALL_SECONDS = 300.0
# TensorFlow start-up, the first collective handshake and tracing the first step can take minutes on big models.
DEFAULT_STARTUP_SECONDS = 900.0
DEFAULT_HOST = "127.0.0.1"

LABELS = ("job", "task_type", "task_index", "host")
# From 1 ms (small CPU models) to a minute (large models, slow interconnect).
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CHECKPOINT_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


@dataclass(frozen=True)
class TaskLabels:
    """The identity every tfdist series carries."""

    job: str
    task_type: str
    task_index: int
    host: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "TaskLabels":
        """Read ``TFDIST_JOB_NAME``/``TFDIST_TASK_TYPE``/``TFDIST_TASK_INDEX``, falling back to ``TF_CONFIG``."""
        task_type = environ.get(constants.TASK_TYPE, "")
        index = environ.get(constants.TASK_INDEX, "")
        if not task_type or not index:
            from tfdist.runtime.cluster import cluster_info

            info = cluster_info(environ, export=False)
            task_type = task_type or info.task_type
            index = index or str(info.task_index)
        try:
            task_index = int(index)
        except ValueError:
            raise UsageError(f"{constants.TASK_INDEX}={index!r} is not an integer",
                             hint="let tfdist launch set it, or unset it") from None
        return cls(environ.get(constants.JOB_NAME) or "tfdist", task_type, task_index, socket.gethostname())

    def values(self) -> tuple[str, str, str, str]:
        """Label values in :data:`LABELS` order."""
        return (self.job, self.task_type, str(self.task_index), self.host)


@dataclass(frozen=True)
class HealthPolicy:
    """When ``/healthz`` says 503: no step for ``stall_seconds`` (``startup_seconds`` before the first step)."""

    stall_seconds: float = DEFAULT_STALL_SECONDS
    startup_seconds: float = DEFAULT_STARTUP_SECONDS

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "HealthPolicy":
        """Read ``TFDIST_HEALTH_STALL_SECONDS`` and ``TFDIST_HEALTH_STARTUP_SECONDS``."""
        stall = _positive(environ, HEALTH_STALL_SECONDS, DEFAULT_STALL_SECONDS)
        # The grace is never shorter than the stall threshold: start-up is no faster than a step.
        return cls(stall, _positive(environ, HEALTH_STARTUP_SECONDS, max(stall, DEFAULT_STARTUP_SECONDS)))


def _positive(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise UsageError(f"{name}={raw!r} is not a positive number of seconds", hint=f"e.g. {name}=300")
    return value


class MetricsServer:
    """``/metrics`` and ``/healthz`` on one port, served from a daemon thread.

    Args:
        registry: what ``/metrics`` exposes.
        health: returns ``(healthy, details)`` for ``/healthz``.
        port: TCP port; 0 picks a free one (see :attr:`port`).
        host: address to bind.
    """

    def __init__(self, registry: CollectorRegistry, health: Callable[[], tuple[bool, dict[str, Any]]],
                 port: int, host: str = DEFAULT_HOST) -> None:
        metrics_app = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO") == "/healthz":
                healthy, details = health()
                body = (json.dumps(details) + "\n").encode()
                start_response("200 OK" if healthy else "503 Service Unavailable",
                               [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
                return [body]
            return metrics_app(environ, start_response)

        server_class = _Server6 if ":" in host else ThreadingWSGIServer
        try:
            self._server = make_server(host, port, app, server_class, handler_class=_QuietHandler)
        except OSError as failure:
            raise TfdistError(f"cannot serve metrics on {host}:{port}: {failure.strerror or failure}",
                              hint="pick another --metrics-port, or free that port") from None
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="tfdist-metrics", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Base address, e.g. ``http://127.0.0.1:9100``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()


class _Server6(ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    # One access-log line per scrape would flood the task's log.
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass


class TrainingMetrics:
    """The training task's metrics and health state.

    ``step_done`` is called once per step from the training loop, so it only bumps pre-bound (cached) label
    children and stores the loss object as is: converting a TensorFlow tensor to a float forces a device sync,
    so that happens at scrape time instead.

    Args:
        labels: the task's identity.
        health: the ``/healthz`` thresholds.
        collectors: extra collectors (GPU, host) registered next to the training metrics.
        clock: monotonic clock; tests inject their own.
    """

    def __init__(self, labels: TaskLabels, *, health: HealthPolicy = HealthPolicy(),
                 collectors: Iterable[Collector] = (), clock: Callable[[], float] = time.monotonic) -> None:
        self.labels = labels
        self.health_policy = health
        self.registry = CollectorRegistry()
        self.server: MetricsServer | None = None
        self._clock = clock
        self._started_at = clock()
        self._last_step_at: float | None = None
        self._loss: Any = None
        self._step_count = 0
        values = labels.values()
        r = self.registry
        self._steps = Counter("tfdist_train_steps", "Training steps completed by this task.", LABELS,
                              registry=r).labels(*values)
        self._examples = Counter("tfdist_train_examples", "Training examples processed by this task.", LABELS,
                                 registry=r).labels(*values)
        self._duration = Histogram("tfdist_train_step_duration_seconds", "Wall time of one training step.",
                                   LABELS, buckets=STEP_BUCKETS, registry=r).labels(*values)
        loss = Gauge("tfdist_train_loss", "Training loss of the latest step.", LABELS, registry=r).labels(*values)
        loss.set_function(self._loss_value)
        last = Gauge("tfdist_train_last_step_timestamp_seconds", "Unix time the latest step completed.", LABELS,
                     registry=r).labels(*values)
        last.set_function(self._last_step_timestamp)
        self._ckpt_step = Gauge("tfdist_checkpoint_last_step", "Step of the latest checkpoint saved.", LABELS,
                                registry=r).labels(*values)
        self._ckpt_time = Gauge("tfdist_checkpoint_last_timestamp_seconds", "Unix time of the latest checkpoint.",
                                LABELS, registry=r).labels(*values)
        self._ckpt_duration = Histogram("tfdist_checkpoint_duration_seconds", "Wall time of one checkpoint save.",
                                        LABELS, buckets=CHECKPOINT_BUCKETS, registry=r).labels(*values)
        for collector in collectors:
            r.register(collector)

    # -- called by the training loop ------------------------------------------------------------------------
    def step_done(self, examples: int, loss: Any, duration_s: float, *, steps: int = 1) -> None:
        """Record ``steps`` completed steps (one call per Keras ``steps_per_execution`` group).

        Args:
            examples: examples this task processed in those steps (0 when unknown).
            loss: the latest loss: a float, a scalar tensor or ``None``; converted only when scraped.
            duration_s: wall time of one step.
            steps: how many steps this call covers.
        """
        self._last_step_at = self._clock()
        self._step_count += steps
        self._steps.inc(steps)
        if examples:
            self._examples.inc(examples)
        self._duration.observe(duration_s)
        if loss is not None:
            self._loss = loss

    def checkpoint_saved(self, step: int, duration_s: float) -> None:
        """Record a checkpoint written at ``step`` that took ``duration_s`` seconds."""
        self._ckpt_step.set(step)
        self._ckpt_time.set_to_current_time()
        self._ckpt_duration.observe(duration_s)

    # -- read by scrapes and probes -----------------------------------------------------------------------
    def health(self) -> tuple[bool, dict[str, Any]]:
        """``(healthy, details)`` as ``/healthz`` reports them."""
        now = self._clock()
        policy = self.health_policy
        if self._last_step_at is None:
            waited = now - self._started_at
            healthy = waited <= policy.startup_seconds
            return healthy, {"status": "starting" if healthy else "stalled", "steps": 0,
                             "seconds_since_start": round(waited, 3), "startup_seconds": policy.startup_seconds}
        idle = now - self._last_step_at
        healthy = idle <= policy.stall_seconds
        return healthy, {"status": "ok" if healthy else "stalled", "steps": self._step_count,
                         "seconds_since_last_step": round(idle, 3), "stall_seconds": policy.stall_seconds}

    def _loss_value(self) -> float:
        try:
            return float(self._loss) if self._loss is not None else float("nan")
        except (TypeError, ValueError):
            return float("nan")

    def _last_step_timestamp(self) -> float:
        if self._last_step_at is None:
            return float("nan")
        return time.time() - (self._clock() - self._last_step_at)

    # -- serving -------------------------------------------------------------------------------------------
    def start(self, port: int, host: str = DEFAULT_HOST) -> MetricsServer:
        """Serve ``/metrics`` and ``/healthz`` on ``host:port`` (0: any free port)."""
        if self.server is None:
            self.server = MetricsServer(self.registry, self.health, port, host)
        return self.server

    def close(self) -> None:
        """Stop the HTTP server, if any."""
        if self.server is not None:
            self.server.close()
            self.server = None


class HostCollector(Collector):
    """CPU and memory of this task's process and of its host, read through psutil at scrape time."""

    def __init__(self, labels: TaskLabels) -> None:
        import psutil

        self._psutil = psutil
        self._process = psutil.Process()
        self._names = list(LABELS)
        self._values = list(labels.values())

    def collect(self) -> Iterator[Metric]:
        """Yield task CPU seconds and RSS, host CPU seconds by mode and host memory."""
        names, values = self._names, self._values
        cpu = self._process.cpu_times()
        task_cpu = CounterMetricFamily("tfdist_task_cpu_seconds", "CPU time used by the task's process.",
                                       labels=names)
        task_cpu.add_metric(values, cpu.user + cpu.system)
        yield task_cpu
        rss = GaugeMetricFamily("tfdist_task_resident_memory_bytes", "Resident memory of the task's process.",
                                labels=names)
        rss.add_metric(values, self._process.memory_info().rss)
        yield rss
        host_cpu = CounterMetricFamily("tfdist_host_cpu_seconds", "CPU time of the host, summed over its CPUs.",
                                       labels=names + ["mode"])
        for mode, seconds in self._psutil.cpu_times()._asdict().items():
            host_cpu.add_metric(values + [mode], seconds)
        yield host_cpu
        memory = self._psutil.virtual_memory()
        for name, value, text in (("total", memory.total, "Memory of the host."),
                                  ("available", memory.available, "Memory available for new work on the host.")):
            family = GaugeMetricFamily(f"tfdist_host_memory_{name}_bytes", text, labels=names)
            family.add_metric(values, value)
            yield family


class _TaskStateCollector(Collector):
    """``tfdist_task_state{...,state}``: 1 for each task's current state, 0 for the other states seen."""

    def __init__(self, job: str, host: str) -> None:
        self._job, self._host = job, host
        self._states: dict[tuple[str, int], str] = {}
        self._known: list[str] = []
        self._lock = threading.Lock()

    def set(self, task_type: str, index: int, state: str) -> None:
        with self._lock:
            if state not in self._known:
                self._known.append(state)
            self._states[(task_type, int(index))] = state

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            states, known = dict(self._states), list(self._known)
        family = GaugeMetricFamily("tfdist_task_state", "1 for the state each task is in (launcher's view).",
                                   labels=[*LABELS, "state"])
        for (task_type, index), current in sorted(states.items()):
            for state in known:
                family.add_metric([self._job, task_type, str(index), self._host, state], float(state == current))
        yield family


class LauncherMetrics:
    """The launcher's own metrics: restarts of the task group and each task's state.

    Args:
        job: the job name (the ``job`` label).
    """

    def __init__(self, job: str) -> None:
        self.job = job
        host = socket.gethostname()
        self.registry = CollectorRegistry()
        self._restarts = Counter("tfdist_restarts", "Restarts of the job's task group by the launcher.",
                                 ["job", "host"], registry=self.registry).labels(job, host)
        self._states = _TaskStateCollector(job, host)
        self.registry.register(self._states)
        self.server: MetricsServer | None = None

    def start(self, port: int, host: str = DEFAULT_HOST) -> MetricsServer:
        """Serve ``/metrics`` (and an always-200 ``/healthz``) on ``host:port``."""
        if self.server is None:
            self.server = MetricsServer(self.registry, lambda: (True, {"status": "ok"}), port, host)
        return self.server

    def restart(self) -> None:
        """Count one restart of the task group."""
        self._restarts.inc()

    def set_task_state(self, task_type: str, index: int, state: str) -> None:
        """Record a task's state (free text such as ``running``, ``failed``, ``succeeded``)."""
        self._states.set(task_type, index, state)

    def close(self) -> None:
        """Stop the HTTP server, if any."""
        if self.server is not None:
            self.server.close()
            self.server = None


_active: TrainingMetrics | None = None
_active_lock = threading.Lock()


def start_from_env(environ: Mapping[str, str] = os.environ) -> TrainingMetrics | None:
    """Start this process's metrics server when ``TFDIST_METRICS_PORT`` is set; else return ``None``.

    Idempotent: a second call returns the same :class:`TrainingMetrics`. GPU metrics are added when NVML sees
    a GPU this task may use; host CPU and memory always.

    Raises:
        UsageError: a malformed port or threshold in the environment.
        TfdistError: the port cannot be bound.
    """
    global _active
    raw = environ.get(constants.METRICS_PORT, "").strip()
    if not raw:
        return None
    with _active_lock:
        if _active is not None:
            return _active
        if not raw.isdigit() or int(raw) > 65535:
            raise UsageError(f"{constants.METRICS_PORT}={raw!r} is not a TCP port",
                             hint="use tfdist launch --metrics-port, e.g. 9100")
        from tfdist.runtime.gpu_metrics import nvml_collector

        labels = TaskLabels.from_env(environ)
        collectors: list[Collector] = [HostCollector(labels)]
        gpu = nvml_collector(environ, hostname=labels.host)
        if gpu is not None:
            collectors.append(gpu)
        metrics = TrainingMetrics(labels, health=HealthPolicy.from_env(environ), collectors=collectors)
        metrics.start(int(raw), environ.get(constants.METRICS_HOST) or DEFAULT_HOST)
        _active = metrics
        return metrics


def _stop_active() -> None:
    """Stop the server :func:`start_from_env` started (tests and interpreter-embedding callers)."""
    global _active
    with _active_lock:
        if _active is not None:
            _active.close()
            _active = None


def _steps_per_call(model: Any) -> int:
    """How many steps one batch hook call covers (tf-keras' ``steps_per_execution``)."""
    try:
        return max(1, int(model._steps_per_execution.numpy()))
    except (AttributeError, TypeError, ValueError):
        return 1


def keras_callback(metrics: TrainingMetrics, examples_per_step: int | None = None) -> Any:
    """A ``tf.keras`` callback that reports every training batch to ``metrics``.

    The step duration is the time between consecutive batch ends within an epoch (input pipeline included),
    or since the batch began for the first batch of an epoch.

    Args:
        metrics: from :func:`start_from_env`.
        examples_per_step: examples this task processes per step (its share of the global batch); without it
            ``tfdist_train_examples_total`` stays 0.
    """
    import tensorflow as tf

    class MetricsCallback(tf.keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            # Receive the logs as tensors: no per-batch conversion (and device sync) for this callback.
            self._supports_tf_logs = True
            self._mark: float | None = None
            self._per_call = 1

        def on_train_begin(self, logs: Any = None) -> None:
            self._per_call = _steps_per_call(self.model)

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if self._mark is None:
                self._mark = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            now = time.perf_counter()
            per_call = self._per_call
            duration = (now - self._mark) / per_call if self._mark is not None else 0.0
            self._mark = now
            metrics.step_done((examples_per_step or 0) * per_call, (logs or {}).get("loss"), duration,
                              steps=per_call)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self._mark = None  # validation and epoch-end callbacks are not part of a step

        def on_test_begin(self, logs: Any = None) -> None:
            self._mark = None

    return MetricsCallback()


def time_backups(backup: Any, metrics: TrainingMetrics) -> Any:
    """Report each save of a tf-keras ``BackupAndRestore`` callback as a checkpoint (step and duration).

    Wraps the callback's ``_backup`` method (tf-keras 2.x); returns the callback unchanged where it has none.
    """
    original = getattr(backup, "_backup", None)
    if not callable(original):
        return backup

    def _backup(epoch: int, batch: int = 0) -> None:
        started = time.perf_counter()
        original(epoch=epoch, batch=batch)
        elapsed = time.perf_counter() - started
        iterations = getattr(getattr(backup.model, "optimizer", None), "iterations", None)
        metrics.checkpoint_saved(int(iterations.numpy()) if iterations is not None else 0, elapsed)

    backup._backup = _backup
    return backup


def is_chief(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this task writes summaries: the chief, else worker 0 (see ``tfdist.runtime.cluster``)."""
    from tfdist.runtime.cluster import cluster_info

    return cluster_info(environ, export=False).is_chief


def keras_tensorboard(log_dir: str, **kwargs: Any) -> Any:
    """``tf.keras.callbacks.TensorBoard`` writing epoch-level summaries only, at no per-step cost.

    tf-keras' TensorBoard calls ``tf.summary.scalar`` eagerly for every log entry in its batch hooks, and tf-keras
    runs those hooks whenever *any* callback has batch hooks (metrics, heartbeat, step-based backups), even with
    ``update_freq="epoch"``: that costs hundreds of microseconds per step. This subclass drops its batch hooks;
    :func:`tensorboard_callback` writes the step-level scalars instead. Profiling (``profile_batch``) is off.

    Args:
        log_dir: TensorBoard directory (tf-keras sends non-chief writes to a temporary directory by itself).
        **kwargs: more ``TensorBoard`` arguments (``histogram_freq``, ``write_graph``...).
    """
    import tensorflow as tf

    class EpochTensorBoard(tf.keras.callbacks.TensorBoard):
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            pass

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            pass

    kwargs.update(update_freq="epoch", profile_batch=0)
    kwargs.setdefault("write_graph", False)
    return EpochTensorBoard(log_dir, **kwargs)


def tensorboard_callback(log_dir: str, *, examples_per_step: int | None = None, every_seconds: float = 10.0,
                         environ: Mapping[str, str] = os.environ) -> Any:
    """A ``tf.keras`` callback with which the chief writes loss, throughput and step time to TensorBoard.

    Scalars ``train/loss``, ``train/examples_per_second`` and ``train/step_time_seconds`` go to
    ``<log_dir>/train`` every ``every_seconds`` and at each epoch's end, averaged since the last write. The period
    is in seconds, not steps, so the cost (a few ms per write, and one device sync for the loss) stays negligible
    however short a step is. On other tasks the callback does nothing at all, so one event file per job grows.
    ``tf.keras.callbacks.TensorBoard`` adds epoch-level metrics and graphs.

    Args:
        log_dir: the job's shared TensorBoard directory (``tfdist tensorboard --logdir`` reads it).
        examples_per_step: the global batch size, for ``examples_per_second``.
        every_seconds: write period.
        environ: where ``TF_CONFIG`` is read.
    """
    import tensorflow as tf

    if not is_chief(environ):
        return tf.keras.callbacks.Callback()  # no hooks: tf-keras then skips it on every batch

    class ScalarsCallback(tf.keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self._supports_tf_logs = True
            self._writer: Any = None
            self._step = 0
            self._since: float | None = None
            self._count = 0
            self._loss: Any = None
            self._per_call = 1

        def on_train_begin(self, logs: Any = None) -> None:
            if self._writer is None:
                self._writer = tf.summary.create_file_writer(os.path.join(log_dir, "train"))
            self._per_call = _steps_per_call(self.model)

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if self._since is None:
                self._since = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self._step += self._per_call
            self._count += self._per_call
            if logs:
                self._loss = logs.get("loss", self._loss)
            if self._since is not None and time.perf_counter() - self._since >= every_seconds:
                self._write()

        def _write(self) -> None:
            elapsed = time.perf_counter() - self._since if self._since is not None else 0.0
            if self._count and elapsed > 0:
                with self._writer.as_default(step=self._step):
                    if self._loss is not None:
                        tf.summary.scalar("train/loss", self._loss)
                    tf.summary.scalar("train/step_time_seconds", elapsed / self._count)
                    if examples_per_step:
                        tf.summary.scalar("train/examples_per_second", examples_per_step * self._count / elapsed)
            self._since, self._count = time.perf_counter(), 0

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self._write()
            self._since = None  # the pause between epochs is not step time
            self._writer.flush()

        def on_train_end(self, logs: Any = None) -> None:
            if self._writer is not None:
                self._writer.flush()

    return ScalarsCallback()
