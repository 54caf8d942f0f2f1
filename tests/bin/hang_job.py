"""A tiny 2-worker MultiWorkerMirroredStrategy Keras job that hangs on purpose, one way per --mode, on worker 1 once it
reaches --at-step (the flight recorder's integration tests; one script so the suite imports TensorFlow once per task).

Modes (worker 1 only; worker 0 always trains normally and ends up waiting for worker 1 in the gradient all-reduce):
  none       train normally (the test may SIGSTOP a worker itself)
  deadlock   a callback takes two locks in the opposite order of a helper thread: a Python deadlock
  generator  the tf.data input is a Python generator whose loader blocks forever on an empty queue
  sleep      a callback calls a user function that sleeps for an hour
  leave      worker 1 leaves its training loop early (an exception it catches) and then waits for results

--own-phases: the job writes phase heartbeats itself (tests/bin/_phase_beats.py) instead of tfdist.runtime's
callbacks: for bench/flight.py under --no-bootstrap, until the task bootstrap reports phases.
"""
from __future__ import annotations

import argparse
import os
import queue
import threading
import time

from tfdist import runtime
from tfdist.protocol.records import Phase


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("none", "deadlock", "generator", "sleep", "leave"), default="none")
    parser.add_argument("--at-step", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--own-phases", action="store_true")
    return parser.parse_args()


ARGS = parse_args()
STRATEGY = runtime.strategy()
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

TASK = runtime.task()
FAULTY = TASK == ("worker", 1)
EMPTY: queue.Queue = queue.Queue()
LOCK_A, LOCK_B = threading.Lock(), threading.Lock()


def load_batch(index: int):
    if FAULTY and ARGS.mode == "generator" and index >= ARGS.at_step:
        return EMPTY.get()  # nothing ever arrives
    return np.full((8, 4), index % 3, "float32"), np.zeros((8, 1), "float32")


def batches():
    index = 0
    while True:
        yield load_batch(index)
        index += 1


def hold_b_then_a(ready: threading.Event) -> None:
    with LOCK_B:
        ready.set()
        time.sleep(0.2)
        with LOCK_A:
            pass


def update_stats() -> None:
    with LOCK_A:
        ready = threading.Event()
        threading.Thread(target=hold_b_then_a, args=(ready,), name="stats-writer", daemon=True).start()
        ready.wait()
        with LOCK_B:  # deadlock: the helper holds B and waits for A
            pass


def slow_user_function() -> None:
    time.sleep(3600)


class LeftTraining(Exception):
    pass


def wait_for_results() -> None:
    threading.Event().wait(3600)


def mark_fault() -> None:
    """bench/flight.py measures detection from this moment: the time the fault began, in HANG_JOB_FAULT_FILE."""
    path = os.environ.get("HANG_JOB_FAULT_FILE")
    if path and not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(f"{time.time()}\n")


class Fault(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.02)
        if not FAULTY or batch + 1 < ARGS.at_step:
            return
        mark_fault()
        if ARGS.mode == "deadlock":
            update_stats()
        elif ARGS.mode == "sleep":
            slow_user_function()
        elif ARGS.mode == "leave":
            raise LeftTraining()  # out of fit at once (stop_training would still run fit's end-of-epoch collectives)


class OwnPhases(tf.keras.callbacks.Callback):
    """Phase heartbeats from the script itself (--own-phases): the start-up up to the end of the first step, a step
    from each later batch's begin, between at the end of an epoch."""

    def __init__(self) -> None:
        super().__init__()
        from _phase_beats import Phases

        self.phases, self.step = Phases(), 0

    def on_train_batch_begin(self, batch, logs=None):
        self.phases.step, self.step = self.step, self.step + 1
        if self.step > 1:  # the first step (its tracing) belongs to the start-up
            self.phases.enter(Phase.STEP)

    def on_epoch_end(self, epoch, logs=None):
        self.phases.enter(Phase.BETWEEN)


def main() -> None:
    dataset = tf.data.Dataset.from_generator(
        batches, output_signature=(tf.TensorSpec((8, 4), tf.float32), tf.TensorSpec((8, 1), tf.float32)))
    with STRATEGY.scope():
        model = tf.keras.Sequential([tf.keras.layers.Input(shape=(4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    # One step first, before any heartbeat: it traces the train function, which on a loaded machine takes longer than
    # the tests' short --hang-timeout; the timed fit below reuses the traced function.
    model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
    callbacks = [OwnPhases()] if ARGS.own_phases else runtime.callbacks("/tmp/unused", tensorboard=False,
                                                                          fault_tolerance=False)
    callbacks.append(Fault())
    try:
        model.fit(dataset, epochs=1, steps_per_epoch=ARGS.steps, callbacks=callbacks, verbose=0)
    except LeftTraining:  # a worker that leaves its training loop early, as a swallowed error would make it
        wait_for_results()
    print("training finished", flush=True)


main()
