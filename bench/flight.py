"""Benchmark for the flight recorder (issue 22): how long one dump of a 4-task job takes (goal: under 5 s).

A real 4-worker MultiWorkerMirroredStrategy job (tests/bin/hang_job.py) is started with `tfdist launch`, worker 1
made to hang in a user function, and then the flight recorder collects every task, alternating over several rounds
with the baseline (the same collection without reading stacks: heartbeats, /proc, log tails), and with the
faulthandler fallback when the tasks registered it. Prints each median and the ratio to the baseline.

    .venv/bin/python bench/flight.py [--rounds 7] [--workers 4]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import PYTHON, QUIET_TF, REPO, alternate, median, median_ratio

sys.path.insert(0, str(REPO / "src"))
from tfdist.launch.flight import collect  # noqa: E402
from tfdist.launch.flight.recorder import record  # noqa: E402
from tfdist.launch.flight.rules import decide  # noqa: E402
from tfdist.protocol.records import read_heartbeat  # noqa: E402

HANG_JOB = str(REPO / "tests" / "bin" / "hang_job.py")


def start_job(folder: str, workers: int) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "tfdist", "launch", "-n", str(workers), "--log-dir", folder,
                             "--hang-timeout", "0", "--", HANG_JOB, "--mode", "sleep", "--at-step", "3"],
                            env={**QUIET_TF, "TFDIST_HEARTBEAT_INTERVAL": "0"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def wait_until_hung(folder: str, workers: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    beats = [Path(folder, "attempt-0", f"worker-{i}.heartbeat") for i in range(workers)]
    while time.monotonic() < deadline:
        steps = [b.step if b else None for b in (read_heartbeat(str(p)) for p in beats)]
        if all(s is not None and s >= 3 for s in steps):
            time.sleep(2)  # every worker is now past step 3 and waiting
            return
        time.sleep(0.5)
    raise SystemExit("the job never reached step 3")


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "logs")
        job = start_job(folder, args.workers)
        try:
            wait_until_hung(folder, args.workers)
            targets = collect.targets_from_folder(folder, 0)
            print(f"{len(targets)} tasks; worker:1 sleeps in a user function, the others wait in the all-reduce")
            results = alternate(args.rounds, [
                ("baseline (no stacks)", lambda: timed(lambda: collect.collect(targets, dumper="none"))),
                ("dump with py-spy", lambda: timed(lambda: record(targets, run_id="bench", attempt=0,
                                                                   reason="on-demand", folder=None))),
            ])
            verdict = decide(collect.collect(targets))
            print("verdict:", verdict.headline)
        finally:
            os.killpg(job.pid, signal.SIGTERM)
            try:
                job.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
    dump, base = results["dump with py-spy"], results["baseline (no stacks)"]
    print(json.dumps({"workers": args.workers, "rounds": args.rounds, "dump_median_s": round(median(dump), 3),
                      "baseline_median_s": round(median(base), 3), "dump_max_s": round(max(dump), 3),
                      "ratio_dump_to_baseline": round(median_ratio(dump, base), 1), "goal_s": 5.0}))


if __name__ == "__main__":
    main()
