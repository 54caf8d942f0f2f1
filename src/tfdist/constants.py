"""Every environment variable tfdist reads or sets, in one registry.

Flags: each command-line flag has an environment twin named ``TFDIST_<COMMAND>_<FLAG>`` (for example
``tfdist launch --workers`` reads ``TFDIST_LAUNCH_WORKERS``), so Kubernetes and Slurm manifests can configure a
command through ``env:`` blocks. ``tfdist <command> --help`` shows each twin next to its flag.
"""
from __future__ import annotations

from typing import Final

ENV_PREFIX: Final = "TFDIST"

# Set by `tfdist launch` for each task; read by tfdist.runtime inside the training script. Defined, with every other
# variable, in the registry (tfdist.protocol.variables.REGISTRY).
from tfdist.protocol.variables import (  # noqa: E402
    CUDA_VISIBLE_DEVICES, DEBUG, ERROR_FILE, HEARTBEAT_FILE, JOB_NAME, LEGACY_KERAS, MAX_RESTARTS, METRICS_HOST, METRICS_PORT,
    REGISTRY, RESTART_COUNT, RUN_ID, TASK_INDEX, TASK_TYPE, TF_CONFIG, SetBy,
)

# Variables set for every task, with what they mean; rendered in `tfdist launch --help`.
TASK_ENVIRONMENT: Final[dict[str, str]] = {
    v.name: v.meaning for v in REGISTRY if v.set_by in (SetBy.LAUNCHER, SetBy.LAUNCHER_DEFAULT)}
