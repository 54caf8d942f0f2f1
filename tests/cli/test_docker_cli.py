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
    out.parent.mkdir()
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


def test_existing_dockerfile_is_refused_then_replaced_with_force_keeping_a_bak(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "Dockerfile"
    out.write_text("FROM scratch\n# hand-written\n")
    assert main(["docker", "--tf", "2.21", "--cpu", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--force" in err and err.count("\n") == 1
    assert out.read_text() == "FROM scratch\n# hand-written\n" and not (tmp_path / ".dockerignore").exists()
    assert main(["docker", "--tf", "2.21", "--cpu", "-o", str(out), "--force"]) == 0
    assert "FROM python:3.11-slim-bookworm" in out.read_text()
    assert (tmp_path / "Dockerfile.bak").read_text() == "FROM scratch\n# hand-written\n"
    assert "Dockerfile.bak" in capsys.readouterr().err
    # Regenerating changes nothing in our own .dockerignore, so it gets no .bak.
    assert main(["docker", "--tf", "2.21", "--cpu", "-o", str(out), "--force"]) == 0
    assert not (tmp_path / ".dockerignore.bak").exists()


def test_output_into_a_missing_folder_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docker", "--tf", "2.21", "--cpu", "-o", str(tmp_path / "ctx" / "Dockerfile")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and err.count("\n") == 1
    assert not (tmp_path / "ctx").exists()


@pytest.mark.parametrize("header", [
    '# tfdist-lock: {"tf": "2.21"',  # cut JSON
    '# tfdist-lock: {"tf": "2.21"}',  # missing keys
    '# tfdist-lock: ["2.21"]',  # not an object
    '# tfdist-lock: {"tf": 2.21, "flavour": "cpu", "python": "3.11", "platform": "linux", "glibc": "2.28"}',
    '# tfdist-lock: {"tf": "2.21\\nRUN id", "flavour": "cpu", "python": "3.11", "platform": "linux", '
    '"glibc": "2.28"}',
    '# tfdist-lock: {"tf": "2.21", "flavour": "tpu", "python": "3.11", "platform": "linux", "glibc": "2.28"}',
])
def test_a_malformed_lock_header_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    header: str) -> None:
    from tfdist.deploy.lock import HEADER_MARK

    lock = tmp_path / "requirements.lock"
    lock.write_text(header.replace("# tfdist-lock: ", HEADER_MARK) + "\n" + BODY)
    assert main(["docker", "--lock", str(lock), "-o", str(tmp_path / "Dockerfile")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "Dockerfile").exists()


def test_tag_with_a_newline_cannot_add_an_instruction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "Dockerfile"
    assert main(["docker", "--tf", "2.21", "--cpu", "--tag", "t\nRUN touch /pwned", "-o", str(out)]) == 2
    assert "--tag 't\\nRUN touch /pwned' contains the control character" in capsys.readouterr().err
    assert not out.exists()
