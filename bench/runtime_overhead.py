"""Cost of observability: digits training throughput with metrics, /healthz and TensorBoard on vs all off.

    .venv/bin/python bench/runtime_overhead.py                    # in-process A/B (default), 30 rounds
    .venv/bin/python bench/runtime_overhead.py --launch --rounds 5 # whole 2-worker `tfdist launch` runs

In-process (default): examples/digits.py's model and data, trained with ``model.fit`` in segments of ``--steps``
steps, alternating "on" and "off" segments (order flipped every round) in one process, so that the drift of a
shared machine hits both sides alike:

- on:  ``TrainingMetrics`` with the host collector (and NVML where a GPU is present) serving ``/metrics`` and
  ``/healthz``, scraped once a second by a separate process; ``keras_callback``; the ``tf.keras`` TensorBoard
  callback as ``tfdist.runtime.callbacks()`` adds it (``update_freq=50``) plus the chief's ``tensorboard_callback``;
- off: no callbacks.

Two figures per side: wall-clock steps per second, and the process's CPU seconds per step (which other processes
on a busy machine disturb much less). Result: the median over rounds of on/off, goal at most 2 % slower.

``--launch``: each round runs ``tfdist launch -n 2 examples/digits.py`` twice (with ``--metrics-port`` and
TensorBoard, and without both), alternating, throughput from the chief's ``train_steps / train_seconds``. This is
the end-to-end figure, but TensorFlow start-up and the all-reduce make it far noisier on a shared machine.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
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
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RESULT = re.compile(r"\[worker:0\] train_steps=(\d+) train_seconds=([\d.]+)")
GOAL = 0.02
SCRAPER = """
import sys, time, urllib.request
while True:
    for path in ("/metrics", "/healthz"):
        try:
            urllib.request.urlopen(sys.argv[1] + path, timeout=1).read()
        except OSError:
            pass
    time.sleep(1.0)
"""


def _quartiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4)
    return f"[{q[0]:.4f}, {q[2]:.4f}]"


def _verdict(ratio: float) -> str:
    return f"{100 * (1 - ratio):+.2f} % (goal <= {100 * GOAL:.0f} %: {'met' if 1 - ratio <= GOAL else 'NOT met'})"


# -- in-process A/B ---------------------------------------------------------------------------------------------
def in_process(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(ROOT / "src"))
    spec = importlib.util.spec_from_file_location("digits", ROOT / "examples" / "digits.py")
    assert spec is not None and spec.loader is not None
    digits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(digits)
    import tensorflow as tf

    from tfdist.runtime import metrics as m
    from tfdist.runtime.gpu_metrics import nvml_collector

    batch = 32
    (x, y), _ = digits.load_digits(7)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=7).repeat().batch(batch).prefetch(2)
    model = digits.build_model(tf)
    labels = m.TaskLabels("bench", "worker", 0, socket.gethostname())
    collectors: list[Any] = [m.HostCollector(labels)]
    gpu = nvml_collector(os.environ)
    if gpu is not None:
        collectors.append(gpu)
    metrics = m.TrainingMetrics(labels, collectors=collectors)
    server = metrics.start(0)
    scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, server.url])
    logs = Path(tempfile.mkdtemp(prefix="tfdist-bench-tb-"))

    def on() -> list[Any]:
        return [m.keras_callback(metrics, examples_per_step=batch),
                tf.keras.callbacks.TensorBoard(str(logs / "keras"), update_freq=50, profile_batch=0,
                                               write_graph=False),
                m.tensorboard_callback(str(logs / "tfdist"), examples_per_step=batch, environ={})]

    def off() -> list[Any]:
        return []

    def segment(make: Callable[[], list[Any]]) -> tuple[float, float]:
        callbacks = make()
        wall, cpu = time.perf_counter(), time.process_time()
        model.fit(dataset, epochs=1, steps_per_epoch=args.steps, callbacks=callbacks, verbose=0)
        return args.steps / (time.perf_counter() - wall), (time.process_time() - cpu) / args.steps

    try:
        segment(off), segment(on)  # warm-up: tracing, first writers
        results: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
        for round_ in range(args.rounds):
            order = (("off", off), ("on", on)) if round_ % 2 == 0 else (("on", on), ("off", off))
            for name, make in order:
                results[name].append(segment(make))
        wall_ratio = [a[0] / b[0] for a, b in zip(results["on"], results["off"])]
        cpu_ratio = [b[1] / a[1] for a, b in zip(results["on"], results["off"])]  # >1 means on is cheaper
        med = statistics.median
        print(f"in-process digits fit, batch {batch}, {args.rounds} rounds x {args.steps} steps per side")
        print(f"  wall: off {med(r[0] for r in results['off']):.1f} steps/s, "
              f"on {med(r[0] for r in results['on']):.1f} steps/s; median on/off {med(wall_ratio):.4f} (quartiles {_quartiles(wall_ratio)}): "
              f"{_verdict(med(wall_ratio))}")
        print(f"  cpu:  off {1e3 * med(r[1] for r in results['off']):.3f} ms/step, on "
              f"{1e3 * med(r[1] for r in results['on']):.3f} ms/step; median off/on {med(cpu_ratio):.4f} "
              f"(quartiles {_quartiles(cpu_ratio)}): {_verdict(med(cpu_ratio))}")
        with urllib.request.urlopen(server.url + "/healthz", timeout=5) as answer:
            print(f"  /healthz at the end: {answer.status} {answer.read().decode().strip()}")
    finally:
        scraper.terminate()
        scraper.wait()
        metrics.close()


# -- whole launches ---------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _scrape_forever(ports: list[int], stop: threading.Event) -> None:
    while not stop.wait(1.0):
        for port in ports:
            for path in ("/metrics", "/healthz"):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1).read()
                except OSError:
                    pass  # not up yet


def launch_once(on: bool, args: argparse.Namespace, workdir: Path) -> float:
    """One 2-worker launch; returns the chief's training steps per second."""
    model_dir = Path(tempfile.mkdtemp(prefix="on-" if on else "off-", dir=workdir))
    command = [sys.executable, "-m", "tfdist", "launch", "-n", str(args.workers), "--tee",
               "--log-dir", str(model_dir / "logs")]
    stop = threading.Event()
    if on:
        port = _free_port()
        command += ["--metrics-port", str(port)]
        threading.Thread(target=_scrape_forever, args=([port + i for i in range(args.workers)], stop),
                         daemon=True).start()
    # --save-every past the run's end: no fault-tolerance backup inside the timed region of either side.
    command += ["--", str(ROOT / "examples" / "digits.py"), "--epochs", "1", "--steps-per-epoch", str(args.steps),
                "--save-every", "100000000", "--model-dir", str(model_dir)]
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


def launches(args: argparse.Namespace) -> None:
    off: list[float] = []
    on: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tfdist-bench-") as tmp:
        for round_ in range(args.rounds):
            for side in ((False, True) if round_ % 2 == 0 else (True, False)):
                (on if side else off).append(launch_once(side, args, Path(tmp)))
            print(f"round {round_ + 1}: off {off[-1]:7.2f} steps/s   on {on[-1]:7.2f} steps/s   "
                  f"on/off {on[-1] / off[-1]:.4f}", flush=True)
    ratios = [a / b for a, b in zip(on, off)]
    ratio = statistics.median(ratios)
    print(f"tfdist launch -n {args.workers} digits, {args.rounds} rounds x {args.steps} steps: median off "
          f"{statistics.median(off):.2f} steps/s, on {statistics.median(on):.2f} steps/s; median on/off "
          f"{ratio:.4f} (quartiles {_quartiles(ratios) if len(ratios) > 1 else '-'}): {_verdict(ratio)}")


def micro(n: int = 200_000) -> None:
    """Per-call cost of ``step_done`` (cached label children) against an empty loop."""
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
    print(f"micro: step_done {(time.perf_counter() - started) / n * 1e6:.2f} us per call "
          f"(empty loop {empty:.3f} us)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launch", action="store_true", help="compare whole `tfdist launch` runs instead")
    parser.add_argument("--rounds", type=int, default=None, help="default 30 in-process, 5 with --launch")
    parser.add_argument("--steps", type=int, default=None, help="steps per segment (200) or per launch (300)")
    parser.add_argument("--workers", type=int, default=2, help="with --launch")
    args = parser.parse_args()
    if args.launch:
        args.rounds, args.steps = args.rounds or 5, args.steps or 300
        launches(args)
    else:
        args.rounds, args.steps = args.rounds or 30, args.steps or 200
        in_process(args)
    micro()
    return 0


if __name__ == "__main__":
    sys.exit(main())
