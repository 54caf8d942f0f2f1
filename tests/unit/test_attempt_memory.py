"""What the supervisor remembers between attempts for the restart rules: each hang's signature, and whether steps
advanced; fed with snapshots and flight reports as the supervisor has them."""
from __future__ import annotations

from tfdist.launch.flight.evidence import TaskEvidence, Verdict as FlightVerdict
from tfdist.launch.flight.report import HangReport
from tfdist.launch.local.attempt_memory import AttemptMemory
from tfdist.launch.local.rules import GroupAction, Verdict
from tfdist.launch.local.snapshot import GroupSnapshot, TaskView
from tfdist.launch.outcome import Cause
from tfdist.protocol import HeartbeatRecord
from tfdist.protocol.stackdump import Frame, ThreadStack

HUNG = Verdict(GroupAction.FAIL, Cause.HUNG, "worker:0")
FAILED = Verdict(GroupAction.FAIL, Cause.TASK_FAILED, "worker:0")


def snapshot(step: int | None = 42, progressed: bool = True, name: str = "worker:0") -> GroupSnapshot:
    beat = HeartbeatRecord(step=step, time=0.0) if step is not None else None
    return GroupSnapshot(tasks=(TaskView(name=name, task_type="worker", task_index=0, heartbeat=beat,
                                         progressed=progressed),))


def report(culprit: str, line: int) -> HangReport:
    frames = (Frame("on_train_batch_end", "/u/train.py", line), Frame("<module>", "/u/train.py", 100))
    task = TaskEvidence(name=culprit, step=42, threads=(ThreadStack("MainThread", frames),))
    return HangReport(run_id="r", attempt=0, reason="hang", verdict=FlightVerdict(culprit, "h"), tasks=(task,),
                      time=0.0)


def test_the_same_hang_in_two_attempts_in_a_row_is_repeated():
    memory = AttemptMemory()
    memory.hung(0, HUNG, report("worker:1", 88), snapshot())
    memory.hung(1, HUNG, report("worker:1", 88), snapshot())
    assert memory.restart_facts(1, step_lag=0)["repeated_hang"] == \
        "worker:1 at step 42, in train.py:88 `on_train_batch_end`"  # the recorder's culprit, not the watchdog's
    memory.hung(2, HUNG, report("worker:1", 90), snapshot())
    assert memory.repeated_hang(2, step_lag=0) is None, "another line"
    memory.hung(3, FAILED, report("worker:1", 90), snapshot())
    assert memory.repeated_hang(3, step_lag=0) is None and 3 not in memory.hangs, "a failure is no hang"


def test_without_the_flight_recorder_task_and_step_decide():
    memory = AttemptMemory()
    memory.hung(0, HUNG, None, snapshot(42))
    memory.hung(1, HUNG, None, snapshot(45))
    assert memory.repeated_hang(1, step_lag=0) is None and memory.repeated_hang(1, step_lag=3) is not None


def test_progress_is_unknown_for_the_first_attempt_and_for_jobs_without_heartbeats():
    memory = AttemptMemory()
    memory.ended(0, snapshot(step=None, progressed=False))
    memory.ended(1, snapshot(step=None, progressed=False))
    assert (memory.progressed(0), memory.progressed(1)) == (None, None)
    memory.ended(2, snapshot(step=10, progressed=True))
    memory.ended(3, snapshot(step=None, progressed=False))  # crashed before its first heartbeat
    assert (memory.progressed(2), memory.progressed(3)) == (True, False)
    assert memory.restart_facts(3, step_lag=0) == {"repeated_hang": None, "progressed": False}
