"""Pure: the gRPC keep-alive a parameter-server job's tasks get, so a silent worker is seen as failed.

TensorFlow's ClusterCoordinator tolerates a worker whose calls *fail* (UnavailableError: the closure is put back and
run by another worker, and the worker is taken back when it serves at its address again), but waits without end on a
worker that stops answering: a SIGSTOPped process, a machine cut off the network (no connection reset ever arrives).
TensorFlow's gRPC channels read extra channel arguments from ``TF_GRPC_DEFAULT_OPTIONS`` (``name=value,...``, parsed
in tsl's grpc_channel.cc ``CreateDefaultChannelArguments``). With HTTP/2 keep-alive pings a channel whose peer does
not acknowledge a ping within the timeout is closed and its calls fail with UNAVAILABLE ("ping timeout"): the
coordinator then treats the silent worker as a failed one.

Only the client's keep-alive is set: TensorFlow's servers keep gRPC's server defaults (at most 2 pings without data
before a GOAWAY "too_many_pings"), and the client's default ``grpc.http2.max_pings_without_data`` (2) keeps it under
that. Measured on the 2-core test host (one machine, digits example, worker:1 SIGSTOPped after epoch 1): with the
options below the chief trained on; without them it stayed at its step until --hang-timeout.

The one place of this fact, in ``cluster`` so that every room may use it: ``tfdist launch`` gives it to its tasks
(``launch.local.taskenv.shared_env``), and ``tfdist tf-config --exec``, through which the Slurm script and the
Kubernetes pods that ``tfdist slurm`` / ``tfdist k8s`` write start every task, gives it to the tasks of a resolved
cluster with parameter servers (``cluster.resolve.task_environment``). Both apply the same rule, :func:`keepalive_env`.
"""
from __future__ import annotations

from typing import Mapping

from tfdist.protocol import GRPC_DEFAULT_OPTIONS

# A ping every 10 s while calls are open, the peer declared dead 20 s after an unanswered one: a silent worker is
# dropped within ~30 s; a busy but live task (the 2-core host runs at load 10+) answers pings from gRPC's own threads.
KEEPALIVE_TIME_MS = 10_000
KEEPALIVE_TIMEOUT_MS = 20_000


def keepalive_options() -> str:
    """The ``TF_GRPC_DEFAULT_OPTIONS`` value tfdist sets."""
    return f"grpc.keepalive_time_ms={KEEPALIVE_TIME_MS},grpc.keepalive_timeout_ms={KEEPALIVE_TIMEOUT_MS}"


def keepalive_env(ps: int, environ: Mapping[str, str]) -> dict[str, str]:
    """``{TF_GRPC_DEFAULT_OPTIONS: ...}`` for a job with parameter servers, unless ``environ`` (the launcher's, or the
    task's own before ``tf-config --exec``) already sets it, even empty: the user's value wins (``--env`` wins too,
    applied after launcher defaults); nothing otherwise
    (MultiWorkerMirroredStrategy jobs fail on a lost peer through the collective timeout and the launcher's rules)."""
    if ps <= 0 or GRPC_DEFAULT_OPTIONS in environ:
        return {}
    return {GRPC_DEFAULT_OPTIONS: keepalive_options()}


# Written into the job files of parameter-server jobs (``tfdist slurm``, ``tfdist k8s``), whose tasks get the
# keep-alive at run time from ``tf-config --exec`` rather than from the file, so that a value set before wins.
JOB_FILE_NOTE = (
    f"Parameter servers: `tfdist tf-config --exec` gives every task gRPC keep-alive ({GRPC_DEFAULT_OPTIONS})",
    "unless its environment already sets it (empty: off), so the chief drops a worker that stops answering",
    "(a frozen task, a node cut off) within about 30 s instead of waiting for it for ever.",
)
