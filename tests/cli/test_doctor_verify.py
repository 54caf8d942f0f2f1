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
    # The static XLA checks' prediction travels with the verification, whatever it is on this machine.
    predicted = [f"{f['severity']} {f['id']}: {f['title']}" for f in document["findings"] if f["id"].startswith("xla-")]
    assert verification["xla_prediction"] == [p for p in predicted if not p.split()[1].startswith(("xla-compile", "xla-prediction"))]
    if not has_nvidia:
        assert verification["gpus"] == []
        assert rc == 0 and document["verdict"] == "cpu-only"
        # No GPU listed: the XLA step does not run, and says why, instead of compiling for the CPU.
        assert verification["xla"] == {"ran": False, "reason": "TensorFlow lists no GPU"}
        assert not any(f["id"] in ("xla-compile-failed", "xla-prediction-wrong") for f in document["findings"])
        # GPU-related log lines on a machine without a GPU are information, not problems.
        assert all(f["severity"] != "error" for f in document["findings"])
    elif verification["gpus"]:
        # A GPU: the jit_compile=True step ran; a failure is an error finding carrying TensorFlow's own text.
        xla = verification["xla"]
        assert xla["ran"] is True
        failed = [f for f in document["findings"] if f["id"] == "xla-compile-failed"]
        assert bool(failed) == (not xla["ok"])
        if failed:
            assert failed[0]["evidence"][0] == "TensorFlow: " + xla["error"]
