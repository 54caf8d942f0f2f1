"""Every valued flag and argument of `tfdist slurm` against the hostile corpus: the script is parsed by bash, run
with recording stubs for srun, and linted by shellcheck; #SBATCH lines are read the way sbatch reads them."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.corpus import assert_not_pwned, assert_shellcheck_clean, confirm, feed

# One bash runs every accepted script, each sourced in its own subshell (a fork, not a new bash), with srun as a
# recording function: as fast as one process, and each script still runs exactly as sbatch's bash would run it.
DRIVER = r"""
srun() {
    printf '%s\0' "$@" > "$STUB_DIR/srun.argv"
    printf '%s\0' "$TFDIST_MODEL_DIR" "$TFDIST_JOB_NAME" > "$STUB_DIR/srun.env"
}
for script in "$@"; do
    ( cd "$(dirname -- "$script")" && STUB_DIR="$PWD" && source "./$(basename -- "$script")" ) \
        > "$script.stdout" 2> "$script.stderr"
    echo "$?" > "$script.status"
done
"""
# flag -> (valid base value, whether the value is a path the script creates)
FLAGS = {
    "--nodes": ("2", False), "--tasks-per-node": ("2", False), "--gpus-per-task": ("1", False),
    "--cpus-per-task": ("4", False), "--partition": ("gpu", False), "--time": ("04:00:00", False),
    "--max-restarts": ("3", False), "--log-dir": ("logs", True), "--model-dir": ("ckpt", True),
    "--job-name": ("digits", False), "--grace": ("60", False), "--port-base": ("30000", False),
    "--ps": ("0", False), "--python": ("py", False), "--output": ("job.sbatch", True),
    "SCRIPT": ("train.py", False), "ARG": ("--epochs", False),
}
INT_DIRECTIVES = {"--nodes": "nodes", "--tasks-per-node": "ntasks-per-node", "--gpus-per-task": "gpus-per-task",
                  "--cpus-per-task": "cpus-per-task"}


def argv_for(flag: str, value: str) -> list[str]:
    output = value if flag == "--output" else "job.sbatch"
    script, args = ("train.py", ["--epochs", "1"])
    options: list[str] = [] if flag in ("--output", "SCRIPT", "ARG") else [flag, value]
    if flag == "SCRIPT":
        script = value
    if flag == "ARG":
        args = [value]
    return ["slurm", "-o", output, *options, script, *args]


def sbatch_directives(text: str) -> dict[str, str]:
    """#SBATCH lines as sbatch reads them: options up to the first command; each must be one --key=value word."""
    found = {}
    for line in text.splitlines()[1:]:
        if not line.startswith("#"):
            break
        if line.startswith("#SBATCH"):
            words = line.split()
            assert len(words) == 2, line  # one option per line, no stray words for sbatch to read as more options
            key, _, value = words[1].partition("=")
            found[key.removeprefix("--")] = value
    return found


def run_scripts(scripts: list[Path]) -> None:
    """Run the sbatch scripts under bash with a recording srun (see DRIVER); results land next to each script.

    Bash parses the whole retry loop, which holds srun and every line after it, before running it: a script that
    reaches srun and exits 0 has parsed completely (so no separate `bash -n`)."""
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "HOME": str(scripts[0].parent)}
    subprocess.run(["bash", "-c", DRIVER, "driver", *map(str, scripts)], env=env, check=True, timeout=300)


def srun_record(script: Path) -> tuple[list[str], list[str]]:
    """What the script's srun received: its argv and the exported variables."""
    status = (script.parent / (script.name + ".status")).read_text().strip()
    assert status == "0", (script.parent / (script.name + ".stderr")).read_text()
    argv = (script.parent / "srun.argv").read_bytes().decode("utf-8").split("\0")[:-1]
    exported = (script.parent / "srun.env").read_bytes().decode("utf-8").split("\0")[:-1]
    return argv, exported


def check_round_trip(flag: str, value: str, script: Path) -> None:
    text = script.read_text(encoding="utf-8")
    directives = sbatch_directives(text)
    argv, (model_dir, job_name) = srun_record(script)
    assert argv[0] == "--kill-on-bad-exit=1"
    log_dir = argv[1].removeprefix("--output=").removesuffix("/%x-%j-r0-task%t.log")
    python, command = argv[2], argv[8:]
    assert argv[3:8] == ["-m", "tfdist", "tf-config", "--exec", "--"] and command[0] == python
    if flag in INT_DIRECTIVES:
        assert directives.get(INT_DIRECTIVES[flag], "0") == str(int(value))
    elif flag == "--grace":
        assert directives["signal"] == f"B:TERM@{int(value)}"
    elif flag == "--max-restarts":
        assert f"MAX_RESTARTS=${{TFDIST_MAX_RESTARTS:-{int(value)}}}" in text
    elif flag == "--port-base":
        assert f"TFDIST_SLURM_PORT_BASE:-{int(value)}}}" in text
    elif flag == "--ps":
        assert int(value) == 0 and "TFDIST_SLURM_PS" not in text
    elif flag in ("--partition", "--time", "--job-name"):
        expected = value or "train" if flag == "--job-name" else value  # empty -J: the script's name, as documented
        assert directives[flag.removeprefix("--")] == expected
        if flag == "--job-name":
            assert job_name == expected
    elif flag == "--log-dir":
        assert log_dir == value and (script.parent / value).is_dir()
    elif flag == "--model-dir":
        expected = value or "checkpoints/train"  # empty means the default, as documented in --help
        assert model_dir == expected and (script.parent / expected).is_dir()
    elif flag == "--python":
        assert python == (value or sys.executable)  # empty: the interpreter running tfdist, as documented
    elif flag == "--output":
        line = text.splitlines()[1]
        assert shlex.split(line.split("Submit with: ", 1)[1]) == ["sbatch", os.path.basename(value)]
    elif flag == "SCRIPT":
        assert command[1:] == [value, "--epochs", "1"]
    elif flag == "ARG":
        assert command[1:] == ["train.py", value]
    else:  # pragma: no cover - a flag added to FLAGS without a check
        raise AssertionError(flag)


def make_script(flag: str):  # type: ignore[no-untyped-def]
    """`tfdist slurm` wants SCRIPT to exist in the submit folder: create it, under its hostile name where a file can
    have that name (a value no file can carry is then refused as a missing script, in one line)."""
    def make(folder: Path, value: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            (folder / (value if flag == "SCRIPT" else "train.py")).write_text("print('trained')\n")
        except (OSError, ValueError):
            pass
    return make


@pytest.mark.slow  # shellcheck over ~600 distinct scripts: about 30 s of CPU
@pytest.mark.parametrize("flag", FLAGS)
def test_each_value_round_trips_or_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    base, relative = FLAGS[flag]
    accepted = feed("slurm", flag, base, argv_for, tmp_path, capsys, relative=relative, prepare=make_script(flag))
    scripts = [item.folder / (item.value if flag == "--output" else "job.sbatch") for item in accepted]
    run_scripts(scripts)
    assert_not_pwned(tmp_path, flag)
    confirm("slurm", flag, accepted, lambda item: check_round_trip(
        flag, item.value, item.folder / (item.value if flag == "--output" else "job.sbatch")))
    assert_shellcheck_clean(scripts)
