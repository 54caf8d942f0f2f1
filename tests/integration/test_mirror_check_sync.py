"""Before switching: the check that refuses an unreachable or broken mirror, the names users type, the PyPI sync
age read from captured-format status documents served on loopback, and ``--package`` ranking by the time to the
first MiB of the exact wheel, against loopback mirrors of known speed."""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from tests.fixtures.mirror.conftest_helpers import (  # noqa: F401  (fixtures)
    loopback_only, own_venv, real_config_untouched)
from tests.fixtures.mirror.conftest_helpers import run_mirror as run
from tests.fixtures.mirror.conftest_helpers import probe_projects, start_mirror
from tests.fixtures.mirror.loopback import Behaviour, LoopbackMirror, Wheel, _random_bytes, build_wheel
from tfdist.errors import UsageError
from tfdist.mirror import catalog
from tfdist.mirror.syncstatus import parse_mirrorz, parse_mirrorz_status, parse_tunasync

pytestmark = pytest.mark.usefixtures("loopback_only", "own_venv", "real_config_untouched")
NOW = int(time.time())


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again on exit: connecting is refused


# ---- the check before `use` ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["closed-port", "500", "no-metadata", "file-404"])
def test_use_refuses_an_unreachable_or_broken_mirror(fault: str, capsys, isolated_home: Path) -> None:
    server = None
    if fault == "closed-port":
        url = f"http://127.0.0.1:{closed_port()}/simple"
    else:
        server = start_mirror(Behaviour(fault=fault), size=16 * 1024)
        url = server.url
    try:
        rc, out, err = run(capsys, "use", "lan", "--url", f"lan={url}", "--allow-insecure", "--tool", "pip,uv",
                           "--timeout", "2")
    finally:
        if server is not None:
            server.stop()
    assert rc == 1 and err.count("\n") == 1 and "failed the check before switching" in err and "--no-check" in err
    assert {"closed-port": "connection refused", "500": "HTTP 500", "no-metadata": "metadata",
            "file-404": "HTTP 404"}[fault] in err
    assert not (isolated_home / ".config").exists() and not (isolated_home / ".local" / "state").exists()


def test_use_switches_to_a_healthy_mirror_and_no_check_skips_the_probe(capsys, isolated_home: Path) -> None:
    good = start_mirror(size=16 * 1024)
    try:
        rc, out, err = run(capsys, "use", "lan", "--url", f"lan={good.url}", "--allow-insecure", "--tool", "pip")
        assert rc == 0, out + err
        assert "/simple/pip/" in good.behaviour.requests and "Now using lan" in out
    finally:
        good.stop()
    dead = f"http://127.0.0.1:{closed_port()}/simple"
    rc, out, err = run(capsys, "use", "dead", "--url", f"dead={dead}", "--allow-insecure", "--tool", "pip",
                       "--no-check")
    assert rc == 0, err
    assert dead in (isolated_home / ".config" / "pip" / "pip.conf").read_text()


# ---- names users type -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("typed,name", [("tsinghua", "tuna"), ("THU", "tuna"), ("ali", "aliyun"),
                                        ("alibaba", "aliyun"), ("huaweicloud", "huawei"), ("qcloud", "tencent"),
                                        ("sjtug", "sjtu"), ("cernet", "mirrorz"), ("ustc", "ustc"), ("bfsu", "bfsu")])
def test_aliases_resolve(typed: str, name: str) -> None:
    assert catalog.get_mirror(typed).name == name


def test_aliases_are_unique_and_never_shadow_names() -> None:
    mirrors = catalog.load_catalog()
    aliases = [a for m in mirrors.values() for a in m.aliases]
    assert len(aliases) == len(set(aliases)) and not set(aliases) & set(mirrors)
    with pytest.raises(UsageError, match="unknown mirror '163'"):
        catalog.get_mirror("163")  # NetEase is not in the catalog (disabled upstream: daily sync only)
    with pytest.raises(UsageError, match="already taken"):
        catalog.parse_adhoc(["tsinghua=https://x.test/simple"])


# ---- sync age ---------------------------------------------------------------------------------------------------
def tunasync_document(age: int) -> list[dict]:
    """The shape tunasync's manager publishes (internal/status_web.go WebMirrorStatus)."""
    stamp = NOW - age
    text = time.strftime("%Y-%m-%d %H:%M:%S +0000", time.gmtime(stamp))
    return [
        {"name": "debian", "is_master": True, "status": "syncing", "last_update": text, "last_update_ts": stamp - 99,
         "last_ended": text, "last_ended_ts": stamp, "upstream": "rsync://x/debian/", "size": "1.5T"},
        {"name": "pypi", "is_master": True, "status": "success", "last_update": text, "last_update_ts": stamp,
         "last_ended": text, "last_ended_ts": stamp, "upstream": "https://upstream.test/", "size": "20T"},
    ]


def mirrorz_document(status: str) -> dict:
    """The shape of mirrorz.json (mirrorz-org/mirrorz README, data format 1.x)."""
    return {"version": 1.7, "site": {"url": "https://mirrors.test", "abbr": "TEST"}, "info": [],
            "mirrors": [{"cname": "AOSP", "url": "/AOSP", "status": "S"},
                        {"cname": "pypi", "desc": "", "url": "/pypi", "status": status, "help": "/help/pypi/",
                         "upstream": "", "size": "10T"}]}


def test_status_documents_parse() -> None:
    assert parse_tunasync(tunasync_document(600), "pypi").last_success == NOW - 600
    assert parse_tunasync(tunasync_document(600), "pypi").state == "success"
    assert parse_tunasync(tunasync_document(600), "nope").error
    assert parse_tunasync({"not": "a list"}, "pypi").error
    assert parse_tunasync([{"name": "pypi", "status": "failed", "last_update_ts": True}], "pypi").last_success is None
    assert parse_mirrorz(mirrorz_document(f"S{NOW - 60}X{NOW + 60}"), "PyPI").last_success == NOW - 60
    syncing = parse_mirrorz_status(f"Y{NOW - 5}O{NOW - 3600}")
    assert syncing.state == "syncing" and syncing.last_success == NOW - 3600
    failed = parse_mirrorz_status(f"F{NOW}")
    assert failed.state == "failed" and failed.last_success is None
    for garbage in ("", "s123", "S12x", "X123"):
        assert parse_mirrorz_status(garbage).error, garbage


@pytest.mark.slow
def test_mirror_test_shows_sync_age_from_documents_served_on_loopback(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    now = int(time.time())  # not the module's NOW: other tests may have run for minutes since import
    files = {"/static/tunasync.json": json.dumps(tunasync_document(1800 + NOW - now)).encode(),
             "/static/json/mirrorz.json": json.dumps(mirrorz_document(f"Y{now}O{now - 7200}")).encode()}
    server = LoopbackMirror(probe_projects(64 * 1024), files=files).start()
    base = f"http://127.0.0.1:{server.port}"
    flags = ["--only", "t,z,n", "--url", f"t={server.url}", "--url", f"z={server.url}", "--url", f"n={server.url}",
             "--sync-status", f"t=tunasync:{base}/static/tunasync.json",
             "--sync-status", f"z=mirrorz:{base}/static/json/mirrorz.json",
             "--allow-insecure", "--timeout", "3"]
    try:
        rc, out, err = run(capsys, "test", *flags, "--json")
        assert rc == 0, err
        rows = {r["name"]: r for r in json.loads(out)["results"]}
        assert rows["t"]["sync"]["state"] == "success" and 1790 <= rows["t"]["sync"]["age_s"] <= 1900
        assert rows["z"]["sync"]["state"] == "syncing" and 7190 <= rows["z"]["sync"]["age_s"] <= 7300
        assert rows["n"]["sync"] is None
        rc, out, _ = run(capsys, "test", *flags)
        assert "30 min ago (success)" in out and "2.0 h ago (syncing)" in out
    finally:
        server.stop()


# ---- --package --------------------------------------------------------------------------------------------------
def tensorflow_wheels(best_tag: str, with_pin: bool = True) -> list[Wheel]:
    """The pinned release as a wheel for this machine, and decoys a careless pick would take."""
    data = _random_bytes(2 * 1024 * 1024, 7)
    meta = b"Metadata-Version: 2.1\nName: tensorflow\nVersion: 2.21.0\n"
    wheels = [Wheel("tensorflow-2.21.0-py3-none-any.whl", data, meta)]  # fits, but less specific
    if with_pin:
        wheels.append(Wheel(f"tensorflow-2.21.0-{best_tag}.whl", data, meta))
    wheels += [Wheel("tensorflow-2.22.0-py3-none-any.whl", data, meta),  # newer: not what was asked
               Wheel("tensorflow-2.21.0-cp311-cp311-win_amd64.whl", data, meta)]  # other platform, listed last
    if not with_pin:
        wheels = wheels[2:]
    return wheels


@pytest.mark.slow
def test_package_ranks_by_time_to_the_first_mib_of_the_exact_wheel(capsys) -> None:
    from pip._vendor.packaging.tags import sys_tags

    best = str(next(iter(sys_tags())))
    rates = {"fast": 8_000_000, "mid": 2_000_000, "slow": 700_000}
    servers = {name: LoopbackMirror({"tensorflow": tensorflow_wheels(best), "pip": [build_wheel("pip", "1")]},
                                    Behaviour(rate=rate)).start() for name, rate in rates.items()}
    servers["stale"] = LoopbackMirror({"tensorflow": tensorflow_wheels(best, with_pin=False)}).start()
    flags = ["--only", ",".join(servers), "--allow-insecure", "--timeout", "5", "--package", "tensorflow==2.21.0",
             *[a for name, s in servers.items() for a in ("--url", f"{name}={s.url}")]]
    try:
        rc, out, err = run(capsys, "test", *flags, "--json")
        assert rc == 0, err
        results = json.loads(out)["results"]
        assert [r["name"] for r in results] == ["fast", "mid", "slow", "stale"]
        for r in results[:3]:
            assert r["file_url"].endswith(f"/tensorflow-2.21.0-{best}.whl") and r["downloaded_bytes"] == 1 << 20
        assert results[0]["first_mib_s"] < results[1]["first_mib_s"] < results[2]["first_mib_s"]
        assert results[3]["status"] == "error" and "tensorflow==2.21.0" in results[3]["error"]
    finally:
        for server in servers.values():
            server.stop()


@pytest.mark.parametrize("bad", ["tensorflow", "tensorflow>=2.21", "tensorflow==", "tf==2.21 x", "==2.21",
                                 "tensorflow==2.21\n"])
def test_package_must_be_an_exact_pin(bad: str, capsys) -> None:
    rc, _, err = run(capsys, "test", "--only", "tuna", "--package", bad)
    assert rc == 2 and "--package" in err and err.count("\n") == 1
