"""Shared helpers for the benchmarks: alternating rounds and medians (benchmarks are not tests)."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
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


# A tree's measuring process finds its own source here (to start a second process of the same script).
WORKER_SOURCE_VARIABLE = "TFDIST_BENCH_WORKER_SOURCE"


def tree_from_git(revision: str, scratch: Path) -> Path:
    """``revision``'s ``src`` folder (``git archive``) unpacked into ``scratch``: a baseline tree to measure against."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(scratch)], input=archive.stdout, check=True)
    return scratch


class TreeWorker:
    """One tree's long-lived measuring process (``source`` run with that tree's ``src`` first on the path): it says
    ``ready``, then answers each command line with one JSON number, so trees can take turns in one run."""

    def __init__(self, tree: Path, source: str, close_timeout: float = 60) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree / "src"), WORKER_SOURCE_VARIABLE: source}
        self.tree = tree
        self.close_timeout = close_timeout
        self.proc = subprocess.Popen([PYTHON, "-c", source], env=env, cwd=tree, text=True, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._expect("ready")

    def _expect(self, what: str | None = None) -> str:
        line = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not line or (what is not None and line != what):
            self.proc.kill()
            raise SystemExit(f"{self.tree}: the worker failed: {line}\n{self.proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        return line

    def ask(self, command: str) -> float:
        self.proc.stdin.write(command + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return float(json.loads(self._expect()))

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=self.close_timeout)
