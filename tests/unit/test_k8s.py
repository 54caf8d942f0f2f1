"""Kubernetes manifests: JobSets (the default kind) and TFJobs against their CRDs' schemas (strict: unknown fields
refused), core objects and job templates against Kubernetes' own schemas (kubernetes-validate, offline), tfdist's own
checks of what the schemas leave open, and the TF_CONFIG each pod resolves to matching the DNS names the manifests
create."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests import k8s_crds
from tfdist.deploy.k8s import TFJOB_NOTE, K8sJobSpec, defaults, manifests, render_manifests
from tfdist.errors import UsageError
from tfdist.cluster.grpc_keepalive import keepalive_options
from tfdist.cluster.resolve import resolve_tf_config, task_environment

CURRENT = kubernetes_validate.latest_version()  # the newest Kubernetes whose schemas kubernetes-validate bundles
OLDEST = "1.30.0"  # the oldest release still common in managed clusters

SHAPES = {
    "workers": dict(workers=3),
    "chief-ps-evaluator-gpu": dict(workers=2, chief=True, ps=2, evaluator=True, gpus_per_worker=4),
    "pvc-namespace": dict(workers=2, checkpoint_pvc="shared-ckpt", namespace="ml", max_restarts=5),
    "no-probes": dict(workers=1, chief=True, probes=False),
}


def spec(kind: str, **overrides) -> K8sJobSpec:
    values = dict(name="digits", image="registry.example/digits:1", command=("python", "digits.py", "--epochs", "3"),
                  kind=kind)
    values.update(overrides)
    return K8sJobSpec(**values)


@pytest.fixture(scope="module")
def tfjob_schema() -> jsonschema.Draft7Validator:
    return k8s_crds.validator(k8s_crds.TFJOB_CRD, "v1")


@pytest.fixture(scope="module")
def jobset_schema() -> jsonschema.Draft7Validator:
    return k8s_crds.validator(k8s_crds.JOBSET_CRD, "v1alpha2")


def _containers(pod_spec: dict) -> list[dict]:
    return pod_spec["containers"]


def _check_pod_spec(pod_spec: dict, role: str, shape: K8sJobSpec) -> None:
    """What the schemas do not say: names, ports the probes use, GPUs, grace period, shared volume."""
    d = defaults()
    (container,) = _containers(pod_spec)
    assert container["name"] == "tensorflow"
    assert container["command"][:4] == ["tfdist", "tf-config", "--exec", "--"]
    assert tuple(container["command"][4:]) == shape.command
    port_names = {port["name"] for port in container["ports"]}
    env = {item["name"]: item for item in container["env"]}
    assert env["TFDIST_METRICS_PORT"]["value"] == str(d["metrics_port"])
    assert env["TFDIST_METRICS_HOST"]["value"] == "0.0.0.0"
    assert env["TFDIST_MODEL_DIR"]["value"].startswith(d["shared_mount"] + "/")
    probed = role in ("chief", "worker") and shape.probes
    for probe in ("startupProbe", "livenessProbe"):
        assert (probe in container) == probed
        if probed:
            assert container[probe]["httpGet"]["port"] in port_names
            assert container[probe]["httpGet"]["path"] == "/healthz"
    if probed:
        live = container["livenessProbe"]
        assert live["periodSeconds"] * live["failureThreshold"] >= 300  # longer than a checkpoint save
        start = container["startupProbe"]
        assert start["periodSeconds"] * start["failureThreshold"] >= 600
    gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    expected_gpus = shape.gpus_per_worker if role in ("chief", "worker") and shape.gpus_per_worker else None
    assert gpus == expected_gpus
    assert pod_spec["terminationGracePeriodSeconds"] >= 60
    (volume,) = pod_spec["volumes"]
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": d["shared_mount"]}]
    if shape.checkpoint_pvc:
        assert volume["persistentVolumeClaim"] == {"claimName": shape.checkpoint_pvc}
    else:
        assert "emptyDir" in volume


# ------------------------------------------------------------------------------------------------------ TFJob

@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_tfjob_matches_the_crd_schema_and_tfdist_rules(tfjob_schema, shape):
    job_spec = spec("tfjob", **SHAPES[shape])
    (tfjob,) = manifests(job_spec)
    tfjob_schema.validate(tfjob)
    assert (tfjob["apiVersion"], tfjob["kind"]) == ("kubeflow.org/v1", "TFJob")
    # The schema leaves these strings open; the operator only knows these values.
    run_policy = tfjob["spec"]["runPolicy"]
    assert run_policy["cleanPodPolicy"] in ("All", "Running", "None")
    assert run_policy["backoffLimit"] == job_spec.max_restarts
    assert run_policy["ttlSecondsAfterFinished"] > 0
    replica_specs = tfjob["spec"]["tfReplicaSpecs"]
    assert set(replica_specs) <= {"Chief", "Worker", "PS", "Evaluator"}
    expected = {"Chief": int(job_spec.chief), "Worker": job_spec.workers, "PS": job_spec.ps,
                "Evaluator": int(job_spec.evaluator)}
    assert {key: value["replicas"] for key, value in replica_specs.items()} == {
        key: n for key, n in expected.items() if n}
    for key, replica in replica_specs.items():
        assert replica["restartPolicy"] == "ExitCode"  # retries 128-255, e.g. 143 = preempted
        role = {"Chief": "chief", "Worker": "worker", "PS": "ps", "Evaluator": "evaluator"}[key]
        _check_pod_spec(replica["template"]["spec"], role, job_spec)
        # Kubernetes' own schema for the pod template the operator will stamp out.
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                                      "template": replica["template"]}, CURRENT, strict=True)


def test_the_crd_schema_check_is_not_vacuous(tfjob_schema):
    (tfjob,) = manifests(spec("tfjob", workers=2))
    broken = copy.deepcopy(tfjob)
    broken["spec"]["runPolicy"]["backoffLimit"] = "three"
    with pytest.raises(jsonschema.ValidationError):
        tfjob_schema.validate(broken)
    broken = copy.deepcopy(tfjob)
    broken["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "2"
    with pytest.raises(jsonschema.ValidationError):
        tfjob_schema.validate(broken)
    broken = copy.deepcopy(tfjob)
    broken["spec"]["runPolicy"]["backofLimit"] = 3  # a typo: the API server's strict field validation refuses it
    with pytest.raises(jsonschema.ValidationError, match="backofLimit"):
        tfjob_schema.validate(broken)


def test_a_tfjob_is_only_written_on_request_and_says_what_it_needs():
    assert K8sJobSpec(name="d", image="i:1", command=("t",)).kind == "jobset"
    header = render_manifests(spec("tfjob", workers=2)).split("\n---", 1)[0]
    assert f"# Note: {TFJOB_NOTE}." in header and "Kubeflow Trainer v1" in TFJOB_NOTE
    assert "Trainer" not in render_manifests(spec("jobset", workers=2)).split("\n---", 1)[0]


# ---------------------------------------------------------------------------------------- Indexed Job, JobSet

@pytest.mark.parametrize("shape", ["workers", "pvc-namespace", "no-probes"])
def test_indexed_job_and_service_pass_kubernetes_schemas(shape):
    job_spec = spec("indexed-job", **SHAPES[shape])
    service, job = manifests(job_spec)
    for version in (CURRENT, OLDEST):
        kubernetes_validate.validate(service, version, strict=True)
        kubernetes_validate.validate(job, version, strict=True)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    pod = job["spec"]["template"]
    # The service selects exactly the job's pods, and the pods name the service as their subdomain.
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["subdomain"] == service["metadata"]["name"]
    assert pod["spec"]["restartPolicy"] == "Never"  # required by podFailurePolicy
    total = sum(job_spec.replicas().values())
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == total
    rules = job["spec"]["podFailurePolicy"]["rules"]
    fail = [rule for rule in rules if rule["action"] == "FailJob"][0]["onExitCodes"]
    assert fail["containerName"] == "tensorflow" and fail["operator"] == "In"
    assert 143 not in fail["values"] and 1 in fail["values"] and max(fail["values"]) == 127
    _check_pod_spec(pod["spec"], "worker", job_spec)


def test_kubernetes_validate_is_not_vacuous():
    _, job = manifests(spec("indexed-job", workers=2))
    broken = copy.deepcopy(job)
    broken["spec"]["template"]["spec"]["subdomian"] = "typo"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, CURRENT, strict=True)


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_jobset_matches_the_crd_schema_and_its_jobs_are_valid_jobs(jobset_schema, shape):
    job_spec = spec("jobset", **SHAPES[shape])
    (jobset,) = manifests(job_spec)
    jobset_schema.validate(jobset)
    assert (jobset["apiVersion"], jobset["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    body = jobset["spec"]
    assert body["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    # A permanent exit status fails the Job by its podFailurePolicy (reason PodFailurePolicy), and that fails the
    # JobSet instead of restarting it: 1-127 are not retried, as under a TFJob's ExitCode policy.
    assert body["failurePolicy"] == {"maxRestarts": job_spec.max_restarts, "rules": [
        {"name": "permanentExitCode", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]}
    assert body["successPolicy"]["targetReplicatedJobs"] == ["chief" if job_spec.chief else "worker"]
    assert [rj["name"] for rj in body["replicatedJobs"]] == list(job_spec.replicas())
    for replicated in body["replicatedJobs"]:
        assert replicated["replicas"] == 1  # the resolver's host names assume job index 0
        job_body = replicated["template"]["spec"]
        assert job_body["backoffLimit"] == 0  # any failure goes to JobSet, which restarts every job
        assert job_body["completions"] == job_spec.replicas()[replicated["name"]]
        kubernetes_validate.validate({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
                                      "spec": job_body}, CURRENT, strict=True)
        _check_pod_spec(job_body["template"]["spec"], replicated["name"], job_spec)


# ------------------------------------------------------------------ what each pod resolves to, end to end

def _pod_env(container: dict, annotations: dict[str, str], labels: dict[str, str], index: int) -> dict[str, str]:
    """The environment Kubernetes would give this container (downward API resolved by hand)."""
    env = {"JOB_COMPLETION_INDEX": str(index)}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        path = item["valueFrom"]["fieldRef"]["fieldPath"]
        source, key = path.split("[", 1)
        key = key.strip("[]'")
        env[item["name"]] = (annotations if source == "metadata.annotations" else labels)[key]
    return env


def test_the_jobset_schema_check_is_not_vacuous(jobset_schema):
    (jobset,) = manifests(spec("jobset", workers=2))
    for path, value in ((("failurePolicy", "maxRestarts"), "three"), (("successPolicy", "operator"), "Most"),
                        (("failurePolicy", "rules", 0, "action"), "Retry"), (("network", "enableDNSHostname"), True),
                        (("replicatedJobs", 0, "template", "spec", "completion"), 2)):
        broken = copy.deepcopy(jobset)
        parent = broken["spec"]
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = value
        with pytest.raises(jsonschema.ValidationError):
            jobset_schema.validate(broken)


def test_jobset_pods_resolve_to_the_names_jobset_gives_them():
    job_spec = spec("jobset", workers=2, chief=True, ps=1, evaluator=True)
    (jobset,) = manifests(job_spec)
    name = jobset["metadata"]["name"]
    # JobSet's naming: pod host name <jobset>-<replicated job>-<job index>-<pod index>, subdomain = JobSet name.
    hosts = {(rj["name"], i): f"{name}-{rj['name']}-0-{i}.{name}:2222"
             for rj in jobset["spec"]["replicatedJobs"] for i in range(rj["template"]["spec"]["completions"])}
    seen = set()
    for rj in jobset["spec"]["replicatedJobs"]:
        (container,) = rj["template"]["spec"]["template"]["spec"]["containers"]
        for index in range(rj["template"]["spec"]["completions"]):
            annotations = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                           "jobset.sigs.k8s.io/restart-attempt": "0"}
            config = resolve_tf_config(_pod_env(container, annotations, {}, index))
            assert config["task"] == {"type": rj["name"], "index": index}
            for role, addresses in config["cluster"].items():
                assert addresses == [hosts[(role, i)] for i in range(len(addresses))]
            assert "evaluator" not in config["cluster"]
            seen.add((rj["name"], index))
    assert len(seen) == 5


def test_indexed_job_pods_resolve_to_their_own_host_names():
    job_spec = spec("indexed-job", workers=3, chief=True)
    service, job = manifests(job_spec)
    pod = job["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    job_name = job["metadata"]["name"]
    configs = []
    for index in range(job["spec"]["completions"]):
        labels = {"job-name": job_name, **pod["metadata"]["labels"]}
        configs.append(resolve_tf_config(_pod_env(container, {}, labels, index)))
    # Kubernetes names pod i "<job>-<i>" and publishes it as <hostname>.<subdomain>.
    everyone = [f"{job_name}-{i}.{pod['spec']['subdomain']}:{service['spec']['ports'][0]['port']}"
                for i in range(4)]
    for index, config in enumerate(configs):
        assert config["cluster"] == {"chief": everyone[:1], "worker": everyone[1:]}
        address = (config["cluster"][config["task"]["type"]][config["task"]["index"]])
        assert address.startswith(f"{job_name}-{index}.")


def _jobset_pods(job_spec: K8sJobSpec):
    """(role, index, container, the environment Kubernetes gives it) for every pod of the spec's JobSet."""
    (jobset,) = manifests(job_spec)
    name = jobset["metadata"]["name"]
    for rj in jobset["spec"]["replicatedJobs"]:
        (container,) = rj["template"]["spec"]["template"]["spec"]["containers"]
        annotations = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                       "jobset.sigs.k8s.io/restart-attempt": "0"}
        for index in range(rj["template"]["spec"]["completions"]):
            yield rj["name"], index, container, _pod_env(container, annotations, {}, index)


def _started(container: dict, pod_env: dict[str, str]) -> dict[str, str]:
    """Run the container's command as the pod would (`tfdist tf-config --exec -- ...`, the program replaced by one
    that prints its environment) and return the environment the training program got."""
    assert container["command"][:4] == ["tfdist", "tf-config", "--exec", "--"]
    show = "import json, os; print(json.dumps(dict(os.environ)))"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TFDIST_", "TF_", "JOB"))}
    result = subprocess.run([sys.executable, "-m", "tfdist", *container["command"][1:4], sys.executable, "-c", show],
                            env={**base, **pod_env}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_every_pod_of_a_parameter_server_job_starts_with_grpc_keepalive():
    # Without it the chief's coordinator waits for ever on a worker that stops answering (a cut-off node, a frozen
    # pod); tf-config --exec sets it, so the manifests never do: an image's or a hand-edited manifest's value wins.
    ps_job = spec("jobset", workers=2, chief=True, ps=1, evaluator=True)
    pods = list(_jobset_pods(ps_job))
    assert len(pods) == 5
    for role, index, container, pod_env in pods:
        assert "TF_GRPC_DEFAULT_OPTIONS" not in {item["name"] for item in container["env"]}
        assert task_environment(pod_env)["TF_GRPC_DEFAULT_OPTIONS"] == keepalive_options(), (role, index)
    role, index, container, pod_env = next(pod for pod in pods if pod[0] == "worker" and pod[1] == 1)
    started = _started(container, pod_env)
    assert (started["TFDIST_TASK_TYPE"], started["TFDIST_TASK_INDEX"]) == ("worker", "1")
    assert started["TF_GRPC_DEFAULT_OPTIONS"] == keepalive_options()
    # A value the pod already has (the image's ENV, the manifest edited by hand) is kept, even an empty one.
    assert _started(container, {**pod_env, "TF_GRPC_DEFAULT_OPTIONS": ""})["TF_GRPC_DEFAULT_OPTIONS"] == ""
    assert "gRPC keep-alive (TF_GRPC_DEFAULT_OPTIONS)" in render_manifests(ps_job).split("\n---", 1)[0]
    assert "TF_GRPC_DEFAULT_OPTIONS" not in render_manifests(spec("jobset", workers=2, chief=True))
    # MultiWorkerMirroredStrategy: no parameter servers, nothing set.
    for _, _, _, pod_env in _jobset_pods(spec("jobset", workers=2, chief=True)):
        assert "TF_GRPC_DEFAULT_OPTIONS" not in task_environment(pod_env)


def test_tfjob_parameter_server_pods_get_grpc_keepalive_from_the_operators_tf_config():
    (tfjob,) = manifests(spec("tfjob", workers=2, chief=True, ps=1))
    replicas = tfjob["spec"]["tfReplicaSpecs"]
    # What the operator injects: one address per replica, by its own service names.
    cluster = {role.lower(): [f"digits-{role.lower()}-{i}.ns.svc:2222" for i in range(body["replicas"])]
               for role, body in replicas.items()}
    for role, body in replicas.items():
        (container,) = body["template"]["spec"]["containers"]
        pod_env = {item["name"]: item["value"] for item in container["env"]}
        for index in range(body["replicas"]):
            operator = json.dumps({"cluster": cluster, "task": {"type": role.lower(), "index": index}})
            assert task_environment({**pod_env, "TF_CONFIG": operator})["TF_GRPC_DEFAULT_OPTIONS"] == \
                keepalive_options()


# ---------------------------------------------------------------------------------------------- input checks

@pytest.mark.parametrize(("overrides", "message"), [
    (dict(name="Digits"), "--name 'Digits' is not a DNS label"),
    (dict(name="d" * 41), "longer than the 40"),
    (dict(name="digits\n"), r"--name 'digits\\n' is not a DNS label"),
    (dict(name="9digits"), "does not start with a letter"),
    (dict(kind="deployment"), "unknown kind"),
    (dict(kind="indexed-job", ps=1, workers=2), "never completes"),
    (dict(kind="indexed-job", evaluator=True), "one pod template"),
    (dict(workers=0), "at least one worker"),
    (dict(workers=0, chief=True, ps=1), "need workers"),
    (dict(command=()), "no command"),
    (dict(image="a b"), "image"),
    (dict(checkpoint_pvc="Bad_Claim"), "--checkpoint-pvc 'Bad_Claim' is not a DNS subdomain"),
    (dict(checkpoint_pvc="a..b"), "--checkpoint-pvc 'a..b' is not a DNS subdomain"),
    (dict(checkpoint_pvc="c" * 254), "longer than the 253"),
    (dict(checkpoint_pvc="ckpt\n"), "--checkpoint-pvc"),
    (dict(namespace="ML"), "--namespace 'ML' is not a DNS label"),
    (dict(namespace="n" * 64), "longer than the 63"),
    (dict(namespace="ml\n"), "--namespace"),
    (dict(image="r/x:t\nkind: Pod"), "--image"),
    (dict(command=("python", "a\0b")), "NUL"),
])
def test_bad_specs_are_usage_errors(overrides, message):
    with pytest.raises(UsageError, match=message):
        spec(overrides.pop("kind", "tfjob"), **overrides)


def test_rendered_yaml_round_trips():
    text = render_manifests(spec("indexed-job", workers=2))
    assert text.startswith("# Written by `tfdist k8s`")
    documents = list(yaml.safe_load_all(text))
    assert documents == manifests(spec("indexed-job", workers=2))
