"""The real resolver against the machine's normal package index (network): uv resolves TF 2.21 CPU and GPU for
Python 3.11 and 3.12, pip accepts the result in --require-hashes mode, and a mirror used for resolving leaves no
trace in the lock.

pip's --require-hashes check downloads every wheel to verify it (about 0.9 GB for a CPU lock and 3 GB for a GPU
one), so pip checks one lock per flavour, on different Pythons (CPU 3.12, GPU 3.11), to keep this module near 100
seconds; all four locks are resolved and inspected.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tfdist.cli.main import main
from tfdist.deploy import lock as locking

pytestmark = pytest.mark.slow

Resolver = Callable[[str, str], Path]


@pytest.fixture(scope="session")
def uv_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uv cache for the whole session (HOME is a new folder per test, and so would be uv's default cache)."""
    return tmp_path_factory.mktemp("uv-cache")


@pytest.fixture(scope="session")
def _lock_store(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    return {}


@pytest.fixture
def resolved(uv_cache: Path, _lock_store: dict[tuple[str, str], Path], monkeypatch: pytest.MonkeyPatch,
             tmp_path_factory: pytest.TempPathFactory) -> Resolver:
    """Resolve (once per session) a TF 2.21 lock with `tfdist lock` and return its path."""
    monkeypatch.setenv("UV_CACHE_DIR", str(uv_cache))

    def resolve(flavour: str, python: str) -> Path:
        key = (flavour, python)
        if key not in _lock_store:
            out = tmp_path_factory.mktemp(f"lock-{flavour}-{python}") / "requirements.lock"
            assert main(["lock", "--tf", "2.21", f"--{flavour}", "--python", python, "-o", str(out),
                         "--no-tfdist"]) == 0
            _lock_store[key] = out
        return _lock_store[key]

    return resolve


@pytest.mark.parametrize("flavour, python", [("cpu", "3.11"), ("gpu", "3.11"), ("cpu", "3.12"), ("gpu", "3.12")])
def test_lock_resolves_for_the_target(resolved: Resolver, flavour: str, python: str) -> None:
    text = resolved(flavour, python).read_text()
    pins = locking.pins(text)
    assert pins["tf-keras"].startswith("2.21.")
    assert pins["tensorflow"].startswith("2.21.")  # GPU and CPU alike: the one distribution tf-keras accepts
    assert "tensorflow-cpu" not in pins
    assert "tensorboard" in pins and "tfdist" not in pins
    if flavour == "gpu":
        assert pins["nvidia-cudnn-cu12"].startswith("9.")
        assert pins["nvidia-cuda-runtime-cu12"].startswith("12.")
    else:
        assert not any(name.startswith("nvidia-") for name in pins)
    entries = locking.requirement_entries(text)
    assert len(entries) == len(pins) and all("--hash=sha256:" in entry for entry in entries)
    assert locking.parse_header(text) == locking.LockInfo("2.21", flavour, python, "linux-x86_64", "2.28")
    assert "--index-url" not in text and "://" not in text


def _pip_platforms() -> list[str]:
    # pip's --platform does not imply older manylinux levels, so list every level the glibc 2.28 target accepts.
    tags = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 16, -1)]
    return [arg for tag in [*tags, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
            for arg in ("--platform", tag)]


@pytest.mark.parametrize("flavour, python", [("cpu", "3.12"), ("gpu", "3.11")])
def test_pip_accepts_the_lock_in_require_hashes_mode(resolved: Resolver, tmp_path: Path, flavour: str,
                                                     python: str) -> None:
    lock = resolved(flavour, python)
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--require-hashes", "-r", str(lock),
               "--ignore-installed", "--only-binary=:all:", "--python-version", python, *_pip_platforms(),
               "--report", str(report), "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    installed = {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
                 for item in json.loads(report.read_text())["install"]}
    assert installed == locking.pins(lock.read_text())


class _ForwardingIndex(BaseHTTPRequestHandler):
    """A loopback 'mirror': forwards simple-index pages to the official index and counts what it served."""

    upstream = ""
    served: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        suffix = self.path.split("/simple", 1)[-1]
        request = urllib.request.Request(self.upstream.rstrip("/") + suffix,
                                         headers={"Accept": self.headers.get("Accept", "text/html")})
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                body, status, kind = answer.read(), answer.status, answer.headers.get("Content-Type", "text/html")
        except urllib.error.HTTPError as failure:
            body, status, kind = b"", failure.code, "text/plain"
        self.served.append(suffix)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def loopback_mirror() -> Iterator[tuple[str, list[str]]]:
    from tfdist.mirror.catalog import official_pypi_index

    _ForwardingIndex.upstream = official_pypi_index()
    _ForwardingIndex.served = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ForwardingIndex)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", _ForwardingIndex.served
    finally:
        server.shutdown()
        server.server_close()


def test_mirror_is_used_for_resolving_but_not_written(resolved: Resolver, loopback_mirror: tuple[str, list[str]]
                                                       ) -> None:
    url, served = loopback_mirror
    through_mirror = locking.resolve(locking.LockSpec(tf="2.21", flavour="cpu", python="3.11", mirror_index=url,
                                                      include_tfdist=False))
    assert any("tensorflow" in path for path in served), served
    assert "127.0.0.1" not in through_mirror.text
    direct = resolved("cpu", "3.11").read_text()
    assert through_mirror.pins == locking.pins(direct)
    assert through_mirror.text == direct
