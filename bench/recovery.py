"""Benchmark for fault recovery under `tfdist launch` (issue: fault tolerance).

Median over several trials each, on tfdist.examples.digits with 2 workers:
- kill:     SIGKILL of worker 1 mid-training -> time until the whole group is torn down (goal <= 1 s), time until the
            first resumed training step (goal <= 10 s), steps lost (goal <= the save interval); with warm spares
            (the default) and, as the baseline, with --no-warm-spares.
- hang:     SIGSTOP of worker 1 with --hang-timeout H -> time until teardown (goal <= H + 1 s).
- preempt:  SIGTERM to worker 1 -> steps lost (goal 0) and time to the first resumed step.
- overhead: training throughput with the default backup interval vs no checkpointing, alternating (goal <= 3 %).

    .venv/bin/python bench/recovery.py [--trials 5] [--hang-timeout 5]
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from _common import PYTHON, QUIET_TF, REPO, alternate, median, median_ratio

DIGITS = str(REPO / "src" / "tfdist" / "examples" / "digits.py")
SAVE_EVERY = 20
ENV = {**QUIET_TF, "TFDIST_HEARTBEAT_INTERVAL": "0"}  # exact step numbers in the heartbeat files


def read_step(path: Path) -> int | None:
    try:
        words = path.read_text().split()
    except OSError:
        return None
    return int(words[0]) if words and words[0].isdigit() else None


def wait(predicate, timeout: float = 240, interval: float = 0.002, alive: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"the launcher exited ({alive.returncode}) before the condition was met")
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("condition not met")


def task(launcher: psutil.Process, index: int) -> psutil.Process:
    for child in launcher.children():
        try:
            if child.environ().get("TFDIST_TASK_INDEX") == str(index):
                return child
        except psutil.Error:
            pass
    raise LookupError(index)


def trial(kind: str, hang_timeout: float, spares: bool = True) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp, "logs")
        launcher = subprocess.Popen(
            [PYTHON, "-m", "tfdist", "launch", "-n", "2", "--max-restarts", "1", "--backoff", "0",
             "--warm-spares" if spares else "--no-warm-spares", "--hang-timeout",
             str(hang_timeout), "--log-dir", str(logs), "--tee", "--", DIGITS, "--epochs", "8", "--steps-per-epoch", "60",
             "--save-every", str(SAVE_EVERY), "--step-delay", "0.02", "--no-tensorboard", "--model-dir", f"{tmp}/m"],
            env=ENV, stdout=open(f"{tmp}/out", "w"), stderr=open(f"{tmp}/err", "w"))  # noqa: SIM115
        beat = logs / "attempt-0" / "worker-1.heartbeat"
        wait(lambda: (read_step(beat) or 0) >= 45, alive=launcher)
        if spares:  # a fault soon after the start finds no spare yet; measure the steady state
            wait(lambda: len(psutil.Process(launcher.pid).children()) >= 4, timeout=60)
            time.sleep(8)  # the spares' TensorFlow import
        parent = psutil.Process(launcher.pid)
        victims = [task(parent, 0), task(parent, 1)]
        step_at_fault = read_step(beat) or 0
        start = time.perf_counter()
        victims[1].send_signal({"kill": signal.SIGKILL, "hang": signal.SIGSTOP, "preempt": signal.SIGTERM}[kind])
        psutil.wait_procs(victims, timeout=120)
        teardown = time.perf_counter() - start
        resumed_beat = logs / "attempt-1" / "worker-0.heartbeat"
        first = wait(lambda: read_step(resumed_beat) is not None and read_step(resumed_beat), timeout=240,
                     alive=launcher)
        wait(lambda: (read_step(resumed_beat) or -1) > first, timeout=240, alive=launcher)
        to_first_step = time.perf_counter() - start
        launcher.wait(timeout=300)
        out, err = Path(tmp, "out").read_text(), Path(tmp, "err").read_text()
        if launcher.returncode != 0:
            raise RuntimeError(err[-2000:])
        restored = int(re.search(r"resumed_from_step=(\d+)", out).group(1))
        return {"teardown_s": teardown, "first_resumed_step_s": to_first_step,
                "steps_lost": max(0, step_at_fault - restored)}


def throughput(no_checkpoints: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        extra = ["--no-checkpoints"] if no_checkpoints else []
        result = subprocess.run(
            [PYTHON, "-m", "tfdist", "launch", "-n", "2", "--log-dir", f"{tmp}/logs", "--tee", "--", DIGITS,
             "--epochs", "4", "--steps-per-epoch", "100", "--no-tensorboard", "--model-dir", f"{tmp}/m", *extra],
            env=QUIET_TF, capture_output=True, text=True, check=True)
        seconds = float(re.search(r"\[worker:0\] train_steps=\d+ train_seconds=([\d.]+)", result.stdout).group(1))
        return 400 / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--hang-timeout", type=float, default=5.0)
    parser.add_argument("--skip-overhead", action="store_true")
    args = parser.parse_args()
    summary: dict[str, dict[str, float]] = {}
    kinds = [("kill (cold restart)", "kill", False), ("kill", "kill", True), ("hang", "hang", True),
             ("preempt", "preempt", True)]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in kinds}
    for i in range(args.trials):  # alternate the kinds within each round
        for name, kind, spares in kinds:
            runs[name].append(trial(kind, args.hang_timeout if kind == "hang" else 300.0, spares))
            print(f"  {name} trial {i + 1}: " + ", ".join(f"{k}={v:.3f}" for k, v in runs[name][-1].items()),
                  flush=True)
    for name, _, _ in kinds:
        summary[name] = {key: median([r[key] for r in runs[name]]) for key in runs[name][0]}
        print(f"{name}: median " + ", ".join(f"{k}={v:.3f}" for k, v in summary[name].items()), flush=True)
    if not args.skip_overhead:
        print("overhead: steps/s with the default backup interval vs no checkpointing, alternating")
        rates = alternate(args.trials, [("checkpointing", lambda: throughput(False)),
                                        ("none", lambda: throughput(True))])
        slowdown = 1 - median_ratio(rates["checkpointing"], rates["none"])
        summary["overhead"] = {"slowdown": slowdown}
        print(f"overhead: median slowdown {slowdown * 100:.1f} % (goal <= 3 %)")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
