"""What a failed task's output says: the failure's site (for the deterministic-failure rule and the report) and the
peers TensorFlow names unhealthy (for the blame rule)."""
from __future__ import annotations

import pytest

from tfdist.launch.clues import FailureSite, failure_site, unhealthy_peers

LIB = "/venv/lib/python3.12/site-packages"
USER_ERROR = f'''Traceback (most recent call last):
  File "train.py", line 63, in <module>
    learning_rate_scale = 1 / 0
ZeroDivisionError: division by zero
'''
LIBRARY_ERROR = f'''Traceback (most recent call last):
  File "/work/train.py", line 80, in <module>
    model.fit(dataset)
  File "{LIB}/tf_keras/src/utils/traceback_utils.py", line 70, in error_handler
    raise e.with_traceback(filtered_tb) from None
  File "{LIB}/tensorflow/python/eager/execute.py", line 53, in quick_execute
    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,
tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: task 1 is gone
Additional GRPC error information:
'''
CHAINED = USER_ERROR + "\nDuring handling of the above exception, another exception occurred:\n\n" + '''Traceback (most recent call last):
  File "train.py", line 70, in <module>
    raise RuntimeError("save failed")
RuntimeError: save failed
'''


@pytest.mark.parametrize("text, expected", [
    (USER_ERROR, FailureSite("ZeroDivisionError", "train.py:63")),
    (LIBRARY_ERROR, FailureSite("UnavailableError", "/work/train.py:80")),  # the user's frame, not TensorFlow's
    (CHAINED, FailureSite("RuntimeError", "train.py:70")),  # the exception that ended the script
    (f'Traceback (most recent call last):\n  File "{LIB}/x.py", line 3, in f\nKeyError: 1\n',
     FailureSite("KeyError", f"{LIB}/x.py:3")),  # only library frames: the innermost one
    ("I0000 cpu_feature_guard.cc:227] optimized\nKilled\n", None),
    ("", None),
])
def test_failure_site(text, expected):
    assert failure_site(text, library_roots=(LIB,)) == expected


TF_ABORT = [
    "E0000 coordination_service_agent.cc:332] Polled an error from coordination service.\n",
    "2026-12-02 01:02:03.4: E tensorflow/core/distributed_runtime/coordination/coordination_service.cc:1013] "
    "The following tasks are unhealthy (stopped sending heartbeats):\n",
    "/job:worker/replica:0/task:1\n",
    "/job:worker/replica:0/task:3\n",
    "The tasks have crashed. Check the task logs for an earlier error to debug further.\n",
    "/job:worker/replica:0/task:0 is where this error was printed\n",
]


@pytest.mark.parametrize("lines, expected", [
    (TF_ABORT, ("worker:1", "worker:3")),
    (["The following tasks are unhealthy (stopped sending heartbeats): /job:chief/replica:0/task:0\n"], ("chief:0",)),
    (["/job:worker/replica:0/task:1 sent a message\n"], ()),  # a task named outside the verdict
    ([], ()),
])
def test_unhealthy_peers(lines, expected):
    assert unhealthy_peers(lines) == expected
