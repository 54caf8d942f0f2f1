"""Benchmarks for the flight recorder and the hang watchdog (issues 22 and 36).

Default: how long one dump of a 4-task job takes (goal: under 5 s). A real 4-worker MultiWorkerMirroredStrategy job
(tests/bin/hang_job.py) is started with `tfdist launch`, worker 1 made to hang in a user function, and then the
flight recorder collects every task, alternating over several rounds with the baseline (the same collection without
reading stacks: heartbeats, /proc, log tails). Prints each median and the ratio to the baseline.

--detection: how long the launcher takes, with default flags, to call a hang: a SIGSTOPped worker, a worker
deadlocked in a callback, and a hung collective (worker 1 leaves its training loop, worker 0 waits in the
all-reduce); a 2-worker Keras job of ~40 ms steps (tests/bin/hang_job.py), alternating scenarios over --rounds.
Detection is from the fault (the bench's SIGSTOP, or the moment hang_job.py's fault began) to the launcher's
``verdict`` event (a hang, or a failure that blames the stopped worker once TensorFlow aborted its peer). Goal: within 10 s (or 25 steps, whichever is longer). Learned thresholds need heartbeats that
say their phase (the task bootstrap's): without them every hang waits --hang-timeout (300 s) and --cap cuts it;
--own-phases has the job write them itself (tests/bin/hang_job.py under --no-bootstrap) to measure the launcher's
side before the bootstrap does.

--false-hangs: a healthy job whose phases are long (bench/_phases_job.py: a 60 s first step, a 25 s pause between
epochs, a worker killed and restored, slow steps after the restore), default flags: how many hangs the launcher
called (goal: 0) and whether the job succeeded.

    .venv/bin/python bench/flight.py [--rounds 7] [--workers 4]
    .venv/bin/python bench/flight.py --detection [--rounds 3] [--cap 60] [--own-phases]
    .venv/bin/python bench/flight.py --false-hangs [--rounds 1] [--own-phases]
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


def events(folder: str) -> list[dict]:
    try:
        with open(os.path.join(folder, "events.jsonl"), encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError):
        return []


def stop_job(job: subprocess.Popen) -> None:
    try:
        os.killpg(job.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    job.wait()


def says_phases(folder: str) -> bool:
    beat = read_heartbeat(os.path.join(folder, "attempt-0", "worker-0.heartbeat"))
    return beat is not None and beat.phase is not None


DETECTION = {"stopped worker": "none", "deadlock in a callback": "deadlock", "hung collective": "leave"}
FAULT_STEP = 30


def detect_once(scenario: str, cap: float, own_phases: bool = False) -> tuple[float, str, bool]:
    """Seconds from the fault to the launcher's hang verdict (``cap`` when none came), the task it named, and
    whether the tasks' heartbeats said their phase. ``own_phases``: the job writes phase heartbeats itself, under
    --no-bootstrap (a stand-in for the task bootstrap's)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder, marker = os.path.join(tmp, "logs"), os.path.join(tmp, "fault")
        stand_in = (["--no-bootstrap"], ["--own-phases"]) if own_phases else ([], [])
        job = subprocess.Popen([PYTHON, "-m", "tfdist", "launch", "-n", "2", "--max-restarts", "0", *stand_in[0],
                                "--log-dir", folder, "--", HANG_JOB, "--mode", DETECTION[scenario], "--at-step",
                                str(FAULT_STEP), "--steps", "100000", *stand_in[1]],
                               env={**QUIET_TF, "HANG_JOB_FAULT_FILE": marker},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_until_step(folder, FAULT_STEP if DETECTION[scenario] == "none" else 1)
            if DETECTION[scenario] == "none":
                pid = next(t.pid for t in collect.targets_from_folder(folder, 0) if t.name == "worker:1")
                faulted = time.time()
                os.kill(pid, signal.SIGSTOP)
            else:
                faulted = wait_for_file(marker, 600)
            deadline = time.time() + cap
            while time.time() < deadline:
                # Any verdict: a stopped worker may also be blamed when TensorFlow aborts its peer (task-failed).
                verdicts = [e for e in events(folder) if e.get("event") == "verdict"]
                if verdicts:
                    return verdicts[0]["time"] - faulted, culprit(folder, verdicts[0]), says_phases(folder)
                time.sleep(0.1)
            return cap, "-", says_phases(folder)
        finally:
            stop_job(job)


def culprit(folder: str, verdict: dict, timeout: float = 30) -> str:
    """``worker:1 (hung; flight recorder: worker:1)``: the watchdog's task and the one the recorder names."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        reports = [e for e in events(folder) if e.get("event") == "hang-report"]
        if reports or any(e.get("event") == "group-stopped" for e in events(folder)):
            named = reports[0].get("culprit") if reports else "no report"
            return f"{verdict.get('task')} ({verdict.get('cause')}; flight recorder: {named})"
        time.sleep(0.1)
    return f"{verdict.get('task')} ({verdict.get('cause')})"


def wait_until_step(folder: str, step: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    beats = [Path(folder, "attempt-0", f"worker-{i}.heartbeat") for i in range(2)]
    while time.monotonic() < deadline:
        steps = [b.step if b else None for b in (read_heartbeat(str(p)) for p in beats)]
        if all(s is not None and s >= step for s in steps):
            return
        time.sleep(0.05)
    raise SystemExit(f"the job never reached step {step}")


def wait_for_file(path: str, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return float(Path(path).read_text().strip())
        except (OSError, ValueError):
            time.sleep(0.05)
    raise SystemExit("the fault never began")


def detection(rounds: int, cap: float, own_phases: bool) -> None:
    results: dict[str, list[float]] = {name: [] for name in DETECTION}
    phases = set()
    for r in range(rounds):
        order = list(DETECTION) if r % 2 == 0 else list(reversed(DETECTION))
        for scenario in order:
            seconds, task, said = detect_once(scenario, cap, own_phases)
            results[scenario].append(seconds)
            phases.add(said)
            print(f"  round {r + 1}: {scenario}: {seconds:.1f} s, named {task}", flush=True)
    print(json.dumps({"rounds": rounds, "cap_s": cap, "heartbeats_say_phases": sorted(phases),
                      "detection_median_s": {k: round(median(v), 1) for k, v in results.items()},
                      "detection_max_s": {k: round(max(v), 1) for k, v in results.items()}, "goal_s": 10.0}))


def false_hangs(rounds: int, first_step: float, pause: float, own_phases: bool) -> None:
    runs = []
    for r in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            folder = os.path.join(tmp, "logs")
            started = time.monotonic()
            stand_in = (["--no-bootstrap"], ["--own-phases"]) if own_phases else ([], [])
            done = subprocess.run([PYTHON, "-m", "tfdist", "launch", "-n", "2", *stand_in[0], "--log-dir", folder,
                                   "--", str(REPO / "bench" / "_phases_job.py"), os.path.join(tmp, "backup"),
                                   "--first-step", str(first_step), "--pause", str(pause), *stand_in[1]],
                                  env=QUIET_TF, capture_output=True, text=True, timeout=1800)
            hangs = [e for e in events(folder) if e.get("event") == "verdict" and e.get("cause") == "hung"]
            attempts = sum(e.get("event") == "attempt-started" for e in events(folder))
            runs.append({"exit": done.returncode, "false_hangs": len(hangs), "attempts": attempts,
                         "seconds": round(time.monotonic() - started, 1), "phases": says_phases(folder)})
            print(f"  round {r + 1}: {runs[-1]}", flush=True)
    print(json.dumps({"rounds": rounds, "first_step_s": first_step, "pause_s": pause,
                      "false_hangs": sum(r["false_hangs"] for r in runs),
                      "succeeded": sum(r["exit"] == 0 for r in runs), "goal_false_hangs": 0}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--detection", action="store_true")
    parser.add_argument("--false-hangs", action="store_true")
    parser.add_argument("--cap", type=float, default=60.0, help="--detection: give up on a hang after this long")
    parser.add_argument("--own-phases", action="store_true",
                        help="the job writes its phases itself (until the task bootstrap does)")
    parser.add_argument("--first-step", type=float, default=60.0)
    parser.add_argument("--pause", type=float, default=25.0)
    args = parser.parse_args()
    if args.detection:
        return detection(args.rounds or 3, args.cap, args.own_phases)
    if args.false_hangs:
        return false_hangs(args.rounds or 1, args.first_step, args.pause, args.own_phases)
    args.rounds = args.rounds or 7
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
