"""After a SIGKILL and a restore from an in-memory snapshot, random ops and the input continue exactly where the
killed run was: the restored run draws, at the steps after the snapshot, the very numbers and batches the killed run
drew at those steps (real TensorFlow processes)."""
from __future__ import annotations

import ast
import re

import pytest

from tests.integration.test_snapshots import run_task, shm_dir, step_hashes  # noqa: F401 - shm_dir is a fixture

pytestmark = [pytest.mark.slow, pytest.mark.tf]

KILL_AT = 17


def draws(out: str) -> dict[int, tuple[list[float], str]]:
    return {int(s): (ast.literal_eval(r), b) for s, r, b in
            re.findall(r"^draw step=(\d+) rng=(\[[^\]]*\]) batch=(\w+)", out, flags=re.M)}


def resumed_step(result) -> int:
    found = re.search(r"tfdist: resume: from snapshot at step (\d+)", result.stderr)
    assert found, result.stderr[-3000:]
    return int(found.group(1))


def test_a_custom_loop_continues_the_global_generator_and_the_input_after_a_kill(tmp_path, shm_dir):  # noqa: F811
    killed = run_task(tmp_path, shm_dir, "--loop", "--rng", "--kill-at", str(KILL_AT))
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert "1 random generator(s), 1 input position(s)" in killed.stderr  # the Dropout's; the global one comes later
    before = draws(killed.stdout)
    assert max(before) == KILL_AT

    resumed = run_task(tmp_path, shm_dir, "--loop", "--rng", "--steps", "20")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    step = resumed_step(resumed)
    assert 0 < step < KILL_AT
    after = draws(resumed.stdout)
    assert min(after) == step + 1
    for s in range(step + 1, KILL_AT + 1):
        assert after[s] == before[s], f"step {s}: the restored run drew {after[s]}, the killed run {before[s]}"
    # The global generator was created at the first step from a non-deterministic seed, and the iterator shuffles:
    # neither a fresh generator nor a fresh iterator gives these.
    assert after[step + 1][1] != before[1][1]
    assert "not restored" not in resumed.stderr and "not saved" not in resumed.stderr


def test_keras_fit_continues_the_dropout_generator_after_a_kill(tmp_path, shm_dir):  # noqa: F811
    killed = run_task(tmp_path, shm_dir, "--rng", "--kill-at", str(KILL_AT))
    assert killed.returncode == -9, killed.stderr[-3000:]
    before = step_hashes(killed.stdout)
    before[KILL_AT] = re.search(rf"^killed step={KILL_AT} state=(\w+)", killed.stdout, flags=re.M).group(1)

    resumed = run_task(tmp_path, shm_dir, "--rng")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    step = resumed_step(resumed)
    assert 0 < step < KILL_AT
    after = step_hashes(resumed.stdout)
    # One batch, repeated: the state after a step depends on the restored weights, slots and the dropout mask only,
    # and a Dropout generator started afresh from its seed would draw the mask of step 1.
    for s in range(step + 1, KILL_AT + 1):
        assert after[s] == before[s], f"step {s} differs from the killed run's"
    assert "random generator state not in the snapshot" not in resumed.stderr
