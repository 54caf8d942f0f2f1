"""The training state beyond the model's variables: random generators and the input position.

What TensorFlow 2.21 lets a snapshot restore (with tf-keras 2.21, which ``runtime.callbacks`` trains with):

- A ``tf.random.Generator`` keeps its state in a variable. Generators the model or the checkpoint tracks are model
  variables already. Found here besides: the generators tf-keras layers keep for themselves
  (``layer._random_generator``: the random augmentation layers such as ``RandomFlip``, and ``Dropout`` & co. after
  ``tf.keras.backend.experimental.enable_tf_random_generator()``), which no checkpoint and no ``model.variables``
  holds (``rng:<path>``); and the global generator (``tf.random.get_global_generator()``) once it exists
  (``task:rng:global``).
- Op-seeded random ops (``tf.random.uniform(seed=...)``, ``tf.nn.dropout``, tf-keras' default ``Dropout``, which is
  "legacy_stateful") keep their position inside the op's kernel, not in a variable: nothing to save, and after a
  restore they start their sequence afresh.
- A ``tf.data`` iterator (``iter(dataset)``) the loop hands over (``task:input:<i>``): its serialized state (positions,
  buffered elements), with the external-state policy a ``tf.train.Checkpoint`` uses (FAIL unless the dataset's
  options say otherwise). Not possible for ``from_generator`` / ``py_function`` pipelines, nor for a distributed
  iterator (``strategy.experimental_distribute_dataset``), which TensorFlow cannot serialize: one line, and the rest
  is snapshotted.

``task:`` state is each task's own (every task of a multi-worker job has its own iterator and global generator), but
one task per machine writes the machine's file: it is saved and restored only in a job of one task.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

import numpy as np

from tfdist.runtime.snapshots.session import say

RNG, GLOBAL_RNG, INPUT = "rng:", "task:rng:global", "task:input:"


def global_generator() -> Any:
    """The global generator if the program created it (never creates it: that draws a non-deterministic seed)."""
    from tensorflow.python.ops import stateful_random_ops

    return stateful_random_ops.global_generator


def task_count(strategy: Any) -> int:
    """How many processes train together (1 unless a cluster resolver names several)."""
    try:
        resolver = getattr(strategy, "cluster_resolver", None)
        spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    except Exception:  # noqa: BLE001 - strategies without a cluster are one task
        return 1
    return max(1, sum(len(spec.get(job) or ()) for job in ("chief", "worker")))


def keras_generators(root: Any) -> list[tuple[str, Any]]:
    """``(rng:<path>, state variable)`` of the generators tf-keras layers under ``root`` keep to themselves; the path
    is the layer's place in the object graph (``layer_with_weights-0``, ``model/flip``), the same in every run of
    the script, unlike layer names (``random_flip_1``: numbered in creation order within the process)."""
    import tensorflow as tf

    view, found = tf.train.TrackableView(root), []
    queue, seen = [("", root)], {id(root)}
    while queue:  # breadth first, as TrackableView.descendants, but keeping the path
        path, obj = queue.pop(0)
        generator = getattr(getattr(obj, "_random_generator", None), "_generator", None)
        if isinstance(generator, tf.random.Generator):
            found.append((f"{RNG}{path}", generator.state))
        for name, child in view.children(obj).items():
            if id(child) not in seen:
                seen.add(id(child))
                queue.append((f"{path}/{name}" if path else name, child))
    return found


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "message", None) or exc).strip().splitlines()[0]
    return re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:[^\]]*\].*\Z", "", text).strip() or type(exc).__name__


def save_iterator(iterator: Any) -> bytes:
    """The iterator's state (one serialized variant tensor), with a checkpoint's external-state policy.

    One ``serialize_tensor`` over the whole state: about 5 ms for a 256-element shuffle buffer of 64 floats each,
    where ``OwnedIterator._save`` (a serialization per slice, base64, join) takes 14-30 ms (medians, loaded 2-core
    machine). Above 2 GB the serialization fails, and the iterator is dropped from the snapshots with one line."""
    import tensorflow as tf
    from tensorflow.python.ops import gen_dataset_ops

    dataset = getattr(iterator, "_dataset", None)
    policy = dataset.options().experimental_external_state_policy if dataset is not None else None
    variant = gen_dataset_ops.serialize_iterator(iterator._iterator_resource,
                                                 (policy or tf.data.experimental.ExternalStatePolicy.FAIL).value)
    return bytes(tf.io.serialize_tensor(variant).numpy())


def restore_iterator(iterator: Any, state: bytes) -> None:
    """Put the iterator where ``state`` says; if it cannot (another pipeline), back at its dataset's start and raise.

    A failed deserialization leaves the iterator cancelled, so it is remade from its dataset in place (the same
    resource, which the loop's functions may have captured)."""
    import tensorflow as tf
    from tensorflow.python.ops import gen_dataset_ops

    try:
        gen_dataset_ops.deserialize_iterator(iterator._iterator_resource, tf.io.parse_tensor(state, tf.variant))
    except Exception:
        gen_dataset_ops.make_iterator(iterator._dataset._variant_tensor, iterator._iterator_resource)
        raise


class ExtraState:
    """The state of one task beyond its model variables (see the module docstring)."""

    def __init__(self, model_variables: Sequence[Any], *, root: Any = None, iterators: Iterable[Any] = (),
                 strategy: Any = None) -> None:
        self._model_ids = {id(v) for v in model_variables}
        try:
            found = keras_generators(root) if root is not None else []
        except Exception as exc:  # noqa: BLE001 - an object graph TrackableView cannot walk: snapshot the rest
            say(f"tfdist: snapshots: the layers' random generators are not saved ({_reason(exc)})")
            found = []
        self.replicated = [(n, v) for n, v in found if id(v) not in self._model_ids]
        self.tasks = task_count(strategy)
        self.iterators: list[Any] = []
        given = [it for it in iterators if it is not None]
        if given and self.tasks > 1:
            say(f"tfdist: snapshots: the input position is not saved in a job of {self.tasks} tasks (each task has "
                "its own and one task per machine writes): a restored run restarts its iterator")
        elif given:
            self.iterators = [it for it in given if self._saveable(it)]
        self.global_rng = global_generator()

    @staticmethod
    def _saveable(iterator: Any) -> bool:
        why = None
        if not hasattr(iterator, "_iterator_resource"):
            why = f"a {type(iterator).__name__} cannot be serialized by TensorFlow (pass iter(dataset))"
        else:
            try:
                save_iterator(iterator)
            except Exception as exc:  # noqa: BLE001 - from_generator, py_function: TF says which
                why = _reason(exc)
        if why is not None:
            say(f"tfdist: snapshots: the input position is not saved ({why}): a restored run restarts that "
                "iterator; the rest is snapshotted")
        return why is None

    def _own_global(self) -> bool:
        return self.tasks == 1 and self.global_rng is not None and id(self.global_rng.state) not in self._model_ids

    def variables(self) -> list[tuple[str, Any]]:
        """``(name, variable)`` of the extra state kept in variables, copied with the model's."""
        own = [(GLOBAL_RNG, self.global_rng.state)] if self._own_global() else []
        return self.replicated + own

    def refresh(self) -> None:
        self.global_rng = global_generator()

    def describe(self) -> str:
        """For the cost line: what beyond the model's variables each snapshot holds."""
        rng = len(self.replicated) + int(self._own_global())
        parts = [f"{rng} random generator(s)"] if rng else []
        parts += [f"{len(self.iterators)} input position(s)"] if self.iterators else []
        return "".join(f", {p}" for p in parts)

    def changed(self) -> bool:
        """The program created (or replaced) the global generator since :meth:`variables` was listed."""
        return self.tasks == 1 and global_generator() is not self.global_rng

    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"tasks": self.tasks}
        if self._own_global():
            meta["global_rng_alg"] = int(self.global_rng.algorithm)
        return meta

    def input_arrays(self) -> list[tuple[str, np.ndarray]]:
        """The iterators' states now (on the training thread: they move with the next step)."""
        arrays = []
        for i, iterator in enumerate(self.iterators):
            if iterator is None:
                continue
            try:
                arrays.append((f"{INPUT}{i}", np.frombuffer(save_iterator(iterator), dtype=np.uint8)))
            except Exception as exc:  # noqa: BLE001 - e.g. grew past 2 GB: the step goes on, without it from now
                say(f"tfdist: snapshots: the input position of iterator {i} is no longer saved ({_reason(exc)})")
                self.iterators[i] = None
        return arrays

    def restore(self, step: int, version: int, extras: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Assign what the snapshot holds; one line for each kind it cannot restore."""
        if version < 2:
            say(f"tfdist: resume: the snapshot of step {step} is from an older tfdist (variables only): random "
                "generators and the input position start afresh")
            return
        missing = [name for name, variable in self.replicated if not _assign(variable, extras.get(name))]
        if missing:
            say(f"tfdist: resume: random generator state not in the snapshot of step {step}: {', '.join(missing)}")
        if self.tasks != 1 or int(meta.get("tasks", 1)) != 1:  # one-task jobs only (the module docstring says why)
            if any(name.startswith("task:") for name in extras):
                say(f"tfdist: resume: the snapshot of step {step} holds one task's global random generator and input "
                    f"position, not restored in a job of {self.tasks} tasks: they start afresh")
            return
        self._restore_global(step, extras.get(GLOBAL_RNG), meta.get("global_rng_alg"))
        for i, iterator in enumerate(self.iterators):
            if iterator is None:
                continue
            state = extras.get(f"{INPUT}{i}")
            try:
                if state is None:
                    raise LookupError("not in the snapshot")
                restore_iterator(iterator, state.tobytes())
            except Exception as exc:  # noqa: BLE001 - another pipeline than the one saved: start it afresh
                say(f"tfdist: resume: the input position of iterator {i} is not restored ({_reason(exc)}): it "
                    "starts afresh")

    def _restore_global(self, step: int, state: np.ndarray | None, alg: Any) -> None:
        import tensorflow as tf

        if state is None:
            if self.global_rng is not None:
                say(f"tfdist: resume: the global random generator is not in the snapshot of step {step} (it was "
                    "created later): it continues from its own seed")
            return
        if self.global_rng is not None and id(self.global_rng.state) in self._model_ids:
            return  # the checkpoint tracks it: restored with the model
        if self.global_rng is not None and _assign(self.global_rng.state, state):
            return
        generator = tf.random.Generator.from_state(state, alg=tf.random.Algorithm.PHILOX if alg is None else int(alg))
        tf.random.set_global_generator(generator)  # it existed at that step in the interrupted run
        self.global_rng = generator


def _assign(variable: Any, value: np.ndarray | None) -> bool:
    if value is None or tuple(value.shape) != tuple(variable.shape):
        return False
    variable.assign(value)
    return True
