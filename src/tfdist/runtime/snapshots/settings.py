"""Whether and how often a task snapshots, from its environment (pure)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from tfdist.errors import UsageError
from tfdist.protocol.variables import SNAPSHOT_DIR, SNAPSHOT_EVERY, SNAPSHOTS

OFF_VALUES = ("0", "false", "no", "off")


@dataclass(frozen=True)
class SnapshotSettings:
    """``directory``: the run's shared-memory folder (the launcher owns it; None outside one).
    ``every``: a fixed interval in steps, or None to choose it from the measured cost within ``budget``."""

    enabled: bool
    directory: str | None
    every: int | None = None
    budget: float = 0.02

    @property
    def active(self) -> bool:
        return self.enabled and bool(self.directory)


def settings_from_env(environ: Mapping[str, str] | None = None, *, enabled: bool = True) -> SnapshotSettings:
    """The task's settings; ``enabled`` is the script's own switch (``runtime.callbacks(snapshots=...)``).

    Raises:
        UsageError: TFDIST_SNAPSHOT_EVERY is neither ``auto`` nor a positive integer.
    """
    env = os.environ if environ is None else environ
    enabled = enabled and env.get(SNAPSHOTS, "1").strip().lower() not in OFF_VALUES
    raw = env.get(SNAPSHOT_EVERY, "auto").strip().lower() or "auto"
    every = None
    if raw != "auto":
        try:
            every = int(raw)
        except ValueError:
            every = 0
        if every < 1:
            raise UsageError(f"{SNAPSHOT_EVERY}={raw!r} is not a step count",
                             hint=f"set {SNAPSHOT_EVERY} to auto or a positive integer")
    return SnapshotSettings(enabled=enabled, directory=env.get(SNAPSHOT_DIR) or None, every=every)
