"""Run records: where they go, how a run is found, and what a damaged or foreign record does."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tfdist.errors import UsageError
from tfdist.launch.console import progress, runs


def make(run_id: str, tmp_path: Path, started: float, **kw) -> runs.RunRecord:
    folder = tmp_path / run_id
    folder.mkdir(exist_ok=True)
    record = runs.new_record(run_id=run_id, log_dir=str(folder), temporary=False, job_name="j",
                             command=("python", "-u", "train.py"))
    return replace(record, started_at=started, **kw)


def test_state_dir_follows_xdg_then_home():
    assert runs.state_dir({"XDG_STATE_HOME": "/x/state", "HOME": "/h"}) == Path("/x/state/tfdist")
    assert runs.state_dir({"HOME": "/h"}) == Path("/h/.local/state/tfdist")
    assert runs.state_dir({"XDG_STATE_HOME": "", "HOME": "/h"}) == Path("/h/.local/state/tfdist")


def test_saved_records_are_found_newest_first_by_id_prefix_or_folder(tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    older, newer = make("aaa111", tmp_path, 1000.0), make("aab222", tmp_path, 2000.0)
    for record in (older, newer):
        runs.save(record, env)
    assert [r.run_id for r in runs.list_records(env)] == ["aab222", "aaa111"]
    assert runs.find_run(None, env) == newer
    assert runs.find_run("aaa", env) == older
    assert runs.find_run(str(tmp_path / "aaa111"), env) == older  # the run folder's own copy
    assert json.loads((tmp_path / "aaa111" / "run.json").read_text())["schema"] == "tfdist.run"
    with pytest.raises(UsageError, match="matches 2 runs"):
        runs.find_run("aa", env)
    with pytest.raises(UsageError, match="no run 'zzz' among the 2 recorded"):
        runs.find_run("zzz", env)
    with pytest.raises(UsageError, match="is not a run id"):
        runs.find_run("a b", env)
    with pytest.raises(UsageError, match="is not a run folder"):
        runs.find_run(str(tmp_path), env)


def test_nothing_recorded_says_where_it_looked(tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path / "empty")}
    with pytest.raises(UsageError, match="no runs recorded in .*empty/tfdist/runs"):
        runs.find_run(None, env)


def test_the_end_is_recorded_and_reloaded(tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    record = make("ccc333", tmp_path, 1000.0)
    runs.save(record, env)
    assert not record.ended
    runs.save(runs.finished(record, "succeeded", {"steps": 5}), env)
    fresh = runs.reload(record, env)
    assert fresh.ended and fresh.state == "succeeded" and fresh.summary == {"steps": 5}


@pytest.mark.parametrize("text, why", [
    ('{"schema": "tfdist.run", "schema_version": 2, "run_id": "x"}', "version"),
    ('{"schema": "other"}', "not a tfdist run record"),
    ('{"schema": "tfdist.run", "schema_version": 1, "run_id": "x"}', "incomplete"),
    ('[1, 2]', "not a tfdist run record"),
])
def test_foreign_or_damaged_records_are_rejected(text, why):
    with pytest.raises(ValueError, match=why):
        runs.RunRecord.from_json(json.loads(text))


def test_damaged_files_are_skipped_when_listing(tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    runs.save(make("ddd444", tmp_path, 1.0), env)
    (runs.records_dir(env) / "broken.json").write_text("{not json")
    assert [r.run_id for r in runs.list_records(env)] == ["ddd444"]


def test_old_records_are_pruned(tmp_path, monkeypatch):
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    monkeypatch.setattr(runs, "KEEP_RECORDS", 3)
    for i in range(5):
        record = make(f"r{i}", tmp_path, float(i))
        runs.save(record, env)
        os.utime(runs.records_dir(env) / f"r{i}.json", (i, i))
    assert sorted(p.stem for p in runs.records_dir(env).glob("*.json")) == ["r2", "r3", "r4"]


def test_a_read_only_state_folder_does_not_stop_a_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    runs.save(make("eee555", tmp_path, 1.0), {"XDG_STATE_HOME": str(blocker)})  # cannot mkdir under a file
    assert (tmp_path / "eee555" / "run.json").exists()


def test_launcher_alive_and_run_state(tmp_path):
    me = make("fff666", tmp_path, 0.0)
    assert runs.launcher_alive(replace(me, started_at=9e12)) is True
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = replace(me, launcher_pid=gone.pid)
    assert runs.launcher_alive(dead) is False
    assert runs.launcher_alive(replace(me, started_at=0.0)) is False  # our pid, but started after the run: recycled
    elsewhere = replace(me, host="another-host")
    assert runs.launcher_alive(elsewhere) is None
    assert progress.run_state(dead, False) == "lost"
    assert progress.run_state(elsewhere, None) == "unknown"
    assert progress.run_state(me, True) == "running"
    assert progress.run_state(runs.finished(dead, "failed", {}), False) == "failed"


def test_records_are_written_for_the_user_alone(tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    runs.save(make("ggg777", tmp_path, 1.0), env)
    for path in (runs.records_dir(env) / "ggg777.json", tmp_path / "ggg777" / "run.json"):
        assert path.stat().st_mode & 0o777 == 0o600
    assert not [p for p in runs.records_dir(env).iterdir() if p.name.startswith(".")]  # no temporary file left


def test_the_recorded_command_has_its_secrets_masked(tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    record = runs.new_record(run_id="hhh888", log_dir=str(tmp_path), temporary=False, job_name="j",
                             command=("env", "WANDB_API_KEY=k3y", "python", "train.py", "--hf-token", "t0ken",
                                      "--password=pw", "--data", "https://user:hunter2@data.example/x",
                                      "--epochs", "3"))
    runs.save(record, env)
    text = (runs.records_dir(env) / "hhh888.json").read_text()
    for secret in ("k3y", "t0ken", "=pw", "hunter2"):
        assert secret not in text
    assert runs.find_run("hhh888", env).command == (
        "env", "WANDB_API_KEY=****", "python", "train.py", "--hf-token", "****", "--password=****", "--data",
        "https://user:****@data.example/x", "--epochs", "3")


GOOD_RECORD = {"schema": "tfdist.run", "schema_version": 1, "run_id": "iii999", "log_dir": "/nowhere/iii999",
               "temporary": False, "job_name": "j", "command": ["python", "train.py"], "host": "h",
               "launcher_pid": 1, "started_at": 1000.0, "cwd": "/", "state": "succeeded", "ended_at": 2000.0,
               "summary": {"steps": 3, "steps_per_s": 1.5, "restarts": 0, "loss": 0.5}}


@pytest.mark.parametrize("field, value", [
    ("summary", {"steps": "many"}), ("summary", {"steps_per_s": "fast"}), ("summary", {"loss": "low"}),
    ("summary", {"restarts": {}}), ("summary", [["steps", 1]]), ("summary", {"other": [1]}),
    ("started_at", 1e308), ("started_at", "nan"), ("started_at", True), ("ended_at", "inf"), ("ended_at", -5),
    ("log_dir", "/tmp/\u0000x"), ("command", "python train.py"), ("command", [1, 2]), ("launcher_pid", 10 ** 30),
    ("launcher_pid", "1"), ("run_id", "../../etc"), ("host", ["a"]), ("temporary", "no"), ("job_name", {"a": 1}),
])
@pytest.mark.parametrize("argv", [["status"], ["status", "--list"], ["status", "--json"], ["logs"]])
def test_a_record_with_wrong_types_is_one_line_never_a_traceback(tmp_path, monkeypatch, capsys, field, value,
                                                                  argv):
    from tfdist.cli.main import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    folder = runs.records_dir(os.environ)
    folder.mkdir(parents=True)
    (folder / "iii999.json").write_text(json.dumps({**GOOD_RECORD, field: value}))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text(json.dumps({**GOOD_RECORD, field: value}))
    assert main(argv) in (0, 2)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) <= 1 and "Traceback" not in err
    assert main(["status", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path / "run" / "run.json") in err and field in err


@pytest.mark.parametrize("ended_at", [2000.0, None], ids=["ended", "running-elsewhere"])
def test_status_shows_a_records_names_as_printable_text(tmp_path, monkeypatch, capsys, ended_at):
    from tfdist.cli.main import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    folder = runs.records_dir(os.environ)
    folder.mkdir(parents=True)
    hostile = {**GOOD_RECORD, "host": "evil\x1b[2J\nlost node 9", "job_name": "j\x1b]0;title\x07",
               "command": ["python", "train.py\r\nrm -rf /"], "state": "succ\x1b[1m\nlost node 8",
               "ended_at": ended_at}
    (folder / "iii999.json").write_text(json.dumps(hostile))
    for argv in (["status"], ["status", "--list"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\r" not in out and "\x07" not in out
        assert not any(line.startswith(("lost node", "rm -rf")) for line in out.splitlines())
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert ("evil\\x1b[2J\\nlost node 9" in out) if ended_at is None else ("succ\\x1b[1m\\nlost node 8" in out)
