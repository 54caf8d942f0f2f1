"""The mechanism both front ends share (Keras ``fit`` and custom loops): resume, then copy every N steps.

- :meth:`SnapshotSession.resume`: every replica lists the snapshot steps it can load whole, the replicas exchange
  the lists, and :func:`~tfdist.runtime.snapshots.policy.choose_resume` picks the newest step all of them have if
  it is newer than the durable checkpoint; the variables are then assigned from that snapshot.
- Then one process per machine (the holder of the folder's writer lock) copies the state to host memory every N
  steps on the training thread and hands it to the background writer.

What this costs the training thread -- the resume's listing and agreement, claiming the folder, the copies -- is
counted against the step time (:class:`~tfdist.runtime.snapshots.policy.Cadence`), and :meth:`SnapshotSession.close`
prints it as one line. The copy function is compiled on a background thread (``TrainingVariables.warm_up``): an
automatic cadence starts it when its first copy comes due and skips copies until it is ready; a fixed one starts it
at once and waits for it at its first copy.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Mapping

from tfdist.runtime.snapshots.format import ArraySpec, Snapshot, SnapshotRefused
from tfdist.runtime.snapshots.policy import SNAPSHOT, Cadence, Resume, choose_resume, fits, mib, refusal
from tfdist.runtime.snapshots.settings import SnapshotSettings
from tfdist.runtime.snapshots.store import KEEP, SnapshotStore
from tfdist.runtime.snapshots.variables import TrainingVariables, gather_steps
from tfdist.runtime.snapshots.writer import BackgroundWriter


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class SnapshotSession:
    """``extras``: the task's state beyond the model's variables
    (:class:`~tfdist.runtime.snapshots.extras.ExtraState`: random generators, input position), or None."""

    def __init__(self, variables: TrainingVariables, strategy: Any, settings: SnapshotSettings,
                 extras: Any = None) -> None:
        self.extras = extras
        self.variables = variables
        self._relist()
        self.strategy = strategy
        self.settings = settings
        self.store = SnapshotStore(settings.directory or "")
        self.cadence = Cadence(settings.every, settings.budget)
        self.writer: BackgroundWriter | None = None
        self.step = 0
        self._since = 0
        self._last_end: float | None = None

    def resume(self, checkpoint_step: int) -> tuple[Resume, Snapshot | None]:
        """Restore the newest state every replica can load (a collective: every replica must call it)."""
        started = time.perf_counter()
        own = self.store.loadable(self.variables.fingerprint)
        choice = choose_resume(gather_steps(self.strategy, own), checkpoint_step)
        self.cadence.startup_took(time.perf_counter() - started)  # the restore itself is what snapshots are for
        snapshot = None
        if choice.source == SNAPSHOT:
            try:
                snapshot = self.store.load(choice.step, self.variables.fingerprint)
            except SnapshotRefused as exc:  # verified a moment ago; only a removed folder gets here
                raise RuntimeError(f"snapshot of step {choice.step} vanished during the restore: {exc}") from None
            self.variables.assign(snapshot.arrays)
        self.step = choice.step
        say(choice.describe())
        if snapshot is not None and self.extras is not None:
            self.extras.restore(choice.step, snapshot.version, dict(snapshot.extras), dict(snapshot.meta))
            self._relist()  # the restore may have created the global generator
        return choice, snapshot

    def _relist(self) -> None:
        """Copy the extra state kept in variables (as it is now) with the model's."""
        if self.extras is not None:
            self.extras.refresh()
            self.variables = TrainingVariables(self.variables.variables, self.extras.variables())

    def start_writing(self) -> bool:
        """Become this machine's writer (if no other live task is) after :meth:`resume`."""
        started, store = time.perf_counter(), self.store
        try:
            if not store.claim_writer():
                return False
            store.prune(keep=KEEP, above=self.step)  # newer than the resumed step: an abandoned run's
            size, free = self.variables.nbytes, store.free_bytes()
        except OSError as exc:  # the folder is gone (its launcher ended or cleaned up): train without snapshots
            say(f"tfdist: snapshots off: {store.directory}: {exc.strerror or exc}")
            store.release_writer()
            return False
        if not fits(size, free):
            say(refusal(size, free, str(store.directory)))
            store.release_writer()
            return False
        every = f"every {self.settings.every} step(s)" if self.settings.every else \
            f"every N steps, N chosen to keep the copy within {self.settings.budget:.0%} of step time"
        more = self.extras.describe() if self.extras is not None else ""
        say(f"tfdist: snapshots: {mib(size)} each ({len(self.variables.variables)} variables{more}), {every}; up to "
            f"{KEEP + 1} in {store.directory} ({mib(free)} free) and 2 host copies")
        if self.cadence.fixed is not None:  # it copies at its first due step: compile now, off this thread
            self.variables.warm_up(self.strategy)
        self.writer = BackgroundWriter(store, self.variables.specs)
        self.cadence.startup_took(time.perf_counter() - started)
        return True

    def step_done(self, step: int, meta: Mapping[str, Any] | None = None) -> None:
        """Training reached ``step`` (the optimizer's count after the update); copy if one is due."""
        now = time.perf_counter()
        steps = step - self.step
        self.step = step
        if self.writer is None or self.writer.failed is not None:
            return
        if self._last_end is not None and steps > 0:
            self.cadence.step_took((now - self._last_end) / steps)
        self._since += steps
        if self.cadence.fixed is None and not self.variables.warmed_up:
            # An automatic cadence compiles the copy function (XLA, on a background thread) only once its first
            # copy is due: a short job whose training never pays for the start-up never compiles it. That thread's
            # CPU time came out of training on a small machine (the digits job's fit: 1.9 s, +0.26 s with it).
            if self.cadence.due(self._since):
                self.variables.warm_up(self.strategy)
            self._last_end = now  # no copy until it is compiled
            return
        if self.cadence.due(self._since):
            try:
                arrays, specs, meta = self._copy(meta)
            except Exception as exc:  # noqa: BLE001 - the copy function could not be built: train without
                say(f"tfdist: snapshots off: the host copy failed: {type(exc).__name__}: {exc}")
                self.close()
                return
            copied = time.perf_counter()
            self.cadence.copy_took(copied - now)
            self.writer.submit(step, arrays, meta, specs, self.variables.model_count)
            self._since = 0
            now = copied
        self._last_end = now

    def _copy(self, meta: Mapping[str, Any] | None) -> tuple[list[Any], list[ArraySpec], dict[str, Any]]:
        """The host copy: the variables (model, then extras) and each saved iterator's state, with their layout."""
        if self.extras is None:
            return self.variables.copy(), self.variables.specs, dict(meta or {})
        if self.extras.changed():  # the global generator was created or replaced: copy the new one from now on
            self._relist()
        arrays, specs = self.variables.copy(), list(self.variables.specs)
        for name, state in self.extras.input_arrays():
            arrays.append(state)
            specs.append(ArraySpec(name, state.dtype.str, state.shape))
        return arrays, specs, {**(meta or {}), **self.extras.meta()}

    def pause(self) -> None:
        """Time until the next step is not step time (epoch end, validation)."""
        self._last_end = None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            say(self.cadence.breakdown())
        self.store.release_writer()
