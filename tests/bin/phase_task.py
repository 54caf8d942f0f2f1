"""A stand-in training task that reports its phases as the task bootstrap does (no TensorFlow): a start-up, steps of
``--step`` seconds, optionally a pause between steps, and optionally a stall in a step that never ends.

    phase_task.py [--steps N] [--step S] [--pause-at N --pause S] [--stall TASK --stall-at N] [--first-attempt-only]
                  [--stalled-starts-late S]

The other tasks wait (for ever) at their first step after the stall began, as peers in a collective do.

Heartbeats follow the protocol (tfdist.protocol.records): written at once when the phase changes kind, at most
every TFDIST_HEARTBEAT_INTERVAL while it stays the same, with the finished phases' count, p99 and longest.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src"))
from _phase_beats import PATH, Phases  # noqa: E402  (tests/bin: the script's own folder)
from tfdist.protocol.records import Phase  # noqa: E402

TASK = "{type}:{index}".format(**json.loads(os.environ.get("TF_CONFIG", '{"task": {}}')).get("task", {}))
ATTEMPT = int(os.environ.get("TFDIST_RESTART_COUNT", "0"))
STALLED = os.path.join(os.path.dirname(PATH) or ".", "stalled")  # in the attempt's folder: the stall began


def stall_forever() -> None:
    while True:
        time.sleep(3600)


def wait_for_the_stalled_peer() -> None:
    """What a peer does under a synchronous strategy: it waits for the stalled task in the next collective (here:
    its first step once the stall began, so that its last heartbeat comes after the stalled task's)."""
    while True:
        time.sleep(3600)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step", type=float, default=0.02)
    p.add_argument("--pause-at", type=int, default=-1)
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--stall", default="")
    p.add_argument("--stall-at", type=int, default=-1)
    p.add_argument("--first-attempt-only", action="store_true")
    p.add_argument("--stalled-starts-late", type=float, default=0.0,
                   help="the stalled task starts this much later, and its peers wait at once: they fall silent first")
    args = p.parse_args()
    faulty = TASK == args.stall and (ATTEMPT == 0 or not args.first_attempt_only)
    if faulty:
        time.sleep(args.stalled_starts_late)
    phases = Phases()
    for step in range(args.steps):
        if step == args.pause_at:
            phases.enter(Phase.BETWEEN)
            time.sleep(args.pause)
        phases.step = step
        phases.enter(Phase.STEP)
        if faulty and step == args.stall_at:
            open(STALLED, "w").close()
            stall_forever()
        if args.stall and not faulty and step > args.stall_at and (os.path.exists(STALLED) or
                                                                     args.stalled_starts_late):
            wait_for_the_stalled_peer()
        time.sleep(args.step)
    print(f"{TASK} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
