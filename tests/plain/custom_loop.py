"""A custom training loop under MultiWorkerMirroredStrategy with a CheckpointManager, in the shape of TensorFlow's
"Custom training loop with Keras and MultiWorkerMirroredStrategy" tutorial. Imports nothing of tfdist; the data is
made here. A restarted job resumes from the last epoch's checkpoint.
"""
import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint-dir", required=True)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps", type=int, default=5, help="steps per epoch")
parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds each step also takes (slow training)")
args = parser.parse_args()

tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
per_worker_batch_size = 16
global_batch_size = per_worker_batch_size * num_workers
num_epochs = args.epochs
num_steps_per_epoch = args.steps


def mnist_like_dataset(batch_size):
    rng = np.random.default_rng(0)
    images = rng.random((512, 28, 28), dtype=np.float32)
    labels = rng.integers(0, 10, size=512)
    return tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(512).repeat().batch(batch_size)


def dataset_fn(global_batch_size, input_context):
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    dataset = mnist_like_dataset(batch_size)
    return dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)


def build_cnn_model():
    return tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(4, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(10),
    ])


strategy = tf.distribute.MultiWorkerMirroredStrategy()

with strategy.scope():
    multi_worker_model = build_cnn_model()
    multi_worker_dataset = strategy.distribute_datasets_from_function(
        lambda input_context: dataset_fn(global_batch_size, input_context))
    optimizer = tf.keras.optimizers.RMSprop(learning_rate=0.001)
    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            predictions = multi_worker_model(x, training=True)
            per_example_loss = tf.keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction=tf.keras.losses.Reduction.NONE)(y, predictions)
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
        grads = tape.gradient(loss, multi_worker_model.trainable_variables)
        optimizer.apply_gradients(zip(grads, multi_worker_model.trainable_variables))
        train_accuracy.update_state(y, predictions)
        return loss

    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


def _is_chief(task_type, task_id, cluster_spec):
    return (task_type is None or task_type == "chief"
            or (task_type == "worker" and task_id == 0 and "chief" not in cluster_spec.as_dict()))


def _get_temp_dir(dirpath, task_id):
    return os.path.join(dirpath, "workertemp_" + str(task_id))


def write_filepath(filepath, task_type, task_id, cluster_spec):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id, cluster_spec):
        dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)


epoch = tf.Variable(initial_value=tf.constant(0, dtype=tf.dtypes.int64), name="epoch")
step_in_epoch = tf.Variable(initial_value=tf.constant(0, dtype=tf.dtypes.int64), name="step_in_epoch")
task_type, task_id = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
cluster_spec = strategy.cluster_resolver.cluster_spec()

checkpoint = tf.train.Checkpoint(model=multi_worker_model, epoch=epoch, step_in_epoch=step_in_epoch)
write_checkpoint_dir = write_filepath(os.path.join(args.checkpoint_dir, "ckpt"), task_type, task_id, cluster_spec)
checkpoint_manager = tf.train.CheckpointManager(checkpoint, directory=write_checkpoint_dir, max_to_keep=1)

latest_checkpoint = tf.train.latest_checkpoint(os.path.join(args.checkpoint_dir, "ckpt"))
if latest_checkpoint:
    checkpoint.restore(latest_checkpoint)
    print(f"restored {latest_checkpoint} at epoch {epoch.numpy()}")

while epoch.numpy() < num_epochs:
    iterator = iter(multi_worker_dataset)
    total_loss = 0.0
    num_batches = 0
    while step_in_epoch.numpy() < num_steps_per_epoch:
        total_loss += train_step(iterator)
        num_batches += 1
        step_in_epoch.assign_add(1)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    train_loss = total_loss / num_batches
    print(f"Epoch: {epoch.numpy()}, accuracy: {train_accuracy.result():.3f}, train_loss: {float(train_loss):.3f}")
    train_accuracy.reset_states()
    checkpoint_manager.save()
    if not _is_chief(task_type, task_id, cluster_spec):
        tf.io.gfile.rmtree(write_checkpoint_dir)
    epoch.assign_add(1)
    step_in_epoch.assign(0)
