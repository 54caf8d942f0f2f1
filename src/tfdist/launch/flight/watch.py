"""The cheap watch for tasks that send no heartbeats (a program that is not Python, a script whose steps the task
bootstrap cannot see): how long a task has been quiet, meaning it used next to no CPU time and wrote no output.

Sampled by the launcher's poll loop, at most every :data:`SAMPLE_EVERY` seconds per task: one read of
``/proc/<pid>/stat`` and one ``stat`` of its log, nothing inside the task. CPU time is judged over the trailing
:data:`WINDOW` seconds, because the kernel counts it in ticks (10 ms) and a task blocked in a collective still wakes
for gRPC keep-alives: busy means more than :data:`BUSY_SHARE` of one core over that window.

What it cannot see: a task that spins (a busy loop, a livelock, a collective that polls) looks busy; a task that
prints while it is stuck (a retry loop logging each attempt) looks alive; and a task that legitimately waits without
output for longer than ``--hang-timeout`` (a long restore from slow storage, a peer still starting) looks hung, so
the timeout must exceed the longest silent phase of the job.
"""
from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass

from tfdist.launch.flight import procfs

SAMPLE_EVERY = 0.5  # seconds: the heartbeat cadence (TFDIST_HEARTBEAT_INTERVAL's default)
WINDOW = 5.0
BUSY_SHARE = 0.05


@dataclass
class _Track:
    samples: deque[tuple[float, float]]  # (when, CPU seconds) over the last WINDOW seconds, oldest first
    log_size: int
    last_active: float
    last_sample: float


def is_busy(cpu_used: float, seconds: float, share: float = BUSY_SHARE) -> bool:
    """Whether ``cpu_used`` CPU seconds over ``seconds`` of wall time is more than ``share`` of a core."""
    return seconds > 0 and cpu_used > share * seconds


class QuietWatch:
    """Per task (by pid): seconds since it last used CPU time or wrote output. CPU time is judged over the trailing
    :data:`WINDOW` seconds (a sliding window of samples), so a task that computes is active at every sample, and a
    task that stopped computing is quiet at most one window later."""

    def __init__(self) -> None:
        self._tracks: dict[int, _Track] = {}

    def observe(self, pid: int, log_path: str, now: float) -> float:
        """Seconds ``pid`` has been quiet as of ``now`` (monotonic); 0 while it is active."""
        track = self._tracks.get(pid)
        if track is not None and now - track.last_sample < SAMPLE_EVERY:
            return now - track.last_active
        cpu = procfs.cpu_seconds(pid)
        try:
            size = os.stat(log_path).st_size
        except OSError:
            size = 0
        if track is None:
            self._tracks[pid] = _Track(deque([(now, cpu)] if cpu is not None else []), size, now, now)
            return 0.0
        track.last_sample = now
        if size != track.log_size:
            track.log_size, track.last_active = size, now
        if cpu is not None:
            while len(track.samples) > 1 and now - track.samples[1][0] >= WINDOW:
                track.samples.popleft()  # keep one sample at least WINDOW old, when there is one
            if track.samples and is_busy(cpu - track.samples[0][1], now - track.samples[0][0]):
                track.last_active = now
            track.samples.append((now, cpu))
        return now - track.last_active

    def forget(self, pid: int) -> None:
        self._tracks.pop(pid, None)
