"""The background writer: the training thread hands over host copies, one thread writes them into shared memory.

The hand-over never blocks on the write: when a copy arrives while the previous one is still being written, the
waiting copy (if any) is replaced by the newer one, so the writer always writes the newest state it has and memory
holds at most two host copies (the one being written and the one waiting).
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Mapping, Sequence

import numpy as np

from tfdist.runtime.snapshots.format import ArraySpec
from tfdist.runtime.snapshots.store import SnapshotStore

# step, arrays, meta, layout, how many of the arrays are the model's
_Job = tuple[int, Sequence[np.ndarray], Mapping[str, Any], Sequence[ArraySpec], "int | None"]


class BackgroundWriter:
    def __init__(self, store: SnapshotStore, specs: Sequence[ArraySpec]) -> None:
        self.store = store
        self.specs = list(specs)
        self.written_step: int | None = None
        self.failed: BaseException | None = None
        self._pending: _Job | None = None
        self._busy = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="tfdist-snapshot-writer", daemon=True)
        self._thread.start()

    def submit(self, step: int, arrays: Sequence[np.ndarray], meta: Mapping[str, Any],
               specs: Sequence[ArraySpec] | None = None, model_count: int | None = None) -> None:
        """``specs``/``model_count``: this copy's layout when it differs from the writer's (extra state)."""
        with self._cond:
            self._pending = (step, arrays, meta, self.specs if specs is None else specs, model_count)
            self._cond.notify()

    def flush(self, timeout: float = 30.0) -> None:
        """Wait (bounded) until everything handed over is written."""
        with self._cond:
            self._cond.wait_for(lambda: (self._pending is None and not self._busy) or self.failed is not None,
                                timeout=timeout)

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                step, arrays, meta, specs, model_count = self._pending
                self._pending, self._busy = None, True
            try:
                self.store.write(step, arrays, specs, meta, model_count)
                self.written_step = step
            except Exception as exc:  # shared memory full or removed: training goes on without snapshots
                self.failed = exc
                print(f"tfdist: snapshots off: writing step {step} failed: {exc}", file=sys.stderr, flush=True)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
            if self.failed is not None:
                return
