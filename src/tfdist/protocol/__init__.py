"""The task protocol: what ``tfdist launch`` and a training task say to each other, shared by the launcher
(:mod:`tfdist.launch`) and the runtime inside the task (:mod:`tfdist.runtime`).

- :mod:`~tfdist.protocol.variables`: the registry of every environment variable tfdist sets or reads;
- :mod:`~tfdist.protocol.plan`: what the launcher tells a task (:class:`Command`, :class:`TaskPlan`);
- :mod:`~tfdist.protocol.records`: what a task tells the launcher (heartbeat and error records, imported modules);
- :mod:`~tfdist.protocol.snapshot_file`: the in-memory snapshot file, which the agent checks when it copies one.

Imports nothing of tfdist but :mod:`tfdist.errors`, :mod:`tfdist.status` and :mod:`tfdist.frozen` (stdlib only), and
never TensorFlow. The names below
are re-exported so callers can write ``from tfdist import protocol as P``; each is defined once, in its module, and
loaded on first use (PEP 562): importing only the variables (as ``tfdist.constants`` does for every command) does not
load the records' json/socket/traceback machinery, which every CLI start would otherwise pay.
``python -m tfdist.protocol`` prints the table of variables in docs/protocol.md.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

_EXPORTS = {
    "plan": ("BOOTSTRAP_SITE", "Command", "TaskPlan", "bootstrap_environment", "forget_bootstrap"),
    "records": ("MODULES_SUFFIX", "PREEMPTED_EXIT_CODE", "PROTOCOL_VERSION", "ErrorRecord", "HeartbeatRecord",
                "TaskState", "loaded_library_modules", "read_error", "read_heartbeat", "read_modules", "write_error",
                "write_heartbeat", "write_modules"),
    "variables": ("BOOTSTRAP", "CUDA_VISIBLE_DEVICES", "DEBUG", "ERROR_FILE", "FLAG_TWIN_PATTERN",
                  "GRPC_DEFAULT_OPTIONS", "HEARTBEAT_FILE", "HEARTBEAT_INTERVAL", "JOB_NAME", "LEGACY_KERAS", "MAX_RESTARTS", "METRICS_HOST", "METRICS_PORT",
                  "MODEL_DIR", "PROTECTED", "PROTOCOL", "REGISTRY", "RESTART_COUNT", "RUN_ID", "TABLE_BEGIN",
                  "TABLE_END", "TASK_INDEX", "TASK_TYPE", "TF_CONFIG", "VARIABLES", "WARM_PRELOAD", "WARM_START",
                  "EnvVar", "SetBy", "render_env_table", "refuse_protected"),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))


if TYPE_CHECKING:  # for type checkers and editors: the same names, eagerly
    from tfdist.protocol.plan import (  # noqa: F401
        BOOTSTRAP_SITE, Command, TaskPlan, bootstrap_environment, forget_bootstrap,
    )
    from tfdist.protocol.records import (  # noqa: F401
        MODULES_SUFFIX, PREEMPTED_EXIT_CODE, PROTOCOL_VERSION, ErrorRecord, HeartbeatRecord, TaskState,
        loaded_library_modules, read_error, read_heartbeat, read_modules, write_error, write_heartbeat, write_modules,
    )
    from tfdist.protocol.variables import (  # noqa: F401
        BOOTSTRAP, CUDA_VISIBLE_DEVICES, DEBUG, ERROR_FILE, FLAG_TWIN_PATTERN, GRPC_DEFAULT_OPTIONS, HEARTBEAT_FILE,
        HEARTBEAT_INTERVAL,
        JOB_NAME, LEGACY_KERAS, MAX_RESTARTS, METRICS_HOST, METRICS_PORT, MODEL_DIR, PROTECTED, PROTOCOL, REGISTRY,
        RESTART_COUNT, RUN_ID, TABLE_BEGIN, TABLE_END, TASK_INDEX, TASK_TYPE, TF_CONFIG, VARIABLES, WARM_PRELOAD,
        WARM_START, EnvVar, SetBy, render_env_table, refuse_protected,
    )
