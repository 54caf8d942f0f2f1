"""A small training script for the snapshot tests: Keras ``fit`` through ``runtime.callbacks``, or a custom loop
through ``runtime.snapshots.for_checkpoint``. Prints ``restored step=S state=H`` once the restore is done and
``step=S state=H`` after every step (H: a hash of every model and optimizer variable), and can SIGKILL itself right
after the optimizer update of a step, before that step's snapshot is taken (``--kill-at``).

``--rng``: what a step draws must continue after a restore. Keras ``fit``: a ``Dropout`` on tf-keras' own generator
(``enable_tf_random_generator``) over one repeated batch, so the state after a step depends on the restored weights
and the dropout mask only; the killed step's state is printed (``killed step=S state=H``) before the kill. Custom
loop: each step prints ``draw step=S rng=R batch=B`` (R: the global generator's next numbers, created in the loop's
first step from a non-deterministic seed; B: the next batch of a shuffled ``tf.data`` iterator handed to the
snapshots) before its update."""
from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys

from tfdist import runtime


def state_hash(variables) -> str:
    digest = hashlib.sha256()
    for variable in variables:
        digest.update(variable.numpy().tobytes())
    return digest.hexdigest()[:16]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--loop", action="store_true")
    parser.add_argument("--unbuilt-optimizer", action="store_true")
    parser.add_argument("--rng", action="store_true", help="random layers / draws and a saved input position")
    parser.add_argument("--plain", action="store_true",
                        help="tf.keras.callbacks.BackupAndRestore and the bootstrap's hook, not runtime.callbacks")
    args = parser.parse_args(argv)
    strategy = None if args.plain else runtime.strategy()
    import numpy as np
    import tensorflow as tf

    # A plain script: the default strategy (tf-keras' BackupAndRestore refuses OneDeviceStrategy).
    strategy = strategy or tf.distribute.get_strategy()

    tf.keras.utils.set_random_seed(3)
    x = np.random.default_rng(3).random((512, 16)).astype("float32")
    y = (x.sum(axis=1) > 8).astype("int64")
    batch = 16 * strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch)
    layers = [tf.keras.layers.Input(shape=(16,)), tf.keras.layers.Dense(32, activation="relu")]
    if args.rng:
        tf.keras.backend.experimental.enable_tf_random_generator()  # Dropout draws from a tf.random.Generator
        layers.append(tf.keras.layers.Dropout(0.5, seed=4))
        if args.loop:
            dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=5).repeat().batch(batch)
        else:  # fit restarts its iterator: one batch, repeated, so the input position does not matter
            dataset = tf.data.Dataset.from_tensors((x[:batch], y[:batch])).repeat()
    with strategy.scope():
        model = tf.keras.Sequential([*layers, tf.keras.layers.Dense(2)])
        optimizer = tf.keras.optimizers.Adam(0.01)
        model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        if args.loop and not args.unbuilt_optimizer:
            optimizer.build(model.trainable_variables)  # slots exist before the snapshots list the variables
    state = lambda: list(model.variables) + list(optimizer.variables)  # noqa: E731

    def maybe_kill(step: int) -> None:
        if step == args.kill_at:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    if args.loop:
        return custom_loop(args, strategy, model, optimizer, dataset, state, maybe_kill)

    class Killer(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            step = int(optimizer.iterations.numpy())
            if args.rng and step == args.kill_at:
                print(f"killed step={step} state={state_hash(state())}", flush=True)
            maybe_kill(step)

    class Recorder(tf.keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            print(f"restored step={int(optimizer.iterations.numpy())} state={state_hash(state())}", flush=True)

        def on_train_batch_end(self, batch, logs=None):
            print(f"step={int(optimizer.iterations.numpy())} state={state_hash(state())}", flush=True)

    if args.plain:  # what a plain script has, plus what the task bootstrap appends from outside
        callbacks = [tf.keras.callbacks.BackupAndRestore(os.path.join(args.model_dir, "backup")), Killer()]
        callbacks += runtime.snapshots.callbacks_for_fit(model, callbacks)
    else:
        callbacks = runtime.callbacks(args.model_dir, tensorboard=False, save_every_steps=1000)
        names = [type(c).__name__ for c in callbacks]
        at = names.index("SnapshotCallback") if "SnapshotCallback" in names else 1
        callbacks.insert(at, Killer())  # after the optimizer update, before the snapshot
    callbacks.append(Recorder())
    model.fit(dataset, epochs=2, steps_per_epoch=args.steps // 2, callbacks=callbacks, verbose=0)
    resumed = "" if args.plain else f" resumed_from_step={runtime.resumed_from_step()}"
    print(f"train_steps={int(optimizer.iterations.numpy())}{resumed}", flush=True)
    return 0


def custom_loop(args, strategy, model, optimizer, dataset, state, maybe_kill) -> int:
    import tensorflow as tf

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    plain_iterator = iter(dataset) if args.rng else None
    snapshots = runtime.snapshots.for_checkpoint(checkpoint, strategy=strategy, iterator=plain_iterator)
    resumed = snapshots.resume(0)  # no durable checkpoint in this script
    step = int(optimizer.iterations.numpy())
    print(f"restored step={step} state={state_hash(state())} source={resumed.source}", flush=True)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    @tf.function
    def train_step(iterator):
        def replica_step(inputs):
            features, labels = inputs
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(labels, model(features, training=True)))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        strategy.run(replica_step, args=(next(iterator),))

    @tf.function
    def train_on(batch):
        strategy.run(replica_step_on, args=(batch,))

    def replica_step_on(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(labels, model(features, training=True)))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    while step < args.steps:
        if args.rng:
            batch = next(plain_iterator)
            draws = tf.random.get_global_generator().uniform([3]).numpy()  # created here, at the first step
            print(f"draw step={step + 1} rng={draws.tolist()} batch={state_hash(batch[:1])}", flush=True)
            train_on(batch)
        else:
            train_step(iterator)
        step += 1
        maybe_kill(step)
        snapshots.step_done(step)
        print(f"step={step} state={state_hash(state())}", flush=True)
    snapshots.close()
    print(f"train_steps={int(optimizer.iterations.numpy())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
