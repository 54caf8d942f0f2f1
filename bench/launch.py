"""Benchmark for `tfdist launch` (issue: foundation).

(a) End-to-end wall time of `tfdist launch -n 2 -m tfdist.examples.digits` (default flags, so in-memory snapshots on)
    and of the same launch with TFDIST_SNAPSHOTS=0, against the same script started by a plain shell script that
    exports TF_CONFIG by hand; alternating rounds, median ratios (goal <= 1.05). Also worker 0's ``fit`` alone (the
    script's own ``train_seconds``) for the three, median ratios (goal <= 1.05), and what snapshots cost the training
    thread (the task's own breakdown line). Every figure is printed with the machine's load (1-minute average).
(b) Time from SIGKILL of one worker until tfdist has torn the whole group down (goal <= 1 s), and, for comparison,
    how long the surviving worker of the hand-started pair takes to notice on its own (capped).
(c) The task bootstrap's cost (issue 24): a plain multi-worker Keras script (bench/_plain_fit.py, tiny steps) under
    `tfdist launch -n 2` with the bootstrap and with --no-bootstrap, alternating rounds; the script times its own
    ``fit`` (after a warm-up fit), so imports and start-up do not blur the per-step cost; median ratio (goal: within
    the rounds' own spread).

    .venv/bin/python bench/launch.py [--rounds 5] [--epochs 2] [--steps 30] [--only e2e,teardown,bootstrap,flight]

--only e2e,teardown runs what this script measured before (c) and (d) existed; bench/side_by_side.py uses it to
compare (a) and (b) with an older commit's copy of this script.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from _common import PYTHON, QUIET_TF, REPO, alternate, load, median, median_ratio

DIGITS = str(REPO / "src" / "tfdist" / "examples" / "digits.py")
SHELL_BASELINE = """#!/usr/bin/env bash
# What the seed article does: export TF_CONFIG by hand for each worker and start them in the background.
set -u
export TF_USE_LEGACY_KERAS=1
TF_CONFIG='{"cluster":{"worker":["127.0.0.1:%(p0)d","127.0.0.1:%(p1)d"]},"task":{"type":"worker","index":0}}' \\
  %(py)s %(script)s %(args)s > %(dir)s/w0.log 2>&1 &
w0=$!
TF_CONFIG='{"cluster":{"worker":["127.0.0.1:%(p0)d","127.0.0.1:%(p1)d"]},"task":{"type":"worker","index":1}}' \\
  %(py)s %(script)s %(args)s > %(dir)s/w1.log 2>&1 &
w1=$!
echo "$w0 $w1" > %(dir)s/pids
wait $w0; s0=$?
wait $w1
exit $s0
"""


def _free_ports(n: int) -> list[int]:
    from tfdist.launch.local.ports import free_ports

    return free_ports(n)


def script_args(model_dir: str, epochs: int, steps: int) -> list[str]:
    return [DIGITS, "--epochs", str(epochs), "--steps-per-epoch", str(steps), "--model-dir", model_dir,
            "--no-tensorboard"]


# Worker 0's fit seconds and its snapshot breakdown per candidate, filled by the runs below (alternate() collects
# only what each run returns: its wall time).
FIT: dict[str, list[float]] = {}
BREAKDOWN: dict[str, list[str]] = {}
# Where each run's wall time went (seconds), per candidate: the launcher's own start (its start until the tasks are
# started: imports, ports, the snapshot folder, the watcher), the tasks outside ``fit`` (the interpreter, TensorFlow,
# the bootstrap, the strategy, the model, the end; for the shell: its wall time minus fit), ``fit``, and the
# launcher's end (the leader's exit until the launcher's, from its events.jsonl).
PARTS_OF: dict[str, list[dict[str, float]]] = {}
# CPU seconds (user + system) of each run's whole process tree: unlike wall time, barely moved by other people's
# load on a shared machine, and what tfdist's own work (the launcher, the bootstrap, spares, snapshots) costs.
CPU: dict[str, list[float]] = {}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _fit_seconds(name: str, log: str, other: str = "") -> None:
    """Worker 0's fit seconds from its log; the snapshot cost line from either worker's."""
    if "train_seconds=" not in log:
        raise RuntimeError(f"{name}: the digits job printed no train_seconds: {log[-2000:]!r}")
    FIT.setdefault(name, []).append(float(log.split("train_seconds=")[1].split()[0]))
    BREAKDOWN.setdefault(name, []).extend(line for line in (log + other).splitlines()
                                          if line.startswith("tfdist: snapshots cost"))


def run_tfdist(epochs: int, steps: int, snapshots: bool = True, name: str = "tfdist", flags: tuple[str, ...] = ()
               ) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = QUIET_TF if snapshots else {**QUIET_TF, "TFDIST_SNAPSHOTS": "0"}
        cpu, start = children_cpu(), time.perf_counter()
        done = subprocess.run([PYTHON, "-m", "tfdist", "launch", "-n", "2", "--log-dir", f"{tmp}/logs", *flags, "--",
                               *script_args(f"{tmp}/m", epochs, steps)], env=env, check=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        elapsed = time.perf_counter() - start
        ended = time.time()
        CPU.setdefault(name, []).append(children_cpu() - cpu)
        attempts = sorted(Path(tmp, "logs").glob("attempt-*"), key=lambda path: int(path.name.split("-")[1]))
        if len(attempts) > 1:  # a loaded machine can make a job restart: say so, and time its last attempt
            why = [line for line in done.stderr.splitlines() if line.startswith("tfdist:") and "attempt" not in line]
            print(f"  ({name}: {len(attempts) - 1} restart(s); timing the last attempt; " + " / ".join(why[:4]) + ")",
                  flush=True)
        logs = [Path(attempts[-1], f"worker-{i}.log").read_text() for i in (0, 1)]
        _fit_seconds(name, logs[0], logs[1])  # the machine's snapshot writer is whichever claimed the folder first
        events = {e["event"]: e["time"] for e in map(json.loads, Path(tmp, "logs", "events.jsonl").read_text()
                                                     .splitlines())}  # the last of each: the last attempt's
        launched, verdict = events["attempt-started"] - (ended - elapsed), events["verdict"]
        PARTS_OF.setdefault(name, []).append({
            "launcher start": launched, "tasks outside fit": verdict - events["attempt-started"] - FIT[name][-1],
            "fit": FIT[name][-1], "launcher end": ended - verdict})
        return elapsed


def write_shell(tmp: str, epochs: int, steps: int) -> str:
    p0, p1 = _free_ports(2)
    path = os.path.join(tmp, "start.sh")
    Path(path).write_text(SHELL_BASELINE % {"p0": p0, "p1": p1, "py": PYTHON, "script": DIGITS, "dir": tmp,
                                            "args": " ".join(script_args(f"{tmp}/m", epochs, steps)[1:])})
    return path


def run_shell(epochs: int, steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        path = write_shell(tmp, epochs, steps)
        cpu, start = children_cpu(), time.perf_counter()
        subprocess.run(["bash", path], env=QUIET_TF, check=True)
        elapsed = time.perf_counter() - start
        CPU.setdefault("shell", []).append(children_cpu() - cpu)
        _fit_seconds("shell", Path(tmp, "w0.log").read_text())
        PARTS_OF.setdefault("shell", []).append({"launcher start": 0.0, "tasks outside fit": elapsed - FIT["shell"][-1],
                                                 "fit": FIT["shell"][-1], "launcher end": 0.0})
        return elapsed


def _wait_for_training(paths: list[Path], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.exists() for p in paths):
            return
        time.sleep(0.02)
    raise RuntimeError(f"training never started: {paths}")


def teardown_after_kill_tfdist() -> float:
    """SIGKILL worker 1 while training; time until every task of the group is gone. --max-restarts 0: the launcher
    then exits (the default budget became 3 after c69331f; with it the group restarts and trains 50 epochs on)."""
    with tempfile.TemporaryDirectory() as tmp:
        launcher = subprocess.Popen(
            [PYTHON, "-m", "tfdist", "launch", "-n", "2", "--max-restarts", "0", "--log-dir", f"{tmp}/logs", "--",
             *script_args(f"{tmp}/m", 50, 100), "--step-delay", "0.01"],
            env=QUIET_TF, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        beats = [Path(tmp, "logs", "attempt-0", f"worker-{i}.heartbeat") for i in (0, 1)]
        _wait_for_training(beats)
        tasks = psutil.Process(launcher.pid).children()
        victim = next(t for t in tasks if t.environ().get("TFDIST_TASK_INDEX") == "1")
        others = [t for t in tasks if t.pid != victim.pid]
        start = time.perf_counter()
        victim.send_signal(signal.SIGKILL)
        psutil.wait_procs(others, timeout=30)
        elapsed = time.perf_counter() - start
        launcher.wait(timeout=30)
        return elapsed


def survivor_notices_raw(cap: float) -> float:
    """The hand-started pair: SIGKILL worker 1; time until worker 0 exits by itself (capped)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_shell(tmp, 50, 100)
        Path(path).write_text(Path(path).read_text().replace("--no-tensorboard", "--no-tensorboard --step-delay 0.01"))
        shell = subprocess.Popen(["bash", path], env=QUIET_TF)
        pid_file = Path(tmp, "pids")
        _wait_for_training([pid_file, Path(tmp, "m", "backup")], timeout=180)
        time.sleep(1.0)
        w0, w1 = (int(x) for x in pid_file.read_text().split())
        start = time.perf_counter()
        os.kill(w1, signal.SIGKILL)
        try:
            psutil.Process(w0).wait(timeout=cap)
            elapsed = time.perf_counter() - start
        except psutil.TimeoutExpired:
            elapsed = float("inf")
            os.kill(w0, signal.SIGKILL)
        shell.wait(timeout=30)
        return elapsed


PLAIN_FIT = str(REPO / "bench" / "_plain_fit.py")


def run_plain_fit(bootstrap: bool, steps: int) -> float:
    """Seconds worker 0's timed ``fit`` took under ``tfdist launch -n 2`` (with or without the bootstrap)."""
    with tempfile.TemporaryDirectory() as tmp:
        flags = [] if bootstrap else ["--no-bootstrap"]
        done = subprocess.run([PYTHON, "-m", "tfdist", "launch", "-n", "2", "--log-dir", f"{tmp}/logs", *flags,
                               "--", PLAIN_FIT, str(steps)], env=QUIET_TF, check=True, capture_output=True)
        log = Path(tmp, "logs", "attempt-0", "worker-0.log").read_text()
        if done.returncode or "fit_seconds=" not in log:
            raise RuntimeError(f"the plain fit did not finish: {done.stderr[-2000:]!r}")
        return float(log.split("fit_seconds=")[1].split()[0])


def bootstrap_cost(rounds: int, steps: int) -> float:
    print(f"(c) bootstrap vs --no-bootstrap, {rounds} alternating rounds, plain fit of {steps} tiny steps on 2 workers")
    fit = alternate(rounds, [("bootstrap", lambda: run_plain_fit(True, steps)),
                             ("no-bootstrap", lambda: run_plain_fit(False, steps))])
    ratio = median_ratio(fit["bootstrap"], fit["no-bootstrap"])
    spread = max(fit["no-bootstrap"]) / min(fit["no-bootstrap"])
    print(f"    median fit: bootstrap {median(fit['bootstrap']):.3f}s, no bootstrap {median(fit['no-bootstrap']):.3f}s; "
          f"median ratio {ratio:.3f}; --no-bootstrap's own max/min spread {spread:.3f}")
    return ratio


def _poll_cost(group, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        group.poll(stale_after=300.0)
    return (time.perf_counter() - started) / calls


def flight_cost(rounds: int, calls: int = 2000) -> float:
    """(d) The flight recorder while the job is healthy. Tasks pay nothing (no sampling inside them; the task side is
    one faulthandler registration at start, part of (c)). The launcher pays only for tasks without heartbeats: one
    /proc read and one stat per task every 0.5 s (flight.watch). Measured here: the launcher's poll of 2 running
    tasks without heartbeats, with the watch sampling on every poll (the worst case, 10x its real rate) against the
    same poll with the watch off; alternating rounds, median ratio."""
    import sys as _sys

    _sys.path.insert(0, str(REPO / "src"))
    from tfdist.launch.flight import watch
    from tfdist.launch.local.group import TaskGroup
    from tfdist.launch.console.task_output import Console
    from tfdist.protocol import Command, TaskPlan

    print(f"(d) flight recorder's watch vs none, {rounds} alternating rounds of {calls} polls of 2 tasks")
    with tempfile.TemporaryDirectory() as tmp:
        plans = [TaskPlan(task_type="worker", task_index=i, address="127.0.0.1:1", tf_config="{}", run_id="bench",
                          command=Command("-c", ("import time; time.sleep(600)",), interpreter=PYTHON, module=False),
                          attempt=0, max_restarts=0, job_name="bench", heartbeat_path=f"{tmp}/w{i}.heartbeat",
                          error_path=f"{tmp}/w{i}.error.json") for i in range(2)]
        group = TaskGroup(plans, attempt=0, attempt_dir=tmp, base_env=dict(os.environ), console=Console(False))
        group.start()
        sample_every = watch.SAMPLE_EVERY
        real_watch = group._quiet

        class Off:
            def observe(self, pid: int, log_path: str, now: float) -> None:
                return None

        def with_watch() -> float:
            watch.SAMPLE_EVERY, group._quiet = 0.0, real_watch
            return _poll_cost(group, calls) * 1e6

        def without() -> float:
            group._quiet = Off()
            return _poll_cost(group, calls) * 1e6

        try:
            cost = alternate(rounds, [("watch (us/poll)", with_watch), ("no watch (us/poll)", without)])
        finally:
            watch.SAMPLE_EVERY = sample_every
            group.stop(1.0)
    ratio = median_ratio(cost["watch (us/poll)"], cost["no watch (us/poll)"])
    extra = median(cost["watch (us/poll)"]) - median(cost["no watch (us/poll)"])
    print(f"    median poll {median(cost['watch (us/poll)']):.0f} us with the watch sampling every poll, "
          f"{median(cost['no watch (us/poll)']):.0f} us without: ratio {ratio:.2f}; at the real rate (each task "
          f"sampled twice a second) the watch costs the launcher {extra * 2 / 1e4:.3f}% of one core for 2 tasks")
    return ratio


def end_to_end(rounds: int, epochs: int, steps: int) -> dict[str, float]:
    """(a): wall and fit of tfdist (default flags), tfdist with TFDIST_SNAPSHOTS=0, tfdist with --no-warm-spares
    (the spares import TensorFlow while the first attempt trains: 4.7 s of CPU each here) and the shell,
    alternating."""
    print(f"(a) end-to-end, {rounds} alternating rounds, digits {epochs}x{steps} steps on 2 workers "
          f"(load {load()})")
    FIT.clear()
    BREAKDOWN.clear()
    wall = alternate(rounds, [("tfdist", lambda: run_tfdist(epochs, steps)),
                              ("tfdist-no-snapshots", lambda: run_tfdist(epochs, steps, False, "tfdist-no-snapshots")),
                              ("tfdist-no-spares", lambda: run_tfdist(epochs, steps, True, "tfdist-no-spares",
                                                                      ("--no-warm-spares",))),
                              ("shell", lambda: run_shell(epochs, steps))])
    out = {"e2e_ratio": median_ratio(wall["tfdist"], wall["shell"]),
           "e2e_no_snapshots_ratio": median_ratio(wall["tfdist-no-snapshots"], wall["shell"]),
           "fit_ratio": median_ratio(FIT["tfdist"], FIT["shell"]),
           "fit_no_snapshots_ratio": median_ratio(FIT["tfdist-no-snapshots"], FIT["shell"]),
           "e2e_no_spares_ratio": median_ratio(wall["tfdist-no-spares"], wall["shell"]),
           "fit_no_spares_ratio": median_ratio(FIT["tfdist-no-spares"], FIT["shell"])}
    print(f"    end to end: median tfdist {median(wall['tfdist']):.2f}s, without snapshots "
          f"{median(wall['tfdist-no-snapshots']):.2f}s, shell {median(wall['shell']):.2f}s; median ratios "
          f"{out['e2e_ratio']:.3f} and {out['e2e_no_snapshots_ratio']:.3f} (goal <= 1.05) (load {load()})")
    print(f"    fit alone (worker 0): median tfdist {median(FIT['tfdist']):.3f}s, without snapshots "
          f"{median(FIT['tfdist-no-snapshots']):.3f}s, shell {median(FIT['shell']):.3f}s; median ratios "
          f"{out['fit_ratio']:.3f} and {out['fit_no_snapshots_ratio']:.3f} (goal <= 1.05)")
    print(f"    with --no-warm-spares: end to end {median(wall['tfdist-no-spares']):.2f}s, fit "
          f"{median(FIT['tfdist-no-spares']):.3f}s; median ratios {out['e2e_no_spares_ratio']:.3f} and "
          f"{out['fit_no_spares_ratio']:.3f} (load {load()})")
    for line in BREAKDOWN.get("tfdist", [])[:1] + BREAKDOWN.get("tfdist", [])[-1:]:
        print(f"    the snapshot writer's own breakdown (first and last round): {line}")
    print_breakdown()
    cpu = ", ".join(f"{name} {median(CPU[name]):.2f}s" + (f" ({median_ratio(CPU[name], CPU['shell']):.3f}x)"
                                                         if name != "shell" else "") for name in CPU)
    print(f"    CPU time of the whole job (user + system, median): {cpu}")
    out.update({f"cpu_ratio_{name}": median_ratio(CPU[name], CPU["shell"]) for name in CPU if name != "shell"})
    return out


def print_breakdown() -> None:
    """Where the wall time went, median seconds per part and candidate, and tfdist's extra over the shell's."""
    names = [name for name in ("tfdist", "tfdist-no-snapshots", "tfdist-no-spares", "shell") if name in PARTS_OF]
    parts = list(PARTS_OF["shell"][0]) if "shell" in PARTS_OF else []
    print("    where the time went (median seconds; in brackets: minus the shell's):")
    for part in parts:
        shell = median([run[part] for run in PARTS_OF["shell"]])
        cells = []
        for name in names:
            value = median([run[part] for run in PARTS_OF[name]])
            cells.append(f"{name} {value:.2f}" + (f" ({value - shell:+.2f})" if name != "shell" else ""))
        print(f"      {part:<18} " + ", ".join(cells))


PARTS = ("e2e", "teardown", "bootstrap", "flight")  # (a), (b), (c), (d)


def parts(text: str) -> list[str]:
    wanted = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in wanted if part not in PARTS]
    if unknown or not wanted:
        raise argparse.ArgumentTypeError(f"unknown part {unknown or text!r}; choose from {','.join(PARTS)}")
    return wanted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--raw-cap", type=float, default=60.0)
    parser.add_argument("--plain-steps", type=int, default=300, help="(c): steps of the timed plain fit")
    parser.add_argument("--only", type=parts, default=list(PARTS),
                        help="comma-separated parts to run: e2e (a), teardown (b), bootstrap (c), flight (d); "
                             "default all")
    args = parser.parse_args()
    summary: dict[str, float] = {}
    if "e2e" in args.only:
        summary.update(end_to_end(args.rounds, args.epochs, args.steps))
    if "teardown" in args.only:
        print(f"(b) SIGKILL of worker 1 -> whole group torn down, {args.rounds} rounds")
        teardown = [teardown_after_kill_tfdist() for _ in range(args.rounds)]
        print(f"    tfdist: median {median(teardown):.3f}s, max {max(teardown):.3f}s (goal <= 1 s)")
        raw = survivor_notices_raw(args.raw_cap)
        raw_text = f"{raw:.1f}s" if raw != float("inf") else f"not within {args.raw_cap:.0f}s"
        print(f"    raw TF, hand-started pair: the surviving worker exited by itself after {raw_text}; "
              "nothing restarts it")
        summary.update(teardown_median_s=median(teardown), raw_survivor_s=raw)
    if "bootstrap" in args.only:
        summary["bootstrap_ratio"] = bootstrap_cost(args.rounds, args.plain_steps)
    if "flight" in args.only:
        summary["flight_watch_poll_ratio"] = flight_cost(args.rounds)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
