"""Issue 35 item 6: the probe's User-Agents are pip's and uv's own, as those tools build them here."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tfdist.mirror.agents import ClientFacts, agents_for, installed_version, pip_user_agent, uv_user_agent

_FACTS = ClientFacts(python="3.14.6", implementation="CPython", implementation_version="3.14.6", system="Linux",
                     release="6.8.0-45-generic", cpu="x86_64", distro_name="Ubuntu", distro_version="24.04",
                     distro_id="noble", libc=("glibc", "2.39"), openssl="OpenSSL 3.6.3 9 Jun 2026")


def test_pip_form_carries_the_json_a_firewall_matched() -> None:
    """tuna/issues#2603: the rule matched "implementation":{"name":...,"version":...} in pip's JSON."""
    agent = pip_user_agent("26.1.2", _FACTS)
    head, _, body = agent.partition(" ")
    assert head == "pip/26.1.2"
    data = json.loads(body)
    assert list(data) == sorted(data)  # pip sorts its keys
    assert data["implementation"] == {"name": "CPython", "version": "3.14.6"}
    assert data["installer"] == {"name": "pip", "version": "26.1.2"} and data["ci"] is None
    assert data["distro"] == {"id": "noble", "libc": {"lib": "glibc", "version": "2.39"}, "name": "Ubuntu",
                              "version": "24.04"}
    assert '"implementation":{"name":"CPython","version":"3.14.6"}' in agent  # compact separators


def test_uv_form_keeps_its_field_order_and_nulls() -> None:
    head, _, body = uv_user_agent("0.13.9", _FACTS).partition(" ")
    assert head == "uv/0.13.9"
    data = json.loads(body)
    assert list(data) == ["installer", "python", "implementation", "distro", "system", "cpu", "openssl_version",
                          "setuptools_version", "rustc_version", "ci"]
    assert data["installer"]["name"] == "uv" and data["openssl_version"] is None


def test_pips_user_agent_is_the_one_the_installed_pip_sends() -> None:
    """Built from this interpreter, the pip form equals pip's own user_agent() (the installed pip's version)."""
    pytest.importorskip("pip")
    from pip._internal.network.session import user_agent

    pip = next(a for a in agents_for(("pip",)) if a.tool == "pip")
    assert pip.version == installed_version("pip")
    assert pip.user_agent == user_agent()


def _capture_user_agent(argv: list[str], env: dict[str, str]) -> str:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            seen.append(self.headers.get("User-Agent", ""))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/simple"
        subprocess.run([*argv, "--index-url", url], input=b"tfdistprobe\n", env=env, capture_output=True,
                       timeout=60, check=False)
    finally:
        server.shutdown()
        server.server_close()
    assert seen, "the tool made no request"
    return seen[0]


def test_uvs_user_agent_matches_what_the_installed_uv_sends(tmp_path: Path) -> None:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not os.path.exists(uv):
        pytest.skip("uv is not installed")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "UV_NO_CONFIG": "1",
           "UV_CACHE_DIR": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    real = _capture_user_agent([uv, "pip", "install", "--dry-run", "--python", sys.executable, "-r", "-"], env)
    ours = next(a for a in agents_for(("uv",), env) if a.tool == "uv")
    head, _, body = real.partition(" ")
    assert head == f"uv/{ours.version}"
    real_data, our_data = json.loads(body), json.loads(ours.user_agent.partition(" ")[2])
    assert list(our_data) == list(real_data)
    for key in ("python", "implementation", "system", "cpu", "installer"):
        assert our_data[key] == real_data[key], key


def _conda_root(tmp_path: Path, records: list[str]) -> Path:
    meta = tmp_path / "miniconda3" / "conda-meta"
    meta.mkdir(parents=True)
    for record in records:
        (meta / record).write_text("{}", encoding="utf-8")
    return meta.parent


def test_condas_user_agent_names_its_own_installation(tmp_path: Path) -> None:
    """conda's form (conda/base/context.py): its own conda, requests and python versions, not this interpreter's."""
    root = _conda_root(tmp_path, ["conda-24.7.1-py312h06a4308_0.json",
                                  "conda-libmamba-solver-24.7.0-pyhd3eb1b0_0.json",
                                  "libmambapy-1.5.8-py312h2dafd23_2.json", "requests-2.32.3-py312h06a4308_0.json",
                                  "python-3.12.4-h5148396_1.json"])
    (agent,) = agents_for(("conda",), {"PATH": ""}, conda_root=root)
    assert agent.tool == "conda" and agent.version == "24.7.1"
    assert agent.user_agent.startswith("conda/24.7.1 requests/2.32.3 CPython/3.12.4 ")
    assert agent.user_agent.endswith(" solver/libmamba conda-libmamba-solver/24.7.0 libmambapy/1.5.8")
    assert agents_for(("conda",), {"PATH": ""}, conda_root=tmp_path / "none") == ()
    facts = ClientFacts(python="3.11.9", implementation="CPython", implementation_version="3.11.9", system="Linux",
                        release="6.8.0", distro_version="22.04", libc=("glibc", "2.35"))
    from tfdist.mirror.agents import CondaInstall, conda_user_agent

    assert conda_user_agent(CondaInstall("23.7.4", "2.31.0", "3.11.5"), facts, "ubuntu") == \
        "conda/23.7.4 requests/2.31.0 CPython/3.11.5 Linux/6.8.0 ubuntu/22.04 glibc/2.35"
