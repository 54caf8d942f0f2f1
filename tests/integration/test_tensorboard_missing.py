"""TensorFlow 2.21 no longer installs TensorBoard. A training script that takes tfdist.runtime's callbacks (TensorBoard
summaries on by default) where it is missing trains to the end, and its chief says in one line what to install;
before, ``fit`` failed with ``TBNotInstalledError`` at the end of the first epoch, after that epoch trained."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.tf]

SCRIPT = """
import sys
import numpy as np
import tensorflow as tf
from tfdist import runtime

callbacks = runtime.callbacks(sys.argv[1], global_batch_size=8)
model = tf.keras.Sequential([tf.keras.layers.Input(shape=(4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
data = tf.data.Dataset.from_tensor_slices((np.ones((64, 4), "float32"), np.ones((64, 1), "float32")))
model.fit(data.repeat().batch(8), epochs=2, steps_per_epoch=3, callbacks=callbacks, verbose=0)
print(f"steps={int(model.optimizer.iterations.numpy())}")
"""


def test_a_job_without_tensorboard_trains_on_and_says_what_to_install(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT / "tests" / "fixtures" /
                                                                          "blocked_imports")]),
           "TFDIST_TEST_BLOCKED_IMPORTS": "tensorboard"}
    result = subprocess.run([sys.executable, "train.py", str(tmp_path / "model")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == "steps=6"
    warnings = [line for line in result.stderr.splitlines() if line.startswith("tfdist: warning: TensorBoard")]
    assert warnings == ["tfdist: warning: TensorBoard in tfdist.runtime.callbacks needs the tensorboard extra: "
                        "pip install 'tfdist[tensorboard]'; training on without TensorBoard summaries "
                        "(tensorboard=False: none wanted)"]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "model" / "logs").exists()
