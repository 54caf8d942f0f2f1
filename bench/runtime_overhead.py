"""Cost of observability: digits training throughput with metrics, /healthz and TensorBoard on vs all off.

    .venv/bin/python bench/runtime_overhead.py [--rounds 5] [--workers 2] [--steps 300] [--epochs 2]

Each round runs ``tfdist launch -n WORKERS examples/digits.py`` twice, once per configuration, in alternating
order (off/on, then on/off, ...), so drift on a shared machine hits both sides alike:

- on:  ``--metrics-port`` (Prometheus /metrics + /healthz in every task, scraped once a second by this script,
  NVML when a GPU is present) and the chief's TensorBoard callback;
- off: no metrics port, ``--no-tensorboard``.

Both keep tfdist.runtime's other callbacks; ``--save-every`` is set past the run's length so that no backup
lands inside the timed region of either side. Throughput is the chief's ``train_steps / train_seconds`` (the time
of ``model.fit`` only, without TensorFlow's start-up). The result is the median over rounds of on/off, and the goal
is at most 2 % slower. A micro-benchmark of ``TrainingMetrics.step_done`` against an empty loop follows.
"""
from __future__ import annotations

import argparse
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = re.compile(r"\[worker:0\] train_steps=(\d+) train_seconds=([\d.]+)")
GOAL = 0.02


def _free_port_block(count: int) -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1] if probe.getsockname()[1] + count < 65535 else 20000


def _scrape_forever(ports: list[int], stop: threading.Event) -> None:
    """Scrape every task once a second, as Prometheus would, so the cost of serving is in the measurement."""
    while not stop.wait(1.0):
        for port in ports:
            for path in ("/metrics", "/healthz"):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1).read()
                except OSError:
                    pass  # not up yet, or stalled: irrelevant here


def run_once(on: bool, args: argparse.Namespace, workdir: Path) -> float:
    """One launch; returns the chief's training steps per second."""
    model_dir = Path(tempfile.mkdtemp(prefix="on-" if on else "off-", dir=workdir))
    command = [sys.executable, "-m", "tfdist", "launch", "-n", str(args.workers), "--tee",
               "--log-dir", str(model_dir / "logs")]
    stop = threading.Event()
    scraper = None
    if on:
        port = _free_port_block(args.workers)
        command += ["--metrics-port", str(port)]
        scraper = threading.Thread(target=_scrape_forever, args=([port + i for i in range(args.workers)], stop),
                                   daemon=True)
        scraper.start()
    command += ["--", str(ROOT / "examples" / "digits.py"), "--epochs", str(args.epochs),
                "--steps-per-epoch", str(args.steps), "--save-every", "100000000", "--model-dir", str(model_dir)]
    if not on:
        command.append("--no-tensorboard")
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=workdir)
    finally:
        stop.set()
    match = RESULT.search(result.stdout)
    if result.returncode != 0 or match is None:
        sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
        raise SystemExit(f"launch failed (status {result.returncode}): {' '.join(command)}")
    return int(match.group(1)) / float(match.group(2))


def micro(n: int = 200_000) -> tuple[float, float]:
    """Per-call cost of ``step_done`` (cached label children) and of an empty loop, in microseconds."""
    sys.path.insert(0, str(ROOT / "src"))
    from tfdist.runtime.metrics import TaskLabels, TrainingMetrics

    metrics = TrainingMetrics(TaskLabels("bench", "worker", 0, "h"))
    started = time.perf_counter()
    for _ in range(n):
        pass
    empty = (time.perf_counter() - started) / n * 1e6
    started = time.perf_counter()
    for _ in range(n):
        metrics.step_done(32, 0.5, 0.01)
    return (time.perf_counter() - started) / n * 1e6, empty


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300, help="steps per epoch")
    args = parser.parse_args()
    off: list[float] = []
    on: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tfdist-bench-") as tmp:
        for round_ in range(args.rounds):
            order = (False, True) if round_ % 2 == 0 else (True, False)
            for side in order:
                (on if side else off).append(run_once(side, args, Path(tmp)))
            print(f"round {round_ + 1}: off {off[-1]:7.2f} steps/s   on {on[-1]:7.2f} steps/s   "
                  f"on/off {on[-1] / off[-1]:.4f}", flush=True)
    ratios = [a / b for a, b in zip(on, off)]
    ratio = statistics.median(ratios)
    print(f"median off {statistics.median(off):.2f} steps/s, on {statistics.median(on):.2f} steps/s "
          f"({args.workers} workers, {args.epochs}x{args.steps} steps, {args.rounds} rounds)")
    print(f"median on/off ratio {ratio:.4f}: observability costs {100 * (1 - ratio):+.2f} % throughput "
          f"(goal <= {100 * GOAL:.0f} %: {'met' if 1 - ratio <= GOAL else 'NOT met'})")
    per_call, empty = micro()
    print(f"micro: step_done {per_call:.2f} us per call vs empty loop {empty:.3f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
