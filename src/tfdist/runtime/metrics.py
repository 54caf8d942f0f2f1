"""A training task's Prometheus metrics and ``/healthz`` state.

What a training script gets (``tfdist.runtime.callbacks()`` wires it up when ``tfdist launch --metrics-port`` is
used)::

    metrics = start_from_env()              # None unless TFDIST_METRICS_PORT is set
    callbacks.append(progress_callback(Progress(metrics=metrics, examples_per_step=batch_size)))
    ...
    metrics.checkpoint_saved(step, duration_s)

The server (:mod:`tfdist.observability.server`) binds ``TFDIST_METRICS_HOST`` (default 127.0.0.1); the health
policy is :mod:`tfdist.observability.health`; every series carries :mod:`tfdist.observability.labels`. GPU series
use dcgm-exporter's names and labels instead (see :mod:`tfdist.runtime.gpu_metrics`). Nothing here imports
TensorFlow.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.registry import Collector

from tfdist import constants
from tfdist.cluster.address import check_port
from tfdist.observability.health import HealthPolicy
from tfdist.observability.labels import LABELS, TaskLabels
from tfdist.observability.server import DEFAULT_HOST, MetricsServer

# From 1 ms (small CPU models) to a minute (large models, slow interconnect).
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CHECKPOINT_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


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
        return self.health_policy.assess(now=self._clock(), started_at=self._started_at,
                                         last_step_at=self._last_step_at, steps=self._step_count)

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
            self.server = MetricsServer(self.registry, self.health, port, host, what=constants.METRICS_PORT)
        return self.server

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
        port = check_port(raw, constants.METRICS_PORT, allow_zero=True)
        from tfdist.runtime.gpu_metrics import nvml_collector
        from tfdist.runtime.host_metrics import HostCollector

        labels = TaskLabels.from_env(environ)
        collectors: list[Collector] = [HostCollector(labels)]
        gpu = nvml_collector(environ, hostname=labels.host)
        if gpu is not None:
            collectors.append(gpu)
        metrics = TrainingMetrics(labels, health=HealthPolicy.from_env(environ), collectors=collectors)
        metrics.start(port, environ.get(constants.METRICS_HOST) or DEFAULT_HOST)
        _active = metrics
        return metrics


def _stop_active() -> None:
    """Stop the server :func:`start_from_env` started (tests and interpreter-embedding callers)."""
    global _active
    with _active_lock:
        if _active is not None:
            _active.close()
            _active = None
