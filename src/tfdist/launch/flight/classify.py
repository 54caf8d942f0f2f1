"""Reading stacks: which frames are the script's own code, which are TensorFlow, which are a collective, and what one
task was doing (:func:`activity`). Pure functions of frames and strings; table-tested in
tests/unit/test_flight_rules.py.

What real dumps show (py-spy of tf-keras ``Model.fit`` under MultiWorkerMirroredStrategy, TensorFlow 2.21): a task
waiting for a peer in the gradient all-reduce has one Python thread, its main thread, idle in
``quick_execute (tensorflow/python/eager/execute.py)`` under ``Function.__call__`` under ``Model.fit``; the all-reduce
itself runs in TensorFlow's ``collective_ops`` threads, which have no Python frames (only a native dump shows
``tensorflow::RingReducer``/``BaseCollectiveExecutor`` there, and reading those takes seconds). So "waiting inside
TensorFlow while a peer is elsewhere" is how a collective wait is recognised; collective frames, when a dump has
them (an eager ``strategy.reduce``, a native dump), make it explicit.
"""
from __future__ import annotations

import re

from tfdist.launch.flight.evidence import Activity, Doing
from tfdist.protocol.stackdump import Frame, ThreadStack

# Libraries: installed packages, the standard library, frozen modules, and tfdist's own task side (its callbacks and
# the bootstrap's step thread run inside the task, wherever tfdist is installed from).
_LIBRARY_PATH = re.compile(r"/(site|dist)-packages/|/lib/python\d\.\d+/|^<|/tfdist/(runtime|protocol)/")
_TENSORFLOW_PATH = re.compile(r"/(tensorflow|tf_keras|keras|tensorflow_estimator)/")
_INPUT_PATH = re.compile(r"/tensorflow/python/(data/ops/from_generator_op|ops/script_ops)\.py\Z")
_COLLECTIVE = re.compile(r"collective|all_?reduce|all_?gather|RingReducer|RingGatherer|HierarchicalTreeBroadcaster|"
                         r"cross_device_ops|nccl|reduce_to|batch_reduce", re.IGNORECASE)
_MAIN_THREAD = "MainThread"

# Where the kernel has a thread sleep (its wchan), in words; the first matching prefix wins.
_WCHAN_WORDS = (
    ("hrtimer_nanosleep", "time.sleep"), ("do_nanosleep", "time.sleep"), ("futex", "a lock or condition wait"),
    ("ep_poll", "waiting for I/O"), ("do_select", "waiting for I/O"), ("do_sys_poll", "waiting for I/O"),
    ("pipe_read", "reading a pipe"), ("unix_stream", "reading a socket"), ("sk_wait_data", "reading a socket"),
    ("wait_woken", "reading a socket"), ("do_wait", "waiting for a child process"), ("folio_wait", "disk I/O"),
    ("io_schedule", "disk I/O"),
)


def is_library(frame: Frame) -> bool:
    """An installed library's or the standard library's frame (not the script's own code)."""
    return bool(_LIBRARY_PATH.search(frame.file))


def is_tensorflow(frame: Frame) -> bool:
    return bool(_TENSORFLOW_PATH.search(frame.file))


def is_collective(frame: Frame) -> bool:
    return bool(_COLLECTIVE.search(frame.function) or _COLLECTIVE.search(frame.file.rsplit("/", 1)[-1]))


def wchan_words(wchan: str) -> str | None:
    return next((words for prefix, words in _WCHAN_WORDS if wchan.startswith(prefix)), None)


def main_thread(threads: tuple[ThreadStack, ...]) -> ThreadStack | None:
    """The interpreter's main thread: named so by py-spy; for faulthandler (no names) the one that runs ``<module>``."""
    named = [t for t in threads if t.name == _MAIN_THREAD]
    if named:
        return named[0]
    running_module = [t for t in threads if t.frames and t.frames[-1].function == "<module>"]
    return running_module[0] if running_module else (threads[0] if threads else None)


def _first_user(frames: tuple[Frame, ...]) -> int | None:
    return next((i for i, f in enumerate(frames) if not is_library(f)), None)


def blocked_in(thread: ThreadStack, fallback_wchan: str = "") -> str | None:
    """The call a thread waits in: the library function the script's own code called (``Queue.get``), else what the
    kernel says (``time.sleep``, ``a lock or condition wait``); None for a thread seen running."""
    user = _first_user(thread.frames)
    if user is not None and user > 0:
        return thread.frames[user - 1].function
    if thread.idle is False:
        return None
    return wchan_words(thread.wchan or fallback_wchan)


def activity(threads: tuple[ThreadStack, ...], *, state: str = "", wchan: str = "", exited: bool = False) -> Activity:
    """What one task was doing: stopped or gone (from the kernel), else from its main thread and any Python input
    function TensorFlow was running for it."""
    main = main_thread(threads)
    where = _where(main) if main else None
    if exited:
        return Activity(Doing.EXITED)
    if state in ("T", "t"):
        return Activity(Doing.STOPPED, frame=where, thread=main.name if main else "")
    if main is None or not main.frames:
        return Activity(Doing.UNKNOWN)
    collective = any(is_collective(f) for t in threads for f in t.frames)
    for thread in threads:  # a generator or py_function TensorFlow is waiting on, stuck in the script's code
        if thread is not main and any(_INPUT_PATH.search(f.file) for f in thread.frames):
            user = _first_user(thread.frames)
            if user is not None:
                return Activity(Doing.INPUT, frame=thread.frames[user], blocked_in=blocked_in(thread),
                                collective=collective, thread=thread.name)
    innermost = main.frames[0]
    main_wchan = main.wchan or wchan
    if not is_library(innermost):
        return Activity(Doing.USER_CODE, frame=innermost, blocked_in=blocked_in(main, main_wchan),
                        collective=collective, thread=main.name)
    user = _first_user(main.frames)
    if is_tensorflow(innermost):
        # Name the script's line that called into TensorFlow, and the TensorFlow call it made (Model.fit).
        called = _called_from_user(main.frames, user) if user else innermost.function
        return Activity(Doing.TENSORFLOW, frame=where, blocked_in=called, collective=collective, thread=main.name)
    if user is not None and not any(is_tensorflow(f) for f in main.frames[:user]):
        # The script called a plain library (queue, threading, socket) and waits in it: that is the script's wait.
        return Activity(Doing.USER_CODE, frame=main.frames[user], blocked_in=blocked_in(main, main_wchan),
                        collective=collective, thread=main.name)
    return Activity(Doing.LIBRARY, frame=where, blocked_in=innermost.function, collective=collective,
                    thread=main.name)


def _called_from_user(frames: tuple[Frame, ...], user: int) -> str:
    """The library call the script made (``Model.fit``), passing over decorators' wrappers (``<locals>``)."""
    for frame in reversed(frames[:user]):
        if "<locals>" not in frame.function:
            return frame.function
    return frames[user - 1].function


def _where(thread: ThreadStack) -> Frame | None:
    """The innermost frame of the script's own code, else the innermost frame."""
    user = _first_user(thread.frames)
    if user is not None:
        return thread.frames[user]
    return thread.frames[0] if thread.frames else None
