"""The real consumers read what ``tfdist mirror use`` wrote: pip (``pip config list``, ``pip install``) and uv
(``uv pip compile``), each through a loopback mirror, in an isolated home with the machine's own settings removed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.mirror.conftest_helpers import clean_env, real_config_digest, start_mirror
from tests.fixtures.mirror.loopback import self_signed_tls
from tfdist.mirror.catalog import parse_adhoc
from tfdist.mirror.paths import ConfigPaths
from tfdist.mirror.switch import SwitchRequest, apply, plan

VENV_BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True, scope="module")
def _real_config_untouched():
    before = real_config_digest()
    yield
    assert real_config_digest() == before


def switch_to(url: str, home: Path, tools: tuple[str, ...], *, insecure: bool) -> ConfigPaths:
    env = clean_env(home)
    paths = ConfigPaths.from_env(env, root=home / "root")
    mirror = parse_adhoc([f"loop={url}"], allow_insecure=insecure)["loop"]
    apply(plan(SwitchRequest(mirror=mirror, tools=tools), paths), paths)  # type: ignore[arg-type]
    return paths


def test_pip_config_list_and_pip_install_use_the_written_file(tmp_path: Path) -> None:
    mirror = start_mirror()
    try:
        home = tmp_path / "home"
        paths = switch_to(mirror.url, home, ("pip",), insecure=True)
        env = clean_env(home)
        listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], env=env, capture_output=True,
                                text=True, timeout=60, check=True).stdout
        assert f"global.index-url='{mirror.url}'" in listed
        debug = subprocess.run([sys.executable, "-m", "pip", "config", "debug"], env=env, capture_output=True,
                               text=True, timeout=60, check=True).stdout
        assert f"{paths.pip_file('user')}, exists: True" in debug
        target = tmp_path / "target"
        installed = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), "tfdistprobe==1.0"],
            env=env, capture_output=True, text=True, timeout=120, check=False)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert (target / "tfdistprobe" / "__init__.py").read_text() == 'VERSION = "1.0"\n'
        assert "/simple/tfdistprobe/" in mirror.behaviour.requests
    finally:
        mirror.stop()


def test_pip_downloads_from_an_https_mirror_trusted_through_pip_cert(tmp_path: Path) -> None:
    context, cert = self_signed_tls(tmp_path)
    mirror = start_mirror(tls=context)
    try:
        home = tmp_path / "home"
        switch_to(mirror.url, home, ("pip",), insecure=False)  # https: no --allow-insecure, no trusted-host
        assert "trusted-host" not in (home / ".config" / "pip" / "pip.conf").read_text()
        env = clean_env(home, PIP_CERT=str(cert))
        fetched = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path / "dl"), "tfdistprobe"],
            env=env, capture_output=True, text=True, timeout=120, check=False)
        assert fetched.returncode == 0, fetched.stdout + fetched.stderr
        assert (tmp_path / "dl" / "tfdistprobe-1.0-py3-none-any.whl").is_file()
    finally:
        mirror.stop()


def test_uv_resolves_through_the_written_uv_toml(tmp_path: Path) -> None:
    uv = VENV_BIN / "uv"
    if not uv.exists():
        pytest.skip("uv (dev extra) is not installed in this environment")
    mirror = start_mirror()
    try:
        home = tmp_path / "home"
        switch_to(mirror.url, home, ("uv",), insecure=True)
        env = clean_env(home)
        compiled = subprocess.run([str(uv), "pip", "compile", "-", "--python-version", "3.11", "--no-header"],
                                  input="tfdistprobe\n", env=env, capture_output=True, text=True, timeout=120,
                                  check=False)
        assert compiled.returncode == 0, compiled.stdout + compiled.stderr
        assert "tfdistprobe==1.0" in compiled.stdout
        assert "/simple/tfdistprobe/" in mirror.behaviour.requests
        # Control: without the written file uv knows no such project (offline, so nothing leaves the machine).
        (home / ".config" / "uv" / "uv.toml").unlink()
        control = subprocess.run([str(uv), "pip", "compile", "-", "--python-version", "3.11", "--offline",
                                  "--no-header"], input="tfdistprobe\n", env={**env, "UV_CACHE_DIR": str(tmp_path / "c2")},
                                 capture_output=True, text=True, timeout=120, check=False)
        assert control.returncode != 0
    finally:
        mirror.stop()
