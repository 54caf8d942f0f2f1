"""Hostile values for every mirror flag that reaches a generated file: each one is refused with exit 2 writing
nothing, or round-trips exactly through the file's real consumer (pip's own config loader, tomllib, bash)."""
from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from tfdist.cli.main import main
from tfdist.errors import UsageError
from tfdist.mirror.catalog import Mirror
from tfdist.mirror.envvars import dockerfile_snippet, mirror_environment, shell_lines
from tests.fixtures.mirror.conftest_helpers import (  # noqa: F401  (fixtures)
    loopback_only, real_config_untouched)

GOOD = "https://good.test/simple"
HOSTILE_URLS = [
    GOOD + "\nextra-index-url = https://evil.test/simple",
    GOOD + "\r\nextra-index-url = https://evil.test/simple",
    GOOD + "\textra",
    GOOD + "\x00",
    GOOD + '"',
    GOOD + "'",
    GOOD + "`touch F`",
    GOOD + "\ntouch F",
    GOOD + "$(touch F)",
    GOOD + ";touch F",
    GOOD + "#comment",
    GOOD + " ",
    " " + GOOD,
    "https://gööd.test/simple",
    GOOD + "/" + "a" * 10_000,
    "https://[zz]/simple",
    "https://h.test:70000/simple",
    "https://h.test:99999999999/simple",
    "https://h.test:abc/simple",
    "https:///simple",
    "ftp://h.test/simple",
    "https://u:p@h.test/simple\\x",
    "https://h.test/simple%0Aextra",
    "https://h.test/${HOME}/simple",
    GOOD + "$(id)",  # valid URL characters that mean something to a shell: must round-trip, never run
    GOOD + ";id",
    GOOD + "&x=$HOME",
    "https://u:p%40ss@h.test/simple",
]

pytestmark = pytest.mark.usefixtures("loopback_only", "real_config_untouched")


@pytest.fixture(autouse=True)
def _own_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "venv"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)


def pip_reads(pip_conf: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """What pip's own configuration loader reads from ``pip_conf`` (and only from it)."""
    from pip._internal.configuration import Configuration

    monkeypatch.setenv("PIP_CONFIG_FILE", str(pip_conf))
    config = Configuration(isolated=False)
    config.load()
    return dict(dict(config.items())[str(pip_conf)])


@pytest.mark.parametrize("value", HOSTILE_URLS, ids=range(len(HOSTILE_URLS)))
def test_use_url_is_refused_or_round_trips(value: str, isolated_home: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rc = main(["mirror", "use", "x", "--url", f"x={value}", "--tool", "pip,uv", "--allow-insecure", "--no-verify",
               "--no-check"])
    out, err = capsys.readouterr()
    pip_conf = isolated_home / ".config" / "pip" / "pip.conf"
    uv_toml = isolated_home / ".config" / "uv" / "uv.toml"
    if rc == 2:
        assert err.count("\n") == 1 and "Traceback" not in err and "--url" in err
        assert not pip_conf.exists() and not uv_toml.exists()
        return
    assert rc == 0, err
    expected = value.rstrip("/")
    assert pip_reads(pip_conf, monkeypatch) == {"global.index-url": expected}
    indexes = tomllib.loads(uv_toml.read_text())["index"]
    assert [i["url"] for i in indexes] == [expected]


@pytest.mark.parametrize("value", HOSTILE_URLS, ids=range(len(HOSTILE_URLS)))
def test_env_output_never_runs_injected_commands(value: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["mirror", "env", "x", "--url", f"x={value}", "--allow-insecure"])
    out, err = capsys.readouterr()
    if rc == 2:
        assert err.count("\n") == 1 and out == ""
        return
    assert rc == 0
    shown = subprocess.run(["bash", "-c", 'eval "$1"; printf %s "$PIP_INDEX_URL"', "-", out], cwd=tmp_path,
                           capture_output=True, text=True, check=True, timeout=30).stdout
    assert shown == value.rstrip("/") and not (tmp_path / "F").exists()


def test_shell_and_dockerfile_quote_even_unvalidated_values(tmp_path: Path) -> None:
    """Defence in depth: a catalog entry or future caller that skips validation still cannot inject."""
    evil = Mirror(name="x", title="t\ntouch F\r\ntouch G", pip_index="https://h/simple\ntouch H")
    env = mirror_environment(evil)
    with pytest.raises(UsageError):  # a title that would end the comment line is refused
        shell_lines(env, evil.title)
    text = shell_lines(env, "plain title")
    assert text.startswith("# ") and text.split("\n", 1)[1].startswith("export PIP_INDEX_URL='")
    done = subprocess.run(["bash", "-c", 'eval "$1"; printf %s "$UV_DEFAULT_INDEX"', "-", text], cwd=tmp_path,
                          capture_output=True, text=True, check=True, timeout=30)
    assert done.stdout == evil.pip_index and not list(tmp_path.iterdir())
    with pytest.raises(UsageError):
        dockerfile_snippet(evil, env)


def test_dockerfile_escapes_quotes_dollars_and_backslashes() -> None:
    odd = Mirror(name="x", title='a "b" RUN id', pip_index='https://h/s"i$HOME\\mple')
    snippet = dockerfile_snippet(odd, mirror_environment(odd))
    lines = snippet.splitlines()
    assert lines[0].startswith("# ") and sum(1 for line in lines if not line.startswith((" ", "#"))) == 1
    assert 'PIP_INDEX_URL="https://h/s\\"i\\$HOME\\\\mple"' in snippet
    assert not any(line.lstrip().startswith("RUN") for line in lines)
    with pytest.raises(UsageError):
        dockerfile_snippet(Mirror(name="x", title="t\nRUN id", pip_index="https://h/simple"), {"A": "b"})


def test_ipv6_plain_http_mirror_gets_a_trusted_host_pip_matches(isolated_home: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from pip._internal.models.link import Link
    from pip._internal.network.session import PipSession

    url = "http://[fd00::5]:8089/simple"
    assert main(["mirror", "use", "v6", "--url", f"v6={url}", "--allow-insecure", "--tool", "pip",
                 "--no-check"]) == 0
    values = pip_reads(isolated_home / ".config" / "pip" / "pip.conf", monkeypatch)
    assert values["global.trusted-host"] == "[fd00::5]:8089"
    session = PipSession()
    session.add_trusted_host(values["global.trusted-host"], suppress_logging=True)
    assert session.is_secure_origin(Link(url + "/tfdistprobe/"))
    control = PipSession()  # the old, unbracketed form: pip does not match it
    control.add_trusted_host("fd00::5:8089", suppress_logging=True)
    assert not control.is_secure_origin(Link(url + "/tfdistprobe/"))
    rc = main(["mirror", "env", "v6", "--url", f"v6={url}", "--allow-insecure", "--json"])
    assert rc == 0 and '"PIP_TRUSTED_HOST": "[fd00::5]:8089"' in capsys.readouterr().out


@pytest.mark.parametrize("spec", ["x/y=https://h/simple", "a b=https://h/simple", "x\n=https://h/simple",
                                  "tuna=https://h/simple", "=https://h/simple", "x=", "x"])
def test_bad_names_and_specs_are_one_line_exit_2(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["mirror", "env", "x", "--url", spec])
    _, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and "--url" in err
    assert not os.path.exists("F")
