"""``tfdist doctor --verify`` imports the real TensorFlow of this environment in a child process."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pytest

from tfdist.cli.main import main

# find_spec, not importorskip: the child process imports TensorFlow, this one must not.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="--verify needs TensorFlow installed"
)


@pytest.mark.slow
@pytest.mark.tf
def test_verify_runs_tensorflow_in_a_child(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["doctor", "--json", "--verify", "--verify-timeout", "300"])
    document = json.loads(capsys.readouterr().out)
    verification = document["verification"]
    assert verification["ok"] is True and verification["cpu_op"] is True
    assert verification["version"] == document["facts"]["tensorflow"]["dists"][0]["version"]
    has_nvidia = os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi") is not None
    if not has_nvidia:
        assert verification["gpus"] == []
        assert rc == 0 and document["verdict"] == "cpu-only"
        # GPU-related log lines on a machine without a GPU are information, not problems.
        assert all(f["severity"] != "error" for f in document["findings"])
