"""TensorFlow's "Multi-worker training with Keras" tutorial end to end: train, save (the chief's copy kept, the
others' to temporary folders), reload the model (outside the strategy's scope, as the tutorial does) and train it again, with other epochs and
steps. Reads TF_CONFIG through MultiWorkerMirroredStrategy and imports nothing of tfdist; the data is made here."""
import argparse
import json
import os
import shutil
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--model-dir", required=True)
parser.add_argument("--first", default="3x7", help="EPOCHSxSTEPS of the first fit")
parser.add_argument("--second", default="2x2", help="EPOCHSxSTEPS of the second fit")
parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds each step also takes")
args = parser.parse_args()


class SlowSteps(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(args.step_sleep)


def dataset(batch_size):
    rng = np.random.default_rng(0)
    images = rng.random((256, 28, 28), dtype=np.float32)
    labels = rng.integers(0, 10, size=256)
    return tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(256).repeat().batch(batch_size)


def build_and_compile_model():
    model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(28, 28)), tf.keras.layers.Flatten(),
                                 tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(10)])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.001), metrics=["accuracy"])
    return model


def write_filepath(filepath, task_type, task_id):
    if task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0):
        return filepath
    return os.path.join(os.path.dirname(filepath), f"workertemp_{task_id}", os.path.basename(filepath))


task = json.loads(os.environ["TF_CONFIG"])["task"]
num_workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
data = dataset(8 * num_workers)
callbacks = [SlowSteps()] if args.step_sleep else []
with strategy.scope():
    model = build_and_compile_model()
epochs, steps = (int(n) for n in args.first.split("x"))
model.fit(data, epochs=epochs, steps_per_epoch=steps, callbacks=callbacks, verbose=2)

chief_path = os.path.join(args.model_dir, "model.keras")
path = write_filepath(chief_path, task["type"], task["index"])
os.makedirs(os.path.dirname(path), exist_ok=True)
if path == chief_path:  # under a temporary name first: the other workers load it once it is whole
    partial = os.path.join(args.model_dir, "partial.keras")
    model.save(partial)
    os.replace(partial, chief_path)
else:
    model.save(path)  # saving is collective: every worker saves, only the chief's copy is kept
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    deadline = time.monotonic() + 300
    while not os.path.exists(chief_path) and time.monotonic() < deadline:
        time.sleep(0.1)

# As the tutorial does: each worker loads the chief's model outside the strategy's scope and trains it on its own.
restored = tf.keras.models.load_model(chief_path)
epochs, steps = (int(n) for n in args.second.split("x"))
restored.fit(dataset(8), epochs=epochs, steps_per_epoch=steps, callbacks=callbacks, verbose=2)
print("trained twice")
