"""Each install extra brings exactly one TensorFlow distribution. tf-keras declares `tensorflow` as a dependency (read
here from its installed metadata when present), so next to it only `tensorflow` itself avoids a second distribution
sharing the `tensorflow/` package folder."""
from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
TF_DISTRIBUTIONS = {"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
                    "tensorflow-aarch64", "tensorflow-cpu-aws", "tf-nightly", "tf-nightly-cpu"}


def _names(requirements: list[str]) -> list[str]:
    return [re.match(r"[A-Za-z0-9._-]+", r).group(0).lower().replace("_", "-") for r in requirements]


@pytest.mark.parametrize("extra", ["cpu", "gpu"])
def test_one_tensorflow_per_extra(extra: str) -> None:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    names = _names(extras[extra])
    tensorflows = [n for n in names if n in TF_DISTRIBUTIONS]
    assert tensorflows == ["tensorflow"], f"[{extra}] brings {tensorflows}"
    assert "tf-keras" in names and "tensorboard" in names


def test_tf_keras_requires_tensorflow_itself() -> None:
    try:
        requires = metadata.requires("tf-keras") or []
    except metadata.PackageNotFoundError:
        pytest.skip("tf-keras is not installed here; the extras test above still holds")
    assert "tensorflow" in _names([r for r in requires if "extra ==" not in r])


def test_uv_is_a_runtime_dependency() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert "uv" in _names(project["dependencies"])  # `tfdist lock` right after `pip install tfdist`
    assert "build" in _names(project["optional-dependencies"]["dev"])  # `make dist`
