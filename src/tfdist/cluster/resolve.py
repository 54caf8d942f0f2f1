"""Which TF_CONFIG does this process resolve to? From TF_CONFIG itself, Slurm's or Kubernetes' environment.

``tfdist tf-config`` prints the result and ``tfdist.runtime`` exports it before building a strategy, so a script
started by ``srun`` or by a Kubernetes Indexed Job / JobSet needs no hand-written TF_CONFIG. Pure: reads a mapping,
imports no TensorFlow.

Slurm (variables of the ``srun`` step, falling back to the job's):
    ``SLURM_STEP_NODELIST`` (hosts, expanded in Slurm's order), ``SLURM_STEP_TASKS_PER_NODE`` (``2(x3),1``),
    ``SLURM_PROCID`` (this task's rank), ``SLURM_STEP_NUM_TASKS``, ``SLURM_DISTRIBUTION`` (``block`` by default,
    or ``cyclic``). Ranks are laid out on nodes as Slurm lays them out; the task at local offset ``k`` on its node
    listens on ``port base + k``. Every rank is a worker (worker 0 plays the chief) unless ``TFDIST_SLURM_CHIEF=1``
    (rank 0 is the chief), ``TFDIST_SLURM_PS=K`` (the K ranks after the workers are parameter servers) or
    ``TFDIST_SLURM_EVALUATOR=1`` (the last rank evaluates; it is not part of the cluster). The port base is
    ``TFDIST_SLURM_PORT_BASE``, else ``20000 + 10 * (SLURM_JOB_ID mod 1000)``, so that two jobs sharing a node do
    not collide (with up to 10 tasks per node), and stays below Linux's ephemeral port range.

Kubernetes (set by the manifests ``tfdist k8s`` writes):
    ``JOB_COMPLETION_INDEX`` (set by Kubernetes in every Indexed Job pod), ``TFDIST_K8S_REPLICAS``
    (``chief=1,worker=2,ps=1``), ``TFDIST_K8S_PORT`` (default 2222), and either

    - JobSet: ``JOBSET_NAME`` and ``REPLICATED_JOB_NAME`` (downward API from the labels
      ``jobset.sigs.k8s.io/jobset-name`` / ``replicatedjob-name``; the replicated job is named after the role);
      task ``<role>:<JOB_COMPLETION_INDEX>`` lives at ``<jobset>-<role>-0-<index>.<subdomain>``, the subdomain
      being ``TFDIST_K8S_SUBDOMAIN`` or the JobSet's name (JobSet's default headless service);
    - Indexed Job: ``TFDIST_K8S_JOB_NAME`` (downward API from the ``job-name`` label) and ``TFDIST_K8S_SUBDOMAIN``
      (the headless service); completion index ``i`` lives at ``<job>-<i>.<service>`` and indices are given to
      roles in the order chief, workers, parameter servers, evaluator.
"""
from __future__ import annotations

import re
from typing import Mapping

from tfdist.cluster.address import check_host, check_port, format_address
from tfdist.cluster.grpc_keepalive import keepalive_env
from tfdist.cluster.hostlist import expand_hostlist, expand_tasks_per_node
from tfdist.cluster.limits import MAX_DIGITS, MAX_TASKS
from tfdist.cluster.roles import ALL_ROLES
from tfdist.cluster.tf_config import TfConfig
from tfdist.constants import LEGACY_KERAS, TASK_INDEX, TASK_TYPE, TF_CONFIG
from tfdist.errors import UsageError

SOURCES = ("auto", "env", "slurm", "k8s")

SLURM_PORT_BASE = "TFDIST_SLURM_PORT_BASE"
SLURM_CHIEF = "TFDIST_SLURM_CHIEF"
SLURM_PS = "TFDIST_SLURM_PS"
SLURM_EVALUATOR = "TFDIST_SLURM_EVALUATOR"
K8S_REPLICAS = "TFDIST_K8S_REPLICAS"
K8S_PORT = "TFDIST_K8S_PORT"
K8S_SUBDOMAIN = "TFDIST_K8S_SUBDOMAIN"
K8S_JOB_NAME = "TFDIST_K8S_JOB_NAME"
JOBSET_NAME = "JOBSET_NAME"
REPLICATED_JOB_NAME = "REPLICATED_JOB_NAME"
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
DEFAULT_K8S_PORT = 2222


def resolve_tf_config(environ: Mapping[str, str], source: str = "auto") -> dict | None:
    """The TF_CONFIG dictionary this process should use (see :func:`resolve_cluster`)."""
    resolved = resolve_cluster(environ, source)
    return resolved.to_dict() if resolved is not None else None


def resolve_cluster(environ: Mapping[str, str], source: str = "auto") -> TfConfig | None:
    """The TF_CONFIG this process should use.

    Args:
        environ: the process environment (``os.environ`` or a test's dictionary).
        source: ``auto`` (TF_CONFIG if set, else Slurm, else Kubernetes), or one of ``env``, ``slurm``, ``k8s``.

    Returns:
        The validated TF_CONFIG, or None when ``auto`` finds nothing that describes a cluster (a plain process,
        a one-task Slurm step, or a batch shell outside ``srun``).

    Raises:
        UsageError: the chosen source is missing or its variables contradict each other.
    """
    if source not in SOURCES:
        raise UsageError(f"unknown cluster source {source!r}", hint=f"use one of {', '.join(SOURCES)}")
    if source == "env":
        return _from_tf_config(environ, required=True)
    if source == "slurm":
        return _from_slurm(environ, required=True)
    if source == "k8s":
        return _from_k8s(environ, required=True)
    for finder in (_from_tf_config, _from_slurm, _from_k8s):
        found = finder(environ, required=False)
        if found is not None:
            return found
    return None


def detect_source(environ: Mapping[str, str]) -> str | None:
    """Which source ``auto`` would use (``env``, ``slurm``, ``k8s``), or None."""
    for name, finder in (("env", _from_tf_config), ("slurm", _from_slurm), ("k8s", _from_k8s)):
        if finder(environ, required=False) is not None:
            return name
    return None


# ---------------------------------------------------------------------------------------------------- TF_CONFIG


def _from_tf_config(environ: Mapping[str, str], *, required: bool) -> TfConfig | None:
    text = environ.get(TF_CONFIG, "").strip()
    if not text:
        if required:
            raise UsageError("TF_CONFIG is not set", hint="export TF_CONFIG or use --from auto")
        return None
    return TfConfig.parse(text, TF_CONFIG)


# -------------------------------------------------------------------------------------------------------- Slurm


_DIGITS = re.compile(f"[0-9]{{1,{MAX_DIGITS}}}")
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*")


def _int(environ: Mapping[str, str], name: str, default: int | None = None, *, high: int = MAX_TASKS) -> int:
    """A count or index from the environment, from 0 to ``high``: anything larger is a typo or hostile."""
    raw = environ.get(name, "").strip()
    if not raw:
        if default is None:
            raise UsageError(f"{name} is not set")
        return default
    if not _DIGITS.fullmatch(raw) or int(raw) > high:
        raise UsageError(f"{name}={raw[:40]!r} is not an integer from 0 to {high}")
    return int(raw)


def _dns_name(environ: Mapping[str, str], name: str) -> str:
    """A Kubernetes name from the environment; it becomes part of every task's address."""
    value = environ.get(name, "").strip()
    if value and (len(value) > 253 or not _DNS_NAME.fullmatch(value)):
        raise UsageError(f"{name}={value[:60]!r} is not a Kubernetes DNS name",
                         hint="lower-case letters, digits, '-' and '.'")
    return value


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _first(environ: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


def slurm_port_base(environ: Mapping[str, str]) -> int:
    """``TFDIST_SLURM_PORT_BASE``, else a base derived from ``SLURM_JOB_ID`` (see the module docstring)."""
    if environ.get(SLURM_PORT_BASE, "").strip():
        base = check_port(environ[SLURM_PORT_BASE], SLURM_PORT_BASE)
    else:
        base = 20000 + 10 * (_int(environ, "SLURM_JOB_ID", 0, high=10**MAX_DIGITS) % 1000)
    return check_port(base, SLURM_PORT_BASE)


def _rank_placement(counts: list[int], distribution: str) -> list[tuple[int, int]]:
    """(node index, local offset) of each rank, as Slurm places them."""
    kind = distribution.split(":", 1)[0].split(",", 1)[0].strip().lower() or "block"
    placement: list[tuple[int, int]] = []
    if kind == "block":
        for node, count in enumerate(counts):
            placement.extend((node, offset) for offset in range(count))
    elif kind == "cyclic":
        # Round robin over the nodes that still have room.
        used = [0] * len(counts)
        while len(placement) < sum(counts):
            for node, count in enumerate(counts):
                if used[node] < count:
                    placement.append((node, used[node]))
                    used[node] += 1
    else:
        raise UsageError(f"SLURM_DISTRIBUTION={distribution[:40]!r} is not supported for TF_CONFIG",
                         hint="use srun --distribution=block (the default) or cyclic")
    return placement


def _slurm_roles(environ: Mapping[str, str], ntasks: int) -> list[tuple[str, int]]:
    """(role, index) of each rank: [chief], workers, parameter servers, [evaluator]."""
    chief = 1 if _flag(environ, SLURM_CHIEF) else 0
    evaluator = 1 if _flag(environ, SLURM_EVALUATOR) else 0
    ps = _int(environ, SLURM_PS, 0)
    workers = ntasks - chief - ps - evaluator
    if ps < 0 or workers < 0 or (workers == 0 and not chief):
        raise UsageError(f"{ntasks} Slurm tasks cannot hold chief={chief}, ps={ps}, evaluator={evaluator} "
                         "and at least one worker", hint="ask Slurm for more tasks or fewer special roles")
    roles = [("chief", i) for i in range(chief)] + [("worker", i) for i in range(workers)]
    roles += [("ps", i) for i in range(ps)] + [("evaluator", 0)] * evaluator
    return roles


def _named(name: str, expand, text: str):
    """``expand(text)``, its errors prefixed with the variable ``text`` came from."""
    try:
        return expand(text)
    except UsageError as bad:
        raise UsageError(f"{name}: {bad.message}", hint=bad.hint) from None


def _from_slurm(environ: Mapping[str, str], *, required: bool) -> TfConfig | None:
    nodelist = _first(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    rank_text = environ.get("SLURM_PROCID", "").strip()
    in_step = bool(environ.get("SLURM_STEP_ID", "").strip() or environ.get("SLURM_STEP_NODELIST", "").strip())
    if nodelist is None or not rank_text or not in_step:
        if required:
            raise UsageError("not inside a Slurm task started by srun (no SLURM_STEP_ID / SLURM_PROCID)",
                             hint="start each task with srun")
        return None
    hosts = _named(nodelist[0], expand_hostlist, nodelist[1])
    for host in hosts:
        check_host(host, nodelist[0])
    per_node = _first(environ, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    counts = _named(per_node[0], expand_tasks_per_node, per_node[1]) if per_node else [1] * len(hosts)
    if sum(counts) > MAX_TASKS:
        raise UsageError(f"{per_node[0] if per_node else nodelist[0]} adds up to {sum(counts)} tasks, "
                         f"more than {MAX_TASKS}")
    if len(counts) != len(hosts):
        raise UsageError(f"{nodelist[0]} names {len(hosts)} nodes but "
                         f"{per_node[0] if per_node else 'the task counts'} describe {len(counts)}")
    ntasks = _int(environ, "SLURM_STEP_NUM_TASKS", _int(environ, "SLURM_NTASKS", sum(counts)))
    if ntasks != sum(counts):
        raise UsageError(f"Slurm says {ntasks} tasks but the per-node counts add up to {sum(counts)}")
    rank = _int(environ, "SLURM_PROCID")
    if not 0 <= rank < ntasks:
        raise UsageError(f"SLURM_PROCID={rank} is outside 0..{ntasks - 1}")
    if ntasks == 1 and not required:
        return None  # one task is not a cluster: let the runtime use a single-worker strategy

    placement = _rank_placement(counts, environ.get("SLURM_DISTRIBUTION", "block"))
    node, offset = placement[rank]
    # Slurm tells each task where it runs: disagreeing means our layout would give wrong addresses.
    own_node = environ.get("SLURMD_NODENAME", "").strip()
    if own_node and own_node != hosts[node]:
        raise UsageError(f"rank {rank} should run on {hosts[node]} but SLURMD_NODENAME={own_node[:60]!r}",
                         hint="use the default block distribution or set TF_CONFIG yourself")
    local_id = environ.get("SLURM_LOCALID", "").strip()
    if local_id and _DIGITS.fullmatch(local_id) and int(local_id) != offset:
        raise UsageError(f"rank {rank} should have local id {offset} but SLURM_LOCALID={local_id[:20]!r}",
                         hint="use the default block distribution or set TF_CONFIG yourself")

    base = slurm_port_base(environ)
    if base + max(counts) - 1 > 65535:
        raise UsageError(f"port base {base} + {max(counts)} tasks per node runs past port 65535")
    addresses = [format_address(hosts[n], base + k) for n, k in placement]
    roles = _slurm_roles(environ, ntasks)
    cluster: dict[str, list[str]] = {}
    for (role, _), address in zip(roles, addresses):
        if role != "evaluator":
            cluster.setdefault(role, []).append(address)
    task_type, task_index = roles[rank]
    return TfConfig.build(cluster, task_type, task_index)


# --------------------------------------------------------------------------------------------------- Kubernetes


def parse_replicas(text: str) -> dict[str, int]:
    """``chief=1,worker=2`` -> ``{'chief': 1, 'worker': 2}`` (roles checked, zero counts dropped)."""
    replicas: dict[str, int] = {}
    for piece in text.split(","):
        if not piece.strip():
            continue
        role, sep, count = piece.partition("=")
        role = role.strip()
        if not sep or role not in ALL_ROLES or not _DIGITS.fullmatch(count.strip()):
            raise UsageError(f"bad {K8S_REPLICAS} entry {piece[:40]!r}", hint="expected e.g. chief=1,worker=2,ps=1")
        if int(count) > 0:
            replicas[role] = int(count)
        if sum(replicas.values()) > MAX_TASKS:
            raise UsageError(f"{K8S_REPLICAS} asks for more than {MAX_TASKS} tasks")
    if not replicas.get("chief") and not replicas.get("worker"):
        raise UsageError(f"{K8S_REPLICAS}={text[:60]!r} has no chief and no worker")
    return replicas


def _from_k8s(environ: Mapping[str, str], *, required: bool) -> TfConfig | None:
    index_text = environ.get(JOB_COMPLETION_INDEX, "").strip()
    replicas_text = environ.get(K8S_REPLICAS, "").strip()
    if not index_text or not replicas_text:
        # A plain Indexed Job (a sweep, say) has an index but no cluster: not ours to interpret under auto.
        if required:
            missing = JOB_COMPLETION_INDEX if not index_text else K8S_REPLICAS
            raise UsageError(f"{missing} is not set", hint="use the manifests `tfdist k8s` writes")
        return None
    index = _int(environ, JOB_COMPLETION_INDEX)
    replicas = parse_replicas(replicas_text)
    port = check_port(environ.get(K8S_PORT, "").strip() or DEFAULT_K8S_PORT, K8S_PORT)
    jobset = _dns_name(environ, JOBSET_NAME)
    if jobset:
        subdomain = _dns_name(environ, K8S_SUBDOMAIN) or jobset
        role = environ.get(REPLICATED_JOB_NAME, "").strip()
        if role not in replicas:
            raise UsageError(f"{REPLICATED_JOB_NAME}={role[:40]!r} is not one of the roles in {K8S_REPLICAS} "
                             f"({', '.join(replicas)})")

        def host(r: str, i: int) -> str:
            return f"{jobset}-{r}-0-{i}.{subdomain}:{port}"

        if not 0 <= index < replicas[role]:
            raise UsageError(f"{JOB_COMPLETION_INDEX}={index} is outside 0..{replicas[role] - 1} for {role}")
        task_type, task_index = role, index
    else:
        job = _dns_name(environ, K8S_JOB_NAME)
        subdomain = _dns_name(environ, K8S_SUBDOMAIN)
        if not job or not subdomain:
            raise UsageError(f"an Indexed Job needs {K8S_JOB_NAME} and {K8S_SUBDOMAIN} "
                             f"(or {JOBSET_NAME} under a JobSet)", hint="use the manifests `tfdist k8s` writes")
        order = [(r, i) for r in ALL_ROLES for i in range(replicas.get(r, 0))]
        globals_ = {task: n for n, task in enumerate(order)}

        def host(r: str, i: int) -> str:
            return f"{job}-{globals_[(r, i)]}.{subdomain}:{port}"

        if not 0 <= index < len(order):
            raise UsageError(f"{JOB_COMPLETION_INDEX}={index} is outside 0..{len(order) - 1}")
        task_type, task_index = order[index]
    cluster = {r: [host(r, i) for i in range(n)] for r, n in replicas.items() if r != "evaluator"}
    return TfConfig.build(cluster, task_type, task_index)


# ---------------------------------------------------------------------------------------------- task environment


def task_environment(environ: Mapping[str, str], source: str = "auto", *,
                     legacy_keras_available: bool = False) -> dict[str, str]:
    """``environ`` plus what a training task needs: TF_CONFIG, TFDIST_TASK_TYPE/INDEX, TF_USE_LEGACY_KERAS and, in a
    cluster with parameter servers, TF_GRPC_DEFAULT_OPTIONS.

    Used by ``tfdist tf-config --exec`` (the sbatch script and Kubernetes pods start every task through it).
    A TF_CONFIG already present is kept as it is; TF_USE_LEGACY_KERAS is set to 1 only when tf_keras is installed
    and the caller has not chosen, since Keras 3 cannot run multi-worker ``fit``. The gRPC keep-alive follows the
    launcher's rule (:func:`tfdist.cluster.grpc_keepalive.keepalive_env`): set for every task of a cluster with
    parameter servers, never over a value ``environ`` already has (the submitter's, the image's, the manifest's).

    Args:
        environ: the current environment.
        source: as for :func:`resolve_tf_config`.
        legacy_keras_available: whether ``tf_keras`` is importable (the caller checks, so this stays pure).
    """
    env = dict(environ)
    resolved = resolve_cluster(environ, source)
    if resolved is not None:
        if not env.get(TF_CONFIG, "").strip():
            env[TF_CONFIG] = resolved.to_json()
        if resolved.task is not None:
            env[TASK_TYPE] = resolved.task.type
            env[TASK_INDEX] = str(resolved.task.index)
        env.update(keepalive_env(len(resolved.cluster.get("ps", ())), environ))
    if legacy_keras_available and LEGACY_KERAS not in env:
        env[LEGACY_KERAS] = "1"
    return env
