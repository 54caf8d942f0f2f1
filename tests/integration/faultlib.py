"""Running a real `tfdist launch` job of tfdist.examples.digits and injecting faults into it at chosen moments."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.conftest import REPO_ROOT
from tfdist.protocol import read_heartbeat

DIGITS = str(REPO_ROOT / "src" / "tfdist" / "examples" / "digits.py")
EPOCHS, STEPS = 3, 40
TOTAL_STEPS = EPOCHS * STEPS
SCRIPT_ARGS = ["--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS), "--save-every", "5", "--step-delay",
               "0.03", "--no-tensorboard"]
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}
# A launcher still running when its test ended gets this long to stop its tasks after SIGTERM before it and they are
# killed: a test that failed mid-job must not leave a job training on into the next tests (load, ports, CPU).
STOP_GRACE_S = 20.0
_started: list["Job"] = []


def task_values(text: str, key: str) -> dict[str, str]:
    return dict(re.findall(rf"^\[(\w+:\d+)\] {key}=(\S+)", text, flags=re.M))


@dataclass
class Job:
    """One launch, started in the background with per-attempt logs under ``tmp/logs``."""

    tmp: Path
    launch_args: list[str]
    script_args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    out: str = ""
    err: str = ""

    @property
    def model_dir(self) -> Path:
        return self.tmp / "model"

    def start(self) -> "Job":
        cmd = [sys.executable, "-m", "tfdist", "launch", "--log-dir", str(self.tmp / "logs"), "--tee",
               "--backoff", "0", *self.launch_args, "--", DIGITS, *SCRIPT_ARGS, "--model-dir", str(self.model_dir),
               *self.script_args]
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **QUIET})
        _started.append(self)
        return self

    def stop(self) -> bool:
        """Stop the launcher and every process under it if it is still running; True if it was. SIGTERM first (the
        launcher stops its tasks), then SIGKILL for whatever is left after :data:`STOP_GRACE_S` (a SIGSTOPped task
        never ends on SIGTERM)."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            launcher = psutil.Process(self.proc.pid)
            tree = [launcher, *launcher.children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.out, self.err = self.proc.communicate(timeout=STOP_GRACE_S)
            drained = True
        except subprocess.TimeoutExpired:
            drained = False
        for proc in tree:  # the launcher if it outlived the grace, and tasks it left (a stopped one, at least)
            _kill(proc)
        psutil.wait_procs(tree, timeout=STOP_GRACE_S)
        if not drained:
            self.out, self.err = self.proc.communicate()
        return True

    def heartbeat(self, attempt: int, task: str) -> Path:
        role, index = task.split(":")
        return self.tmp / "logs" / f"attempt-{attempt}" / f"{role}-{index}.heartbeat"

    def wait_for_step(self, attempt: int, task: str, step: int, timeout: float = 180) -> int:
        """Block until ``task`` of ``attempt`` reported at least ``step``; return the step it reported."""
        path = self.heartbeat(attempt, task)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, "the job ended before the fault"
            beat = read_heartbeat(str(path))
            if beat is not None and beat.step is not None and beat.step >= step:
                return beat.step
            time.sleep(0.05)
        raise AssertionError(f"{task} never reached step {step} in attempt {attempt} (last heartbeat: "
                             f"{read_heartbeat(str(path))})\n{self.log_tails(attempt)}")

    def log_tails(self, attempt: int, lines: int = 12) -> str:
        """The last lines of each task's log in ``attempt``: what a failed wait shows, since the launcher's own output
        is read only when the job ends."""
        tails = []
        for log in sorted((self.tmp / "logs" / f"attempt-{attempt}").glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(tails) or "(no task logs)"

    def process(self, task: str, timeout: float = 30) -> psutil.Process:
        """The live process of ``task`` in the newest attempt (from the launcher's ``tasks.json``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            attempts = sorted((self.tmp / "logs").glob("attempt-*/tasks.json"),
                              key=lambda p: int(p.parent.name.split("-")[1]))
            if attempts:
                try:
                    entries = json.loads(attempts[-1].read_text())
                except ValueError:  # being written
                    entries = []
                for entry in entries:
                    if entry["task"] == task:
                        try:  # the record can still name a process that has just died (its restart not yet written)
                            proc = psutil.Process(entry["pid"])
                            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                                return proc
                        except psutil.NoSuchProcess:
                            pass
            time.sleep(0.05)
        raise AssertionError(f"no live process for {task}")

    def signal(self, task: str, sig: int, timeout: float = 30) -> int:
        """Send ``sig`` to the live process of ``task``; one that dies between being found and being signalled is
        looked up again (as :meth:`process` does), so the signal reaches the task's live process or the test fails
        saying there is none."""
        deadline = time.monotonic() + timeout
        while True:
            proc = self.process(task, timeout=max(0.0, deadline - time.monotonic()))
            try:
                proc.send_signal(sig)
                return proc.pid
            except psutil.NoSuchProcess:
                continue

    def finish(self, timeout: float = 400) -> int:
        assert self.proc is not None
        self.out, self.err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode

    def job_pids(self) -> list[int]:
        """Every task pid the launcher reported starting, over all attempts."""
        return [int(p) for p in re.findall(r"pid (\d+) 127\.0\.0\.1", self.err)]


def stop_left_over_jobs() -> list[list[str]]:
    """Stop every job started since the last call that is still running; the launch arguments of those stopped."""
    stopped = [job.launch_args for job in _started if job.stop()]
    _started.clear()
    return stopped


def kill_during_save(job: Job, task: str, timeout: float = 30) -> bool:
    """SIGKILL ``task`` while TensorFlow is writing a backup (a ``*_temp*`` entry appears). True if caught mid-save.

    A ``_temp`` entry already there is not a save in progress: a save cut short by an earlier fault leaves one."""

    def temporaries() -> set[str]:
        try:
            return {name for name in os.listdir(chief_dir) if "_temp" in name}
        except OSError:
            return set()

    chief_dir = job.model_dir / "backup" / "chief"
    victim = job.process(task)
    left_over = temporaries()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if temporaries() - left_over:
            return _kill(victim)
        time.sleep(0.0005)
    _kill(victim)
    return False


def _kill(proc: psutil.Process) -> bool:
    """SIGKILL ``proc``; False when it had already exited (the test then fails on its own assertion, not on
    psutil.NoSuchProcess)."""
    try:
        proc.send_signal(signal.SIGKILL)
        return True
    except psutil.NoSuchProcess:
        return False


def survivors(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive
