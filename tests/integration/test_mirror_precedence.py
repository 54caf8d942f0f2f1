"""Every precedence rule of pip and uv, each case checked three ways: tfdist's model (``mirror status``), the
tool's own view (pip's option parser, ``uv --show-settings``), and the real tool contacting one of several loopback
indexes (which one got the request is what counts). Conda is not installed here: its rules are unit-tested only."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pytest

from tests.fixtures.mirror.conftest_helpers import clean_env, real_config_digest, start_mirror
from tfdist.mirror.catalog import official_pypi_index, parse_adhoc
from tfdist.mirror.paths import ConfigPaths
from tfdist.mirror.recipes import RECIPES, Context
from tfdist.mirror.status import tool_status
from tfdist.mirror.switch import SwitchRequest, apply, plan, verify

pytestmark = pytest.mark.slow
PIP_DIR = Path(__import__("pip").__file__).parent
UV = Path(sys.executable).parent / "uv"
NAMES = ("A", "B", "C")


@pytest.fixture(scope="module")
def mirrors():
    servers = {name: start_mirror(size=16 * 1024) for name in NAMES}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(autouse=True, scope="module")
def _real_config_untouched():
    before = real_config_digest()
    yield
    assert real_config_digest() == before


class Machine:
    """An isolated home, a real venv (for pip's site file), a project folder, and loopback indexes A, B, C."""

    def __init__(self, root: Path, mirrors: dict) -> None:
        self.root, self.mirrors = root, mirrors
        self.home = root / "home"
        self.venv = root / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)], check=True, timeout=60)
        self.project = root / "proj"
        (self.project / "sub").mkdir(parents=True)
        self.extra: dict[str, str] = {}
        self.cwd = self.project / "sub"

    def url(self, name: str) -> str:
        return self.mirrors[name].url

    def write(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def env(self) -> dict[str, str]:
        return clean_env(self.home, VIRTUAL_ENV=str(self.venv), **self.extra)

    def paths(self) -> ConfigPaths:
        # The model never reads this machine's real /etc (pip itself still reads /etc/pip.conf: CA bundle only).
        return replace(ConfigPaths.from_env(self.env()), etc_dir=self.root / "no-etc")

    def context(self) -> Context:
        return Context(self.paths(), self.env(), self.cwd)

    def name_of(self, url: str | None) -> str:
        for name, server in self.mirrors.items():
            if url and url.rstrip("/") == server.url:
                return name
        return "official" if url and url.rstrip("/") == official_pypi_index() else f"other:{url}"

    def contacted(self, argv: list[str]) -> str:
        """Run a real command and return which loopback index answered its request for tfdistprobe."""
        for server in self.mirrors.values():
            server.behaviour.requests.clear()
        done = subprocess.run(argv, env=self.env(), cwd=self.cwd, capture_output=True, text=True, timeout=120,
                              input="tfdistprobe\n")
        hit = [n for n, s in self.mirrors.items() if "/simple/tfdistprobe/" in s.behaviour.requests]
        assert len(hit) == 1, (argv, hit, done.stdout[-2000:], done.stderr[-2000:])
        return hit[0]


PIP_RUN = {
    "install": ["install", "--dry-run", "--no-deps", "--ignore-installed", "tfdistprobe"],
    "download": ["download", "--no-deps", "-d", "{dl}", "tfdistprobe"],
    "wheel": ["wheel", "--no-deps", "-w", "{dl}", "tfdistprobe"],
    "index": ["index", "versions", "tfdistprobe"],
}


def pip_files(m: Machine) -> dict[str, Path]:
    return {"global": m.home / "etc-xdg" / "pip" / "pip.conf", "legacy": m.home / ".pip" / "pip.conf",
            "user": m.home / ".config" / "pip" / "pip.conf", "site": m.venv / "pip.conf",
            "envfile": m.root / "env-pip.conf"}


def ini(url: str, section: str = "global") -> str:
    return f"[{section}]\nindex-url = {url}\n"


# Each case: set-up, then the index each command must use (A/B/C, or official where no loopback can be asked).
PIP_CASES: dict[str, tuple[Callable[[Machine], None], dict[str, str]]] = {
    "global-file": (lambda m: m.write(pip_files(m)["global"], ini(m.url("A"))), dict.fromkeys(PIP_RUN, "A")),
    "legacy-user-beats-global": (lambda m: (m.write(pip_files(m)["global"], ini(m.url("A"))),
                                            m.write(pip_files(m)["legacy"], ini(m.url("B")))),
                                 {"download": "B"}),
    "xdg-user-beats-legacy": (lambda m: (m.write(pip_files(m)["legacy"], ini(m.url("B"))),
                                         m.write(pip_files(m)["user"], ini(m.url("C")))), {"download": "C"}),
    "site-beats-user": (lambda m: (m.write(pip_files(m)["user"], ini(m.url("A"))),
                                   m.write(pip_files(m)["site"], ini(m.url("B")))), {"download": "B"}),
    "pip-config-file-beats-site-and-hides-user": (
        lambda m: (m.write(pip_files(m)["user"], ini(m.url("A")) + ini(m.url("A"), "download")),
                   m.write(pip_files(m)["envfile"], ini(m.url("C"))),
                   m.extra.update(PIP_CONFIG_FILE=str(pip_files(m)["envfile"]))),
        {"download": "C", "install": "C"}),
    "env-var-beats-every-file-and-section": (
        lambda m: (m.write(pip_files(m)["site"], ini(m.url("A")) + ini(m.url("A"), "install")),
                   m.extra.update(PIP_INDEX_URL=m.url("B"))), {"install": "B", "download": "B"}),
    "command-section-of-a-lower-file-beats-global-of-a-higher": (
        lambda m: (m.write(pip_files(m)["global"], ini(m.url("A"), "install") + ini(m.url("C"), "wheel")),
                   m.write(pip_files(m)["user"], ini(m.url("B")))),
        {"install": "A", "download": "B", "wheel": "C", "index": "B"}),
    "empty-value-in-a-higher-file-unsets": (
        lambda m: (m.write(pip_files(m)["legacy"], ini(m.url("B"))),
                   m.write(pip_files(m)["user"], "[global]\nindex-url =\n")), {"download": "official"}),
    "devnull-disables-files": (
        lambda m: (m.write(pip_files(m)["user"], ini(m.url("A"))), m.extra.update(PIP_CONFIG_FILE="/dev/null")),
        {"download": "official"}),
}


@pytest.mark.parametrize("case", list(PIP_CASES))
def test_pip_precedence(case: str, tmp_path: Path, mirrors) -> None:
    setup, expected = PIP_CASES[case]
    m = Machine(tmp_path, mirrors)
    setup(m)
    model = {e.command: m.name_of(e.index) for e in tool_status("pip", m.paths(), m.env(), m.cwd).commands}
    own = {e.command: m.name_of(e.index) for e in RECIPES["pip"].ask_tool(m.context()).effective}
    assert model == own, (case, model, own)  # tfdist's model agrees with pip's own parser for all four commands
    for command, name in expected.items():
        assert model[command] == name, (case, command, model)
        if name in NAMES:  # ask the real pip which index it contacts (never anything but loopback)
            argv = [str(m.venv / "bin" / "python"), str(PIP_DIR),
                    *[a.replace("{dl}", str(tmp_path / "dl")) for a in PIP_RUN[command]]]
            assert m.contacted(argv) == name, (case, command)


def uv_files(m: Machine) -> dict[str, Path]:
    return {"system": m.home / "etc-xdg" / "uv" / "uv.toml", "user": m.home / ".config" / "uv" / "uv.toml",
            "pyproject": m.project / "pyproject.toml", "project": m.project / "uv.toml",
            "sub-pyproject": m.project / "sub" / "pyproject.toml", "given": m.root / "given-uv.toml"}


def index(url: str) -> str:
    return f'[[index]]\nurl = "{url}"\ndefault = true\n'


def legacy(url: str) -> str:
    return f'index-url = "{url}"\n'


PYPROJECT = '[project]\nname = "p"\nversion = "0"\n'
UV_CASES: dict[str, tuple[Callable[[Machine], None], str]] = {
    "system-file": (lambda m: m.write(uv_files(m)["system"], legacy(m.url("A"))), "A"),
    "user-beats-system": (lambda m: (m.write(uv_files(m)["system"], index(m.url("A"))),
                                     m.write(uv_files(m)["user"], index(m.url("B")))), "B"),
    "pyproject-tool-uv-beats-user": (lambda m: (m.write(uv_files(m)["user"], index(m.url("A"))),
                                                m.write(uv_files(m)["pyproject"], PYPROJECT + index(m.url("C"))
                                                        .replace("[[index]]", "[[tool.uv.index]]"))), "C"),
    "uv-toml-beats-pyproject-in-the-same-folder": (
        lambda m: (m.write(uv_files(m)["pyproject"], PYPROJECT + index(m.url("C")).replace("[[index]]",
                                                                                           "[[tool.uv.index]]")),
                   m.write(uv_files(m)["project"], index(m.url("B")))), "B"),
    "pyproject-without-tool-uv-is-skipped": (
        lambda m: (m.write(uv_files(m)["sub-pyproject"], PYPROJECT), m.write(uv_files(m)["project"],
                                                                             index(m.url("A")))), "A"),
    "user-index-table-beats-project-legacy-index-url": (
        lambda m: (m.write(uv_files(m)["user"], index(m.url("A"))), m.write(uv_files(m)["project"],
                                                                           legacy(m.url("B")))), "A"),
    "user-index-table-beats-project-pip-section": (
        lambda m: (m.write(uv_files(m)["user"], index(m.url("A"))),
                   m.write(uv_files(m)["project"], f'[pip]\nindex-url = "{m.url("B")}"\n')), "A"),
    "pip-section-applies-to-uv-pip-only": (
        lambda m: m.write(uv_files(m)["project"], f'[pip]\nindex-url = "{m.url("B")}"\n'), "B"),
    "uv-index-url-variable-beats-files": (
        lambda m: (m.write(uv_files(m)["project"], index(m.url("A"))), m.extra.update(UV_INDEX_URL=m.url("B"))),
        "B"),
    "uv-default-index-beats-uv-index-url": (
        lambda m: m.extra.update(UV_INDEX_URL=m.url("B"), UV_DEFAULT_INDEX=m.url("C")), "C"),
    "uv-config-file-replaces-discovery": (
        lambda m: (m.write(uv_files(m)["project"], index(m.url("A"))), m.write(uv_files(m)["given"],
                                                                              legacy(m.url("C"))),
                   m.extra.update(UV_CONFIG_FILE=str(uv_files(m)["given"]))), "C"),
    "uv-no-config": (lambda m: (m.write(uv_files(m)["user"], index(m.url("A"))), m.extra.update(UV_NO_CONFIG="1")),
                     "official"),
}


@pytest.mark.parametrize("case", list(UV_CASES))
def test_uv_precedence(case: str, tmp_path: Path, mirrors) -> None:
    if not UV.exists():
        pytest.skip("uv (dev extra) is not installed in this environment")
    setup, expected = UV_CASES[case]
    m = Machine(tmp_path, mirrors)
    setup(m)
    m.extra.update(PATH=f"{UV.parent}:/usr/bin:/bin", UV_NO_CACHE="1")
    model = {e.command: m.name_of(e.index) for e in tool_status("uv", m.paths(), m.env(), m.cwd).commands}
    own = {e.command: m.name_of(e.index) for e in RECIPES["uv"].ask_tool(m.context()).effective}
    assert model == own, (case, model, own)  # 'uv pip' and 'uv lock/sync' both agree with uv --show-settings
    assert model["uv pip"] == expected, (case, model)
    if expected in NAMES:
        argv = [str(UV), "pip", "compile", "-", "--python-version", "3.11", "--no-header"]
        assert m.contacted(argv) == expected, case


def test_use_writes_where_pip_reads_it_and_pip_contacts_the_mirror(tmp_path: Path, mirrors) -> None:
    """A command section in the global file would beat [global] in the user file: tfdist sets the same section in
    the user file, and the real pip then contacts the new mirror for that command too."""
    m = Machine(tmp_path, mirrors)
    m.write(pip_files(m)["global"], ini(m.url("A"), "install"))
    mirror = parse_adhoc([f"b={m.url('B')}"], allow_insecure=True)["b"]
    result = plan(SwitchRequest(mirror=mirror, tools=("pip",)), m.paths(), m.env(), m.cwd)
    assert result.overridden == ()
    result = verify(apply(result, m.paths()), m.paths(), m.env(), m.cwd)
    assert result.took_effect and not result.unverified
    argv = [str(m.venv / "bin" / "python"), str(PIP_DIR), *PIP_RUN["install"]]
    assert m.contacted(argv) == "B"


@pytest.mark.parametrize("blocker", ["PIP_INDEX_URL", "site-file", "pyproject", "UV_DEFAULT_INDEX"])
def test_use_names_what_overrides_it_and_exits_1(tmp_path: Path, mirrors, blocker: str) -> None:
    m = Machine(tmp_path, mirrors)
    tool = "uv" if blocker in ("pyproject", "UV_DEFAULT_INDEX") else "pip"
    if blocker == "PIP_INDEX_URL":
        m.extra["PIP_INDEX_URL"] = m.url("A")
        where = "environment variable PIP_INDEX_URL"
    elif blocker == "site-file":
        m.write(pip_files(m)["site"], "# team index\n" + ini(m.url("A")))
        where = f"{pip_files(m)['site']}:3 [global]"
    elif blocker == "pyproject":
        m.write(uv_files(m)["pyproject"], PYPROJECT + index(m.url("A")).replace("[[index]]", "[[tool.uv.index]]"))
        where = f"{uv_files(m)['pyproject']}:5 [[index]]"
    else:
        m.extra["UV_DEFAULT_INDEX"] = m.url("A")
        where = "environment variable UV_DEFAULT_INDEX"
    m.extra["PATH"] = f"{UV.parent}:/usr/bin:/bin"
    env = {**m.env(), "PYTHONPATH": ":".join(sys.path)}
    done = subprocess.run([sys.executable, "-m", "tfdist", "mirror", "use", "b", "--url", f"b={m.url('B')}",
                           "--allow-insecure", "--tool", tool], env=env, cwd=m.cwd, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert where in done.stdout and m.url("A") in done.stdout and "NOT in effect" in done.stdout
    assert "Now using" not in done.stdout


def test_the_tools_own_view_catches_what_the_model_misses(tmp_path: Path, mirrors) -> None:
    """pip also accepts the old option name ``pypi-url`` in config files; tfdist's model does not read it, so only
    asking pip itself reveals that 'pip install' still uses A: a mismatch, and the switch is not claimed."""
    m = Machine(tmp_path, mirrors)
    m.write(pip_files(m)["site"], "[install]\npypi-url = " + m.url("A") + "\n")
    mirror = parse_adhoc([f"b={m.url('B')}"], allow_insecure=True)["b"]
    result = plan(SwitchRequest(mirror=mirror, tools=("pip",)), m.paths(), m.env(), m.cwd)
    assert result.overridden == ()  # the model sees nothing in the way
    result = verify(apply(result, m.paths()), m.paths(), m.env(), m.cwd)
    assert not result.took_effect
    assert [(o.command, m.name_of(o.index)) for o in result.mismatches] == [("install", "A")]
    assert [(o.command, m.name_of(o.index)) for o in result.overridden] == [("install", "A")]
    argv = [str(m.venv / "bin" / "python"), str(PIP_DIR), *PIP_RUN["install"]]
    assert m.contacted(argv) == "A"  # and the real pip agrees with pip's parser, not with the model
