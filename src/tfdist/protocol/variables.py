"""Every environment variable tfdist sets or reads, in one registry: name, who sets it, what it means. The table in
docs/protocol.md is generated from it (``python -m tfdist.protocol``) and checked by tests/unit/test_launch_protocol.py;
``--env`` may not set the variables the launcher owns. Part of the task protocol (:mod:`tfdist.protocol`
re-exports every name); imports nothing heavy.
"""
from __future__ import annotations

from enum import Enum
from typing import Iterable, Mapping

from tfdist.errors import UsageError
from tfdist.frozen import frozen


class SetBy(str, Enum):
    """Who sets a variable."""

    LAUNCHER = "tfdist launch"  # for every task; the protocol: a user's --env cannot override it
    LAUNCHER_DEFAULT = "tfdist launch (default)"  # for every task, unless the user's --env or environment says otherwise
    DEPLOY = "tfdist slurm/k8s"  # written into generated job files
    USER = "you"  # optional tuning read by tfdist


@frozen  # every command imports this registry (tfdist.constants): a generated dataclass cost ~0.8 ms of each start
class EnvVar:
    """One environment variable tfdist sets or reads."""

    name: str
    set_by: SetBy
    meaning: str

    @property
    def protected(self) -> bool:
        """Part of the launcher's protocol: ``--env`` may not set it."""
        return self.set_by is SetBy.LAUNCHER


TF_CONFIG = "TF_CONFIG"
TASK_TYPE = "TFDIST_TASK_TYPE"
TASK_INDEX = "TFDIST_TASK_INDEX"
RESTART_COUNT = "TFDIST_RESTART_COUNT"
MAX_RESTARTS = "TFDIST_MAX_RESTARTS"
RUN_ID = "TFDIST_RUN_ID"
JOB_NAME = "TFDIST_JOB_NAME"
ERROR_FILE = "TFDIST_ERROR_FILE"
HEARTBEAT_FILE = "TFDIST_HEARTBEAT_FILE"
METRICS_PORT = "TFDIST_METRICS_PORT"
METRICS_HOST = "TFDIST_METRICS_HOST"
WARM_START = "TFDIST_WARM_START"
BOOTSTRAP = "TFDIST_BOOTSTRAP"
PROTOCOL = "TFDIST_PROTOCOL"
LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
HEARTBEAT_INTERVAL = "TFDIST_HEARTBEAT_INTERVAL"
WARM_PRELOAD = "TFDIST_WARM_PRELOAD"
DEBUG = "TFDIST_DEBUG"
MODEL_DIR = "TFDIST_MODEL_DIR"
SNAPSHOT_DIR = "TFDIST_SNAPSHOT_DIR"
SNAPSHOTS = "TFDIST_SNAPSHOTS"
SNAPSHOT_EVERY = "TFDIST_SNAPSHOT_EVERY"
GRPC_DEFAULT_OPTIONS = "TF_GRPC_DEFAULT_OPTIONS"
ETCD_PASSWORD = "TFDIST_RDZV_ETCD_PASSWORD"

REGISTRY: tuple[EnvVar, ...] = (
    EnvVar(TF_CONFIG, SetBy.LAUNCHER, "the cluster and this task's role, as JSON (TensorFlow reads it)"),
    EnvVar(TASK_TYPE, SetBy.LAUNCHER, "chief, worker, ps or evaluator"),
    EnvVar(TASK_INDEX, SetBy.LAUNCHER, "index of the task within its type"),
    EnvVar(RESTART_COUNT, SetBy.LAUNCHER, "how many times the group was restarted before this attempt (0 first)"),
    EnvVar(MAX_RESTARTS, SetBy.LAUNCHER, "the launcher's restart budget"),
    EnvVar(RUN_ID, SetBy.LAUNCHER, "one id for the whole launch, shared by all tasks and attempts"),
    EnvVar(JOB_NAME, SetBy.LAUNCHER, "the job's label (--job-name), used in logs and metrics"),
    EnvVar(ERROR_FILE, SetBy.LAUNCHER, "where the runtime writes the error record when the script raises"),
    EnvVar(HEARTBEAT_FILE, SetBy.LAUNCHER, "where the runtime writes the heartbeat record while training"),
    EnvVar(METRICS_PORT, SetBy.LAUNCHER, "with --metrics-port: the port this task serves /metrics and /healthz on"),
    EnvVar(METRICS_HOST, SetBy.LAUNCHER, "with --metrics-port: the address those endpoints bind"),
    EnvVar(WARM_START, SetBy.LAUNCHER, "1 in a task that started from a warm spare"),
    EnvVar(PROTOCOL, SetBy.LAUNCHER, "version of the heartbeat and error records the launcher reads"),
    EnvVar(SNAPSHOT_DIR, SetBy.LAUNCHER, "this run's shared-memory folder for in-memory snapshots (the launcher "
           "creates and removes it)"),
    EnvVar(BOOTSTRAP, SetBy.LAUNCHER_DEFAULT, "1: the task bootstrap runs before a Python task's script (its folder "
           "is put first on PYTHONPATH; both are gone from the script's environment once it runs; --no-bootstrap: "
           "unset)"),
    EnvVar(LEGACY_KERAS, SetBy.LAUNCHER_DEFAULT, "1 when tf-keras is installed (Keras 3 cannot run multi-worker fit)"),
    EnvVar(CUDA_VISIBLE_DEVICES, SetBy.LAUNCHER_DEFAULT, "this task's share of the local GPUs (when GPUs are present)"),
    EnvVar("TF_NUM_INTEROP_THREADS", SetBy.LAUNCHER_DEFAULT,
           "TensorFlow's inter-op thread pool, capped to this task's share of the CPU cores"),
    EnvVar("TF_NUM_INTRAOP_THREADS", SetBy.LAUNCHER_DEFAULT,
           "TensorFlow's intra-op thread pool, capped to this task's share of the CPU cores"),
    EnvVar("OMP_NUM_THREADS", SetBy.LAUNCHER_DEFAULT, "OpenMP threads, capped to this task's share of the CPU cores"),
    EnvVar(GRPC_DEFAULT_OPTIONS, SetBy.LAUNCHER_DEFAULT, "with --ps (and in Slurm and Kubernetes jobs with parameter "
           "servers, from tf-config --exec): gRPC keep-alive for TensorFlow's channels, so the chief sees a silent "
           "worker (stopped, machine cut off) as failed and trains on without it"),
    EnvVar(MODEL_DIR, SetBy.DEPLOY, "checkpoints and TensorBoard logs, on storage every node sees"),
    EnvVar("TFDIST_SLURM_PORT_BASE", SetBy.DEPLOY, "first port of this Slurm job's tasks on each node"),
    EnvVar("TFDIST_SLURM_CHIEF", SetBy.DEPLOY, "1: Slurm rank 0 is the chief"),
    EnvVar("TFDIST_SLURM_PS", SetBy.DEPLOY, "K: the K Slurm ranks after the workers are parameter servers"),
    EnvVar("TFDIST_SLURM_EVALUATOR", SetBy.DEPLOY, "1: the last Slurm rank is the evaluator"),
    EnvVar("TFDIST_SLURM_METRICS_PORT", SetBy.DEPLOY, "P: each Slurm task serves its metrics on P + SLURM_LOCALID"),
    EnvVar("TFDIST_SLURM_METRICS_HOST", SetBy.DEPLOY, "the address Slurm tasks bind their metrics on (default: the "
           "node's)"),
    EnvVar("TFDIST_K8S_REPLICAS", SetBy.DEPLOY, "Kubernetes replica counts, e.g. chief=1,worker=2"),
    EnvVar("TFDIST_K8S_PORT", SetBy.DEPLOY, "the port every Kubernetes task listens on (default 2222)"),
    EnvVar("TFDIST_K8S_SUBDOMAIN", SetBy.DEPLOY, "the headless service naming the Kubernetes pods"),
    EnvVar("TFDIST_K8S_JOB_NAME", SetBy.DEPLOY, "the Indexed Job's name (downward API)"),
    EnvVar(DEBUG, SetBy.USER, "1: show Python tracebacks instead of one-line errors"),
    EnvVar(HEARTBEAT_INTERVAL, SetBy.USER, "seconds between heartbeat writes (default 0.5)"),
    EnvVar(WARM_PRELOAD, SetBy.USER, "modules a warm spare imports ahead, comma-separated (default tensorflow)"),
    EnvVar("TFDIST_HEALTH_STALL_SECONDS", SetBy.USER, "/healthz fails after this long without a step (default 300)"),
    EnvVar("TFDIST_HEALTH_STARTUP_SECONDS", SetBy.USER, "/healthz allows this long before the first step (default 900)"),
    EnvVar("TFDIST_SAVE_EVERY_STEPS", SetBy.USER, "fault-tolerance backup interval in steps (default 100)"),
    EnvVar(SNAPSHOTS, SetBy.USER, "0: no in-memory snapshots (runtime.callbacks(snapshots=False) in a script)"),
    EnvVar(SNAPSHOT_EVERY, SetBy.USER, "snapshot interval in steps, or auto (default: the cost kept within 2 % of a "
           "step)"),
    EnvVar("TFDIST_COLLECTIVE_TIMEOUT", SetBy.USER, "seconds a collective may wait for a peer (default 0: no limit)"),
    EnvVar("TFDIST_OS_RELEASE_FILE", SetBy.USER, "the os-release file setup-gpu scripts read (tests)"),
    EnvVar(ETCD_PASSWORD, SetBy.USER, "the etcd user's password for --rdzv-backend etcd with "
           "--rdzv-conf user=NAME (instead of password_file=)"),
)
VARIABLES: Mapping[str, EnvVar] = {v.name: v for v in REGISTRY}
PROTECTED: frozenset[str] = frozenset(v.name for v in REGISTRY if v.protected)
# Credentials the launcher reads from its own environment and no task may inherit: a task's environment is
# written into dumps and crash reports, read by every library it imports and handed to every process it starts.
LAUNCHER_SECRETS: frozenset[str] = frozenset({ETCD_PASSWORD})
# Flags have environment twins TFDIST_<COMMAND>_<FLAG>; they are listed by --help, not here.
FLAG_TWIN_PATTERN = "TFDIST_<COMMAND>_<FLAG>"

TABLE_BEGIN = "<!-- tfdist:env-table:begin (generated by python -m tfdist.protocol) -->"
TABLE_END = "<!-- tfdist:env-table:end -->"


def render_env_table() -> str:
    """docs/protocol.md's table of variables (Markdown), generated from :data:`REGISTRY`."""
    rows = ["| Variable | Set by | Meaning |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.set_by.value} | {v.meaning} |" for v in REGISTRY]
    rows.append(f"| `{FLAG_TWIN_PATTERN}` | you | every flag's twin, e.g. `TFDIST_LAUNCH_WORKERS` (see `--help`) |")
    return "\n".join(rows)


def without_launcher_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` as a task inherits it: the launcher's own credentials (:data:`LAUNCHER_SECRETS`) left out."""
    return {name: value for name, value in environ.items() if name not in LAUNCHER_SECRETS}


def refuse_protected(names: Iterable[str], *, flag: str = "--env") -> None:
    """Raise when a user-supplied variable would override the protocol.

    Raises:
        UsageError: ``names`` holds a protected variable (the first one is named).
    """
    for name in names:
        if name in PROTECTED:
            raise UsageError(f"{flag} {name}: tfdist launch sets this variable itself (it is how the launcher and "
                             "the task talk)", hint=f"leave {name} out of {flag}")
