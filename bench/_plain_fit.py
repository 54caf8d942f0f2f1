"""A plain multi-worker Keras script for bench/launch.py's bootstrap comparison: tiny steps, so that any per-step
cost of the bootstrap's callback would show. Imports nothing of tfdist; prints the time ``fit`` took."""
import sys
import time

import numpy as np
import tensorflow as tf

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
strategy = tf.distribute.MultiWorkerMirroredStrategy()
features = np.random.default_rng(0).random((1024, 16), dtype=np.float32)
dataset = tf.data.Dataset.from_tensor_slices((features, features.sum(axis=1))).repeat().batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset, epochs=1, steps_per_epoch=10, verbose=0)  # tracing and the first collectives, not timed
started = time.perf_counter()
model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
print(f"fit_seconds={time.perf_counter() - started:.4f}", flush=True)
