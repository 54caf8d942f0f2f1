"""The progress callback in a real tf-keras ``fit``: per-batch metrics, the heartbeat record and the chief's
TensorBoard scalars, next to the timed backup and the epoch-only TensorBoard.

Runs in a child process so that ``TF_USE_LEGACY_KERAS=1`` is in place before TensorFlow is imported.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.tf]

SCRIPT = r'''
import json, os, sys
import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tfdist.cluster import TfConfig
from tfdist import protocol as P
from tfdist.observability.labels import TaskLabels
from tfdist.runtime import metrics as m
from tfdist.runtime.progress import Progress, progress_callback, time_backups
from tfdist.runtime.reporting import Heartbeat
from tfdist.runtime.tensorboard import ScalarWriter, keras_tensorboard

log_dir = sys.argv[1]
labels = TaskLabels("kt", "worker", 0, "h")
tm = m.TrainingMetrics(labels)
x = np.random.default_rng(0).random((80, 4)).astype("float32")
y = (x.sum(axis=1) > 2).astype("int64")
model = tf.keras.Sequential([tf.keras.layers.Input((4,)), tf.keras.layers.Dense(2)])
model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=2)
def tf_config(index):
    return json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": index}})
backup = time_backups(tf.keras.callbacks.BackupAndRestore(os.path.join(log_dir, "backup"), save_freq=5), tm)
callbacks = [backup]
beat_file = os.path.join(log_dir, "heartbeat.json")
os.makedirs(log_dir, exist_ok=True)
for i in (0, 1):
    # As tfdist.runtime.callbacks() decides: only the chief (worker 0 of a chief-less cluster) writes scalars.
    chief = TfConfig.parse(tf_config(i)).is_chief
    scalars = ScalarWriter(os.path.join(log_dir, f"w{i}"), examples_per_step=8, every_seconds=0.0) if chief else None
    callbacks.append(progress_callback(Progress(
        metrics=tm if i == 0 else None, scalars=scalars, examples_per_step=8 if i == 0 else 0,
        heartbeat=Heartbeat(beat_file, min_interval=0.0) if i == 0 else None)))
callbacks.append(keras_tensorboard(os.path.join(log_dir, "keras")))
history = model.fit(x, y, batch_size=8, epochs=2, callbacks=callbacks, verbose=0)
s = {"job": "kt", "task_type": "worker", "task_index": "0", "host": "h"}
get = tm.registry.get_sample_value
tags = {}
for i in (0, 1):
    train = os.path.join(log_dir, f"w{i}", "train")
    tags[i] = []
    if os.path.isdir(train):
        acc = EventAccumulator(train); acc.Reload()
        tags[i] = sorted(acc.Tags()["tensors"] + acc.Tags()["scalars"])
acc = EventAccumulator(os.path.join(log_dir, "keras", "train")); acc.Reload()
keras_tags = sorted(acc.Tags()["tensors"] + acc.Tags()["scalars"])
print(json.dumps({
    "keras": tf.keras.__name__,
    "steps": get("tfdist_train_steps_total", s), "examples": get("tfdist_train_examples_total", s),
    "observations": get("tfdist_train_step_duration_seconds_count", s),
    "loss": get("tfdist_train_loss", s), "final_loss": float(history.history["loss"][-1]),
    "healthy": tm.health()[0], "tags": tags, "ckpt_step": get("tfdist_checkpoint_last_step", s),
    "ckpt_count": get("tfdist_checkpoint_duration_seconds_count", s), "keras_tags": keras_tags,
    "heartbeat": json.loads(P.read_heartbeat(beat_file).to_json())}))
'''


def _run(tmp_path: Path) -> dict:
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "tb")], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_callbacks_in_a_tf_keras_fit(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert run["keras"].startswith("tf_keras"), "expected tf-keras (Keras 2) under TF_USE_LEGACY_KERAS=1"
    # 80 examples / batch 8 = 10 steps per epoch, 2 epochs; steps_per_execution=2 gives 5 hook calls per epoch.
    assert run["steps"] == 20
    assert run["examples"] == 160
    assert run["observations"] == 10
    assert run["loss"] > 0 and run["healthy"]
    # BackupAndRestore every 5 hook calls = 10 steps: saves after steps 10 and 20, timed by time_backups.
    assert (run["ckpt_step"], run["ckpt_count"]) == (20, 2)
    # The chief (worker 0 of a chief-less cluster) writes the scalars; worker 1 writes nothing.
    assert {"train/loss", "train/step_time_seconds", "train/examples_per_second"} <= set(run["tags"]["0"])
    assert run["tags"]["1"] == []
    # tfdist's epoch-only tf.keras TensorBoard still writes the epoch summaries, and no batch ones.
    assert "epoch_loss" in run["keras_tags"] and not any(t.startswith("batch_") for t in run["keras_tags"])
    assert not (tmp_path / "tb" / "w1").exists()
    # The heartbeat the live view reads: the final step, the known total (2 epochs x 10 steps) and a loss.
    beat = run["heartbeat"]
    assert (beat["step"], beat["total_steps"], beat["state"], beat["examples"]) == (20, 20, "finished", 160)
    assert beat["loss"] == pytest.approx(run["final_loss"], rel=0.5)
