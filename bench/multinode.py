"""Benchmark for multi-machine launches (issue: several machines), on machines emulated with network namespaces.

Medians over --trials rounds, tfdist.examples.digits with one worker per machine:
- (a) end to end: 2 machines x 1 worker (rendezvous) vs 1 machine x 2 workers (plain launch), alternating;
      goal ratio <= 1.10.
- (b) arrival: the last machine's agent starts -> the first training step on any machine.
- (c) loss, --nnodes 2:3 on 3 machines: agent SIGKILLed / link cut -> the survivors stop the round (detection), and
      -> the first resumed step; goals <= 1 s (killed), <= node-timeout + 1 s (cut), resumed <= 5 s after detection.
      Printed with where the time goes: stop + new round, TensorFlow start and restore (fit begins), first step.
- (d) scale-up: a third machine joins a running 2-machine job -> steps lost (goal 0).
- (e) etcd vs built-in rendezvous, alternating in the same run (a 3-member etcd on the 3 machines): the last agent
      starts -> the first round is started (join to first round), and an agent SIGKILLed mid-job -> the first
      resumed step (fault to resumed); medians side by side and their ratio.

Needs root (network namespaces).   .venv/bin/python bench/multinode.py [--trials 3] [--parts abcde]
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import PYTHON, QUIET_TF, REPO, alternate, median, median_ratio

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))
from tests.integration.etcd_cluster import EtcdCluster, why_no_etcd  # noqa: E402
from tests.integration.netns import Machines, why_no_namespaces  # noqa: E402
from tfdist.protocol import read_heartbeat  # noqa: E402

DIGITS = str(REPO / "src" / "tfdist" / "examples" / "digits.py")
SCRIPT = ["--epochs", "2", "--steps-per-epoch", "40", "--save-every", "5", "--no-tensorboard"]
NODE_TIMEOUT = 3.0
ENV = {**QUIET_TF, "TFDIST_HEARTBEAT_INTERVAL": "0"}


def secret_file(tmp: Path) -> str:
    """The job's secret, made the documented way (mode 0600), once per folder."""
    path = tmp / "job.secret"
    if not path.exists():
        subprocess.run([PYTHON, "-m", "tfdist.launch.elastic.secret", str(path)], cwd=REPO, env=ENV, check=True,
                       capture_output=True)
    return str(path)


def agent(machines: Machines, i: int, tmp: Path, nnodes: str, *extra: str, script: list[str] = SCRIPT,
          etcd: EtcdCluster | None = None, rank: int | None = None, private_dirs: dict[str, str] | None = None,
          env: dict[str, str] | None = None):
    """Machine ``i``'s agent (node rank ``rank``, default i - 1), logs in ``tmp``/logs<i>, output in m<i>.err;
    ``private_dirs``: folders of its own (``Machines.command``), e.g. its own /dev/shm; ``env`` (default ``ENV``)."""
    where = ["--rdzv-backend", "etcd", "--rdzv-endpoint", etcd.endpoints] if etcd is not None else \
        ["--rdzv-endpoint", f"{machines.address(1)}:29400"]
    argv = [PYTHON, "-m", "tfdist", "launch", "--nnodes", nnodes, *where, "--rdzv-secret-file", secret_file(tmp),
            "--node-rank", str(i - 1 if rank is None else rank), "-n", "1", "--node-timeout", str(NODE_TIMEOUT),
            "--rdzv-last-call", "0.5", "--log-dir", str(tmp / f"logs{i}"), *extra, "--", DIGITS, *script,
            "--model-dir", str(tmp / "model")]
    err = open(tmp / f"m{i}.err", "wb")  # noqa: SIM115
    return subprocess.Popen(machines.command(i, argv, private_dirs=private_dirs), cwd=REPO, env=env or ENV,
                            stdout=err, stderr=err)


def step_of(tmp: Path, i: int, round_: int) -> int | None:
    record = read_heartbeat(str(tmp / f"logs{i}" / f"attempt-{round_}" / f"worker-{i - 1}.heartbeat"))
    if record is None:
        record = next((read_heartbeat(str(p)) for p in (tmp / f"logs{i}" / f"attempt-{round_}").glob("*.heartbeat")),
                      None)
    return None if record is None else record.step


def wait(predicate, timeout: float = 240.0, poll: float = 0.01) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(poll)
    raise TimeoutError("benchmark condition not reached")


def finish(procs) -> None:
    for proc in procs:
        try:
            proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()


# -- (a) ---------------------------------------------------------------------------------------------------------
def two_machines() -> float:
    with Machines(2) as machines, tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        procs = [agent(machines, i, Path(tmp), "2") for i in (1, 2)]
        finish(procs)
        assert all(p.returncode == 0 for p in procs), (Path(tmp) / "m1.err").read_text()[-2000:]
        return time.monotonic() - started


def one_machine() -> float:
    with Machines(1) as machines, tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        argv = [PYTHON, "-m", "tfdist", "launch", "-n", "2", "--host", machines.address(1), "--", DIGITS, *SCRIPT,
                "--model-dir", str(Path(tmp) / "model")]
        done = subprocess.run(machines.command(1, argv), cwd=REPO, env=ENV, capture_output=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return time.monotonic() - started


# -- (b) ---------------------------------------------------------------------------------------------------------
def arrival() -> float:
    with Machines(2) as machines, tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        first = agent(machines, 1, tmp, "2")
        wait(lambda: b"joined job" in (tmp / "m1.err").read_bytes())
        arrived = time.monotonic()
        second = agent(machines, 2, tmp, "2")
        trained = wait(lambda: (step_of(tmp, 1, 0) or 0) >= 1 or (step_of(tmp, 2, 0) or 0) >= 1)
        finish([first, second])
        return trained - arrived


# -- (c) ---------------------------------------------------------------------------------------------------------
def loss(kind: str) -> tuple[float, float]:
    with Machines(3) as machines, tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        # 120 steps, the fault at step 60: long enough after the first steps for the warm spares (started then) to
        # have imported TensorFlow, as they have in a real job, where faults do not come in its first seconds.
        slow = ["--epochs", "3", *SCRIPT[2:], "--step-delay", "0.05"]
        procs = [agent(machines, i, tmp, "2:3", "--rdzv-timeout", "30", script=slow) for i in (1, 2, 3)]
        wait(lambda: (step_of(tmp, 1, 0) or 0) >= 60)
        fault = time.monotonic()
        if kind == "kill":
            os.kill(procs[2].pid, signal.SIGKILL)
        else:
            machines.cut(3)
        detected = wait(lambda: b"stopping round 0" in (tmp / "m1.err").read_bytes())
        restarted = wait(lambda: b"round 1: started workers" in (tmp / "m1.err").read_bytes())
        # The runtime writes a heartbeat when fit begins (the restored step), then after every step.
        began = wait(lambda: step_of(tmp, 1, 1) is not None)
        restored = step_of(tmp, 1, 1) or 0
        resumed = wait(lambda: (step_of(tmp, 1, 1) or 0) > restored)
        procs[2].kill()
        finish(procs[:2])
        return detected - fault, restarted - detected, began - restarted, resumed - began


# -- (d) ---------------------------------------------------------------------------------------------------------
def scale_up() -> float:
    with Machines(3) as machines, tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        slow = [*SCRIPT, "--step-delay", "0.05"]
        procs = [agent(machines, i, tmp, "2:3", script=slow) for i in (1, 2)]
        wait(lambda: (step_of(tmp, 1, 0) or 0) >= 15)
        procs.append(agent(machines, 3, tmp, "2:3", script=slow))
        finish(procs)
        text = "".join((tmp / f"m{i}.err").read_text(errors="replace") for i in (1, 2, 3))
        saved = [int(s) for s in re.findall(r"preempted: state saved at step (\d+)", text)]
        resumed = re.search(r"resumed_from_step=(\d+) world_size=3", text)
        if not saved or not resumed:
            raise RuntimeError("scale-up did not happen:\n" + text[-3000:])
        return float(max(saved) - int(resumed.group(1)))


# -- (e) ---------------------------------------------------------------------------------------------------------
def on_backend(backend: str, measure):
    """Run ``measure(machines, etcd_or_None)`` on 3 fresh machines; etcd's members run there for both backends, so
    the machines carry the same load either way."""
    with Machines(3) as machines, EtcdCluster(machines, members=(1, 2, 3)) as etcd:
        return measure(machines, etcd if backend == "etcd" else None)


def join_to_round(machines: Machines, etcd: EtcdCluster | None) -> float:
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        procs = [agent(machines, i, tmp, "3", etcd=etcd) for i in (1, 2)]
        wait(lambda: all(b"joined job" in (tmp / f"m{i}.err").read_bytes() for i in (1, 2)))
        last = time.monotonic()
        procs.append(agent(machines, 3, tmp, "3", etcd=etcd))
        started = wait(lambda: any(b"round 0: started workers" in (tmp / f"m{i}.err").read_bytes()
                                   for i in (1, 2, 3)))
        for proc in procs:
            proc.kill()
        finish(procs)
        return started - last


def fault_to_resumed(machines: Machines, etcd: EtcdCluster | None) -> float:
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        slow = ["--epochs", "3", *SCRIPT[2:], "--step-delay", "0.05"]
        # A long last call: round 0 has all 3 machines even on a loaded host (no scale-up round before the fault).
        procs = [agent(machines, i, tmp, "2:3", "--rdzv-timeout", "30", "--rdzv-last-call", "20", script=slow,
                       etcd=etcd) for i in (1, 2, 3)]
        wait(lambda: (step_of(tmp, 1, 0) or 0) >= 40)
        fault = time.monotonic()
        os.kill(procs[2].pid, signal.SIGKILL)
        wait(lambda: step_of(tmp, 1, 1) is not None)
        restored = step_of(tmp, 1, 1) or 0
        resumed = wait(lambda: (step_of(tmp, 1, 1) or 0) > restored)
        for proc in procs:
            proc.kill()
        finish(procs)
        return resumed - fault


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--parts", default="abcd")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: every Machines context deletes its namespaces
    reason = why_no_namespaces()
    if reason:
        print(f"multinode benchmark skipped: {reason}")
        return 0
    print(f"load average at start: {os.getloadavg()}")
    if "a" in args.parts:
        print("(a) end to end: 2 machines x 1 worker vs 1 machine x 2 workers")
        runs = alternate(args.trials, [("2 machines x 1", two_machines), ("1 machine x 2", one_machine)])
        ratio = median_ratio(runs["2 machines x 1"], runs["1 machine x 2"])
        print(f"(a) medians {median(runs['2 machines x 1']):.2f} s vs {median(runs['1 machine x 2']):.2f} s: "
              f"ratio {ratio:.3f} (goal <= 1.10)")
    if "b" in args.parts:
        times = [arrival() for _ in range(args.trials)]
        print(f"(b) last arrival -> first step: median {median(times):.2f} s ({', '.join(f'{t:.2f}' for t in times)})")
    if "c" in args.parts:
        for kind, goal in (("kill", 1.0), ("cut", NODE_TIMEOUT + 1)):
            trials = [loss(kind) for _ in range(args.trials)]
            detect, resume = [t[0] for t in trials], [sum(t[1:]) for t in trials]
            print(f"(c) {kind}: detection median {median(detect):.2f} s (goal <= {goal:g}), resumed step "
                  f"{median(resume):.2f} s after detection (goal <= 5); where it goes, median: new round started "
                  f"{median([t[1] for t in trials]):.2f} s, TensorFlow up and checkpoint restored "
                  f"{median([t[2] for t in trials]):.2f} s, first step {median([t[3] for t in trials]):.2f} s; "
                  "trials " + ", ".join("/".join(f"{x:.2f}" for x in t) for t in trials))
    if "d" in args.parts:
        lost = [scale_up() for _ in range(args.trials)]
        print(f"(d) steps lost at scale-up: median {median(lost):g} ({', '.join(f'{x:g}' for x in lost)}; goal 0)")
    if "e" in args.parts and why_no_etcd() is None:
        for name, measure in (("join -> first round", join_to_round), ("fault -> resumed step", fault_to_resumed)):
            runs = alternate(args.trials, [(b, lambda b=b, m=measure: on_backend(b, m)) for b in ("etcd", "tfdist")])
            print(f"(e) {name}: etcd median {median(runs['etcd']):.2f} s vs built-in {median(runs['tfdist']):.2f} s: "
                  f"ratio {median_ratio(runs['etcd'], runs['tfdist']):.3f} (etcd "
                  + ", ".join(f"{t:.2f}" for t in runs["etcd"]) + "; built-in "
                  + ", ".join(f"{t:.2f}" for t in runs["tfdist"]) + ")")
    elif "e" in args.parts:
        print(f"(e) skipped: {why_no_etcd()}")
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
