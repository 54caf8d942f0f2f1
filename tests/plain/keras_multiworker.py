"""Multi-worker Keras training with BackupAndRestore, in the shape of TensorFlow's "Multi-worker training with
Keras" tutorial: the script reads TF_CONFIG through MultiWorkerMirroredStrategy and imports nothing of tfdist. The
data is made here (no download). Flags let the tests make it fail in the ways issue 24 lists.
"""
import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--backup-dir", required=True)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps", type=int, default=5, help="steps per epoch")
parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds each step also takes (slow training)")
parser.add_argument("--divide-by-zero", action="store_true", help="worker 1 divides by zero before training")
parser.add_argument("--fail-after-fit", action="store_true",
                    help="worker 1 raises once fit has returned, while worker 0 waits for a file worker 1 never writes")
parser.add_argument("--save-dir", help="where the chief saves the trained model")
parser.add_argument("--verbose", type=int, default=2, help="Keras' verbose (1: progress bars)")
parser.add_argument("--hang-once", metavar="MARKER", help="worker 1 hangs at step 10 unless MARKER exists (it makes it)")
parser.add_argument("--hang-epoch", type=int, default=0, help="the epoch whose step 10 --hang-once hangs at")
args = parser.parse_args()


def mnist_like_dataset(batch_size):
    # Random 28x28 "images" with labels: the tutorial's MNIST, without the download.
    rng = np.random.default_rng(0)
    images = rng.random((512, 28, 28), dtype=np.float32)
    labels = rng.integers(0, 10, size=512)
    return tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(512).repeat().batch(batch_size)


def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(4, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.001), metrics=["accuracy"])
    return model


class SlowSteps(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(args.step_sleep)


class HangOnce(tf.keras.callbacks.Callback):
    epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == args.hang_epoch and batch == 10 and not os.path.exists(args.hang_once):
            open(args.hang_once, "w").close()
            while True:  # a stuck input pipeline, a deadlock: no error, no progress
                time.sleep(1)


tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
task = tf_config["task"]

strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = 16 * num_workers
multi_worker_dataset = mnist_like_dataset(global_batch_size)

with strategy.scope():
    multi_worker_model = build_and_compile_cnn_model()

if args.divide_by_zero and task["index"] == 1:
    learning_rate_scale = 1 / 0

callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir=args.backup_dir)]
if args.step_sleep:
    callbacks.append(SlowSteps())
if args.hang_once and task["index"] == 1:
    callbacks.append(HangOnce())
multi_worker_model.fit(multi_worker_dataset, epochs=args.epochs, steps_per_epoch=args.steps, callbacks=callbacks,
                       verbose=args.verbose)

if args.fail_after_fit:
    # The script's own race after training: worker 1 expects a file the chief has not written yet, the chief waits
    # for worker 1's answer.
    answer = os.path.join(args.backup_dir, "worker-1-answer")
    if task["index"] == 1:
        raise RuntimeError("the model file was not there yet")
    deadline = time.monotonic() + 120
    while not os.path.exists(answer) and time.monotonic() < deadline:
        time.sleep(0.5)


def write_filepath(filepath, task_type, task_id):
    # Only the chief keeps what it writes; the other workers write to a temporary folder (all must take part).
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0):
        return filepath
    return os.path.join(dirpath, f"workertemp_{task_id}", base)


if args.save_dir:
    path = write_filepath(os.path.join(args.save_dir, "model.keras"), task["type"], task["index"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    multi_worker_model.save(path)
    print(f"saved {path}")
