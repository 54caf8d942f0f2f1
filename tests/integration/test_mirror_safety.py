"""Nothing is lost and nothing leaks: the state lock under real concurrent processes, owner/group/mode kept with
real chown, edits made after a switch survive restore, backups outside the state directory are refused, and an
index password never reaches any output while pip, uv and ``mirror test`` can still use it."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.mirror.conftest_helpers import clean_env, start_mirror
from tests.fixtures.mirror.loopback import Behaviour
from tfdist.cli.main import main
from tfdist.errors import ConfigFileError
from tfdist.mirror.backup import BackupStore
from tfdist.mirror.catalog import get_mirror
from tfdist.mirror.paths import ConfigPaths
from tfdist.mirror.switch import SwitchRequest, apply, plan
from tests.fixtures.mirror.conftest_helpers import (  # noqa: F401  (fixtures)
    loopback_only, own_venv, real_config_untouched)
from tests.fixtures.mirror.conftest_helpers import run_mirror as run

OTHER_UID, OTHER_GID = 4242, 4343
TOKEN = "s3cr3t-T0KEN"

pytestmark = pytest.mark.usefixtures("loopback_only", "own_venv", "real_config_untouched")


@pytest.mark.slow
def test_concurrent_use_runs_all_reach_the_manifest(tmp_path: Path, isolated_home: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    jobs = [["--tool", "pip"], ["--tool", "uv"], ["--tool", "pip", "--scope", "site"],
            ["--tool", "uv", "--scope", "global", "--root", str(tmp_path / "root")]]
    for _ in range(3):  # repeated rounds: one lost entry in any round fails
        procs = [subprocess.Popen([sys.executable, "-m", "tfdist", "mirror", "use", "tuna", "--no-check", *flags], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for flags in jobs]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err.decode()
        entries = BackupStore(ConfigPaths.from_env()).entries()
        assert len(entries) == 4, sorted(entries)
        assert main(["mirror", "restore"]) == 0
        assert BackupStore(ConfigPaths.from_env()).entries() == {}


def test_a_file_changed_between_plan_and_apply_is_not_overwritten(isolated_home: Path) -> None:
    paths = ConfigPaths.from_env()
    pip_conf = paths.pip_file("user")
    pip_conf.parent.mkdir(parents=True)
    pip_conf.write_text("[global]\ntimeout = 5\n")
    planned = plan(SwitchRequest(mirror=get_mirror("tuna"), tools=("pip",)), paths)
    pip_conf.write_text("[global]\ntimeout = 5\nretries = 9\n")  # another program edits the file meanwhile
    with pytest.raises(ConfigFileError, match="changed on disk"):
        apply(planned, paths)
    assert pip_conf.read_text() == "[global]\ntimeout = 5\nretries = 9\n"
    assert BackupStore(paths).entries() == {}


def test_owner_group_and_mode_survive_use_and_restore(isolated_home: Path, capsys) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    pip_conf = isolated_home / ".config" / "pip" / "pip.conf"
    pip_conf.parent.mkdir(parents=True)
    pip_conf.write_text("[global]\ntimeout = 5\n")
    os.chown(pip_conf, OTHER_UID, OTHER_GID)
    os.chmod(pip_conf, 0o640)
    uv_dir = isolated_home / ".config" / "uv"
    uv_dir.mkdir()
    os.chown(uv_dir, OTHER_UID, OTHER_GID)  # a new file in another user's folder becomes theirs
    rc, _, err = run(capsys, "use", "tuna", "--no-check", "--tool", "pip,uv")
    assert rc == 0, err
    for path, mode in ((pip_conf, 0o640), (uv_dir / "uv.toml", 0o644)):
        info = path.stat()
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (OTHER_UID, OTHER_GID, mode), path
    assert "pypi.tuna" in pip_conf.read_text()
    assert run(capsys, "restore")[0] == 0
    info = pip_conf.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (OTHER_UID, OTHER_GID, 0o640)
    assert pip_conf.read_text() == "[global]\ntimeout = 5\n" and not (uv_dir / "uv.toml").exists()


@pytest.mark.parametrize("existed", [False, True])
def test_restore_keeps_edits_made_after_the_switch(isolated_home: Path, capsys, existed: bool) -> None:
    pip_conf = isolated_home / ".config" / "pip" / "pip.conf"
    if existed:
        pip_conf.parent.mkdir(parents=True)
        pip_conf.write_text("[global]\ntimeout = 5\n")
    assert run(capsys, "use", "tuna", "--no-check", "--tool", "pip")[0] == 0
    edited = pip_conf.read_text() + "[install]\nuser = true\n"
    pip_conf.write_text(edited)
    rc, out, _ = run(capsys, "restore", "--json")
    files = json.loads(out)["files"]
    assert rc == 0 and len(files) == 1
    kept = Path(files[0]["kept"])
    assert kept.parent == pip_conf.parent and kept.read_text() == edited and str(kept) in files[0]["note"]
    if existed:
        assert pip_conf.read_text() == "[global]\ntimeout = 5\n"
    else:
        assert not pip_conf.exists()


@pytest.mark.parametrize("backup", ["../../victim", "/tmp/victim-abs", "manifest.json", "link.orig"])
def test_backups_outside_the_state_directory_are_refused(isolated_home: Path, tmp_path: Path, capsys,
                                                         backup: str) -> None:
    assert run(capsys, "use", "tuna", "--no-check", "--tool", "pip")[0] == 0
    store = BackupStore(ConfigPaths.from_env())
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (store.directory / "link.orig").symlink_to(victim)
    manifest = json.loads(store.manifest_path.read_text())
    (entry,) = manifest["entries"].values()
    entry.update(existed=True, backup=backup if backup != "/tmp/victim-abs" else str(victim))
    if backup == "../../victim":
        entry["backup"] = os.path.relpath(victim, store.directory)
    store.manifest_path.write_text(json.dumps(manifest))
    before = (isolated_home / ".config" / "pip" / "pip.conf").read_bytes()
    rc, _, err = run(capsys, "restore")
    assert rc == 2 and "outside tfdist's state directory" in err and err.count("\n") == 1
    assert victim.read_text() == "precious\n"
    assert (isolated_home / ".config" / "pip" / "pip.conf").read_bytes() == before


def test_credentials_are_masked_everywhere_and_files_are_0600(isolated_home: Path, capsys) -> None:
    url = f"https://user:{TOKEN}@corp.test/simple"
    outputs = []
    for args in (["use", "corp", "--url", f"corp={url}", "--tool", "pip,uv", "--dry-run"],
                 ["use", "corp", "--url", f"corp={url}", "--tool", "pip,uv", "--dry-run", "--json"],
                 ["use", "corp", "--url", f"corp={url}", "--tool", "pip,uv", "--no-check"],
                 ["status"], ["status", "--json"], ["env", "corp", "--url", f"corp={url}", "--json"],
                 ["env", "corp", "--url", f"corp={url}", "--dockerfile"],  # refused: ENV would bake it into layers
                 ["use", "corp", "--url", f"corp=https://user:{TOKEN}@[zz]/simple", "--no-check"],
                 ["use", "tuna", "--tool", "pip", "--dry-run"]):  # the diff's "before" side holds the password
        rc, out, err = run(capsys, *args)
        outputs.append(out + err)
        assert rc in (0, 2), (args, err)
    for text in outputs:
        assert TOKEN not in text
    assert "user:****@corp.test" in outputs[0] and "user:****@corp.test" in outputs[4]
    for path in (isolated_home / ".config" / "pip" / "pip.conf", isolated_home / ".config" / "uv" / "uv.toml"):
        assert TOKEN in path.read_text() and stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.slow
def test_mirror_test_probes_a_credentialed_index(capsys) -> None:
    guarded = start_mirror(Behaviour(auth=("user", TOKEN)), size=128 * 1024)
    try:
        port = guarded.port
        good = f"ok=http://user:{TOKEN}@127.0.0.1:{port}/simple"
        bad = f"bad=http://user:wrong@127.0.0.1:{port}/simple"
        rc, out, err = run(capsys, "test", "--only", "ok,bad", "--url", good, "--url", bad, "--allow-insecure",
                           "--timeout", "3", "--json")
        assert rc == 0, err
        assert TOKEN not in out + err
        results = {r["name"]: r for r in json.loads(out)["results"]}
        assert results["ok"]["status"] == "ok" and results["ok"]["downloaded_bytes"] > 0
        assert "user:****@127.0.0.1" in results["ok"]["index_url"]
        assert results["bad"]["status"] == "error" and "401" in results["bad"]["error"]
    finally:
        guarded.stop()


@pytest.mark.slow
def test_pip_installs_from_the_credentialed_index_tfdist_wrote(tmp_path: Path) -> None:
    guarded = start_mirror(Behaviour(auth=("user", TOKEN)))
    home = tmp_path / "home"
    try:
        env = clean_env(home)
        url = f"http://user:{TOKEN}@127.0.0.1:{guarded.port}/simple"
        done = subprocess.run([sys.executable, "-m", "tfdist", "mirror", "use", "corp", "--url", f"corp={url}",
                               "--allow-insecure", "--tool", "pip"], env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and TOKEN not in done.stdout + done.stderr
        fetched = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path / "dl"),
                                  "tfdistprobe"], env=env, capture_output=True, text=True, timeout=120)
        assert fetched.returncode == 0, fetched.stdout + fetched.stderr
        assert (tmp_path / "dl" / "tfdistprobe-1.0-py3-none-any.whl").is_file()
    finally:
        guarded.stop()
