"""A host's probe over ssh (``host_probe.py`` on the other end) and what its report says is wrong with the host.

The host-file driver's preflight probes every listed host before anything starts (``driver.preflight``); a host a
discovery script adds later is probed the same way before its agent is started (``HostVetting``), and compared with
the versions the job's first hosts agreed on: a host with another TensorFlow, Python or tfdist, without the script,
or unable to load ``--firewall``'s table is named in one line and gets no agent, rather than an agent that fails,
is lost and is started again every few seconds.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time

from tfdist.validate import printable

PROBE_TAG, MESH_TAG = "TFDIST-PROBE", "TFDIST-MESH"
PREFLIGHT_TIMEOUT_S = 60.0


class ProbeSession:
    """One host's probe over ssh (``command``: the whole ssh command line): its output lines, read by a thread."""

    def __init__(self, command: list[str], timeout: float = PREFLIGHT_TIMEOUT_S) -> None:
        self.lines: list[str] = []
        self.timeout = timeout
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def found(self, tag: str) -> dict | None:
        """The JSON after ``tag`` if the host printed it yet (never waits)."""
        for line in list(self.lines):
            if line.startswith(tag + " "):
                try:
                    answer = json.loads(line.split(" ", 1)[1])
                except ValueError:
                    return None
                return answer if isinstance(answer, dict) else None
        return None

    def over(self) -> bool:
        """The session ended and everything it printed was read."""
        return self.proc.poll() is not None and not self._reader.is_alive()

    def answer(self, tag: str, deadline: float) -> dict | None:
        """The JSON after ``tag``, or None once the session ended without it or the deadline passed."""
        while True:
            answer = self.found(tag)
            if answer is not None or self.over() or time.monotonic() > deadline:
                return answer
            time.sleep(0.02)

    def why_not(self) -> str:
        if self.proc.poll() is None:
            return f"no answer over ssh within {self.timeout:g}s"
        err = self.proc.stderr.read() if self.proc.stderr else ""
        last = printable((err.strip().splitlines() or [f"exit status {self.proc.returncode}"])[-1], 400)
        if self.proc.returncode == 255:
            return f"unreachable over ssh: {last}"
        return f"cannot run tfdist's probe there: {last}"

    def send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass

    def close(self, grace: float = 10.0) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def report_faults(report: dict, script: str, cwd: str) -> dict[str, str]:
    """What a host's probe report says stops it from running its agent, by kind (``firewall``, ``script``); empty
    when nothing does. ``script`` is the target's file as given ("" for a module or a program on PATH)."""
    faults = {}
    if report.get("firewall"):  # else its agent would exit 2 at once and be started again and again
        faults["firewall"] = printable(str(report["firewall"]), 400)
    if report.get("script") is False:
        faults["script"] = f"{script} is missing in {cwd}"
    return faults


def version_differences(versions: dict, expected: dict) -> str:
    """``"tensorflow 2.15.0 (the job's: 2.16.1)"`` for every version that differs from the job's; "" when none."""
    names = sorted(set(versions) | set(expected))
    return ", ".join(printable(f"{name} {versions.get(name)} (the job's: {expected.get(name)})", 120)
                     for name in names if versions.get(name) != expected.get(name))


class HostVetting:
    """A host added while the job runs, probed before its agent starts. ``verdict()``: None while the probe runs,
    "" when the host may run its agent, else one line saying why not."""

    def __init__(self, session: ProbeSession, expected: dict, script: str, cwd: str) -> None:
        self.session, self.expected, self.script, self.cwd = session, expected, script, cwd
        self.deadline = time.monotonic() + session.timeout

    def verdict(self, now: float) -> str | None:
        report = self.session.found(PROBE_TAG)
        if report is None:
            if not self.session.over() and now < self.deadline:
                return None
            return self.session.why_not()
        differences = version_differences(report.get("versions") or {}, self.expected)
        if differences:
            return f"its versions differ from the job's hosts': {differences}"
        return "; ".join(report_faults(report, self.script, self.cwd).values())

    def close(self) -> None:
        self.session.close(grace=0.0 if self.session.proc.poll() is None else 1.0)
