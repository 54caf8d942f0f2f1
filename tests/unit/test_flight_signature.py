"""Whether two hangs are the same hang, as a table: task, step and innermost frames."""
from __future__ import annotations

import pytest

from tfdist.launch.flight.evidence import TaskEvidence
from tfdist.launch.flight.signature import HangSignature, same_hang, signature_of
from tfdist.protocol.stackdump import Frame, ThreadStack

IN_CALLBACK = ("train.py:88 `on_train_batch_end`", "callbacks.py:10 `_call`", "training.py:1 `fit`")
ELSEWHERE = ("train.py:40 `load`",) + IN_CALLBACK[1:]


@pytest.mark.parametrize("before, after, lag, same", [
    (HangSignature("worker:1", 42, IN_CALLBACK), HangSignature("worker:1", 42, IN_CALLBACK), 0, True),
    (HangSignature("worker:1", 42, IN_CALLBACK), HangSignature("worker:0", 42, IN_CALLBACK), 0, False),
    (HangSignature("worker:1", 42, IN_CALLBACK), HangSignature("worker:1", 43, IN_CALLBACK), 0, False),
    (HangSignature("worker:1", 42, IN_CALLBACK), HangSignature("worker:1", 47, IN_CALLBACK), 9, True),  # lag
    (HangSignature("worker:1", 42, IN_CALLBACK), HangSignature("worker:1", 42, ELSEWHERE), 0, False),
    (HangSignature("worker:1", 42), HangSignature("worker:1", 42, IN_CALLBACK), 0, True),  # one without stacks
    (HangSignature("worker:1", 42), HangSignature("worker:1", 42), 0, True),  # --no-flight-recorder
    (HangSignature("worker:1", None, IN_CALLBACK), HangSignature("worker:1", None, IN_CALLBACK), 0, True),
    (HangSignature("worker:1", None), HangSignature("worker:1", None), 0, False),  # nothing to compare
    (HangSignature("worker:1", None, IN_CALLBACK), HangSignature("worker:1", 3, IN_CALLBACK), 9, False),
    (None, HangSignature("worker:1", 42), 0, False),
])
def test_same_hang(before, after, lag, same):
    assert same_hang(before, after, step_lag=lag) is same


def test_signature_from_the_flight_recorders_evidence():
    frames = tuple(Frame(function=f, file=f"/home/u/{n}", line=ln) for f, n, ln in
                   [("on_train_batch_end", "train.py", 88), ("_call", "callbacks.py", 10), ("fit", "training.py", 1),
                    ("<module>", "train.py", 100)])
    tasks = [TaskEvidence(name="worker:0", step=43), TaskEvidence(
        name="worker:1", step=42, threads=(ThreadStack(name="Thread-1", frames=()),
                                           ThreadStack(name="MainThread", frames=frames)))]
    sig = signature_of("worker:1", tasks, step=40)
    assert sig == HangSignature("worker:1", 42, IN_CALLBACK)
    assert sig.words == "worker:1 at step 42, in train.py:88 `on_train_batch_end`"
    assert signature_of("worker:2", tasks, step=7) == HangSignature("worker:2", 7)
    assert HangSignature("chief:0", None).words == "chief:0 before its first step"
