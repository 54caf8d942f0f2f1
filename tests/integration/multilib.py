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
                                         cwd=REPO_ROOT, env=launch_env(), stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL)
        return self

    def wait(self, timeout: float = 300) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

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


def all_output(agents: list[Agent]) -> str:
    return "".join(a.out + a.err for a in agents)
