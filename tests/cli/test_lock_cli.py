"""`tfdist lock` in-process. The resolver is a recording stand-in executable here; the real uv runs in
tests/integration/test_lock_resolve.py."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from tfdist.cli.main import main
from tfdist.deploy import lock as locking

CANNED = """--index-url https://mirror.example.cn/simple
absl-py==2.5.1 \\
    --hash=sha256:{a}
    # via tensorflow
tensorflow==2.21.0 \\
    --hash=sha256:{b}
    # via -r requirements.in
""".format(a="a" * 64, b="b" * 64)


@pytest.fixture
def fake_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable that records its arguments and prints a canned compile result; returns the record file."""
    record = tmp_path / "uv-args.json"
    script = tmp_path / "uv"
    script.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      f"json.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
                      f"sys.stdout.write({CANNED!r})\n")
    script.chmod(0o755)
    monkeypatch.setattr(locking, "find_uv", lambda: str(script))
    monkeypatch.chdir(tmp_path)  # no dist/ wheel of a checkout is picked up by default
    return record


def test_lock_and_conda_files(tmp_path: Path, fake_uv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, env_file = tmp_path / "requirements.lock", tmp_path / "environment.yml"
    rc = main(["lock", "--tf", "2.21", "--cpu", "--python", "3.12", "--mirror", "tuna", "-o", str(out),
               "--conda", str(env_file)])
    assert rc == 0
    argv = json.loads(fake_uv.read_text())
    assert "--default-index" in argv and argv[argv.index("--default-index") + 1].startswith("https://")
    text = out.read_text()
    assert "mirror.example.cn" not in text and "tuna" not in text
    assert locking.parse_header(text).python == "3.12"
    document = yaml.safe_load(env_file.read_text())
    assert document["dependencies"][0] == "python=3.12"
    assert document["dependencies"][2]["pip"][1].startswith("tensorflow==2.21.0 --hash=sha256:")
    printed = capsys.readouterr()
    assert "locked 2 packages (tensorflow 2.21.0)" in printed.out
    assert f"pip install --require-hashes -r {out}" in printed.out
    assert "through mirror tuna" in printed.err


def test_json_summary(tmp_path: Path, fake_uv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", "--tf", "2.21", "--cpu", "-o", str(tmp_path / "l.lock"), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == "tfdist.lock" and document["schema_version"] == 1
    assert document["pins"] == {"absl-py": "2.5.1", "tensorflow": "2.21.0"}
    assert document["platform"] == "x86_64-manylinux_2_28"


@pytest.mark.parametrize("argv, message", [
    (["--tf", "2.17", "--python", "3.13"], "TensorFlow 2.17 has no wheels for Python 3.13"),
    (["--tf", "2.21", "--glibc", "2.17"], "glibc >= 2.27"),
    (["--tf", "2.12", "--gpu"], "no [and-cuda] extra"),
    (["--tf", "2.21", "--mirror", "nosuchmirror"], "unknown mirror"),
])
def test_refusals_are_one_line_and_write_nothing(tmp_path: Path, fake_uv: Path, capsys: pytest.CaptureFixture[str],
                                                 argv: list[str], message: str) -> None:
    out = tmp_path / "requirements.lock"
    assert main(["lock", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tfdist lock: error: ") and message in err[-1]
    assert not out.exists() and not fake_uv.exists()


def test_help_names_the_env_twins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", "--help"]) == 0
    assert "TFDIST_LOCK_TF" in capsys.readouterr().out
