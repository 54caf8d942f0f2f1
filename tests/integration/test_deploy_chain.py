"""The deploy chain end to end, without a Docker daemon: wheel -> `tfdist lock` (TensorFlow, TensorBoard, tfdist's own
wheel, hashes) -> `tfdist docker` (hadolint-clean) -> the Dockerfile's own install steps run in a fresh venv ->
`tfdist tf-config --exec` starts two workers of the shipped example under TF_CONFIG, as the pods and sbatch do.

Slow: it installs TensorFlow into a fresh venv with pip (about 2 GB unpacked; downloads when pip's cache is cold)."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

from tfdist.cli.main import main
from tfdist.deploy import lock as locking

REPO = Path(__file__).resolve().parents[2]
HADOLINT = Path(sys.executable).parent / "hadolint"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _install_steps(dockerfile: str) -> tuple[list[str], str]:
    """The files the Dockerfile copies into its install folder, and its pip command, read from the file itself."""
    copied = re.search(r"^WORKDIR /tmp/tfdist-install\nCOPY (.+) \./$", dockerfile, re.MULTILINE)
    pip = re.search(r"&& (pip install --require-hashes -r \S+)", dockerfile)
    assert copied and pip, dockerfile
    return copied.group(1).split(), pip.group(1)


@pytest.mark.slow
@pytest.mark.tf
def test_lock_docker_install_and_tf_config_exec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    uv = locking.find_uv()
    # 1. The wheel, built from this checkout as `make dist` does (uv's build frontend: no network for `build`).
    dist = tmp_path / "dist"
    subprocess.run([uv, "build", "--wheel", "--out-dir", str(dist), str(REPO)], check=True, capture_output=True,
                   timeout=300)
    wheel = next(dist.glob("tfdist-*.whl"))
    # 2. The lock, in the build context, with the example's data package as an extra requirement.
    context = tmp_path / "context"
    context.mkdir()
    (tmp_path / "extra.txt").write_text("scikit-learn\n")
    monkeypatch.chdir(tmp_path)
    lock = context / "requirements.lock"
    assert main(["lock", "--tf", "2.21", "--cpu", "--python", PYTHON, "--tfdist-wheel", str(wheel),
                 "-r", str(tmp_path / "extra.txt"), "-o", str(lock)]) == 0
    text = lock.read_text()
    pins = locking.pins(text)
    assert {"tensorflow", "tf-keras", "tensorboard", "scikit-learn"} <= set(pins) and "tensorflow-cpu" not in pins
    assert pins["tfdist"] == wheel.name.split("-")[1]
    assert re.search(rf"^\./{re.escape(wheel.name)} \\\n    --hash=sha256:[0-9a-f]{{64}}$", text, re.MULTILINE)
    assert (context / wheel.name).read_bytes() == wheel.read_bytes()
    # 3. The Dockerfile: clean under hadolint, copying the lock and the wheel.
    assert main(["docker", "--lock", str(lock), "-o", str(context / "Dockerfile")]) == 0
    dockerfile = (context / "Dockerfile").read_text()
    if HADOLINT.exists():
        done = subprocess.run([str(HADOLINT), "--failure-threshold", "info", "--no-color", str(context / "Dockerfile")],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout
    sources, pip_command = _install_steps(dockerfile)
    assert sources == ["requirements.lock", wheel.name]
    # 4. The Dockerfile's install steps, in a fresh venv: its folder holds what COPY put there; pip as written.
    install = tmp_path / "tfdist-install"
    install.mkdir()
    for name in sources:
        shutil.copy(context / name, install / Path(name).name)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", pip_command + " --quiet"], cwd=install, env=env,
                          capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    listed = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "list", "--format", "json"], env=env,
                            capture_output=True, text=True, check=True).stdout
    installed = {p["name"].lower(): p["version"] for p in json.loads(listed)}
    assert installed["tfdist"] == pins["tfdist"] and "tensorflow-cpu" not in installed
    # 5. What the pods and sbatch run: every task through `tfdist tf-config --exec`, here 2 workers on loopback.
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    run_dir = tmp_path / "run"
    tasks: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(2):
            task_env = {**env,
                        "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
            # Output to files, not pipes: waiting on one worker while the other's undrained pipe fills would stop
            # that one in a write, and the first then waits for it in the next collective.
            with open(tmp_path / f"worker-{index}.out", "wb") as out, \
                    open(tmp_path / f"worker-{index}.err", "wb") as err:
                tasks.append(subprocess.Popen(
                    [str(env_dir / "bin" / "tfdist"), "tf-config", "--exec", "--", "python", "-m",
                     "tfdist.examples.digits", "--epochs", "2", "--model-dir", str(run_dir)],
                    cwd=tmp_path, env=task_env, stdout=out, stderr=err))
        # Until both are done or one failed (its peer would wait for it in the next collective until the deadline).
        deadline = time.monotonic() + 600
        while any(t.poll() is None for t in tasks) and all(t.poll() in (None, 0) for t in tasks):
            assert time.monotonic() < deadline, "the workers did not finish within 600 s"
            time.sleep(0.2)
        codes = [task.poll() for task in tasks]
    finally:
        for task in tasks:  # a worker left waiting for a peer that failed is stopped with the test
            if task.poll() is None:
                task.kill()
                task.wait()
    outputs = [(tmp_path / f"worker-{index}.out").read_text(errors="replace") for index in range(2)]
    assert codes == [0, 0], [(tmp_path / f"worker-{i}.err").read_text(errors="replace")[-1500:] for i in range(2)]
    accuracy = float(re.search(r"^final_accuracy=([0-9.]+)$", outputs[0], re.MULTILINE).group(1))
    assert accuracy >= 0.85
    checksums = {re.search(r"^weights_checksum=(\S+)$", out, re.MULTILINE).group(1) for out in outputs}
    assert len(checksums) == 1  # both workers trained one model together
