"""Every valued flag and command word of `tfdist k8s` against the hostile corpus: the manifests are read back with
PyYAML and checked by their real consumers: a JobSet (the default kind) against the JobSet CRD's schema (strict) and
its job templates with kubernetes-validate; an Indexed Job and its Service with kubernetes-validate."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests import k8s_crds
from tests.hostile.corpus import confirm, distinct, feed

KUBERNETES = kubernetes_validate.latest_version()
# flag -> (valid base value, whether the value is a path the tool creates)
FLAGS = {
    "--name": ("digits", False), "--image": ("registry.example/digits:1", False), "--workers": ("2", False),
    "--ps": ("0", False), "--gpus-per-worker": ("1", False), "--kind": (None, False),
    "--max-restarts": ("3", False), "--checkpoint-pvc": ("ckpt", False), "--namespace": ("ml", False),
    "--output": ("job.yaml", True), "COMMAND": ("python", False), "ARG": ("--epochs", False),
}
KINDS = ("jobset", "indexed-job")  # jobset is the default: its runs give no --kind unless the flag under test is it


def argv_for(kind: str, flag: str, value: str) -> list[str]:
    options = {"--name": "digits", "--image": "registry.example/digits:1", "--workers": "2", "--output": "job.yaml"}
    if kind != "jobset":
        options["--kind"] = kind
    command = ["python", "train.py"]
    if flag == "COMMAND":
        command[0] = value
    elif flag == "ARG":
        command[1] = value
    else:
        options[flag] = value
    return ["k8s", *(word for pair in options.items() for word in pair), "--", *command]


def _parts(kind: str, path: Path) -> tuple[list[dict[str, Any]], dict[str, int], dict[str, Any], int]:
    """(every object, the pods per role, the worker's pod spec, the restart budget as written)."""
    documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    if kind == "jobset":
        (jobset,) = documents
        assert jobset["kind"] == "JobSet"
        jobs = {rj["name"]: rj["template"]["spec"] for rj in jobset["spec"]["replicatedJobs"]}
        counts = {role: job["completions"] for role, job in jobs.items()}
        return documents, counts, jobs["worker"]["template"]["spec"], jobset["spec"]["failurePolicy"]["maxRestarts"]
    service, job = documents
    assert (service["kind"], job["kind"]) == ("Service", "Job")
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["name"] == service["metadata"]["name"] == pod["subdomain"]
    total = job["spec"]["completions"]
    return documents, {"worker": total}, pod, job["spec"]["backoffLimit"] // total


def check_round_trip(kind: str, flag: str, value: str, path: Path) -> None:
    documents, counts, pod, restarts = _parts(kind, path)
    (container,) = pod["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    if flag == "--name":
        assert env["TFDIST_JOB_NAME"] == value
        assert all(document["metadata"]["name"] == value for document in documents)
    elif flag == "--image":
        assert container["image"] == value
    elif flag == "--workers":
        assert counts["worker"] == int(value)
    elif flag == "--ps":
        assert counts.get("ps", 0) == int(value)
    elif flag == "--gpus-per-worker":
        assert container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0) == int(value)
    elif flag == "--kind":
        assert value == kind
    elif flag == "--max-restarts":
        assert restarts == int(value)
    elif flag == "--checkpoint-pvc":
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == value
    elif flag == "--namespace":
        assert all(document["metadata"]["namespace"] == value for document in documents)
    elif flag == "--output":
        assert counts == {"worker": 2}
    elif flag == "COMMAND":
        assert container["command"] == ["tfdist", "tf-config", "--exec", "--", value, "train.py"]
    elif flag == "ARG":
        assert container["command"] == ["tfdist", "tf-config", "--exec", "--", "python", value]
    else:  # pragma: no cover - a flag added to FLAGS without a check
        raise AssertionError(flag)


def validate(kind: str, path: Path, jobset_schema: Any) -> None:
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if kind != "jobset":
            kubernetes_validate.validate(document, KUBERNETES, strict=True)
            continue
        jobset_schema.validate(document)
        for replicated in document["spec"]["replicatedJobs"]:
            kubernetes_validate.validate({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
                                          "spec": replicated["template"]["spec"]}, KUBERNETES, strict=True)


@pytest.fixture(scope="module")
def jobset_schema() -> Any:
    return k8s_crds.validator(k8s_crds.JOBSET_CRD, "v1alpha2")


@pytest.mark.slow  # kubernetes-validate over every distinct manifest: about 10 s of CPU per kind
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flag", FLAGS)
def test_each_value_round_trips_or_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], jobset_schema: Any,
                                              kind: str, flag: str) -> None:
    base, relative = FLAGS[flag]
    accepted = feed(f"k8s {kind}", flag, base or kind, lambda f, v: argv_for(kind, f, v), tmp_path, capsys,
                    relative=relative)
    paths = [item.folder / (item.value if flag == "--output" else "job.yaml") for item in accepted]
    confirm(f"k8s {kind}", flag, accepted, lambda item: check_round_trip(
        kind, flag, item.value, item.folder / (item.value if flag == "--output" else "job.yaml")))
    for path in distinct(paths):
        validate(kind, path, jobset_schema)
