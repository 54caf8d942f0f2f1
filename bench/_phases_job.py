"""The job of bench/flight.py's false-hang check: a plain 2-worker MultiWorkerMirroredStrategy Keras script whose
phases are long in the ways a healthy job's are, none of them a hang:

- a first step of --first-step seconds (the train function's tracing sleeps: an XLA compile of a big model);
- a pause of --pause seconds between epochs 0 and 1 (an evaluation or a save at the epoch's end);
- worker 1 killed (SIGKILL) in epoch 1 of the first attempt: the group restarts and BackupAndRestore restores it;
- then --slow-steps steps of --slow seconds each after the restore (caches refill, a cold input pipeline).

    python bench/_phases_job.py BACKUP_DIR [--first-step 60] [--pause 25] [--slow-steps 5] [--slow 2] [--own-phases]

--own-phases: the script writes phase heartbeats itself (tests/bin/_phase_beats.py; run it under --no-bootstrap),
a stand-in for the task bootstrap's: start-up to the end of the first step, restore while BackupAndRestore reads
its backup, a step from each later batch's begin, between at each epoch's end.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("backup_dir")
parser.add_argument("--first-step", type=float, default=60.0)
parser.add_argument("--pause", type=float, default=25.0)
parser.add_argument("--slow-steps", type=int, default=5)
parser.add_argument("--slow", type=float, default=2.0)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--own-phases", action="store_true")
ARGS = parser.parse_args()
TASK = json.loads(os.environ["TF_CONFIG"])["task"]
RESTARTED = int(os.environ.get("TFDIST_RESTART_COUNT", "0")) > 0
STRATEGY = tf.distribute.MultiWorkerMirroredStrategy()


class SlowFirstStep(tf.keras.Sequential):
    def train_step(self, data):
        time.sleep(ARGS.first_step)  # Python: runs while the step is traced, once per process
        return super().train_step(data)


class Phases(tf.keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.batches = 0

    def on_train_batch_begin(self, batch, logs=None):
        self.batches += 1
        if RESTARTED and self.batches <= ARGS.slow_steps:
            time.sleep(ARGS.slow)
        time.sleep(0.03)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if not RESTARTED and self.epoch == 1 and batch == 10 and TASK["index"] == 1:
            os.kill(os.getpid(), signal.SIGKILL)

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0 and not RESTARTED:
            time.sleep(ARGS.pause)


class OwnPhases(tf.keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "bin"))
        from _phase_beats import Phase, Phases

        self.kinds, self.phases, self.step = Phase, Phases(), 0

    def on_train_begin(self, logs=None):
        if RESTARTED:
            self.phases.enter(self.kinds.RESTORE)  # BackupAndRestore, after this callback, reads its backup

    def on_train_batch_begin(self, batch, logs=None):
        self.phases.step, self.step = self.step, self.step + 1
        if self.step > 1:
            self.phases.enter(self.kinds.STEP)

    def on_epoch_end(self, epoch, logs=None):
        self.phases.enter(self.kinds.BETWEEN)


with STRATEGY.scope():
    model = SlowFirstStep([tf.keras.layers.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
data = tf.data.Dataset.from_tensor_slices((np.ones((64, 4), "float32"), np.zeros((64, 1), "float32"))).batch(8)
model.fit(data.repeat(), epochs=ARGS.epochs, steps_per_epoch=ARGS.steps, verbose=0,
          callbacks=[OwnPhases()] * ARGS.own_phases + [tf.keras.callbacks.BackupAndRestore(ARGS.backup_dir), Phases()])
print("training finished", flush=True)
