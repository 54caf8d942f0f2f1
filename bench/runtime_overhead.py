"""Cost of observability: digits training throughput with metrics, /healthz and TensorBoard on vs all off.

    .venv/bin/python bench/runtime_overhead.py                    # in-process A/B (default), 30 rounds
    .venv/bin/python bench/runtime_overhead.py --launch --rounds 5 # whole 2-worker `tfdist launch` runs

In-process (default): examples/digits.py's model and data, trained with ``model.fit`` in segments of ``--steps``
steps, one segment per side per round, the order rotated every round, all in one process, so the drift of a
shared machine hits every side alike. Sides:

- off: no callbacks;
- metrics+healthz: the progress callback feeding ``TrainingMetrics`` (host collector, NVML where a GPU is present)
  serving ``/metrics`` and ``/healthz``, scraped once a second by a separate process (the server runs on every
  side; only this one feeds it);
- tfdist scalars: the progress callback feeding the chief's TensorBoard ``ScalarWriter`` (every 10 s);
- keras_tensorboard: tfdist's epoch-only ``tf.keras`` TensorBoard (no batch hooks);
- heartbeat: the progress callback writing the launcher's heartbeat record (every 0.5 s);
- runtime: all on: what ``tfdist.runtime.callbacks()`` adds: one progress callback feeding all three sinks, and the
  epoch-only TensorBoard.

Each segment is timed in steady state (from step 20 to its end, by a timer callback present on every side), in
wall-clock steps per second and in the process's CPU seconds per step (which other processes on a busy machine
disturb less); the fixed cost of a ``fit`` call (callbacks' set-up, first step) is printed apart. Result: the
median over rounds of side/off, goal at most 2 % slower.

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
WARM_STEPS = 20  # skipped at the start of each segment: the first step of a fit, callbacks' on_train_begin


def in_process(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(ROOT / "src"))
    spec = importlib.util.spec_from_file_location("digits", ROOT / "examples" / "digits.py")
    assert spec is not None and spec.loader is not None
    digits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(digits)
    import tensorflow as tf

    from tfdist.observability.labels import TaskLabels
    from tfdist.runtime import metrics as m
    from tfdist.runtime.gpu_metrics import nvml_collector
    from tfdist.runtime.host_metrics import HostCollector

    batch = 32
    (x, y), _ = digits.load_digits(7)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=7).repeat().batch(batch).prefetch(2)
    model = digits.build_model(tf)
    labels = TaskLabels("bench", "worker", 0, socket.gethostname())
    collectors: list[Any] = [HostCollector(labels)]
    gpu = nvml_collector(os.environ)
    if gpu is not None:
        collectors.append(gpu)
    metrics = m.TrainingMetrics(labels, collectors=collectors)
    server = metrics.start(0)
    scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, server.url])
    logs = Path(tempfile.mkdtemp(prefix="tfdist-bench-tb-"))

    class Timer(tf.keras.callbacks.Callback):
        """Steady-state clock, present on every side alike: wall and CPU time from step WARM_STEPS to the end."""

        def __init__(self) -> None:
            super().__init__()
            self._supports_tf_logs = True
            self.seen = 0
            self.start: tuple[float, float] | None = None
            self.end: tuple[float, float] = (0.0, 0.0)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.seen += 1
            if self.seen == WARM_STEPS:
                self.start = (time.perf_counter(), time.process_time())
            elif self.seen > WARM_STEPS:
                self.end = (time.perf_counter(), time.process_time())

    from tfdist.runtime.progress import Progress, progress_callback
    from tfdist.runtime.reporting import Heartbeat
    from tfdist.runtime.tensorboard import ScalarWriter, keras_tensorboard as epoch_tensorboard

    heartbeat_file = str(logs / "heartbeat.json")

    def progress(*, metrics_on: bool = False, scalars: bool = False, heartbeat: bool = False) -> list[Any]:
        """The one progress callback, fanning out to the chosen sinks."""
        return [progress_callback(Progress(
            metrics=metrics if metrics_on else None, examples_per_step=batch,
            scalars=ScalarWriter(str(logs / "tfdist"), examples_per_step=batch) if scalars else None,
            heartbeat=Heartbeat(heartbeat_file) if heartbeat else None))]

    sides: dict[str, Callable[[], list[Any]]] = {
        "off": lambda: [],
        "metrics+healthz": lambda: progress(metrics_on=True),
        "tfdist scalars": lambda: progress(scalars=True),
        "keras_tensorboard": lambda: [epoch_tensorboard(str(logs / "epoch"))],
        "heartbeat": lambda: progress(heartbeat=True),
        # What tfdist.runtime.callbacks() adds (without the fault-tolerance backup): one progress callback feeding
        # all three sinks, and the epoch-only tf.keras TensorBoard.
        "runtime: all on": lambda: [*progress(metrics_on=True, scalars=True, heartbeat=True),
                                    epoch_tensorboard(str(logs / "epoch"))],
    }

    def segment(make: Callable[[], list[Any]]) -> tuple[float, float, float]:
        timer = Timer()
        started = time.perf_counter()
        model.fit(dataset, epochs=1, steps_per_epoch=args.steps, callbacks=[*make(), timer], verbose=0)
        total = time.perf_counter() - started
        assert timer.start is not None
        steps = timer.seen - WARM_STEPS
        steady = timer.end[0] - timer.start[0]
        # steps/s in steady state, CPU s per step, and the fixed cost of one fit beyond its steady-state steps
        return steps / steady, (timer.end[1] - timer.start[1]) / steps, total - steady / steps * timer.seen

    try:
        for make in sides.values():
            segment(make)  # warm-up: tracing, first writers
        names = list(sides)
        results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
        for round_ in range(args.rounds):
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:  # rotate the order
                results[name].append(segment(sides[name]))
        med = statistics.median
        off = results["off"]
        print(f"in-process digits fit (batch {batch}, 1 task): {args.rounds} rounds x {args.steps} steps per side, "
              f"steady state from step {WARM_STEPS}; ratios are per round against 'off'")
        for name in names:
            mine = results[name]
            wall = [a[0] / b[0] for a, b in zip(mine, off)]
            cpu = [b[1] / a[1] for a, b in zip(mine, off)]
            line = (f"  {name:24s} {med(r[0] for r in mine):7.1f} steps/s  {1e3 * med(r[1] for r in mine):6.3f} "
                    f"ms CPU/step  fixed cost per fit {1e3 * med(r[2] for r in mine):7.1f} ms")
            if name != "off":
                line += (f"\n  {'':24s} wall on/off {med(wall):.4f} {_quartiles(wall)}: {_verdict(med(wall))}"
                         f"\n  {'':24s} CPU off/on  {med(cpu):.4f} {_quartiles(cpu)}: {_verdict(med(cpu))}")
            print(line)
        # Deterministic complement: what each side's callbacks cost per step in tf-keras' own dispatch, without
        # the training step around it (the A/B figures above carry the busy machine's noise).
        loss = tf.constant(0.5)
        print(f"  per-step callback cost (tf-keras CallbackList, loss as a tensor; % of off's "
              f"{1e3 * med(r[1] for r in off):.3f} ms CPU/step):")
        base = dispatch_cost(tf, model, [], loss)
        for name in names[1:]:
            cost = dispatch_cost(tf, model, sides[name](), loss) - base
            print(f"  {name:24s} {cost:7.2f} us/step = {100 * cost / (1e6 * med(r[1] for r in off)):.2f} %")
        with urllib.request.urlopen(server.url + "/healthz", timeout=5) as answer:
            print(f"  /healthz at the end: {answer.status} {answer.read().decode().strip()}")
    finally:
        scraper.terminate()
        scraper.wait()
        metrics.close()


def dispatch_cost(tf: Any, model: Any, callbacks: list[Any], loss: Any, n: int = 20000) -> float:
    """CPU microseconds per step of calling ``callbacks``' batch hooks the way ``fit`` does."""
    hooks = tf.keras.callbacks.CallbackList(callbacks, add_history=True, model=model, epochs=1, steps=n, verbose=0)
    hooks._check_timing = False
    hooks.on_train_begin()
    hooks.on_epoch_begin(0)
    logs = {"loss": loss}
    started = time.process_time()
    for step in range(n):
        hooks.on_train_batch_begin(step)
        hooks.on_train_batch_end(step, logs)
    cost = (time.process_time() - started) / n * 1e6
    hooks.on_epoch_end(0, {"loss": 0.5})
    hooks.on_train_end()
    return cost


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
    from tfdist.observability.labels import TaskLabels
    from tfdist.runtime.metrics import TrainingMetrics

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
    parser.add_argument("--rounds", type=int, default=None, help="default 10 in-process, 5 with --launch")
    parser.add_argument("--steps", type=int, default=None, help="steps per segment (400) or per launch (300)")
    parser.add_argument("--workers", type=int, default=2, help="with --launch")
    args = parser.parse_args()
    if args.launch:
        args.rounds, args.steps = args.rounds or 5, args.steps or 300
        launches(args)
    else:
        args.rounds, args.steps = args.rounds or 10, args.steps or 400
        in_process(args)
    micro()
    return 0


if __name__ == "__main__":
    sys.exit(main())
