"""`tfdist docker` in-process: written files, the lock header as the source of truth, refusals, JSON."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfdist.cli.main import main
from tfdist.deploy.lock import LockSpec, render_header

BODY = "six==1.17.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"


def write_lock(path: Path, **target: str) -> Path:
    spec = LockSpec(**{"tf": "2.21", **target})  # type: ignore[arg-type]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_header(spec, path.name) + BODY)
    return path


def test_gpu_dockerfile_from_a_lock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = write_lock(tmp_path / "locks" / "tf.lock", flavour="gpu", python="3.12")
    out = tmp_path / "Dockerfile"
    assert main(["docker", "--lock", str(lock), "-o", str(out), "--mirror", "tuna"]) == 0
    text = out.read_text()
    assert text.count("FROM nvidia/cuda:12.5.1-base-ubuntu24.04") == 1
    assert "COPY locks/tf.lock ./" in text and "python3.12 -m venv" in text
    assert (tmp_path / ".dockerignore").read_text().startswith("# Written by `tfdist docker`")
    printed = capsys.readouterr().out
    assert f"docker build -t tfdist-tf2.21-gpu --build-arg PIP_INDEX_URL=https://" in printed
    assert "docker run --rm --gpus all tfdist-tf2.21-gpu" in printed
    assert "tuna" not in text.lower()


def test_without_a_lock_it_says_how_to_make_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ctx" / "Dockerfile"
    assert main(["docker", "--tf", "2.21", "--cpu", "-o", str(out)]) == 0
    assert "FROM python:3.11-slim-bookworm" in out.read_text()
    printed = capsys.readouterr().out
    assert f"first:  tfdist lock --tf 2.21 --cpu --python 3.11" in printed
    assert f"-o {tmp_path / 'ctx' / 'requirements.lock'}" in printed


def test_flags_contradicting_the_lock_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = write_lock(tmp_path / "requirements.lock", flavour="cpu", python="3.11")
    out = tmp_path / "Dockerfile"
    assert main(["docker", "--lock", str(lock), "--gpu", "-o", str(out)]) == 2
    assert "contradicts the lock" in capsys.readouterr().err
    assert main(["docker", "--lock", str(lock), "--tf", "2.20", "-o", str(out)]) == 2
    assert not out.exists()


def test_lock_outside_the_build_context_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = write_lock(tmp_path / "elsewhere" / "requirements.lock")
    assert main(["docker", "--lock", str(lock), "-o", str(tmp_path / "ctx" / "Dockerfile")]) == 2
    assert "outside the build context" in capsys.readouterr().err


def test_a_file_without_tfdist_header_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text(BODY)
    assert main(["docker", "--lock", str(lock), "-o", str(tmp_path / "Dockerfile")]) == 2
    assert "no tfdist header" in capsys.readouterr().err


def test_impossible_python_is_refused_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "Dockerfile"
    assert main(["docker", "--tf", "2.17", "--python", "3.13", "-o", str(out)]) == 2
    assert "Python 3.13" in capsys.readouterr().err
    assert not out.exists()


def test_own_dockerignore_is_kept_and_json_reports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".dockerignore").write_text("data/\n")
    write_lock(tmp_path / "requirements.lock")
    assert main(["docker", "--lock", str(tmp_path / "requirements.lock"), "-o", str(tmp_path / "Dockerfile"),
                 "--json"]) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["schema"] == "tfdist.docker" and document["dockerignore"] is None
    assert document["base_image"] == "nvidia/cuda:12.5.1-base-ubuntu22.04" and document["lock_missing"] is False
    assert (tmp_path / ".dockerignore").read_text() == "data/\n"
    assert "kept your own" in captured.err
