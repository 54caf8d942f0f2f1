"""The main job: a small classifier for scikit-learn's bundled handwritten digits (1,797 8x8 images, no download),
trained under whatever strategy ``tfdist.runtime`` picks.

    tfdist launch -n 2 -m tfdist.examples.digits --epochs 5 --model-dir /tmp/digits
    tfdist example digits -o digits.py      # a copy to edit and launch as a script

The data comes with scikit-learn: pip install 'tfdist[examples]'.

The chief prints ``final_accuracy=<float>`` (on a held-out split) as its last line, and ``resumed_from_step=<int>``
when it resumed from a checkpoint. Every training worker prints ``weights_checksum=<float>`` so that a test can check
that the replicas agree.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from tfdist import runtime


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=None,
                        help="per replica (default: --global-batch split over the replicas)")
    parser.add_argument("--global-batch", type=int, default=64,
                        help="examples per step over the whole job, kept when an elastic job changes size")
    parser.add_argument("--model-dir", default=os.environ.get("TFDIST_MODEL_DIR", "/tmp/tfdist-digits"))
    parser.add_argument("--save-every", type=int, default=None, help="fault-tolerance checkpoint interval, steps")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-tensorboard", action="store_true")
    parser.add_argument("--no-checkpoints", action="store_true", help="no fault-tolerance backups (benchmarks)")
    parser.add_argument("--step-delay", type=float, default=0.0,
                        help="sleep this long after each step (slows training so faults can be injected mid-run)")
    parser.add_argument("--fail-once-at-step", type=int, default=None,
                        help="fault injection: worker 1 raises at this step, once per model dir")
    return parser.parse_args(argv)


def load_digits(seed: int):
    """Features scaled to [0, 1] and a fixed 80/20 train/test split."""
    import numpy as np

    from tfdist.extras import MissingExtra, require

    try:
        datasets = require("examples", "the digits data set", module="sklearn.datasets")
    except MissingExtra as missing:
        print(f"digits: error: {missing.one_line()}", file=sys.stderr)
        raise SystemExit(2) from None

    data = datasets.load_digits()
    x = (data.data / 16.0).astype("float32")
    y = data.target.astype("int64")
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    return (x[order[:cut]], y[order[:cut]]), (x[order[cut:]], y[order[cut:]])


def build_model(tf):
    model = tf.keras.Sequential([
        tf.keras.layers.Input(shape=(64,)),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.005),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    strategy = runtime.strategy()  # parameter servers and PS-workers block in here, serving
    import numpy as np
    import tensorflow as tf

    tf.keras.utils.set_random_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_digits(args.seed)
    task_type, task_index = runtime.task()

    if task_type == "evaluator":
        return run_evaluator(tf, args, x_test, y_test)

    per_replica = args.batch_size or runtime.per_replica_batch(args.global_batch, strategy)
    batch = runtime.global_batch_size(per_replica, strategy)
    def make_dataset(_context=None):
        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        return runtime.shard(ds.shuffle(len(x_train), seed=args.seed).repeat().batch(batch))

    with strategy.scope():
        model = build_model(tf)

    callbacks = runtime.callbacks(args.model_dir, save_every_steps=args.save_every, global_batch_size=batch,
                                  tensorboard=not args.no_tensorboard, fault_tolerance=not args.no_checkpoints)
    callbacks += fault_injection_callbacks(tf, args, task_type, task_index)

    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        dataset = tf.keras.utils.experimental.DatasetCreator(make_dataset)
    else:
        dataset = make_dataset()
    started = time.perf_counter()
    model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks, verbose=0)
    elapsed = time.perf_counter() - started

    steps = int(model.optimizer.iterations.numpy())
    checksum = float(sum(np.abs(w).sum() for w in model.get_weights()))
    print(f"weights_checksum={checksum:.6f}", flush=True)
    print(f"train_steps={steps} train_seconds={elapsed:.3f} world_size={runtime.world_size()}", flush=True)
    runtime.save_model(model, os.path.join(args.model_dir, "final.keras"))
    runtime.cleanup()
    if runtime.is_chief():
        if runtime.resumed_from_step():
            print(f"resumed_from_step={runtime.resumed_from_step()} world_size={runtime.world_size()}", flush=True)
        logits = model(x_test, training=False).numpy()
        accuracy = float((logits.argmax(axis=1) == y_test).mean())
        print(f"final_accuracy={accuracy:.4f}", flush=True)
    return 0


def run_evaluator(tf, args, x_test, y_test) -> int:
    """Side-car evaluation: wait for the chief's final model and score it (the launcher stops us if it never comes)."""
    path = os.path.join(args.model_dir, "final.keras")
    while not os.path.exists(path):
        time.sleep(0.5)
    time.sleep(0.5)  # let the chief finish writing
    model = tf.keras.models.load_model(path)
    accuracy = float((model(x_test, training=False).numpy().argmax(axis=1) == y_test).mean())
    print(f"evaluator_accuracy={accuracy:.4f}", flush=True)
    return 0


def fault_injection_callbacks(tf, args, task_type: str, task_index: int) -> list:
    result = []
    if args.step_delay > 0 and runtime.cluster_info().num_ps:
        class SlowEpochs(tf.keras.callbacks.Callback):  # ParameterServerStrategy allows no batch-level callbacks
            def on_epoch_end(self, epoch, logs=None):
                time.sleep(args.step_delay * args.steps_per_epoch)
        result.append(SlowEpochs())
    elif args.step_delay > 0:
        class Slow(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                time.sleep(args.step_delay)
        result.append(Slow())
    marker = os.path.join(args.model_dir, ".failed-once")
    if args.fail_once_at_step is not None and not os.path.exists(marker) and (task_type, task_index) == ("worker", 1):
        class FailOnce(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if int(self.model.optimizer.iterations.numpy()) >= args.fail_once_at_step:
                    os.makedirs(args.model_dir, exist_ok=True)
                    open(marker, "w").close()  # the next attempt trains through
                    raise RuntimeError(f"injected failure at step {args.fail_once_at_step}")
        result.append(FailOnce())
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
