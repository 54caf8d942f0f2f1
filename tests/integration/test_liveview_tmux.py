"""The live view in a real terminal: tmux runs `tfdist launch` as typed at a shell (send-keys), and what the terminal
shows (capture-pane) is checked while the job runs and after it ends; the same job piped through `cat` shows none of
it. The task is the stand-in trainer (no TensorFlow) reporting a total, a loss and examples in its heartbeats.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.slow]

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")
PYTHON = str(REPO_ROOT / ".venv" / "bin" / "python") if (REPO_ROOT / ".venv" / "bin" / "python").exists() else None
EXITED = re.compile(r"^EXIT=\d+$")  # what `echo EXIT=$?` prints (the typed command line may wrap onto "EXIT=$?")
LIVE_LINE = re.compile(r"^worker:(\d)  training  step +(\d+)/300 +([\d.]+) steps/s  loss ([\d.]+) +restarts 0  "
                       r"ETA (\d+m)?\d+s$")


class Tmux:
    """A private tmux server (its own socket, no user configuration) with one 150x40 window running bash."""

    def __init__(self, folder: Path) -> None:
        self.base = ["tmux", "-S", str(folder / "tmux.sock"), "-f", "/dev/null"]
        self.run("new-session", "-d", "-x", "150", "-y", "40", "-s", "t", "bash --norc --noprofile")

    def run(self, *argv: str) -> str:
        return subprocess.run([*self.base, *argv], check=True, capture_output=True, text=True, timeout=20).stdout

    def type(self, line: str) -> None:
        self.run("send-keys", "-t", "t", "-l", line)
        self.run("send-keys", "-t", "t", "Enter")

    def screen(self) -> list[str]:
        return self.run("capture-pane", "-p", "-t", "t").splitlines()

    def history(self) -> list[str]:
        return self.run("capture-pane", "-p", "-S", "-", "-t", "t").splitlines()

    def wait_for(self, predicate, timeout: float, what: str, *, whole: bool = False) -> list[str]:
        deadline = time.monotonic() + timeout
        lines: list[str] = []
        while time.monotonic() < deadline:
            lines = self.history() if whole else self.screen()
            if predicate(lines):
                return lines
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; the terminal shows:\n" + "\n".join(lines))

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=20)


@pytest.fixture
def tmux(tmp_path):
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (apt-get install tmux; .ci/system-deps.sh installs it)")
    session = Tmux(tmp_path)
    try:
        yield session
    finally:
        session.close()


def _command(tmp_path: Path, log_dir: Path, tail: str = "", *extra: str) -> str:
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO_ROOT / "src")), "HOME": os.environ["HOME"],
           "XDG_STATE_HOME": os.environ["XDG_STATE_HOME"], "TERM": "screen"}
    python = PYTHON or "python3"
    words = ["env", *(f"{k}={v}" for k, v in env.items()), python, "-m", "tfdist", "launch", "-n", "2", "--log-dir",
             str(log_dir), "--tee", "--", FAKE, str(tmp_path / "out"), "--total-steps", "300", *extra]
    return shlex.join(words) + tail + "; echo EXIT=$?"


def test_live_lines_in_a_terminal_and_plain_lines_in_a_pipe(tmux, tmp_path):
    # 20 lines of 1 kB per stream and task first: output that wraps over many rows must not disturb the live lines.
    tmux.type(_command(tmp_path, tmp_path / "logs", "", "--chatter", "20"))
    running = tmux.wait_for(lambda s: sum(bool(LIVE_LINE.match(x)) for x in s) == 2, 60, "two live task lines")
    body = [line for line in running if line.strip()]
    # The live lines are the last ones, under the header, and the tasks' own output is above them.
    assert LIVE_LINE.match(body[-1]) and LIVE_LINE.match(body[-2]), body
    assert re.match(r"^tfdist: job \w{12}  running  attempt 0  \d+s$", body[-3]), body
    assert body[-4].startswith("[worker:") or set(body[-4]) <= set("xy"), body  # task output right above them
    assert "[worker:0] hello from worker:0 attempt 0" in tmux.history()
    steps = {int(m.group(1)): int(m.group(2)) for m in map(LIVE_LINE.match, body[-2:]) if m}
    later = tmux.wait_for(lambda s: any((m := LIVE_LINE.match(x)) and int(m.group(2)) > steps[int(m.group(1))]
                                        for x in s), 30, "the step to advance")
    assert later

    final = tmux.wait_for(lambda h: any(EXITED.match(x) for x in h), 90, "the launch to end", whole=True)
    assert "EXIT=0" in final
    text = [line for line in final[:final.index("EXIT=0")] if line.strip()]
    run_id = re.search(r"tfdist: job (\w{12}): logs in", "\n".join(text)).group(1)
    summary = [line for line in text if line.startswith(f"tfdist: job {run_id} succeeded in ")]
    assert len(summary) == 1, text
    assert re.fullmatch(rf"tfdist: job {run_id} succeeded in \d+s, 300 steps, [\d.]+ steps/s, [\d,]+ examples/s, "
                        r"0 restarts, final loss 0.003333", summary[0]), summary
    # The final live lines stay on screen just above the summary; no stale copy of any live line was left behind.
    at = text.index(summary[0])
    assert re.match(rf"^tfdist: job {run_id}  succeeded  attempt 0  \d+s$", text[at - 3]), text
    for task in (0, 1):
        assert re.match(rf"^worker:{task}  done  step 300/300 +[\d.]+ steps/s  loss 0.003333 +restarts 0$",
                        text[at - 2 + task]), text
        assert sum(line.startswith(f"worker:{task}  ") for line in text) == 1, text
    assert sum(line.startswith(f"tfdist: job {run_id}  ") for line in text) == 1, text
    assert text.index("[worker:1] worker:1 done") < at - 3 and text.index("[worker:0] worker:0 done") < at - 3
    assert not any("\x1b" in line or "[2K" in line for line in text)

    # The same job with stderr into a pipe: the plain prefixed lines only, as before the live view existed.
    tmux.run("clear-history", "-t", "t")
    tmux.type("clear")
    tmux.type(_command(tmp_path, tmp_path / "logs2", tail=" 2>&1 | cat"))
    piped = tmux.wait_for(lambda h: any(EXITED.match(x) for x in h), 90, "the piped launch", whole=True)
    joined = "\n".join(piped)
    assert "[worker:1] worker:1 done" in joined and "succeeded after 0 restart(s)" in joined
    assert "steps/s" not in joined and "  training  " not in joined
