"""The flight recorder's verdict rules and stack reading, table-tested on stacks shaped like real py-spy dumps of a
tf-keras MultiWorkerMirroredStrategy job (TensorFlow 2.21)."""
from __future__ import annotations

import pytest

from tfdist.launch.flight.classify import activity, blocked_in, is_collective, is_library, main_thread
from tfdist.launch.flight.evidence import Doing, TaskEvidence
from tfdist.launch.flight.rules import decide
from tfdist.protocol.stackdump import Frame, ThreadStack

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
JOB = "/job/train.py"


def frames(*specs: tuple[str, str, int]) -> tuple[Frame, ...]:
    return tuple(Frame(function, file, line) for function, file, line in specs)


FIT = frames(("Model.fit", f"{SITE}/tf_keras/src/engine/training.py", 1804),
             ("filter_traceback.<locals>.error_handler", f"{SITE}/tf_keras/src/utils/traceback_utils.py", 65),
             ("main", JOB, 98), ("<module>", JOB, 104))
IN_TENSORFLOW = ThreadStack("MainThread", frames(
    ("quick_execute", f"{SITE}/tensorflow/python/eager/execute.py", 53),
    ("Function.__call__", f"{SITE}/tensorflow/python/eager/polymorphic_function/polymorphic_function.py", 833),
    ("filter_traceback.<locals>.error_handler", f"{SITE}/tensorflow/python/util/traceback_utils.py", 164),
) + FIT, idle=True, wchan="futex_do_wait")
IN_CALLBACK_SLEEP = ThreadStack("MainThread", frames(
    ("slow_user_function", JOB, 71), ("Fault.on_train_batch_end", JOB, 86),
    ("CallbackList.on_train_batch_end", f"{SITE}/tf_keras/src/callbacks.py", 478)) + FIT,
    idle=True, wchan="hrtimer_nanosleep")
IN_CALLBACK_DEADLOCK = ThreadStack("MainThread", frames(
    ("update_stats", JOB, 62), ("Fault.on_train_batch_end", JOB, 84),
    ("CallbackList.on_train_batch_end", f"{SITE}/tf_keras/src/callbacks.py", 478)) + FIT,
    idle=True, wchan="futex_do_wait")
HELPER_DEADLOCK = ThreadStack("stats-writer", frames(("hold_b_then_a", JOB, 54),
                                                     ("Thread.run", f"{STDLIB}/threading.py", 982)), idle=True)
GENERATOR = ThreadStack("thread 19871", frames(
    ("Condition.wait", f"{STDLIB}/threading.py", 327), ("Queue.get", f"{STDLIB}/queue.py", 171),
    ("load_batch", JOB, 42), ("batches", JOB, 49),
    ("_from_generator.<locals>.generator_next_fn.<locals>.generator_py_func",
     f"{SITE}/tensorflow/python/data/ops/from_generator_op.py", 198),
    ("FuncRegistry.__call__", f"{SITE}/tensorflow/python/ops/script_ops.py", 269)), idle=True)
WAIT_FOR_RESULTS = ThreadStack("MainThread", frames(
    ("Condition.wait", f"{STDLIB}/threading.py", 331), ("Event.wait", f"{STDLIB}/threading.py", 629),
    ("wait_for_results", JOB, 75), ("main", JOB, 100), ("<module>", JOB, 104)), idle=True, wchan="futex_do_wait")
EAGER_ALL_REDUCE = ThreadStack("MainThread", frames(
    ("all_reduce_v2", f"{SITE}/tensorflow/python/ops/collective_ops.py", 120),
    ("CollectiveAllReduce._reduce_to", f"{SITE}/tensorflow/python/distribute/cross_device_ops.py", 1100),
    ("train_step", JOB, 30), ("<module>", JOB, 50)), idle=True)


def task(name: str, step: int | None, *threads: ThreadStack, state: str = "S", **kw) -> TaskEvidence:
    kw.setdefault("stacks_from", "py-spy")
    return TaskEvidence(name=name, pid=100, step=step, state=state, threads=threads, **kw)


CASES = [
    # (id, tasks, culprit, rule, words in the headline, words in the others line)
    ("sigstop", [task("worker:0", 121, IN_TENSORFLOW), task("worker:1", 120, IN_CALLBACK_SLEEP, state="T")],
     "worker:1", "stopped", ["stopped (SIGSTOP", "at step 120", "train.py:71 `slow_user_function`"],
     ["worker:0 is at step 121, waiting in a collective all-reduce", "Model.fit, from train.py:98 `main`"]),
    ("sleep in a callback", [task("chief:0", 121, IN_TENSORFLOW), task("worker:0", 121, IN_TENSORFLOW),
                             task("worker:1", 120, IN_CALLBACK_SLEEP)],
     "worker:1", "outside-tensorflow", ["at step 120, in train.py:71 `slow_user_function` (blocked in time.sleep)"],
     ["chief:0 and worker:0 are at step 121, waiting in a collective all-reduce"]),
    ("deadlock in a callback", [task("worker:0", 7, IN_TENSORFLOW),
                                task("worker:1", 6, IN_CALLBACK_DEADLOCK, HELPER_DEADLOCK)],
     "worker:1", "outside-tensorflow", ["train.py:62 `update_stats` (blocked in a lock or condition wait)"], []),
    ("generator blocks", [task("worker:0", 5, IN_TENSORFLOW), task("worker:1", 5, GENERATOR, IN_TENSORFLOW)],
     "worker:1", "outside-tensorflow",
     ["its Python input pipeline is in train.py:42 `load_batch` (blocked in Queue.get)"], []),
    ("left the loop, still running", [task("worker:0", 6, IN_TENSORFLOW),
                                      task("worker:1", 5, WAIT_FOR_RESULTS, finished=True)],
     "worker:1", "outside-tensorflow",
     ["left its training loop", "at step 5 and is in train.py:75 `wait_for_results` (blocked in Event.wait)"], []),
    ("left the loop without saying so", [task("worker:0", 6, IN_TENSORFLOW), task("worker:1", 5, WAIT_FOR_RESULTS)],
     "worker:1", "outside-tensorflow",
     ["left its training loop (Model.fit is not on its stack) at step 5 and is in train.py:75 `wait_for_results`"],
     []),
    ("left the loop and exited 0", [task("worker:0", 6, IN_TENSORFLOW),
                                    task("worker:1", 5, finished=True, exit_code=0, state="")],
     "worker:1", "exited", ["left its training loop at step 5 and exit code 0"], ["worker:0 is at step 6"]),
    ("a task failed", [task("worker:0", 6, IN_TENSORFLOW), task("worker:1", 6, exit_code=1, state="")],
     "worker:1", "exited", ["exit code 1 at step 6"], ["waiting in a collective"]),
    ("gone, seen from outside", [task("worker:0", 6, IN_TENSORFLOW), task("worker:1", 6, gone=True, state="")],
     "worker:1", "exited", ["exited at step 6"], []),
    ("lowest step", [task("worker:0", 121, IN_TENSORFLOW), task("worker:1", 118, IN_TENSORFLOW),
                     task("worker:2", 121, IN_TENSORFLOW)],
     "worker:1", "lowest-step", ["at step 118 while the others are at step 121", "inside TensorFlow"], []),
    ("two stopped: the lower step", [task("worker:0", 9, state="T"), task("worker:1", 8, state="T"),
                                     task("worker:2", 9, IN_TENSORFLOW)],
     "worker:1", "stopped", ["worker:1 stopped first", "at step 8"], []),
    ("stopped beats a peer that failed because of it",
     [task("worker:0", 9, exit_code=1, state=""), task("worker:1", 8, state="T")],
     "worker:1", "stopped", ["stopped (SIGSTOP"], ["worker:0 is at step 9, exit code 1"]),
    ("nothing stands out", [task("worker:0", 9, IN_TENSORFLOW), task("worker:1", 9, IN_TENSORFLOW)],
     None, "none", ["no task stands out", "worker:0 is at step 9"], ["worker:1 is at step 9, inside TensorFlow"]),
    ("an evaluator in its own code is no culprit", [task("chief:0", 9, IN_TENSORFLOW),
                                                   task("evaluator:0", None, IN_CALLBACK_SLEEP)],
     None, "none", ["no task stands out"], ["evaluator:0 is before its first step"]),
    ("no stacks at all", [task("worker:0", 3, stacks_from="py-spy: Permission denied"),
                          task("worker:1", 3)],
     None, "none", ["no stacks (py-spy: Permission denied)"], []),
    ("a peer aborted by TensorFlow after the stop", [
        task("worker:0", 5, ThreadStack("thread 12820", (), idle=False), state="R",
             output_tail=("Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks "
                          "are unhealthy (stopped sending heartbeats):", "/job:worker/replica:0/task:1")),
        task("worker:1", 5, IN_TENSORFLOW, state="T")],
     "worker:1", "stopped", ["stopped (SIGSTOP"],
     ["worker:0 is at step 5, its collective was aborted: TensorFlow names worker:1 unhealthy"]),
    ("threads without Python frames", [task("worker:0", 5, ThreadStack("t", ()), state="R"),
                                       task("worker:1", 5, ThreadStack("t", ()), state="R")],
     None, "none", ["no Python frames"], []),
    ("an explicit collective frame", [task("worker:0", 4, EAGER_ALL_REDUCE), task("worker:1", 4, EAGER_ALL_REDUCE)],
     None, "none", ["waiting in a collective all-reduce", "train.py:30 `train_step`"], []),
]


@pytest.mark.parametrize("tasks,culprit,rule,headline,others", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_verdict(tasks, culprit, rule, headline, others):
    verdict = decide(tasks)
    assert (verdict.culprit, verdict.rule) == (culprit, rule), verdict.lines
    for words in headline:
        assert words in verdict.headline, verdict.headline
    for words in others:
        assert words in verdict.others, verdict.others


def test_the_watchdogs_task_is_named_when_nothing_stands_out():
    verdict = decide([task("worker:0", 9, IN_TENSORFLOW), task("worker:1", 9, IN_TENSORFLOW)],
                     watchdog_task="worker:1")
    assert verdict.culprit is None
    assert verdict.headline.startswith("no task stands out: worker:1") and "watchdog" in verdict.headline


@pytest.mark.parametrize("thread,doing", [
    (IN_TENSORFLOW, Doing.TENSORFLOW), (IN_CALLBACK_SLEEP, Doing.USER_CODE), (WAIT_FOR_RESULTS, Doing.USER_CODE),
    (EAGER_ALL_REDUCE, Doing.TENSORFLOW),
    (ThreadStack("MainThread", frames(("select", f"{SITE}/grpc/_channel.py", 1))), Doing.LIBRARY),
    (ThreadStack("MainThread", ()), Doing.UNKNOWN),
])
def test_activity(thread, doing):
    assert activity((thread,)).doing is doing


def test_a_stopped_or_exited_task_is_that_whatever_its_stacks():
    assert activity((IN_TENSORFLOW,), state="T").doing is Doing.STOPPED
    assert activity((IN_TENSORFLOW,), exited=True).doing is Doing.EXITED


@pytest.mark.parametrize("thread,fallback,expected", [
    (GENERATOR, "", "Queue.get"),
    (IN_CALLBACK_SLEEP, "", "time.sleep"),
    (ThreadStack("x", frames(("spin", JOB, 1)), idle=False), "futex_wait", None),  # seen running
    (ThreadStack("x", frames(("f", JOB, 1)), idle=None), "do_sys_poll", "waiting for I/O"),
    (ThreadStack("x", frames(("f", JOB, 1)), idle=True), "", None),
])
def test_blocked_in(thread, fallback, expected):
    assert blocked_in(thread, fallback) == expected


def test_main_thread_without_names_is_the_one_running_the_module():
    other = ThreadStack("0x1", frames(("run", f"{STDLIB}/threading.py", 1)))
    main = ThreadStack("current 0x2", frames(("main", JOB, 3), ("<module>", JOB, 9)))
    assert main_thread((other, main)) is main


@pytest.mark.parametrize("file,expected", [
    (f"{SITE}/tensorflow/python/eager/execute.py", True), (f"{STDLIB}/queue.py", True), ("<frozen runpy>", True),
    ("/src/tfdist/runtime/bootstrap/loops.py", True), ("/src/tfdist/protocol/records.py", True), (JOB, False),
])
def test_library_frames(file, expected):
    assert is_library(Frame("f", file, 1)) is expected


@pytest.mark.parametrize("function,file,expected", [
    ("all_reduce_v2", f"{SITE}/tensorflow/python/ops/collective_ops.py", True),
    ("tensorflow::RingReducer::Run(std::function<void ()>)", "libtensorflow_framework.so.2", True),
    ("CollectiveAllReduce._batch_all_reduce", f"{SITE}/tensorflow/python/distribute/cross_device_ops.py", True),
    ("quick_execute", f"{SITE}/tensorflow/python/eager/execute.py", False),
    ("load_batch", JOB, False),
])
def test_collective_frames(function, file, expected):
    assert is_collective(Frame(function, file, 1)) is expected
