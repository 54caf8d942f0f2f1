"""Phase heartbeats as the task protocol defines them (tfdist.protocol.records), for the stand-in tasks of the tests
and benches (tests/bin/phase_task.py, tests/bin/hang_job.py --own-phases): written at once when the phase changes
kind, at most every TFDIST_HEARTBEAT_INTERVAL while it stays the same, with each finished phase's count, p99 and
longest. The real writers are the task bootstrap's and tfdist.runtime's."""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src"))
from tfdist.protocol.records import HeartbeatRecord, Phase, PhaseStats, write_heartbeat  # noqa: E402

PATH = os.environ.get("TFDIST_HEARTBEAT_FILE", "")
INTERVAL = float(os.environ.get("TFDIST_HEARTBEAT_INTERVAL", "0.5"))


class Phases:
    def __init__(self) -> None:
        self.durations: dict[Phase, list[float]] = {}
        self.phase, self.since, self.written, self.step = Phase.STARTUP, time.time(), 0.0, 0
        self.write()

    def stats(self) -> dict[Phase, PhaseStats]:
        out = {}
        for phase, seen in self.durations.items():
            ordered = sorted(seen)
            out[phase] = PhaseStats(len(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
                                    ordered[-1])
        return out

    def enter(self, phase: Phase) -> None:
        now = time.time()
        self.durations.setdefault(self.phase, []).append(now - self.since)
        kind_changed = phase is not self.phase
        self.phase, self.since = phase, now
        if kind_changed or now - self.written >= INTERVAL:
            self.write()

    def write(self) -> None:
        self.written = time.time()
        if PATH:
            write_heartbeat(PATH, HeartbeatRecord(step=self.step, time=self.written, phase=self.phase,
                                                  phase_since=self.since, phase_stats=self.stats() or None))
