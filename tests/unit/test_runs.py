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
from tfdist.launch import progress, runs


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
