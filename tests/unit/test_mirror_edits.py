"""Hostile config files: every one ends in a correct edit or a one-line error with the original untouched."""
from __future__ import annotations

import configparser
import os
from pathlib import Path

import pytest
import tomlkit
from ruamel.yaml import YAML

from tfdist.errors import ConfigFileError, UsageError
from tfdist.mirror.backup import BackupStore
from tfdist.mirror.catalog import get_mirror, parse_adhoc
from tfdist.mirror.paths import ConfigPaths
from tfdist.mirror.recipes import RECIPES
from tfdist.mirror.switch import SwitchRequest, apply, plan

TUNA = get_mirror("tuna")
TUNA_URL = TUNA.pip_index


def make_paths(tmp_path: Path, **extra: str) -> ConfigPaths:
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config"),
           "VIRTUAL_ENV": str(tmp_path / "venv"), "PATH": "", **extra}
    return ConfigPaths.from_env(env, root=tmp_path / "root")


def switch(paths: ConfigPaths, tool: str, mirror=TUNA, scope: str = "user"):
    result = plan(SwitchRequest(mirror=mirror, tools=(tool,), scope=scope), paths)  # type: ignore[arg-type]
    return apply(result, paths)


def pip_values(path: Path) -> dict[str, dict[str, str]]:
    parser = configparser.RawConfigParser()
    parser.optionxform = lambda s: s.lower().replace("_", "-")  # type: ignore[method-assign]
    parser.read_string(path.read_text(encoding="utf-8"))
    return {s: dict(parser.items(s)) for s in parser.sections()}


# ---- pip ------------------------------------------------------------------------------------------------------
PIP_GOOD = {
    "comments-and-order": (
        b"# team pip config\n[global]\ntimeout = 60\n; old mirror below\nindex-url = https://old.test/simple\n"
        b"[install]\nno-cache-dir = true\n",
        [b"# team pip config", b"; old mirror below", b"[install]\nno-cache-dir = true", b"timeout = 60"],
    ),
    "crlf": (b"[global]\r\nindex-url = https://old.test/simple\r\ntimeout = 5\r\n", [b"\r\ntimeout = 5\r\n"]),
    "underscore-key-and-continuation": (
        b"[global]\nIndex_URL = https://old.test/simple\n    https://continued.test\nretries = 2\n",
        [b"Index_URL = " + TUNA_URL.encode() + b"\nretries = 2"],
    ),
    "no-global-section": (b"[install]\nuser = false\n", [b"[install]\nuser = false\n"]),
    "empty": (b"", []),
    "no-final-newline": (b"[global]\ntimeout = 1", [b"timeout = 1\n"]),
}


@pytest.mark.parametrize("case", sorted(PIP_GOOD))
def test_pip_edit_keeps_everything_else(tmp_path: Path, case: str) -> None:
    original, kept = PIP_GOOD[case]
    paths = make_paths(tmp_path)
    target = paths.pip_file("user")
    target.parent.mkdir(parents=True)
    target.write_bytes(original)
    switch(paths, "pip")
    after = target.read_bytes()
    assert pip_values(target)["global"]["index-url"] == TUNA_URL
    for fragment in kept:
        assert fragment in after, (case, after)
    assert after.count(b"index-url") + after.count(b"Index_URL") == 1


def test_pip_bom_is_dropped_because_pip_cannot_read_it(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    target = paths.pip_file("user")
    target.parent.mkdir(parents=True)
    target.write_bytes(b"\xef\xbb\xbf[global]\ntimeout = 3\n")
    switch(paths, "pip")
    assert not target.read_bytes().startswith(b"\xef\xbb\xbf")
    assert pip_values(target)["global"] == {"timeout": "3", "index-url": TUNA_URL}


PIP_BAD = {
    "duplicate-key": (b"[global]\nindex-url = a\nindex_url = b\n", "pip cannot parse"),
    "duplicate-section": (b"[global]\na = 1\n[global]\nb = 2\n", "pip cannot parse"),
    "no-section-header": (b"index-url = https://x.test/simple\n", "pip cannot parse"),
    "garbage-line": (b"[global]\nthis is not ini\n", "pip cannot parse"),
    "not-utf8": (b"[global]\n# caf\xe9\n", "not valid UTF-8"),
}


@pytest.mark.parametrize("case", sorted(PIP_BAD))
def test_pip_bad_files_are_left_untouched(tmp_path: Path, case: str) -> None:
    original, message = PIP_BAD[case]
    paths = make_paths(tmp_path)
    target = paths.pip_file("user")
    target.parent.mkdir(parents=True)
    target.write_bytes(original)
    with pytest.raises(ConfigFileError, match=message) as raised:
        switch(paths, "pip")
    assert raised.value.status == 2
    assert "\n" not in raised.value.one_line()
    assert target.read_bytes() == original
    assert BackupStore(paths).entries() == {}


# ---- file-system hazards (shared by all tools) -----------------------------------------------------------------
@pytest.mark.parametrize("tool", ["pip", "uv", "conda"])
def test_read_only_file_is_refused(tmp_path: Path, tool: str) -> None:
    paths = make_paths(tmp_path)
    target = RECIPES[tool].target(paths, "user")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"")
    target.chmod(0o444)
    with pytest.raises(ConfigFileError, match="read-only"):
        switch(paths, tool)
    assert target.read_bytes() == b""


@pytest.mark.parametrize("tool", ["pip", "uv", "conda"])
def test_directory_instead_of_file_is_refused(tmp_path: Path, tool: str) -> None:
    paths = make_paths(tmp_path)
    target = RECIPES[tool].target(paths, "user")
    target.mkdir(parents=True)
    with pytest.raises(ConfigFileError, match="is a directory"):
        switch(paths, tool)
    assert target.is_dir()


@pytest.mark.parametrize("tool", ["pip", "uv", "conda"])
def test_missing_parent_directories_are_created(tmp_path: Path, tool: str) -> None:
    paths = make_paths(tmp_path, CONDARC=str(tmp_path / "deep" / "er" / ".condarc"))
    target = RECIPES[tool].target(paths, "user")
    assert not target.parent.exists()
    switch(paths, tool)
    assert "tuna.tsinghua.edu.cn" in target.read_text()


def test_parent_that_is_a_file_is_refused(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    target = paths.pip_file("user")
    target.parent.parent.mkdir(parents=True)
    target.parent.write_text("I am a file")
    with pytest.raises(ConfigFileError, match="not a directory"):
        switch(paths, "pip")
    assert target.parent.read_text() == "I am a file"


def test_symlinked_dotfile_stays_a_symlink_and_target_is_edited(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    real = tmp_path / "dotfiles" / "pip.conf"
    real.parent.mkdir()
    real.write_text("# from my dotfiles repo\n[global]\ntimeout = 9\n")
    link = paths.pip_file("user")
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    switch(paths, "pip")
    assert link.is_symlink()
    assert real.read_text().startswith("# from my dotfiles repo\n")
    assert pip_values(real)["global"]["index-url"] == TUNA_URL
    BackupStore(paths).restore()
    assert link.is_symlink()
    assert real.read_text() == "# from my dotfiles repo\n[global]\ntimeout = 9\n"


def test_dangling_symlink_is_refused(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    link = paths.pip_file("user")
    link.parent.mkdir(parents=True)
    link.symlink_to(tmp_path / "nowhere" / "pip.conf")
    with pytest.raises(ConfigFileError, match="does not exist"):
        switch(paths, "pip")
    assert link.is_symlink()


def test_file_mode_is_preserved(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    target = paths.pip_file("user")
    target.parent.mkdir(parents=True)
    target.write_text("[global]\n")
    target.chmod(0o600)
    switch(paths, "pip")
    assert (target.stat().st_mode & 0o777) == 0o600


def test_one_bad_file_means_nothing_is_written(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    pip_file = paths.pip_file("user")
    uv_file = paths.uv_file("user")
    uv_file.parent.mkdir(parents=True)
    uv_file.write_bytes(b"index-url = [unclosed\n")
    with pytest.raises(ConfigFileError, match="not valid TOML"):
        plan(SwitchRequest(mirror=TUNA, tools=("pip", "uv")), paths)
    assert not pip_file.exists()
    assert uv_file.read_bytes() == b"index-url = [unclosed\n"


# ---- uv ---------------------------------------------------------------------------------------------------------
UV_GOOD = {
    "comments-and-other-indexes": (
        b'# my uv settings\nnative-tls = true  # corporate proxy\n\n[[index]]\nname = "pytorch"\n'
        b'url = "https://download.example.test/whl/cpu"\nexplicit = true\n',
        [b"# my uv settings", b"# corporate proxy", b'name = "pytorch"', b"explicit = true"],
    ),
    "existing-default-replaced": (
        b'[[index]]\nname = "old"\nurl = "https://old.test/simple"\ndefault = true\n', [],
    ),
    "legacy-index-url": (b'index-url = "https://old.test/simple"\ncache-dir = "/tmp/c"\n', [b'cache-dir = "/tmp/c"']),
    "crlf": (b'# c\r\ncache-dir = "/tmp/c"\r\n', [b'# c\r\ncache-dir = "/tmp/c"\r\n']),
}


@pytest.mark.parametrize("case", sorted(UV_GOOD))
def test_uv_edit_sets_one_default_index(tmp_path: Path, case: str) -> None:
    original, kept = UV_GOOD[case]
    paths = make_paths(tmp_path)
    target = paths.uv_file("user")
    target.parent.mkdir(parents=True)
    target.write_bytes(original)
    switch(paths, "uv")
    after = target.read_bytes()
    document = tomlkit.parse(after.decode()).unwrap()
    defaults = [i for i in document.get("index", []) if i.get("default") is True]
    assert [d["url"] for d in defaults] == [TUNA_URL]
    assert "index-url" not in document
    for fragment in kept:
        assert fragment in after, (case, after)


UV_EXTRAS = {  # file text, environment, the extra indexes the note must name (none: no note)
    "stale-extra-index": (b'[[index]]\nname = "old"\nurl = "https://stale.test/simple"\n', {},
                          ["https://stale.test/simple"]),
    "explicit-index-only": (b'[[index]]\nname = "pt"\nurl = "https://pt.test/whl"\nexplicit = true\n', {}, []),
    "legacy-extra-index-url": (b'extra-index-url = ["https://a.test/simple", "https://b.test/simple"]\n', {},
                               ["https://a.test/simple", "https://b.test/simple"]),
    "pip-table": (b'[pip]\nextra-index-url = ["https://p.test/simple"]\n', {}, ["https://p.test/simple"]),
    "environment": (b"", {"UV_INDEX": "corp=https://corp.test/simple", "UV_EXTRA_INDEX_URL": "https://e.test/s"},
                    ["https://corp.test/simple", "https://e.test/s"]),
    "credentials-masked": (b'[[index]]\nurl = "https://me:hunter2@private.test/simple"\n', {},
                           ["https://me:****@private.test/simple"]),
    "nothing-else": (b'cache-dir = "/tmp/c"\n', {}, []),
}


@pytest.mark.parametrize("case", sorted(UV_EXTRAS))
def test_switching_uv_with_extra_indexes_says_so_in_one_line(tmp_path: Path, case: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35 item 6: uv asks extra indexes before the default and takes a package from the first that has it,
    so a stale extra index breaks installs (Comfy-Desktop#184)."""
    original, environ, named = UV_EXTRAS[case]
    for name in ("UV_INDEX", "UV_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)  # the switch reads the process environment, as uv will
    paths = make_paths(tmp_path)
    target = paths.uv_file("user")
    target.parent.mkdir(parents=True)
    target.write_bytes(original)
    result = switch(paths, "uv")
    notes = [n for c in result.changes for n in c.notes if "extra index" in n]
    if not named:
        assert notes == []
        return
    assert len(notes) == 1 and "\n" not in notes[0]
    assert all(url in notes[0] for url in named), notes[0]
    assert "hunter2" not in notes[0] and "first index that has it" in notes[0]


UV_BAD = {
    "duplicate-key": (b'cache-dir = "a"\ncache-dir = "b"\n', "not valid TOML"),
    "invalid": (b"[[index]\nurl = 1\n", "not valid TOML"),
    "index-not-array": (b'index = "https://x.test"\n', "not an array of tables"),
    "not-utf8": (b'cache-dir = "\xff"\n', "not valid UTF-8"),
}


@pytest.mark.parametrize("case", sorted(UV_BAD))
def test_uv_bad_files_are_left_untouched(tmp_path: Path, case: str) -> None:
    original, message = UV_BAD[case]
    paths = make_paths(tmp_path)
    target = paths.uv_file("user")
    target.parent.mkdir(parents=True)
    target.write_bytes(original)
    with pytest.raises(ConfigFileError, match=message):
        switch(paths, "uv")
    assert target.read_bytes() == original


def test_uv_site_scope_is_explained(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no per-environment"):
        plan(SwitchRequest(mirror=TUNA, tools=("uv",), scope="site"), make_paths(tmp_path))


# ---- conda ------------------------------------------------------------------------------------------------------
def load_yaml(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def test_conda_edit_keeps_comments_and_unrelated_keys(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    target = paths.conda_file("user")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("# lab settings\nauto_activate_base: false  # keep base quiet\nchannels:\n  - conda-forge\n"
                      "  - defaults\ncustom_channels:\n  mylab: https://conda.lab.test\n")
    switch(paths, "conda")
    text = target.read_text()
    assert "# lab settings" in text and "# keep base quiet" in text
    data = load_yaml(target)
    assert data["auto_activate_base"] is False
    assert data["channels"] == ["conda-forge", "defaults"]
    assert data["default_channels"] == list(TUNA.conda_default_channels)
    assert data["custom_channels"]["mylab"] == "https://conda.lab.test"
    assert data["custom_channels"]["conda-forge"] == TUNA.conda_custom_channels["conda-forge"]
    assert data["show_channel_urls"] is True


def test_conda_switch_drops_channels_the_new_mirror_lacks(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    switch(paths, "conda", get_mirror("tuna"))
    switch(paths, "conda", get_mirror("ustc"))
    data = load_yaml(paths.conda_file("user"))
    assert "default_channels" not in data  # USTC does not mirror Anaconda's defaults
    assert set(data["custom_channels"]) == {"conda-forge", "bioconda"}  # pytorch no longer points at TUNA
    assert all("ustc" in url for url in data["custom_channels"].values())
    switch(paths, "conda", get_mirror("official"))
    data = load_yaml(paths.conda_file("user"))
    assert "custom_channels" not in data and "default_channels" not in data


CONDA_BAD = {
    "duplicate-key": (b"channels:\n  - a\nchannels:\n  - b\n", "not valid YAML"),
    "invalid": (b"channels: [unclosed\n", "not valid YAML"),
    "not-a-mapping": (b"- just\n- a list\n", "not a mapping"),
    "channels-not-list": (b"channels: conda-forge\n", "not a list"),
    "not-utf8": (b"channels:\n  - caf\xe9\n", "not valid UTF-8"),
}


@pytest.mark.parametrize("case", sorted(CONDA_BAD))
def test_conda_bad_files_are_left_untouched(tmp_path: Path, case: str) -> None:
    original, message = CONDA_BAD[case]
    paths = make_paths(tmp_path)
    target = paths.conda_file("user")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(original)
    with pytest.raises(ConfigFileError, match=message):
        switch(paths, "conda")
    assert target.read_bytes() == original


def test_conda_bom_and_crlf_are_kept(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    target = paths.conda_file("user")
    target.parent.mkdir(parents=True)
    target.write_bytes(b"\xef\xbb\xbf# c\r\nssl_verify: true\r\n")
    switch(paths, "conda")
    after = target.read_bytes()
    assert after.startswith(b"\xef\xbb\xbf# c\r\n") and b"\r\n" in after and b"\n" not in after.replace(b"\r\n", b"")
    assert load_yaml(target)["ssl_verify"] is True


def test_huawei_has_no_conda_so_conda_alone_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no conda channels"):
        plan(SwitchRequest(mirror=get_mirror("huawei"), tools=("conda",)), make_paths(tmp_path))


# ---- backups and restore ----------------------------------------------------------------------------------------
def test_restore_returns_original_bytes_after_several_switches(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    pip_file = paths.pip_file("user")
    pip_file.parent.mkdir(parents=True)
    original = b"\xef\xbb\xbf# mine\r\n[global]\r\ntimeout = 4\r\n"
    pip_file.write_bytes(original)
    for name in ("tuna", "aliyun", "ustc"):
        switch(paths, "pip", get_mirror(name))
        switch(paths, "uv", get_mirror(name))
    assert pip_values(pip_file)["global"]["index-url"] == get_mirror("ustc").pip_index
    actions = BackupStore(paths).restore(("pip",))
    assert [a.action for a in actions] == ["restored"]
    assert pip_file.read_bytes() == original
    assert paths.uv_file("user").exists()  # only pip was asked for
    actions = BackupStore(paths).restore()
    assert [a.action for a in actions] == ["deleted"]
    assert not paths.uv_file("user").exists()
    assert BackupStore(paths).entries() == {}


def test_restore_dry_run_changes_nothing(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    switch(paths, "pip")
    before = paths.pip_file("user").read_bytes()
    actions = BackupStore(paths).restore(dry_run=True)
    assert [a.action for a in actions] == ["deleted"]
    assert paths.pip_file("user").read_bytes() == before


def test_dry_run_plan_writes_nothing_and_diff_shows_change(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    result = plan(SwitchRequest(mirror=TUNA, tools=("pip", "uv", "conda"), dry_run=True), paths)
    assert all(c.changed for c in result.changes)
    assert all(not c.file.path.exists() for c in result.changes)
    assert f"+index-url = {TUNA_URL}" in result.changes[0].diff()


def test_insecure_adhoc_mirror_adds_trusted_host_only_for_http(tmp_path: Path) -> None:
    paths = make_paths(tmp_path)
    mirror = parse_adhoc(["lan=http://10.0.0.5:8080/simple"], allow_insecure=True)["lan"]
    switch(paths, "pip", mirror)
    assert pip_values(paths.pip_file("user"))["global"]["trusted-host"] == "10.0.0.5:8080"
    switch(paths, "pip", TUNA)
    assert pip_values(paths.pip_file("user"))["global"]["index-url"] == TUNA_URL


# ---- scopes ---------------------------------------------------------------------------------------------------
def test_scopes_map_to_the_files_each_tool_reads(tmp_path: Path) -> None:
    paths = make_paths(tmp_path, CONDA_PREFIX=str(tmp_path / "env"))
    root = tmp_path / "root"
    assert paths.pip_file("user") == tmp_path / "home" / ".config" / "pip" / "pip.conf"
    assert paths.pip_file("global") == root / "etc" / "pip.conf"
    assert paths.pip_file("site") == tmp_path / "venv" / "pip.conf"
    assert paths.uv_file("global") == root / "etc" / "uv" / "uv.toml"
    assert paths.conda_file("site") == tmp_path / "env" / ".condarc"
    assert paths.conda_file("global") == root / "etc" / "conda" / ".condarc"
    existing = tmp_path / "custom-pip.conf"
    existing.write_text("")
    assert make_paths(tmp_path, PIP_CONFIG_FILE=str(existing)).pip_file("user") == existing
    assert make_paths(tmp_path, PIP_CONFIG_FILE=str(tmp_path / "absent.conf")).pip_file("user") == \
        paths.pip_file("user")
    with pytest.raises(UsageError, match="os.devnull"):
        make_paths(tmp_path, PIP_CONFIG_FILE=os.devnull).pip_file("user")
    assert make_paths(tmp_path, UV_CONFIG_FILE=str(tmp_path / "u.toml")).uv_file("user") == tmp_path / "u.toml"
    assert make_paths(tmp_path, CONDARC=str(tmp_path / "rc")).conda_file("user") == tmp_path / "rc"
