"""Benchmark for the live view of `tfdist launch` (issue 14).

(a) Task output through the pinned region: N prefixed log lines written to a real pseudo-terminal through
    PinnedLines (3 pinned lines, redrawn under every line) against the same lines written straight to it; alternating
    rounds, median ratio. This is the price of keeping the live lines under chatty TensorFlow output.
(b) One sample of the run folder (what the view does at most twice a second): read tasks.json and every task's
    heartbeat and error file for 8 tasks, rates and rendering included; median milliseconds.

    .venv/bin/python bench/liveview.py [--rounds 5] [--lines 20000]
"""
from __future__ import annotations

import argparse
import json
import os
import pty
import tempfile
import threading
import time

from _common import alternate, median, median_ratio

from tfdist.launch.console.liveview import LiveView
from tfdist.protocol import HeartbeatRecord, write_heartbeat
from tfdist.launch.console.terminal import PinnedLines

LINE = "[worker:1] I0000 00:00:1796073862.980760 22807 coordination_service.cc:1472] Barrier has passed: OK\n"


def _drain(fd: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


def _terminal():
    master, slave = pty.openpty()
    stop = threading.Event()
    reader = threading.Thread(target=_drain, args=(master, stop), daemon=True)
    reader.start()
    stream = os.fdopen(slave, "w", buffering=1, encoding="utf-8")
    return stream, lambda: (stop.set(), stream.close(), os.close(master))


def through_pinned(lines: int) -> float:
    tty, close = _terminal()
    pinned = PinnedLines(tty, width=120)
    pinned.set_lines(["tfdist: job 0123456789ab  running  attempt 0  12s",
                      "worker:0  training  step 1,234/5,000    41.2 steps/s  loss 0.2312    restarts 0  ETA 1m31s",
                      "worker:1  training  step 1,234/5,000    41.2 steps/s  loss 0.2312    restarts 0  ETA 1m31s"])
    started = time.perf_counter()
    for _ in range(lines):
        pinned.emit(LINE, tty)
    elapsed = time.perf_counter() - started
    close()
    return elapsed


def straight(lines: int) -> float:
    tty, close = _terminal()
    started = time.perf_counter()
    for _ in range(lines):
        tty.write(LINE)
        tty.flush()
    elapsed = time.perf_counter() - started
    close()
    return elapsed


def sample_cost(tasks: int, samples: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        attempt = os.path.join(folder, "attempt-0")
        os.makedirs(attempt)
        names = [f"worker:{i}" for i in range(tasks)]
        with open(os.path.join(attempt, "tasks.json"), "w") as handle:
            json.dump([{"task": n, "pid": os.getpid(), "address": ""} for n in names], handle)
        view = LiveView(folder, "0123456789ab", time.time())
        timings = []
        for step in range(samples):
            for name in names:
                write_heartbeat(os.path.join(attempt, name.replace(":", "-") + ".heartbeat"),
                                HeartbeatRecord(step=step, time=time.time(), loss=1.0 / (step + 1), total_steps=10**6))
            started = time.perf_counter()
            view.sample()
            timings.append(time.perf_counter() - started)
        return median(timings) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", type=int, default=20000)
    args = parser.parse_args()
    print(f"(a) {args.lines} log lines to a pseudo-terminal, {args.rounds} alternating rounds")
    results = alternate(args.rounds, [("pinned", lambda: through_pinned(args.lines)),
                                      ("straight", lambda: straight(args.lines))])
    per_line = median(results["pinned"]) / args.lines * 1e6
    print(f"pinned/straight median ratio: {median_ratio(results['pinned'], results['straight']):.2f} "
          f"({per_line:.1f} us per line through the pinned region, "
          f"{args.lines / median(results['pinned']):,.0f} lines/s)")
    print(f"(b) one sample of 8 tasks: {sample_cost(8, 200):.2f} ms median (at most 2 per second)")


if __name__ == "__main__":
    main()
