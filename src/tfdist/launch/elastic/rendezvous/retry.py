"""When an agent tries the rendezvous again, and when it says so: pure policy, no sockets and no clocks of its own.

Why back off with jitter and not retry at a fixed pace: a thousand machines started in the same second that are
all turned away (the server is busy, a listen backlog overflowed) and all come back after the same pause arrive
as the same burst again. Exponential back-off thins the bursts out and jitter spreads each one (the "full jitter"
of the AWS architecture blog's *Exponential Backoff And Jitter*: a delay drawn between half the step and the step,
so no machine waits much longer than its step).

What is retried: every failure before the welcome that is not a proven refusal: the connection refused, closed,
reset or timed out, or the server said it is busy. What is not: a server that answered but did not prove the job
secret (another program, another job, a different secret), and a refusal the rendezvous sent (it proved the
secret first). ``client.py`` raises those; this module only paces the rest.
"""
from __future__ import annotations

from dataclasses import dataclass

FIRST_DELAY_S = 0.05  # a busy server frees a handshake slot in milliseconds
MAX_DELAY_S = 2.0  # so a machine turned away early still comes back soon after the crowd thinned
PROGRESS_EVERY_S = 10.0  # a line this often while the rendezvous does not let this agent in


@dataclass(frozen=True)
class Backoff:
    """The pause before the next try: ``first`` doubled at each failure up to ``cap``, times a jitter factor."""

    first: float = FIRST_DELAY_S
    cap: float = MAX_DELAY_S

    def step(self, failures: int) -> float:
        """The step after ``failures`` failures in a row (1 = the first): ``first * 2**(failures-1)``, at most cap."""
        if failures < 1:
            return 0.0
        return min(self.cap, self.first * 2.0 ** min(failures - 1, 60))

    def delay(self, failures: int, draw: float) -> float:
        """The pause after ``failures`` failures; ``draw`` in [0, 1) is the jitter (``random.random()``)."""
        return self.step(failures) * (0.5 + 0.5 * min(max(draw, 0.0), 1.0))

    def pause(self, failures: int, draw: float, now: float, deadline: float) -> float | None:
        """The pause before the next try, cut to ``deadline``; None when the deadline has passed (give up)."""
        if now >= deadline:
            return None
        return min(self.delay(failures, draw), deadline - now)


def progress_due(now: float, last_line: float, every: float = PROGRESS_EVERY_S) -> bool:
    """True when the waiting agent owes the operator a line (one every ``every`` seconds)."""
    return now - last_line >= every


def tries_text(tries: int) -> str:
    return f"{tries} tr{'y' if tries == 1 else 'ies'}"


def waiting_line(where: str, what: str, tries: int, waited: float, patience: float) -> str:
    """The progress line: where, what happened on the last try, how long of how long."""
    return f"waiting for the rendezvous at {where}: {what} ({tries_text(tries)}, {waited:.0f}s of {patience:.0f}s)"


def gave_up_text(where: str, what: str, tries: int) -> str:
    """Why the agent stopped trying (its deadline, ``--rdzv-timeout``, passed): what happened last."""
    return f"no rendezvous at {where} let this agent in in time ({tries_text(tries)}; last: {what})"
