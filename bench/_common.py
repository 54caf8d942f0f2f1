"""Shared helpers for the benchmarks: alternating rounds and medians (benchmarks are not tests)."""
from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Callable, Sequence

import psutil

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
QUIET_TF = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO / "src")}


def alternate(rounds: int, candidates: Sequence[tuple[str, Callable[[], float]]]) -> dict[str, list[float]]:
    """Run each candidate once per round, in alternating order, and collect what each returns."""
    results: dict[str, list[float]] = {name: [] for name, _ in candidates}
    for r in range(rounds):
        order = candidates if r % 2 == 0 else list(reversed(candidates))
        for name, fn in order:
            value = fn()
            results[name].append(value)
            print(f"  round {r + 1}: {name} = {value:.3f}", flush=True)
    return results


def load() -> str:
    """The machine's 1-minute load average, printed with every figure: the benches share the machine."""
    return f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def median_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    """Median of per-round ratios (robust to a noisy machine drifting between rounds)."""
    return statistics.median(a / b for a, b in zip(numerator, denominator))


def ready_spares(parent: psutil.Process, exclude: set[int] = frozenset()) -> int:
    """How many of ``parent``'s warm spares (tfdist.launch.process.spare_process) finished their imports: their main
    thread waits on their stdin pipe for the order to become a task. A fault before that finds no spare ready (a
    job's first seconds), which is not the steady state the recovery benches measure."""
    ready = 0
    for child in parent.children():
        try:
            if child.pid in exclude or "tfdist.launch.process.spare_process" not in " ".join(child.cmdline()):
                continue
            with open(f"/proc/{child.pid}/wchan") as handle:
                ready += "pipe" in handle.read()
        except (psutil.Error, OSError):
            pass
    return ready
