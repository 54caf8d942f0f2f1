"""The rendezvous' closing report and the bound on the events it keeps for it. Pure.

Apart from the policy (``membership.py``) because it is a rendering of what the policy remembers, in the
single-machine launcher's shape, and the bound on that memory is the report's: a flapping machine cannot grow the
rendezvous' memory or its report without bound.
"""
from __future__ import annotations

KEPT_EVENTS = 200
LEFT_OUT = "... (earlier events left out)"


NAMED = 8  # machines a message's reason names: the rest are counted (it must fit one message's text at any size)


def some_of(labels: list[str]) -> str:
    """``labels`` for a reason sent to the machines: the first :data:`NAMED`, then how many more."""
    named = ", ".join(labels[:NAMED])
    return named if len(labels) <= NAMED else f"{named} and {len(labels) - NAMED:,} more"


def bounded(events: list[str], event: str) -> None:
    """Append, keeping the first and the last :data:`KEPT_EVENTS` // 2."""
    events.append(event)
    if len(events) > KEPT_EVENTS:
        half = KEPT_EVENTS // 2
        if events[half] != LEFT_OUT:
            events.insert(half, LEFT_OUT)
        del events[half + 1]


def closing_report(job: str, status: int, summary: str, *, round_: int, restarts: int, lost: list[str],
                   returned: list[str], left_out: list[str], history: list[str],
                   root_cause: tuple[str, str] | None) -> str:
    """The closing report, in the single-machine launcher's shape (:func:`tfdist.launch.outcome.render_success`
    and ``render_report``): one verdict line, then a line per attempt (here: a round and what happened in it).
    ``round_``: the last round's number; ``root_cause``: (machine, detail) of the last round's failure."""
    if status == 0:
        lines = [f"tfdist: job {job} succeeded after {restarts} restart(s)"]
    else:
        lines = [f"tfdist: job {job} did not succeed after {round_ + 1} attempt(s): {summary}"]
    if lost:
        still = [name for name in lost if name not in returned]
        lines.append("  lost machines: " + ", ".join(lost)
                     + (f" (not back: {', '.join(still)})" if still and still != lost else ""))
    if left_out:
        lines.append("  left out after repeated failures: " + ", ".join(left_out))
    if history:
        lines.append("attempts:")
        lines += [f"  #{event[len('round '):]}" if event.startswith("round ") else f"  {event}" for event in history]
    if status != 0 and root_cause is not None:
        name, detail = root_cause
        lines.append(f"root cause (attempt #{max(round_, 0)}): {name}: {detail}")
    return "\n".join(lines)
