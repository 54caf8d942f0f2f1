"""Running real multi-machine `tfdist launch` jobs of tfdist.examples.digits on emulated machines (see netns.py)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.integration.netns import Machines
from tfdist.protocol import read_heartbeat

DIGITS = str(REPO_ROOT / "src" / "tfdist" / "examples" / "digits.py")
EPOCHS, STEPS = 3, 40
TOTAL_STEPS = EPOCHS * STEPS
SCRIPT_ARGS = ["--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS), "--save-every", "5", "--no-tensorboard"]
# Quick failure detection for tests; the defaults (10 s) are what users get.
FAST = ["--node-timeout", "2", "--rdzv-last-call", "1", "--grace-period", "20"]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO_ROOT / "src")}


def launch_env() -> dict[str, str]:
    """The launch's environment, read when a process starts: HOME and the XDG folders are the test's own
    (tests/conftest.py), so run records and state never reach this machine's real home (``ENV``, read at import,
    holds the real one)."""
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO_ROOT / "src")}


# Every agent's line when its round starts (tfdist/launch/elastic/agent/agent.py).
ROUND_STARTED = re.compile(r"round (\d+): started workers .* on (\d+) machine\(s\)", flags=re.M)


def task_values(text: str, key: str) -> dict[str, str]:
    """``{"node0 worker:1": value}`` for every ``[node0 worker:1] key=value`` line."""
    return dict(re.findall(rf"^\[(node\d+ \w+:\d+)\] .*?\b{key}=(\S+)", text, flags=re.M))


@dataclass
class Agent:
    """One machine's ``tfdist launch`` (an agent, or the host-file driver), output captured to files."""

    machines: Machines
    machine: int
    args: list[str]
    tmp: Path
    private_dirs: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # this machine's own settings, over the launch's environment
    proc: subprocess.Popen | None = None

    @property
    def out_path(self) -> Path:
        return self.tmp / f"m{self.machine}-{id(self)}.out"

    @property
    def err_path(self) -> Path:
        return self.tmp / f"m{self.machine}-{id(self)}.err"

    def start(self) -> "Agent":
        argv = [sys.executable, "-m", "tfdist", "launch", *self.args]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(self.machines.command(self.machine, argv, private_dirs=self.private_dirs),
                                         cwd=REPO_ROOT, env={**launch_env(), **self.env}, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL)
        return self

    def wait(self, timeout: float = 300) -> int:
        """Its exit status; one that does not end in ``timeout`` fails the test with its last lines (a bare
        TimeoutExpired told nothing of where the job stood)."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"machine {self.machine}'s launch did not end in {timeout:g} s:\n"
                                 f"{self.out[-3000:]}\n{self.err[-5000:]}") from None

    @property
    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 180, stream: str = "err", after: int = 0) -> re.Match:
        """The first match of ``pattern`` at or after offset ``after`` of the output (a test that waits for a
        second occurrence of a line passes the end of the first, so the earlier one cannot answer for it)."""
        compiled = re.compile(pattern, flags=re.M)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = compiled.search(self.err if stream == "err" else self.out, after)
            if found:
                return found
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} not seen on machine {self.machine}:\n{self.err[-3000:]}")

    def mark(self) -> tuple[int, int]:
        """Where its stdout and stderr end now: ``since`` reads what was written after (the stderr offset also
        serves as ``wait_for``'s ``after``)."""
        return len(self.out), len(self.err)

    def since(self, mark: tuple[int, int]) -> str:
        """Its stdout, then its stderr, from ``mark`` on: the lines of what happened after a test's fault, not of
        an earlier loss (a keep-alive missed under load) that printed the same kind of line."""
        return self.out[mark[0]:] + self.err[mark[1]:]


def wait_for_round_at_step(agent: Agent, log_dir: str | Path, machines: int, step: int, agents: list[Agent],
                           task: str = "worker-*", timeout: float = 180) -> int:
    """Wait until ``agent``'s newest round runs on ``machines`` machines and one of its tasks named ``task`` (a
    heartbeat file name pattern) reached ``step`` in that round's folder under ``log_dir``; return the round. Under
    load a machine can miss a short keep-alive before the test's fault (--node-timeout 2): the round stops and the
    job re-forms, so the round that trains on every machine is not always round 0."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rounds = ROUND_STARTED.findall(agent.err)
        if rounds and int(rounds[-1][1]) == machines:
            round_ = int(rounds[-1][0])
            beats = [read_heartbeat(str(path)) for path in (Path(log_dir) / f"attempt-{round_}").glob(
                f"{task}.heartbeat")]
            if any(b is not None and b.step is not None and b.step >= step for b in beats):
                return round_
        if any(a.proc is not None and a.proc.poll() is not None for a in agents):
            break
        time.sleep(0.1)
    raise AssertionError(f"no round of {machines} machines reached step {step} ({task}):\n"
                         + all_output(agents)[-4000:])


def job_secret_file(folder: Path, name: str = "job.secret") -> str:
    """A new job secret in ``folder`` (mode 0600), made the documented way; every machine reads the same file."""
    path = folder / name
    done = subprocess.run([sys.executable, "-m", "tfdist.launch.elastic.secret", str(path)], env=ENV,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return str(path)


def rendezvous_args(machines: Machines, nnodes: str, workers: int, model_dir: str, *extra: str,
                    job: str = "digits", port: int = 29400, script: list[str] = SCRIPT_ARGS,
                    secret_file: str | None = None) -> list[str]:
    """One machine's flags; the job secret defaults to one file next to ``model_dir`` (the same for every
    machine of the test)."""
    if secret_file is None:
        folder = Path(model_dir).parent
        folder.mkdir(parents=True, exist_ok=True)
        secret_file = str(folder / "job.secret")
        if not os.path.exists(secret_file):
            job_secret_file(folder)
    return ["--nnodes", nnodes, "--rdzv-endpoint", f"{machines.address(1)}:{port}", "--rdzv-id", job,
            "--rdzv-secret-file", secret_file, "-n", str(workers), *FAST, *extra, "--", DIGITS, *script,
            "--model-dir", model_dir]


def lost_machines(text: str) -> set[str]:
    """The machines the job's final report names as lost (``  lost machines: A, B (not back: B)``). Under load a
    machine can also be lost before the test's fault (a missed keep-alive) and is then named too, so a test checks
    that its own victim is among them, not that the line is exactly one address."""
    return {name.strip() for line in re.findall(r"^  lost machines: ([^(\n]*)", text, flags=re.M)
            for name in line.split(",") if name.strip()}


def all_output(agents: list[Agent]) -> str:
    return "".join(a.out + a.err for a in agents)
