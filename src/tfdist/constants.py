"""Every environment variable tfdist reads or sets, in one registry.

Flags: each command-line flag has an environment twin named ``TFDIST_<COMMAND>_<FLAG>`` (for example
``tfdist launch --workers`` reads ``TFDIST_LAUNCH_WORKERS``), so Kubernetes and Slurm manifests can configure a
command through ``env:`` blocks. ``tfdist <command> --help`` shows each twin next to its flag.
"""
from __future__ import annotations

from typing import Final

ENV_PREFIX: Final = "TFDIST"

# Read by the CLI itself.
DEBUG: Final = "TFDIST_DEBUG"  # "1": show Python tracebacks instead of one-line errors

# Set by `tfdist launch` for each task; read by tfdist.runtime inside the training script.
TF_CONFIG: Final = "TF_CONFIG"
TASK_TYPE: Final = "TFDIST_TASK_TYPE"
TASK_INDEX: Final = "TFDIST_TASK_INDEX"
RESTART_COUNT: Final = "TFDIST_RESTART_COUNT"  # 0 on the first attempt; not a stable task identity
MAX_RESTARTS: Final = "TFDIST_MAX_RESTARTS"
RUN_ID: Final = "TFDIST_RUN_ID"
ERROR_FILE: Final = "TFDIST_ERROR_FILE"  # where the runtime writes a failing task's traceback as JSON
HEARTBEAT_FILE: Final = "TFDIST_HEARTBEAT_FILE"  # touched by the runtime after each step (hang watchdog)
METRICS_PORT: Final = "TFDIST_METRICS_PORT"  # when set, the runtime serves /metrics and /healthz there
METRICS_HOST: Final = "TFDIST_METRICS_HOST"
JOB_NAME: Final = "TFDIST_JOB_NAME"
LEGACY_KERAS: Final = "TF_USE_LEGACY_KERAS"  # "1" makes tf.keras resolve to tf-keras (Keras 2)
CUDA_VISIBLE_DEVICES: Final = "CUDA_VISIBLE_DEVICES"

# Variables set for every task, with what they mean; rendered in `tfdist launch --help`.
TASK_ENVIRONMENT: Final[dict[str, str]] = {
    TF_CONFIG: "cluster and this task's role, as JSON (TensorFlow reads it)",
    TASK_TYPE: "chief, worker, ps or evaluator",
    TASK_INDEX: "index of the task within its type",
    RESTART_COUNT: "how many times the group was restarted before this attempt",
    MAX_RESTARTS: "the launcher's restart budget",
    RUN_ID: "one id for the whole launch, shared by all tasks and attempts",
    ERROR_FILE: "JSON file the runtime writes when the script raises",
    HEARTBEAT_FILE: "file the runtime touches after each training step",
    LEGACY_KERAS: "set to 1 when tf-keras is installed, since Keras 3 cannot run multi-worker fit",
    CUDA_VISIBLE_DEVICES: "this task's share of the local GPUs (only when GPUs are present)",
}
