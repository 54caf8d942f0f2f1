"""Kubernetes manifests for a multi-worker TensorFlow job (pure: a typed spec in, objects / YAML text out).

Three shapes, for three kinds of cluster:

- ``jobset`` (the default): a JobSet (``jobset.x-k8s.io/v1alpha2``), one replicated Indexed Job per role. JobSet
  provides the headless service and restarts *all* jobs on a retryable failure (``failurePolicy.maxRestarts``),
  which is what MultiWorkerMirroredStrategy needs: a restarted worker cannot rejoin a running collective.
- ``indexed-job``: a plain Indexed Job plus a headless Service, for clusters with no controller at all.
- ``tfjob``: Kubeflow's TFJob (``kubeflow.org/v1``), on request only (:data:`TFJOB_NOTE`). The operator creates one
  headless service per replica and injects TF_CONFIG; replicas restart on exit codes 128-255.

Why JobSet is the default: TFJob needs Kubeflow Trainer v1 (the training-operator), which is no longer maintained
(its successor, Trainer v2, has no TFJob), and Kueue turned its TFJob integration off by default (kueue#12606,
trainer#3517), while JobSet is one of the kinds Kueue queues out of the box and what Trainer v2 itself runs on. Of the
two kinds that need no Trainer v1, JobSet is the one that keeps every job shape a TFJob had (parameter servers, a
side-car evaluator, a separate chief) and the gang restart; an Indexed Job needs no CRD at all but has one pod
template for every task, so it takes neither parameter servers nor an evaluator.

Exit statuses mean the same under all three (``permanent_exit_codes`` in the defaults): 1-127 fail the job at once,
128-255 (143 = preempted) are retried. In the last two the runtime derives TF_CONFIG from the completion index
(:mod:`tfdist.cluster.resolve`). Every container starts through ``tfdist tf-config --exec``, serves ``/healthz`` and
``/metrics`` on the metrics port (probed by a startup and a liveness probe), and mounts one shared volume for
checkpoints and TensorBoard logs. Shared values (ports, thresholds, paths) come from ``templates/k8s/defaults.yaml``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from tfdist import __version__, quote, validate
from tfdist.errors import UsageError
from tfdist.cluster import TaskId, leader_of
from tfdist.cluster import resolve as names
from tfdist.cluster.grpc_keepalive import JOB_FILE_NOTE

KINDS = ("jobset", "indexed-job", "tfjob")
DEFAULT_KIND = "jobset"  # why: the module's docstring
# Said (on stderr, and in the file's header) whenever a TFJob is written: what it needs that a cluster may lack.
TFJOB_NOTE = ("a TFJob needs Kubeflow Trainer v1 (the training-operator), which is no longer maintained, and Kueue "
              "queues it only with its kubeflow.org/tfjob integration turned on; --kind jobset (the default) or "
              "indexed-job need neither")
# The header of the files of the other kinds: what must run in the cluster for them.
NEEDS = {"jobset": "Needs the JobSet controller (jobset.x-k8s.io); Kueue queues JobSets out of the box.",
         "indexed-job": "Needs nothing but Kubernetes (batch/v1 Job and a headless Service)."}
# The failure reason a Job gets when its podFailurePolicy's FailJob rule matched (a permanent exit status).
POD_FAILURE_POLICY_REASON = "PodFailurePolicy"
TFJOB_REPLICA_KEYS = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
GPU_RESOURCE = "nvidia.com/gpu"
CONTAINER_NAME = "tensorflow"  # TFJob requires this name
# Pod host names must stay DNS labels (<= 63): "<name>-<role>-0-<index>" under a JobSet.
MAX_NAME = 40


@lru_cache(maxsize=1)
def defaults() -> dict[str, Any]:
    """The shared values of ``templates/k8s/defaults.yaml``."""
    text = resources.files("tfdist.deploy").joinpath("templates/k8s/defaults.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


@dataclass(frozen=True)
class K8sJobSpec:
    """What ``tfdist k8s`` was asked for.

    Attributes:
        name: job name (a DNS label of at most 40 characters; pods and services are named after it).
        image: container image with TensorFlow, tfdist and the training code.
        command: what each task runs (started through ``tfdist tf-config --exec``).
        workers: worker replicas. ps: parameter servers. chief: a separate chief. evaluator: a side-car evaluator.
        gpus_per_worker: ``nvidia.com/gpu`` limit of the chief and each worker (0: none).
        kind: ``jobset`` (default), ``indexed-job`` or ``tfjob``.
        max_restarts: how often the job may be restarted after failures.
        checkpoint_pvc: a ReadWriteMany PersistentVolumeClaim for checkpoints; None: an emptyDir (lost with the pod).
        namespace: metadata.namespace, or None for kubectl's current namespace.
        probes: add the startup and liveness probes on the runtime's ``/healthz``.
    """

    name: str
    image: str
    command: tuple[str, ...]
    workers: int = 1
    ps: int = 0
    chief: bool = False
    evaluator: bool = False
    gpus_per_worker: int = 0
    kind: str = DEFAULT_KIND
    max_restarts: int = 3
    checkpoint_pvc: str | None = None
    namespace: str | None = None
    probes: bool = True

    def __post_init__(self) -> None:
        validate.dns_label(self.name, "--name", max_length=MAX_NAME)
        if not self.name[0].isalpha():  # services and pods are named after it: RFC 1035 labels start with a letter
            raise validate.refuse("--name", self.name, "does not start with a letter", "start it with a-z")
        validate.image_reference(self.image, "--image")
        if self.namespace is not None:
            validate.dns_label(self.namespace, "--namespace")
        if self.checkpoint_pvc is not None:
            validate.dns_subdomain(self.checkpoint_pvc, "--checkpoint-pvc")
        for word in self.command:
            quote.shell(word, "COMMAND")  # no argument can hold a NUL; everything else is quoted by the YAML writer
        if self.kind not in KINDS:
            raise UsageError(f"unknown kind {self.kind!r}", hint=f"use one of {', '.join(KINDS)}")
        if not self.command:
            raise UsageError("no command to run", hint="put it after --, e.g. -- python train.py")
        if self.workers < 0 or self.ps < 0 or self.gpus_per_worker < 0 or self.max_restarts < 0:
            raise UsageError("--workers, --ps, --gpus-per-worker and --max-restarts cannot be negative")
        if self.workers == 0 and not self.chief:
            raise UsageError("the job needs at least one worker or a chief", hint="pass --workers N")
        if self.ps and self.workers == 0:
            raise UsageError("parameter servers need workers", hint="pass --workers N")
        if self.kind == "indexed-job" and self.ps:
            raise UsageError("parameter servers never exit, so an Indexed Job with them never completes",
                             hint="use --kind jobset (the default) for parameter-server training")
        if self.kind == "indexed-job" and self.evaluator:
            # One pod template serves every index, and the evaluator must not get the workers' step-based probes.
            raise UsageError("an Indexed Job has one pod template, which cannot suit both workers and an evaluator",
                             hint="use --kind jobset (the default) for a side-car evaluator")

    def replicas(self) -> dict[str, int]:
        """Role -> replica count, roles in TF order, empty roles left out."""
        counts = {"chief": int(self.chief), "worker": self.workers, "ps": self.ps, "evaluator": int(self.evaluator)}
        return {role: n for role, n in counts.items() if n}

    @property
    def model_dir(self) -> str:
        return f"{defaults()['shared_mount']}/{self.name}"


# ------------------------------------------------------------------------------------------------ building blocks


def _labels(spec: K8sJobSpec, role: str | None = None) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/created-by": "tfdist"}
    if role:
        labels["app.kubernetes.io/component"] = role
    return labels


def _metadata(spec: K8sJobSpec, name: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name or spec.name}
    if spec.namespace:
        meta["namespace"] = spec.namespace
    meta["labels"] = _labels(spec)
    return meta


def _field(path: str) -> dict[str, Any]:
    return {"fieldRef": {"fieldPath": path}}


def _env(spec: K8sJobSpec, role: str) -> list[dict[str, Any]]:
    d = defaults()
    env: list[dict[str, Any]] = [
        {"name": "TFDIST_JOB_NAME", "value": spec.name},
        {"name": "TFDIST_MODEL_DIR", "value": spec.model_dir},
        {"name": "TFDIST_METRICS_PORT", "value": str(d["metrics_port"])},
        {"name": "TFDIST_METRICS_HOST", "value": "0.0.0.0"},
        {"name": "TFDIST_MAX_RESTARTS", "value": str(spec.max_restarts)},
    ]
    if spec.kind == "tfjob":
        return env  # the operator injects TF_CONFIG
    replicas = ",".join(f"{r}={n}" for r, n in spec.replicas().items())
    env += [{"name": names.K8S_REPLICAS, "value": replicas}, {"name": names.K8S_PORT, "value": str(d["tf_port"])}]
    if spec.kind == "jobset":
        env += [
            {"name": names.JOBSET_NAME, "valueFrom": _field("metadata.annotations['jobset.sigs.k8s.io/jobset-name']")},
            {"name": names.REPLICATED_JOB_NAME,
             "valueFrom": _field("metadata.annotations['jobset.sigs.k8s.io/replicatedjob-name']")},
            {"name": "TFDIST_RESTART_COUNT",
             "valueFrom": _field("metadata.annotations['jobset.sigs.k8s.io/restart-attempt']")},
        ]
    else:
        env += [
            {"name": names.K8S_JOB_NAME, "valueFrom": _field("metadata.labels['job-name']")},
            {"name": names.K8S_SUBDOMAIN, "value": spec.name},
        ]
    return env


def _probe(kind: str) -> dict[str, Any]:
    d = defaults()
    probe = {"httpGet": {"path": d["health_path"], "port": d["metrics_port_name"]}}
    probe.update(d[kind])
    return probe


def _container(spec: K8sJobSpec, role: str) -> dict[str, Any]:
    d = defaults()
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "command": ["tfdist", "tf-config", "--exec", "--", *spec.command],
        "env": _env(spec, role),
        "ports": [{"name": d["tf_port_name"], "containerPort": d["tf_port"]},
                  {"name": d["metrics_port_name"], "containerPort": d["metrics_port"]}],
        "volumeMounts": [{"name": d["shared_volume"], "mountPath": d["shared_mount"]}],
    }
    if spec.gpus_per_worker and role in ("chief", "worker"):
        container["resources"] = {"limits": {GPU_RESOURCE: spec.gpus_per_worker}}
    # Parameter servers and the evaluator run no training steps, so a step-based health check says nothing there.
    if spec.probes and role in ("chief", "worker"):
        container["startupProbe"] = _probe("startup_probe")
        container["livenessProbe"] = _probe("liveness_probe")
    return container


def _pod_spec(spec: K8sJobSpec, role: str, *, restart_policy: str | None) -> dict[str, Any]:
    d = defaults()
    volume: dict[str, Any] = {"name": d["shared_volume"]}
    if spec.checkpoint_pvc:
        volume["persistentVolumeClaim"] = {"claimName": spec.checkpoint_pvc}
    else:
        volume["emptyDir"] = {}
    pod: dict[str, Any] = {}
    if restart_policy:
        pod["restartPolicy"] = restart_policy
    pod["terminationGracePeriodSeconds"] = d["termination_grace_seconds"]
    pod["containers"] = [_container(spec, role)]
    pod["volumes"] = [volume]
    return pod


def _pod_template(spec: K8sJobSpec, role: str, *, restart_policy: str | None) -> dict[str, Any]:
    return {"metadata": {"labels": _labels(spec, role)},
            "spec": _pod_spec(spec, role, restart_policy=restart_policy)}


class _FlowList(list):
    """A list written on one line (the 127 permanent exit codes)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_FlowList, lambda dumper, data: dumper.represent_sequence(
    "tag:yaml.org,2002:seq", data, flow_style=True))


def _permanent_exit_codes() -> list[int]:
    low, high = defaults()["permanent_exit_codes"]
    return _FlowList(range(low, high + 1))


# --------------------------------------------------------------------------------------------------- the kinds


def tfjob(spec: K8sJobSpec) -> dict[str, Any]:
    """A Kubeflow TFJob (``kubeflow.org/v1``)."""
    d = defaults()
    replica_specs = {
        TFJOB_REPLICA_KEYS[role]: {
            "replicas": count,
            "restartPolicy": "ExitCode",
            "template": _pod_template(spec, role, restart_policy=None),
        }
        for role, count in spec.replicas().items()
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": _metadata(spec),
        "spec": {
            "runPolicy": {
                "backoffLimit": spec.max_restarts,
                # Running: parameter servers (which never exit) are removed once the chief finishes.
                "cleanPodPolicy": "Running",
                "ttlSecondsAfterFinished": d["ttl_seconds_after_finished"],
            },
            "tfReplicaSpecs": replica_specs,
        },
    }


def _indexed_job_spec(spec: K8sJobSpec, role: str | None, completions: int, *,
                      backoff_limit: int, subdomain: str | None) -> dict[str, Any]:
    template = _pod_template(spec, role or "worker", restart_policy="Never")
    if role is None:  # one template for every role of an Indexed Job
        template["metadata"]["labels"].pop("app.kubernetes.io/component")
    if subdomain:
        template["spec"] = {"subdomain": subdomain, **template["spec"]}
    return {
        "completionMode": "Indexed",
        "completions": completions,
        "parallelism": completions,
        "backoffLimit": backoff_limit,
        "podFailurePolicy": {"rules": [
            # Evicted or preempted pods do not count against the restart budget.
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob",
             "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "In", "values": _permanent_exit_codes()}},
        ]},
        "template": template,
    }


def jobset(spec: K8sJobSpec) -> dict[str, Any]:
    """A JobSet (``jobset.x-k8s.io/v1alpha2``): one replicated Indexed Job per role."""
    # The JobSet succeeds when the leader's replicated job does (TFJob's success policy).
    leader = leader_of(TaskId(role, 0) for role in spec.replicas()).type  # type: ignore[union-attr]
    replicated = [
        {"name": role, "replicas": 1,
         "template": {"spec": _indexed_job_spec(spec, role, count, backoff_limit=0, subdomain=None)}}
        for role, count in spec.replicas().items()
    ]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _metadata(spec),
        "spec": {
            # The headless service "<name>" with a DNS record per pod, published before the pods are ready.
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            # Any failed pod fails its Job (backoffLimit 0), and JobSet then recreates every Job: a gang restart;
            # except a permanent exit status (the Job's podFailurePolicy), which fails the JobSet at once, as the
            # ExitCode restart policy of a TFJob does: training a bug or bad input again cannot help.
            "failurePolicy": {"maxRestarts": spec.max_restarts, "rules": [
                {"name": "permanentExitCode", "action": "FailJobSet",
                 "onJobFailureReasons": [POD_FAILURE_POLICY_REASON]}]},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [leader]},
            "ttlSecondsAfterFinished": defaults()["ttl_seconds_after_finished"],
            "replicatedJobs": replicated,
        },
    }


def indexed_job(spec: K8sJobSpec) -> list[dict[str, Any]]:
    """A headless Service and an Indexed Job (``batch/v1``); completion index 0 is the chief if there is one."""
    d = defaults()
    total = sum(spec.replicas().values())
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec),
        "spec": {
            "clusterIP": "None",
            # Peers must resolve each other before the startup probe passes.
            "publishNotReadyAddresses": True,
            "selector": {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/created-by": "tfdist"},
            "ports": [{"name": d["tf_port_name"], "port": d["tf_port"], "targetPort": d["tf_port"]}],
        },
    }
    job_spec = _indexed_job_spec(spec, None, total, backoff_limit=spec.max_restarts * total, subdomain=spec.name)
    job_spec["ttlSecondsAfterFinished"] = d["ttl_seconds_after_finished"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(spec), "spec": job_spec}
    return [service, job]


def manifests(spec: K8sJobSpec) -> list[dict[str, Any]]:
    """The Kubernetes objects for ``spec``, in the order to apply them."""
    if spec.kind == "tfjob":
        return [tfjob(spec)]
    if spec.kind == "jobset":
        return [jobset(spec)]
    return indexed_job(spec)


def render_manifests(spec: K8sJobSpec) -> str:
    """The objects as one multi-document YAML text with a short header."""
    needs = f"Note: {TFJOB_NOTE}." if spec.kind == "tfjob" else NEEDS[spec.kind]
    header = (f"# Written by `tfdist k8s` (tfdist {__version__}): {spec.kind}, "
              + ", ".join(f"{n} {r}" for r, n in spec.replicas().items())
              + f".\n# {needs}\n# Apply with: kubectl apply -f <this file>\n"
              + "".join(f"# {line}\n" for line in (JOB_FILE_NOTE if spec.ps else ())))
    body = yaml.dump_all(manifests(spec), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120,
                         explicit_start=True)
    return header + body
