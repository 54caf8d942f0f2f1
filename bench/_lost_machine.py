"""bench/recovery.py's lost-machine trial, on machines emulated with network namespaces (tests/integration/netns.py,
the test fixture: everything it makes is deleted even on failure; traffic only inside 198.18.0.0/24; needs root).

A rendezvous job of tfdist.examples.digits, --nnodes 3, one worker per machine, each machine with a /dev/shm of its
own (a private bind mount: machines share no memory). Mid-training (step >= FAULT_AT, once the survivors' warm spares
are ready, as in a job that has run for a while) machine 3 is lost: its agent is SIGKILLed and its tasks and /dev/shm
go with it. A replacement machine (machine 4, an empty /dev/shm) starts its agent at the same instant, as a standby
machine would, and joins the next round (--nnodes 3: the job waits for it). Measured from the heartbeats, like the
single-machine kinds:
- steps_lost: the newest step any replica of round 0 finished (every machine's heartbeats, read once round 1 has
  started: no round-0 task can run a step after its peer is gone) minus the step round 1 resumed from;
- first_resumed_step_s: the fault -> machine 1's first heartbeat past the resumed step;
- detection_s (the fault -> the rendezvous' "lost node"), round_started_s (-> "round 1: started": the replacement
  has joined, the snapshot is copied, the tasks start) and fit_began_s (-> machine 1's first heartbeat of round 1,
  written when fit begins: TensorFlow up, the cluster formed, the state restored);
- resumed_from: "snapshot, copied to the joining machine" (the survivors' in-memory snapshot, sent over the
  rendezvous), "snapshot", "checkpoint" (the durable one, --save-every), or "scratch".
"""
from __future__ import annotations

import json
import os
import re
import signal
import tempfile
import time
from pathlib import Path

import psutil
from _common import ready_spares
from multinode import ENV, agent, finish, wait
from tests.integration.netns import Machines, why_no_namespaces
from tfdist.protocol import read_heartbeat

EPOCHS, STEPS, SAVE_EVERY = 6, 40, 20  # long enough for the spares to be ready mid-training
FAULT_AT = 70  # 10 steps after a durable save (--save-every 20)
SCRIPT = ["--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS), "--save-every", str(SAVE_EVERY),
          "--step-delay", "0.25", "--no-tensorboard"]  # slow steps, light on the CPU: the spares import meanwhile
PROBE = str(Path(__file__).resolve().parent / "_probe")
# Where the time from "round 1: started" to the first resumed step goes, on machine 1's task (bench/_probe marks).
PHASES = ("TF server + cluster", "model build", "checkpoint restore", "snapshot resume", "snapshot writer start",
          "first step")
RESUME = re.compile(r"tfdist: resume: from (snapshot|checkpoint) at step (\d+)|tfdist: resume: from (scratch)")

__all__ = ["lost_machine", "why_no_namespaces"]


def steps(tmp: Path, machine: int, round_: int) -> list[int]:
    """The newest step of every heartbeat file of ``machine``'s round ``round_``."""
    found = []
    for path in (tmp / f"logs{machine}" / f"attempt-{round_}").glob("*.heartbeat"):
        record = read_heartbeat(str(path))
        if record is not None and record.step is not None:
            found.append(record.step)
    return found


def output(tmp: Path, machine: int) -> str:
    try:
        return (tmp / f"m{machine}.err").read_text(errors="replace")
    except OSError:
        return ""


def after(text: str, marker: str) -> str:
    """``text`` from the first ``marker`` on ("" when it is not there yet)."""
    at = text.find(marker)
    return "" if at < 0 else text[at:]


def lost_machine(snapshots: bool) -> dict[str, float | str]:
    with tempfile.TemporaryDirectory(prefix="tfdist-bench-lost-") as tmpdir, Machines(4) as machines:
        tmp = Path(tmpdir)
        off = [] if snapshots else ["--env", "TFDIST_SNAPSHOTS=0"]
        (tmp / "probe").mkdir()
        env = {**ENV, "PYTHONPATH": f"{PROBE}:{ENV['PYTHONPATH']}", "TFDIST_BENCH_PROBE_DIR": str(tmp / "probe")}

        def start(machine: int, rank: int):
            return agent(machines, machine, tmp, "3", "--tee", "--rdzv-timeout", "180", *off, script=SCRIPT,
                         rank=rank, private_dirs={"/dev/shm": str(tmp / f"shm{machine}")}, env=env)

        procs = [start(i, i - 1) for i in (1, 2, 3)]
        try:
            wait(lambda: max(steps(tmp, 1, 0), default=0) >= FAULT_AT, timeout=600)
            # the survivors' warm spares (one per worker, started once the job trains) have imported TensorFlow, as
            # in a job that has run for a while
            survivors = [psutil.Process(p.pid) for p in procs[:2]]
            wait(lambda: all(ready_spares(s) >= 1 for s in survivors), timeout=300, poll=0.2)
            if max(steps(tmp, 1, 0), default=0) > EPOCHS * STEPS - 20:
                raise RuntimeError("the warm spares were ready only at the end of training: a fault there measures "
                                   "nothing (a loaded machine? more --epochs in SCRIPT)")
            fault = time.monotonic()
            os.kill(procs[2].pid, signal.SIGKILL)  # machine 3 is lost, with its tasks and its /dev/shm
            procs.append(start(4, 2))  # the replacement, empty /dev/shm
            detected = wait(lambda: "lost node" in output(tmp, 1))
            started = wait(lambda: "round 1: started" in output(tmp, 1), timeout=300)
            step_at_fault = max(s for i in (1, 2, 3) for s in steps(tmp, i, 0))
            seen = watch_steps(tmp, procs[0])  # until machine 1's agent exits: the job's end
            finish(procs[:2] + procs[3:])
            codes = [p.returncode for p in procs[:2] + procs[3:]]
            if codes != [0, 0, 0]:
                raise RuntimeError(f"exit codes {codes}:\n" + output(tmp, 1)[-3000:])
            chief = re.search(r"resumed_from_step=(\d+)", output(tmp, 1))
            restored = int(chief.group(1)) if chief else 0
            resumed = next((at for at, step in seen if step > restored), None)
            if resumed is None:
                raise RuntimeError(f"no step after the resumed step {restored} (the fault came after the last step?)")
            said = RESUME.search(after(output(tmp, 1), "round 1: started"))
            source = (said.group(1) or said.group(3)) if said else ("checkpoint" if restored else "scratch")
            if said and said.group(2) and int(said.group(2)) != restored:
                raise RuntimeError(f"resumed_from_step={restored} but the task said {said.group(0)!r}")
            copied = re.search(rf"copied the snapshot of step {restored} from", output(tmp, 4))
            return {"steps_lost": step_at_fault - restored, "first_resumed_step_s": resumed - fault,
                    "detection_s": detected - fault, "round_started_s": started - fault,
                    "fit_began_s": seen[0][0] - fault, **breakdown(tmp / "probe", restored),
                    "resumed_from": f"{source}, copied to the joining machine" if copied else source}
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
            finish(procs)


def watch_steps(tmp: Path, chief, timeout: float = 600.0) -> list[tuple[float, int]]:
    """(when, step) each time machine 1's round-1 heartbeat step changed, until ``chief`` (its agent) exits. The
    resumed step is known only from the chief's last line (``resumed_from_step=``), so every change is kept."""
    seen: list[tuple[float, int]] = []
    deadline = time.monotonic() + timeout
    while chief.poll() is None and time.monotonic() < deadline:
        step = max(steps(tmp, 1, 1), default=None)
        if step is not None and (not seen or seen[-1][1] != step):
            seen.append((time.monotonic(), step))
        time.sleep(0.005)
    return seen


def breakdown(probes: Path, restored: int) -> dict[str, float]:
    """Machine 1's task in round 1 (worker 0), from its probe marks; a phase the run did not have (no snapshots)
    counts 0."""
    try:
        marks = [json.loads(line) for line in (probes / "worker-0-1.jsonl").read_text().splitlines() if line]
    except (OSError, ValueError):
        return {}
    at = {}
    for mark in marks:
        at.setdefault(mark["mark"], mark["time"])
    first = next((m["time"] for m in marks if m["mark"] == "beat" and (m.get("step") or 0) > restored), None)
    if first is None or not {"strategy-begin", "strategy-ready", "restore-begin", "restore-done"} <= set(at):
        return {}
    points = [at["strategy-begin"], at["strategy-ready"], at["restore-begin"], at["restore-done"]]
    points += [at.get("snapshot-resume-done", points[-1])]
    points += [at.get("snapshot-writer-done", points[-1]), first]
    return {phase: b - a for phase, a, b in zip(PHASES, points, points[1:])}
