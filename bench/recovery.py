"""Benchmark for fault recovery under `tfdist launch` (issue: fault tolerance).

Median over several trials each, on tfdist.examples.digits with 2 workers:
- kill:     SIGKILL of worker 1 mid-training -> time until the whole group is torn down (goal <= 1 s), time until the
            first resumed training step (goal <= 10 s), steps lost (goal <= 2 with in-memory snapshots, the
            default; kill-nosnap: the same with TFDIST_SNAPSHOTS=0, where the goal is <= the save interval); with
            warm spares (the default) and, as the baseline, with --no-warm-spares.
            steps_lost = the last step any worker finished before the kill (the attempt's heartbeats, written every
            step here) minus the step the restarted group resumed from.
- hang:     SIGSTOP of worker 1 with --hang-timeout H -> time until teardown (goal <= H + 1 s).
- preempt:  SIGTERM to worker 1 -> steps lost (goal 0) and time to the first resumed step.
- overhead: training throughput with the default backup interval vs no checkpointing, alternating (goal <= 3 %).
- lost-machine: 3 machines as network namespaces (needs root), a rendezvous job (--nnodes 3, one worker each, each
            machine with a /dev/shm of its own); machine 3's agent SIGKILLed mid-training, a replacement machine joins:
            steps_lost, first_resumed_step_s, and whether the resumed step came from the survivors' snapshot copied
            to the joining machine or the durable checkpoint (bench/_lost_machine.py). lost-machine-nosnap: the same
            with TFDIST_SNAPSHOTS=0 (today's recovery, from --save-every); with both, the median of the per-round
            first_resumed_step_s ratios (snapshots on / off) is printed (goal <= 1: no slower than today).
- snapshot_overhead: mean step time of worker 0 with a snapshot every step (TFDIST_SNAPSHOT_EVERY=1) / with
            snapshots off, alternating runs, median of the per-round ratios (goal <= 1.02).

Each trial also prints where the time from the fault to the first resumed step went: detection (fault -> the
launcher's verdict), teardown (-> group stopped), hand-off (-> next attempt started: ports, plans, orders to the warm
spares), script start (-> the script's first tfdist call), TF server + cluster (runtime.strategy()), model build (->
BackupAndRestore starts), checkpoint restore, first step (-> the first heartbeat past the restored step). Sources: the
launcher's events.jsonl, and marks from bench/_probe/sitecustomize.py (put on PYTHONPATH for the trials only).

    .venv/bin/python bench/recovery.py [--trials 5] [--hang-timeout 5]
                                       [--kinds kill-cold,kill,kill-nosnap,hang,preempt,lost-machine,
                                                lost-machine-nosnap] [--skip-overhead]
                                       [--skip-snapshot-overhead]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

import sys

from _common import PYTHON, QUIET_TF, REPO, alternate, median, median_ratio, ready_spares
from _lost_machine import PHASES as LOST_MACHINE_PHASES, lost_machine, why_no_namespaces

sys.path.insert(0, str(REPO / "src"))
from tfdist.protocol import read_heartbeat  # noqa: E402

DIGITS = str(REPO / "src" / "tfdist" / "examples" / "digits.py")
SAVE_EVERY = 20
ENV = {**QUIET_TF, "TFDIST_HEARTBEAT_INTERVAL": "0"}  # exact step numbers in the heartbeat files


PROBE = str(REPO / "bench" / "_probe")
PHASES = ("detection", "teardown", "hand-off", "script start", "TF server + cluster", "model build",
          "checkpoint restore", "first step")
EVERY_PHASE = PHASES + tuple(p for p in LOST_MACHINE_PHASES if p not in PHASES)  # in the order printed


def read_step(path: Path) -> int | None:
    beat = read_heartbeat(str(path))
    return None if beat is None else beat.step


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


def tasks(logs: Path, attempt: int) -> dict[str, psutil.Process]:
    entries = json.loads((logs / f"attempt-{attempt}" / "tasks.json").read_text())
    return {e["task"]: psutil.Process(e["pid"]) for e in entries}


def spares_ready(launcher: psutil.Process, logs: Path) -> bool:
    """Every task has a warm spare that finished its imports."""
    return ready_spares(launcher, exclude={p.pid for p in tasks(logs, 0).values()}) >= 2


def jsonl(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def breakdown(tmp: str, fault_at: float, restored: int) -> dict[str, float]:
    """Where the time from the fault to the first resumed step went, from the launcher's events.jsonl, the probe's
    marks (bench/_probe) and the heartbeat records' own times."""
    logs, probes = Path(tmp, "logs"), Path(tmp, "probe")
    events = jsonl(logs / "events.jsonl")

    def event(name: str, attempt: int) -> float:
        return next(e["time"] for e in events if e["event"] == name and e.get("attempt") == attempt)

    marks: dict[str, list[float]] = {}
    for path in probes.glob("*-1.jsonl"):  # attempt 1, every task
        for m in jsonl(path):
            marks.setdefault(m["mark"], []).append(m["time"])
    last = {name: max(times) for name, times in marks.items()}
    first_step = min(m["time"] for path in probes.glob("worker-*-1.jsonl") for m in jsonl(path)
                     if m["mark"] == "beat" and (m.get("step") or 0) > restored)
    points = [fault_at, event("verdict", 0), event("group-stopped", 0), event("attempt-started", 1),
              last["strategy-begin"], last["strategy-ready"], last["restore-begin"], last["restore-done"], first_step]
    return {phase: b - a for phase, a, b in zip(PHASES, points, points[1:])}


def last_finished_step(logs: Path, attempt: int) -> int:
    """The newest step any training task of ``attempt`` reported (its heartbeats)."""
    steps = [read_step(path) for path in (logs / f"attempt-{attempt}").glob("*.heartbeat")]
    return max((s for s in steps if s is not None), default=0)


def trial(kind: str, hang_timeout: float, spares: bool = True, snapshots: bool = True) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp, "logs")
        Path(tmp, "probe").mkdir()
        env = {**ENV, "PYTHONPATH": f"{PROBE}:{ENV['PYTHONPATH']}", "TFDIST_BENCH_PROBE_DIR": f"{tmp}/probe"}
        launcher = subprocess.Popen(
            [PYTHON, "-m", "tfdist", "launch", "-n", "2", "--max-restarts", "1", "--backoff", "0",
             "--warm-spares" if spares else "--no-warm-spares", *([] if snapshots else ["--env", "TFDIST_SNAPSHOTS=0"]),
             "--hang-timeout",
             str(hang_timeout), "--log-dir", str(logs), "--tee", "--", DIGITS, "--epochs", "20", "--steps-per-epoch", "60",
             "--save-every", str(SAVE_EVERY), "--step-delay", "0.02", "--no-tensorboard", "--model-dir", f"{tmp}/m"],
            env=env, stdout=open(f"{tmp}/out", "w"), stderr=open(f"{tmp}/err", "w"))  # noqa: SIM115
        beat = logs / "attempt-0" / "worker-1.heartbeat"
        wait(lambda: (read_step(beat) or 0) >= 45, alive=launcher)
        parent = psutil.Process(launcher.pid)
        # 1200 steps of at least 20 ms: over 20 s of training left at any pace, so warm spares start (a job with
        # less left never starts them: launch/local/spare_timing.py). A fault soon after the start finds no spare
        # yet; measure the steady state.
        if spares:
            wait(lambda: spares_ready(parent, logs), timeout=120, interval=0.2, alive=launcher)
        victims = tasks(logs, 0)
        fault_at = time.time()
        start = time.perf_counter()
        victims["worker:1"].send_signal({"kill": signal.SIGKILL, "hang": signal.SIGSTOP, "preempt": signal.SIGTERM}[kind])
        psutil.wait_procs(list(victims.values()), timeout=120)
        teardown = time.perf_counter() - start
        step_at_fault = last_finished_step(logs, 0)  # every task of attempt 0 is gone: no beat comes after this
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
        result = {"teardown_s": teardown, "first_resumed_step_s": to_first_step,
                  "steps_lost": step_at_fault - restored}
        try:
            result.update(breakdown(tmp, fault_at, restored))
        except (StopIteration, KeyError, ValueError) as missing:
            print(f"  (no breakdown: {missing!r})", flush=True)
        return result


def throughput(no_checkpoints: bool, env: tuple[str, ...] = ()) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        extra = ["--no-checkpoints"] if no_checkpoints else []
        result = subprocess.run(
            [PYTHON, "-m", "tfdist", "launch", "-n", "2", "--log-dir", f"{tmp}/logs", "--tee",
             *[arg for pair in env for arg in ("--env", pair)], "--", DIGITS,
             "--epochs", "4", "--steps-per-epoch", "100", "--no-tensorboard", "--model-dir", f"{tmp}/m", *extra],
            env=QUIET_TF, capture_output=True, text=True, check=True)
        seconds = float(re.search(r"\[worker:0\] train_steps=\d+ train_seconds=([\d.]+)", result.stdout).group(1))
        return 400 / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--hang-timeout", type=float, default=5.0)
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-snapshot-overhead", action="store_true")
    parser.add_argument("--kinds", default="kill-cold,kill,kill-nosnap,hang,preempt,lost-machine,lost-machine-nosnap",
                        help="which faults, comma-separated")
    args = parser.parse_args()
    summary: dict[str, dict[str, float]] = {}
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    # (name, option, fault, warm spares, snapshots)
    kinds = [("kill (cold restart)", "kill-cold", "kill", False, True), ("kill", "kill", "kill", True, True),
             ("kill (snapshots off)", "kill-nosnap", "kill", True, False), ("hang", "hang", "hang", True, True),
             ("preempt", "preempt", "preempt", True, True),
             ("lost machine", "lost-machine", "lost-machine", True, True),
             ("lost machine (snapshots off)", "lost-machine-nosnap", "lost-machine", True, False)]
    wanted = args.kinds.split(",")
    kinds = [k for k in kinds if k[1] in wanted]
    if any(k[2] == "lost-machine" for k in kinds) and why_no_namespaces():
        print(f"lost-machine trials skipped: {why_no_namespaces()}", flush=True)
        kinds = [k for k in kinds if k[2] != "lost-machine"]
    runs: dict[str, list[dict[str, float]]] = {k[0]: [] for k in kinds}
    for i in range(args.trials):  # alternate the kinds within each round
        for name, _, kind, spares, snapshots in kinds:
            runs[name].append(lost_machine(snapshots) if kind == "lost-machine" else
                              trial(kind, args.hang_timeout if kind == "hang" else 300.0, spares, snapshots))
            print(f"  {name} trial {i + 1}: " + ", ".join(
                f"{k}={v:.3f}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in runs[name][-1].items()),
                flush=True)
    for name, *_ in kinds:
        keys = [k for k in runs[name][0] if all(isinstance(r.get(k), (int, float)) for r in runs[name])]
        summary[name] = {key: median([r[key] for r in runs[name]]) for key in keys}
        print(f"{name}: median " + ", ".join(f"{k}={summary[name][k]:.3f}" for k in keys if k not in EVERY_PHASE),
              flush=True)
        sources = [r["resumed_from"] for r in runs[name] if "resumed_from" in r]
        if sources:
            print(f"  resumed from, per trial: {'; '.join(sources)}", flush=True)
        parts = [f"{k} {summary[name][k]:.2f}s" for k in EVERY_PHASE if k in summary[name]]
        if parts:
            print(f"  where the time goes (medians): {' + '.join(parts)}", flush=True)
    on, off = runs.get("lost machine"), runs.get("lost machine (snapshots off)")
    if on and off:
        ratio = median_ratio([r["first_resumed_step_s"] for r in on], [r["first_resumed_step_s"] for r in off])
        summary["lost machine"]["first_resumed_step_ratio"] = ratio
        print(f"lost machine: first_resumed_step_s ratio snapshots on / off = {ratio:.3f} (median of the per-round "
              "ratios; goal <= 1, no slower than today)", flush=True)
    if not args.skip_overhead:
        print("overhead: steps/s with the default backup interval vs no checkpointing, alternating")
        rates = alternate(args.trials, [("checkpointing", lambda: throughput(False)),
                                        ("none", lambda: throughput(True))])
        slowdown = 1 - median_ratio(rates["checkpointing"], rates["none"])
        summary["overhead"] = {"slowdown": slowdown}
        print(f"overhead: median slowdown {slowdown * 100:.1f} % (goal <= 3 %)")
    if not args.skip_snapshot_overhead:
        print("snapshot overhead: steps/s with a snapshot every step vs snapshots off, alternating")
        rates = alternate(args.trials, [
            ("every step", lambda: throughput(False, ("TFDIST_SNAPSHOT_EVERY=1",))),
            ("off", lambda: throughput(False, ("TFDIST_SNAPSHOTS=0",)))])
        ratio = median_ratio(rates["off"], rates["every step"])  # step time with / without
        summary["snapshot"] = {"overhead": ratio}
        print(f"snapshot_overhead={ratio:.3f} (step time with a snapshot every step / without; goal <= 1.02)")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
