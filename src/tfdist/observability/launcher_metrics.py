"""The launcher's own metrics: restarts of the task group and each task's state, on ``--launcher-metrics-port``."""
from __future__ import annotations

import socket
import threading
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tfdist.observability.labels import LABELS
from tfdist.observability.server import DEFAULT_HOST, MetricsServer


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
            self.server = MetricsServer(self.registry, lambda: (True, {"status": "ok"}), port, host,
                                        what="--launcher-metrics-port")
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
