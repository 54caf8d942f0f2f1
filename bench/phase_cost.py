"""Cost of the phase clock (issue 36) per training step: ``Progress.batch_end``, the one call tfdist makes per Keras
batch (the task bootstrap's callback and tfdist.runtime's), timed with the heartbeat's phase clock and without it.

    .venv/bin/python bench/phase_cost.py [--calls 200000] [--rounds 7]

No TensorFlow: the loss is a float and the heartbeat is never due in the timed loop (its interval is an hour), so
what is timed is the per-step Python work alone: counting, the clock read, and with phases the ring write. Apart,
what an epoch's end adds: its changes of kind (between, then step again) each write the heartbeat at once, where
an epoch's end wrote one beat before phases. Rounds alternate; the result is the median over rounds.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tfdist.runtime.phases import PhaseClock  # noqa: E402
from tfdist.runtime.progress import Progress  # noqa: E402
from tfdist.runtime.reporting import Heartbeat  # noqa: E402

from _common import alternate, median  # noqa: E402

def progress_in(folder: str, calls: int, with_phases: bool) -> Progress:
    heartbeat = Heartbeat(os.path.join(folder, "hb"), min_interval=3600.0, phases=PhaseClock())
    progress = Progress(heartbeat=heartbeat)
    if not with_phases:
        progress._phases = None  # what batch_end did before phases
    progress.begin(0, total_steps=calls, steps_per_epoch=calls + 2)  # also the first beat (it lists the modules)
    progress.batch_end(0.5, 0)  # the first step (it ends start-up)
    return progress


def per_call_ns(folder: str, calls: int, with_phases: bool) -> float:
    batch_end = progress_in(folder, calls, with_phases).batch_end
    started = time.perf_counter_ns()
    for batch in range(1, calls + 1):
        batch_end(0.5, batch)
    return (time.perf_counter_ns() - started) / calls


def epoch_end_us(folder: str, with_phases: bool, epochs: int = 200) -> float:
    progress = progress_in(folder, epochs, with_phases)
    started = time.perf_counter_ns()
    for _ in range(epochs):
        progress.epoch_end()
        progress.epoch_begin()
        progress.batch_end(0.5)
    return (time.perf_counter_ns() - started) / epochs / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = alternate(args.rounds, [
            ("without phases", lambda: per_call_ns(folder, args.calls, False)),
            ("with phases", lambda: per_call_ns(folder, args.calls, True)),
        ])
        ends = alternate(args.rounds, [
            ("epoch end without phases", lambda: epoch_end_us(folder, False)),
            ("epoch end with phases", lambda: epoch_end_us(folder, True)),
        ])
    off, on = median(results["without phases"]), median(results["with phases"])
    end_off, end_on = median(ends["epoch end without phases"]), median(ends["epoch end with phases"])
    print(f"per step (batch_end): {off:.0f} ns without phases, {on:.0f} ns with (median of {args.rounds}): "
          f"+{on - off:.0f} ns")
    print(f"per epoch end: {end_off:.0f} us without phases, {end_on:.0f} us with: +{end_on - end_off:.0f} us")


if __name__ == "__main__":
    main()
