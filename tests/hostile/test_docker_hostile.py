"""Every valued flag of `tfdist docker` against the hostile corpus: the Dockerfile is read back instruction by
instruction the way Docker's parser splits it and linted by hadolint; printed commands are read back by shlex."""
from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.hostile.corpus import confirm, distinct, feed, tool
from tfdist.deploy.lock import LockSpec, render_header
from tfdist.mirror.catalog import get_mirror

LOCK_BODY = "six==1.17.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"
# The instructions of the CPU Dockerfile, in order: a value that adds or splits one shows up here.
INSTRUCTIONS = ["FROM", "ARG", "ENV", "SHELL", "WORKDIR", "COPY", "RUN", "WORKDIR", "COPY", "USER", "CMD"]
# flag -> (valid base value, whether the value is a path the tool creates or reads)
FLAGS = {
    "--tf": ("2.21", False), "--python": ("3.11", False), "--lock": ("requirements.lock", True),
    "--mirror": ("tuna", False), "--tag": ("me/train:1", False), "--output": ("Dockerfile", True),
}


def argv_for(flag: str, value: str) -> list[str]:
    if flag == "--lock":
        return ["docker", "--lock", value, "-o", "Dockerfile"]
    options = {"--tf": "2.21", "--cpu": None, "--output": "Dockerfile", flag: value}
    return ["docker", *(word for key, val in options.items() for word in (key, val) if word is not None)]


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs as Docker's parser sees them: comments dropped, `\\` continuations joined."""
    found, pending = [], ""
    for line in dockerfile.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        keyword, _, rest = (pending + line).strip().partition(" ")
        found.append((keyword.upper(), rest.strip()))
        pending = ""
    return found


def printed(out: str, prefix: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith(prefix))
    return shlex.split(line[len(prefix):])


def check_round_trip(flag: str, value: str, dockerfile: Path, out: str) -> None:
    parsed = instructions(dockerfile.read_text(encoding="utf-8"))
    assert [keyword for keyword, _ in parsed] == INSTRUCTIONS
    build, run = printed(out, "build:"), printed(out, "run:")
    if flag == "--tf":
        assert value == "2.21"
    elif flag == "--python":
        assert parsed[0][1] == f"python:{value or '3.11'}-slim-bookworm"  # empty: the default, as documented
    elif flag == "--lock":
        assert parsed[5][1] == f"{Path(value).as_posix()} ./"  # pathlib drops a trailing /
    elif flag == "--mirror":
        if not value:  # empty: no mirror, as without the flag
            assert not any(word.startswith("PIP_INDEX_URL=") for word in build)
        else:
            assert f"PIP_INDEX_URL={get_mirror(value).pip_index}" in build and value == value.strip()
    elif flag == "--tag":
        tag = value or "tfdist-tf2.21-cpu"  # empty: the default name, as documented
        assert build[:4] == ["docker", "build", "-t", tag] and run[-1] == tag
    elif flag == "--output":
        given = Path(value)
        if given.name != "Dockerfile" or given.parent != Path("."):
            assert build[build.index("-f") + 1] == str(given)
        assert build[-1] == str(given.parent)
    else:  # pragma: no cover - a flag added to FLAGS without a check
        raise AssertionError(flag)


def write_lock(folder: Path, name: str) -> None:
    """The lock the --lock value names, if the file system can hold that name (if not, tfdist must refuse it)."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        (folder / name).write_text(render_header(LockSpec(tf="2.21", flavour="cpu", python="3.11")) + LOCK_BODY)
    except (OSError, ValueError):
        pass


@pytest.mark.parametrize("flag", FLAGS)
def test_each_value_round_trips_or_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    base, relative = FLAGS[flag]
    accepted = feed("docker", flag, base, argv_for, tmp_path, capsys, relative=relative,
                    prepare=write_lock if flag == "--lock" else None)
    dockerfiles = [item.folder / (item.value if flag == "--output" else "Dockerfile") for item in accepted]
    confirm("docker", flag, accepted, lambda item: check_round_trip(
        flag, item.value, item.folder / (item.value if flag == "--output" else "Dockerfile"), item.outcome.out))
    lint = subprocess.run([tool("hadolint"), "--failure-threshold", "info", "--no-color",
                           *map(str, distinct(dockerfiles))], capture_output=True, text=True, timeout=300)
    assert lint.returncode == 0, lint.stdout[-3000:] + lint.stderr[-1000:]
