"""CPU and memory of a task's process and of its host, read through psutil when Prometheus scrapes."""
from __future__ import annotations

from typing import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tfdist.observability.labels import LABELS, TaskLabels


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
