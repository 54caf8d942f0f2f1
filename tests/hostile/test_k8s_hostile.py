"""Every valued flag and command word of `tfdist k8s` against the hostile corpus: the manifests are read back with
PyYAML and checked against Kubernetes' own schemas with kubernetes-validate (an Indexed Job and its Service)."""
from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.hostile.corpus import confirm, distinct, feed

KUBERNETES = kubernetes_validate.latest_version()
BASE = {"--name": "digits", "--image": "registry.example/digits:1", "--workers": "2", "--kind": "indexed-job",
        "--output": "job.yaml"}
# flag -> (valid base value, whether the value is a path the tool creates)
FLAGS = {
    "--name": ("digits", False), "--image": ("registry.example/digits:1", False), "--workers": ("2", False),
    "--ps": ("0", False), "--gpus-per-worker": ("1", False), "--kind": ("indexed-job", False),
    "--max-restarts": ("3", False), "--checkpoint-pvc": ("ckpt", False), "--namespace": ("ml", False),
    "--output": ("job.yaml", True), "COMMAND": ("python", False), "ARG": ("--epochs", False),
}


def argv_for(flag: str, value: str) -> list[str]:
    options = dict(BASE)
    command = ["python", "train.py"]
    if flag == "COMMAND":
        command[0] = value
    elif flag == "ARG":
        command[1] = value
    else:
        options[flag] = value
    return ["k8s", *(word for pair in options.items() for word in pair), "--", *command]


def check_round_trip(flag: str, value: str, path: Path) -> None:
    service, job = yaml.safe_load_all(path.read_text(encoding="utf-8"))
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    total = job["spec"]["completions"]
    if flag == "--name":
        assert job["metadata"]["name"] == service["metadata"]["name"] == pod["subdomain"] == value
    elif flag == "--image":
        assert container["image"] == value
    elif flag == "--workers":
        assert total == int(value)
    elif flag == "--ps":
        assert int(value) == 0 and total == 2
    elif flag == "--gpus-per-worker":
        assert container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0) == int(value)
    elif flag == "--kind":
        assert value == "indexed-job" and job["kind"] == "Job"
    elif flag == "--max-restarts":
        assert job["spec"]["backoffLimit"] == int(value) * total
    elif flag == "--checkpoint-pvc":
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == value
    elif flag == "--namespace":
        assert job["metadata"]["namespace"] == service["metadata"]["namespace"] == value
    elif flag == "--output":
        assert job["kind"] == "Job"
    elif flag == "COMMAND":
        assert container["command"] == ["tfdist", "tf-config", "--exec", "--", value, "train.py"]
    elif flag == "ARG":
        assert container["command"] == ["tfdist", "tf-config", "--exec", "--", "python", value]
    else:  # pragma: no cover - a flag added to FLAGS without a check
        raise AssertionError(flag)


@pytest.mark.slow  # kubernetes-validate over every distinct manifest: about 10 s of CPU
@pytest.mark.parametrize("flag", FLAGS)
def test_each_value_round_trips_or_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    base, relative = FLAGS[flag]
    accepted = feed("k8s", flag, base, argv_for, tmp_path, capsys, relative=relative)
    paths = [item.folder / (item.value if flag == "--output" else "job.yaml") for item in accepted]
    confirm("k8s", flag, accepted, lambda item: check_round_trip(
        flag, item.value, item.folder / (item.value if flag == "--output" else "job.yaml")))
    for path in distinct(paths):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            kubernetes_validate.validate(document, KUBERNETES, strict=True)
