"""Hostile values for every valued flag of `tfdist lock`, read back by the lock's consumers.

Each accepted lock is parsed by pip's own requirements-file parser (the pins with their hashes, nothing else), its
header read back (the JSON target, the regenerate command and the install line split the way a shell splits them),
its environment.yml read by PyYAML, and the lock handed to `tfdist docker --lock`, which must take the recorded target
or refuse with one line. The resolver is a shell stand-in that prints a canned uv result; the real uv runs in
tests/integration/test_lock_resolve.py.
"""
from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tfdist import __version__
from tfdist.deploy import lock as locking
from tfdist.deploy.lock import HEADER_MARK, requirement_entries
from tfdist.validate import bad_character
from tests.hostile.corpus import TALLY, Accepted, assert_not_pwned, assert_refused_cleanly, confirm, feed, run_cli

CANNED = """absl-py==2.5.1 \\
    --hash=sha256:{a}
    # via tensorflow
tensorflow==2.21.0 \\
    --hash=sha256:{b}
    # via -r requirements.in
""".format(a="a" * 64, b="b" * 64)
WHEEL_HASH = "c" * 64
WHEEL = f"tfdist-{__version__}-py3-none-any.whl"
# flag -> (valid base value, a path the test lets the tool read or write)
FLAGS = {
    "--tf": ("2.21", False), "--python": ("3.11", False), "--glibc": ("2.28", False),
    "--platform": ("linux-x86_64", False), "--mirror": ("tuna", False), "--requirement": ("extra.txt", True),
    "--output": ("requirements.lock", True), "--conda": ("environment.yml", True), "--tfdist-wheel": (WHEEL, True),
}


@pytest.fixture
def fake_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """uv stand-in: the canned pins, plus tfdist's own `@ file://` line when requirements.in asks for a wheel."""
    canned = tmp_path / "canned.txt"
    canned.write_text(CANNED)
    script = tmp_path / "uv"
    script.write_text(f"#!/bin/sh\ncat {shlex.quote(str(canned))}\n"
                      "if grep -q '^tfdist @ ' requirements.in; then\n"
                      "  sed -n 's/^tfdist @ .*/& \\\\/p' requirements.in\n"
                      f"  echo '    --hash=sha256:{WHEEL_HASH}'\nfi\n")
    script.chmod(0o755)
    monkeypatch.setattr(locking, "find_uv", lambda: str(script))


def _argv(flag: str, value: str) -> list[str]:
    defaults = {"--tf": "2.21", "--output": "requirements.lock"}
    argv = ["lock", "--cpu"] + ([] if flag == "--tfdist-wheel" else ["--no-tfdist"])
    for name, given in defaults.items():
        if name != flag:
            argv += [name, given]
    return argv + [flag, value]


def _prepare(flag: str):  # type: ignore[no-untyped-def]
    def make(folder: Path, value: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        if flag in ("--requirement", "--tfdist-wheel"):
            try:  # the file the flag names, where such a file can exist
                (folder / value).write_text("absl-py\n" if flag == "--requirement" else "not a real wheel\n")
            except (OSError, ValueError):
                pass
    return make


def _pip_requirements(path: Path) -> list[tuple[str, list[str]]]:
    from pip._internal.network.session import PipSession
    from pip._internal.req.req_file import parse_requirements

    parsed = parse_requirements(str(path), session=PipSession())
    return [(item.requirement.strip(), sorted((item.options or {}).get("hashes", {}).get("sha256", [])))
            for item in parsed]


def _check(flag: str, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    def check(item: Accepted) -> None:
        given = {**{"--tf": "2.21", "--python": "3.11", "--glibc": "2.28", "--platform": "linux-x86_64",
                    "--output": "requirements.lock"}, flag: item.value}
        output = given["--output"]
        lock = item.folder / output
        text = lock.read_text(encoding="utf-8")
        # pip: exactly the canned pins with their hashes (a value that broke a line out of the header would add one).
        expected = [("absl-py==2.5.1", ["a" * 64]), ("tensorflow==2.21.0", ["b" * 64])]
        if flag == "--tfdist-wheel":
            expected.append((f"./{Path(item.value).name}", [WHEEL_HASH]))
        assert _pip_requirements(lock) == expected
        # The header: the JSON target, then the regenerate and install lines as a shell splits them.
        info = locking.parse_header(text)
        assert (info.tf, info.python, info.glibc, info.platform) == \
            (given["--tf"], given["--python"], given["--glibc"], given["--platform"])
        lines = text.splitlines()
        name = Path(output).name
        regenerate = shlex.split(lines[1].removeprefix("#   "))
        assert lines[1].startswith("#   ") and regenerate[regenerate.index("-o") + 1] == name
        assert regenerate[regenerate.index("--tf") + 1] == given["--tf"]
        if flag == "--requirement":
            assert regenerate[regenerate.index("-r") + 1] == Path(item.value).name
        if flag == "--tfdist-wheel":
            assert regenerate[regenerate.index("--tfdist-wheel") + 1] == Path(item.value).name
            assert info.tfdist_wheel == Path(item.value).name
        assert shlex.split(lines[3].removeprefix("# Install: "))[:5] == \
            ["pip", "install", "--require-hashes", "-r", name]
        assert sum(line.startswith(HEADER_MARK) for line in lines) == 1
        if flag == "--conda":
            document = yaml.safe_load((item.folder / item.value).read_text(encoding="utf-8"))
            assert document["dependencies"][2]["pip"] == requirement_entries(text)
        # Every line printed is one line of printable text (the progress line repeats the target and the mirror).
        assert [line for line in (item.outcome.out + item.outcome.err).splitlines() if bad_character(line)] == []
        # The printed install command, as a user would paste it.
        printed = [line for line in item.outcome.out.splitlines() if line.startswith("install: ")]
        assert shlex.split(printed[0].removeprefix("install: ")) == ["pip", "install", "--require-hashes", "-r", output]
        _docker_reads(item, flag, name, capsys)
        assert_not_pwned(item.folder, item.what)
    return check


def _docker_reads(item: Accepted, flag: str, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`tfdist docker --lock` takes the recorded target, or refuses the lock's name with one line."""
    lock = str(Path(item.value) if flag == "--output" else Path(name))
    outcome = run_cli(["docker", "--lock", lock, "-o", "Dockerfile.hostile"], item.folder, capsys)
    if outcome.status == 2:
        assert_refused_cleanly(outcome, f"docker --lock after {item.what}")
        TALLY.add("lock: docker --lock", flag, "refused")
        return
    assert outcome.status == 0, (item.what, outcome.err)
    dockerfile = (item.folder / "Dockerfile.hostile").read_text(encoding="utf-8")
    assert "tensorflow" in dockerfile and "3.11" in dockerfile if flag != "--python" else item.value in dockerfile
    TALLY.add("lock: docker --lock", flag, "round-trip")


@pytest.mark.parametrize("flag", list(FLAGS))
def test_every_lock_flag(flag: str, tmp_path: Path, fake_uv: None, capsys: pytest.CaptureFixture[str]) -> None:
    base, relative = FLAGS[flag]
    accepted = feed("lock", flag, base, _argv, tmp_path, capsys, relative=relative, prepare=_prepare(flag))
    confirm("lock", flag, accepted, _check(flag, capsys))


def test_the_lock_command_docker_prints_first_is_one_shell_command(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # Without a lock, docker prints `first: tfdist lock ... -o FOLDER/requirements.lock`, FOLDER being -o's: a folder
    # name may hold shell syntax. bash, with tfdist as a recording function, must get the words back exactly.
    context = tmp_path / "my ctx; touch PWNED $(touch PWNED) 'q\""
    context.mkdir()
    outcome = run_cli(["docker", "--tf", "2.21", "--cpu", "-o", str(context / "Dockerfile")], tmp_path, capsys)
    assert outcome.status == 0, outcome.err
    command = next(line for line in outcome.out.splitlines() if line.startswith("first:")).removeprefix("first:")
    script = "tfdist() { printf '%s\\0' \"$@\"; }\n" + command + "\n"
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, timeout=30)
    words = done.stdout.decode().split("\0")[:-1]
    assert done.returncode == 0 and words[words.index("-o") + 1] == str(context / "requirements.lock")
    assert words[:2] == ["lock", "--tf"] and "--force" not in words
    assert_not_pwned(tmp_path, "docker first:")
