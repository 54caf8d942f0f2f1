"""Distributed training with Keras on one machine, in the shape of TensorFlow's "Distributed training with Keras"
tutorial: MirroredStrategy over the local devices, Model.fit with checkpoint and learning-rate callbacks, then
evaluate. Imports nothing of tfdist; the data is made here.
"""
import argparse
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint-dir", required=True)
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

strategy = tf.distribute.MirroredStrategy()
print(f"Number of devices: {strategy.num_replicas_in_sync}")

BATCH_SIZE = 32 * strategy.num_replicas_in_sync
rng = np.random.default_rng(1)
images = rng.random((320, 28, 28, 1), dtype=np.float32)
labels = rng.integers(0, 10, size=320)
train_dataset = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(320).batch(BATCH_SIZE)
eval_dataset = tf.data.Dataset.from_tensor_slices((images[:64], labels[:64])).batch(BATCH_SIZE)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(4, 3, activation="relu", input_shape=(28, 28, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.Adam(), metrics=["accuracy"])


def decay(epoch):
    return 1e-3 if epoch < 2 else 1e-4


checkpoint_prefix = os.path.join(args.checkpoint_dir, "ckpt_{epoch}")
callbacks = [
    tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix, save_weights_only=True),
    tf.keras.callbacks.LearningRateScheduler(decay),
]
model.fit(train_dataset, epochs=args.epochs, callbacks=callbacks, verbose=2)

model.load_weights(tf.train.latest_checkpoint(args.checkpoint_dir))
eval_loss, eval_acc = model.evaluate(eval_dataset, verbose=0)
print(f"Eval loss: {eval_loss:.4f}, Eval accuracy: {eval_acc:.4f}")
