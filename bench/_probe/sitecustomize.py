"""Benchmark probe (bench/recovery.py puts this folder first on PYTHONPATH): records when a task reaches each phase of
its start, so the benchmark can say where a restart's time goes. Writes one JSON line per mark to
``$TFDIST_BENCH_PROBE_DIR/<task>-<attempt>.jsonl``; inert without that variable. Only wraps functions, changes
nothing they do."""
import json
import os
import time

_DIR = os.environ.get("TFDIST_BENCH_PROBE_DIR")


def mark(name: str, **fields) -> None:
    task = f"{os.environ.get('TFDIST_TASK_TYPE', 'x')}-{os.environ.get('TFDIST_TASK_INDEX', 'x')}"
    path = os.path.join(_DIR, f"{task}-{os.environ.get('TFDIST_RESTART_COUNT', 'x')}.jsonl")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"time": time.time(), "mark": name, **fields}) + "\n")


def _wrap(owner, attribute: str, before: str, after: str) -> None:
    original = getattr(owner, attribute)

    def wrapped(*args, **kwargs):
        mark(before)
        try:
            return original(*args, **kwargs)
        finally:
            mark(after)

    setattr(owner, attribute, wrapped)


def _install() -> None:
    import tfdist.protocol as protocol
    import tfdist.runtime as runtime

    write_heartbeat = protocol.write_heartbeat

    def heartbeat(path, record):  # the heartbeat file keeps only the latest record: keep each one's time here
        mark("beat", step=record.step)
        return write_heartbeat(path, record)

    protocol.write_heartbeat = heartbeat

    original = runtime.strategy

    def strategy(*args, **kwargs):
        mark("strategy-begin")  # the script ran its imports and reached its first tfdist call
        result = original(*args, **kwargs)
        mark("strategy-ready")  # TF server started, the cluster formed
        import tensorflow as tf

        _wrap(tf.keras.callbacks.BackupAndRestore, "on_train_begin", "restore-begin", "restore-done")
        from tfdist.runtime.snapshots.session import SnapshotSession

        # the snapshot callback's start: the replicas agree on a step (a collective) and load it; then the writer
        # is claimed and the copy function traced
        _wrap(SnapshotSession, "resume", "snapshot-resume-begin", "snapshot-resume-done")
        _wrap(SnapshotSession, "start_writing", "snapshot-writer-begin", "snapshot-writer-done")
        return result

    runtime.strategy = strategy


if _DIR:
    _install()
