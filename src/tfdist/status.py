"""Exit statuses: one enum, so schedulers and scripts can tell outcomes apart."""
from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """Process exit statuses of the ``tfdist`` command.

    ``PREEMPTED`` sits in the 128-255 band that Kubeflow's ``ExitCode`` restart policy treats as retryable,
    while TensorFlow's own default (42) would be classed as permanent there.
    """

    SUCCESS = 0
    ERROR = 1  # a check found problems (doctor) or an operation failed
    USAGE = 2  # bad flags, bad input file: nothing was changed
    TASK_FAILED = 3  # a training task failed and the restart budget is spent
    PREEMPTED = 143  # the job was asked to stop (SIGTERM) and saved its state: retry it
    CTRL_C = 130
