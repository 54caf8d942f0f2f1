"""When ``/healthz`` says 503: the health policy, pure and table-tested.

``/healthz`` answers 200 while a step has completed within ``TFDIST_HEALTH_STALL_SECONDS`` (and during a start-up
grace before the first step), else 503. It is what a Kubernetes liveness probe and the launcher's hang watchdog
read. A stopped or wedged process cannot answer at all, which a probe also counts as a failure; its peers, blocked
in collectives, turn 503. Anything between two training steps that lasts longer than the threshold (a long
validation pass, a slow checkpoint save) also reads as a stall: size the threshold for the longest legitimate pause.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tfdist.errors import UsageError

HEALTH_STALL_SECONDS = "TFDIST_HEALTH_STALL_SECONDS"
HEALTH_STARTUP_SECONDS = "TFDIST_HEALTH_STARTUP_SECONDS"
DEFAULT_STALL_SECONDS = 300.0
# TensorFlow start-up, the first collective handshake and tracing the first step can take minutes on big models.
DEFAULT_STARTUP_SECONDS = 900.0


@dataclass(frozen=True)
class HealthPolicy:
    """When ``/healthz`` says 503: no step for ``stall_seconds`` (``startup_seconds`` before the first step)."""

    stall_seconds: float = DEFAULT_STALL_SECONDS
    startup_seconds: float = DEFAULT_STARTUP_SECONDS

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "HealthPolicy":
        """Read ``TFDIST_HEALTH_STALL_SECONDS`` and ``TFDIST_HEALTH_STARTUP_SECONDS``."""
        stall = _positive(environ, HEALTH_STALL_SECONDS, DEFAULT_STALL_SECONDS)
        # The grace is never shorter than the stall threshold: start-up is no faster than a step.
        return cls(stall, _positive(environ, HEALTH_STARTUP_SECONDS, max(stall, DEFAULT_STARTUP_SECONDS)))

    def assess(self, *, now: float, started_at: float, last_step_at: float | None,
               steps: int) -> tuple[bool, dict[str, Any]]:
        """``(healthy, details)`` as ``/healthz`` reports them, from monotonic times."""
        if last_step_at is None:
            waited = now - started_at
            healthy = waited <= self.startup_seconds
            return healthy, {"status": "starting" if healthy else "stalled", "steps": 0,
                             "seconds_since_start": round(waited, 3), "startup_seconds": self.startup_seconds}
        idle = now - last_step_at
        healthy = idle <= self.stall_seconds
        return healthy, {"status": "ok" if healthy else "stalled", "steps": steps,
                         "seconds_since_last_step": round(idle, 3), "stall_seconds": self.stall_seconds}


def _positive(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise UsageError(f"{name}={raw[:40]!r} is not a positive number of seconds", hint=f"e.g. {name}=300")
    return value
