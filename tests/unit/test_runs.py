"""Run records: where they go, how a run is found (the one running now first), and what a damaged or foreign record
does."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from tfdist.errors import UsageError
from tfdist.launch.console import progress, runs


def make(run_id: str, tmp_path: Path, started: float, **kw) -> runs.RunRecord:
    """A record of this host whose launcher started with the run, at ``started``, and is long gone (unless ``kw``
    says otherwise)."""
    folder = tmp_path / run_id
    folder.mkdir(exist_ok=True)
    record = runs.new_record(run_id=run_id, log_dir=str(folder), temporary=False, job_name="j",
                             command=("python", "-u", "train.py"))
    return replace(record, **{"started_at": started, "launcher_started_at": started, **kw})


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
    me = runs.new_record(run_id="fff666", log_dir=str(tmp_path), temporary=False, job_name="j", command=("t",))
    assert me.launcher_started_at == psutil.Process().create_time()
    assert runs.launcher_alive(me) is True
    # Our pid, but the recorded launcher started at another time: the pid was reused (after a reboot, in another
    # pid namespace), even though this process started before the run.
    assert runs.launcher_alive(replace(me, launcher_started_at=me.launcher_started_at - 5)) is False
    assert runs.launcher_alive(replace(me, launcher_started_at=me.launcher_started_at + 5)) is False
    # A record without the launcher's start time (written before it was kept): the process must predate the run.
    assert runs.launcher_alive(replace(me, launcher_started_at=None, started_at=9e12)) is True
    assert runs.launcher_alive(replace(me, launcher_started_at=None, started_at=0.0)) is False
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = replace(me, launcher_pid=gone.pid)
    assert runs.launcher_alive(dead) is False
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
    ("launcher_started_at", "now"), ("launcher_started_at", -1),
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


@pytest.mark.parametrize("started, recorded, run_started, same", [
    (100.0, 100.0, 100.2, True), (101.0, 100.0, 100.2, True), (99.0, 100.0, 100.2, True),  # boot time rounding
    (103.0, 100.0, 100.2, False), (50.0, 100.0, 100.2, False),  # another process holds the pid now
    (50.0, None, 100.2, True), (102.0, None, 100.2, True), (103.0, None, 100.2, False),  # an older record
])
def test_same_process_by_pid_and_start_time(started, recorded, run_started, same):
    record = replace(runs.RunRecord.from_json(GOOD_RECORD), launcher_started_at=recorded, started_at=run_started)
    assert runs.same_process(started, record) is same


def test_the_launchers_start_time_is_read_back_and_checked(tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    runs.save(make("jjj000", tmp_path, 1000.5), env)
    assert runs.find_run("jjj000", env).launcher_started_at == 1000.5
    assert runs.RunRecord.from_json(GOOD_RECORD).launcher_started_at is None  # a record from before it was kept
    with pytest.raises(ValueError, match="launcher_started_at is not a time"):
        runs.RunRecord.from_json({**GOOD_RECORD, "launcher_started_at": "now"})


# ------------------------------------------------------------------------------ which run a command given none means

def rec(run_id: str, cwd: str, started: float) -> runs.RunRecord:
    return replace(runs.RunRecord.from_json(GOOD_RECORD), run_id=run_id, cwd=cwd, started_at=started, ended_at=None,
                   state="running")


# Newest first, as list_records gives them. "mine" was started here and ended long ago; "other" runs elsewhere.
RECORDS = [rec("other", "/other", 50.0), rec("mine", "/here", 40.0), rec("second", "/third", 30.0),
           rec("mine2", "/here", 20.0)]


@pytest.mark.parametrize("running, cwd, chosen, by", [
    ({"other"}, "/here", "other", runs.BY_RUNNING),  # issue 35: the live job wins over the newest from here
    ({"mine2"}, "/here", "mine2", runs.BY_RUNNING),  # even over a newer one from here
    ({"second"}, "/nowhere", "second", runs.BY_RUNNING),
    ({"other", "mine"}, "/here", "mine", runs.BY_RUNNING_HERE),  # of several running, the one started here
    ({"other", "second"}, "/other", "other", runs.BY_RUNNING_HERE),
    (set(), "/here", "mine", runs.BY_FOLDER),  # none running: the latest started from here
    (set(), "/nowhere", "other", runs.BY_NEWEST),  # ... else the latest of all
    ({"not-recorded"}, "/here", "mine", runs.BY_FOLDER),
])
def test_which_run_a_command_given_none_means(running, cwd, chosen, by):
    pick = runs.pick(RECORDS, cwd, running)
    assert (pick.record.run_id, pick.by) == (chosen, by)
    assert sorted(r.run_id for r in pick.running) == sorted(running & {r.run_id for r in RECORDS})
    assert {r.run_id for r in pick.also_running} == {r.run_id for r in pick.running} - {chosen}


@pytest.mark.parametrize("running, cwd, says", [
    ({"other", "second"}, "/here", "2 runs are running now, none of them started from this folder: other (from "
                                   "/other, started "),
    ({"mine", "mine2", "other"}, "/here", "3 runs are running now, 2 of them started from this folder: other (from "
                                          "/other, started "),
])
def test_several_running_runs_are_named_never_guessed(running, cwd, says):
    with pytest.raises(UsageError) as refused:
        runs.pick(RECORDS, cwd, running)
    line = refused.value.one_line()
    assert line.startswith(says) and "\n" not in line
    assert all(f"{run_id} (from " in line for run_id in running)
    assert "launcher pid 1)" in line
    assert ("mine (from this folder, started" in line) is ("mine" in running)
    assert "e.g. `tfdist status other`" in line and "`tfdist status --list` shows every run" in line


def test_many_running_runs_are_counted_past_the_first_five():
    many = [rec(f"r{i}", f"/f{i}", 100.0 - i) for i in range(8)]
    with pytest.raises(UsageError, match=r"^8 runs are running now, none .*r4 \(from /f4.* and 3 more$") as refused:
        runs.pick(many, "/here", {r.run_id for r in many})
    assert "r5 (" not in refused.value.message
    here = replace(many[7], cwd="/here")
    assert runs.chosen_because(here, "/here", (*many[:7], here)).endswith(" and 2 more")


def test_why_the_run_shown_was_chosen_in_words():
    other, mine = RECORDS[0], RECORDS[1]
    assert runs.chosen_because(other, "/here", (other,)) == \
        "showing run other, the one running now (started from /other)"
    assert runs.chosen_because(mine, "/here", (mine,)) == "showing run mine, the one running now (started from this " \
                                                            "folder)"
    text = runs.chosen_because(mine, "/here", (other, mine))
    assert text.startswith("showing run mine, the one of 2 running now started from this folder; also running: other "
                           "(from /other, started ")
    assert runs.chosen_because(mine, "/here") == "showing run mine, the latest started from this folder"
    hostile = replace(other, cwd="/x\x1b[2J\nlost node")
    assert "\x1b" not in runs.chosen_because(hostile, "/here", (hostile,))
    assert "\n" not in runs.chosen_because(mine, "/here", (hostile, mine))


@contextlib.contextmanager
def live_launcher(run_id: str, cwd: str, tmp_path: Path, started_at: float) -> Iterator[runs.RunRecord]:
    """The record of a run started from ``cwd`` at ``started_at`` whose launcher is a real process that runs now
    (killed afterwards). The order of runs is given, not read from start times: two reads of one may differ by 1 s."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = psutil.Process(process.pid).create_time()
        folder = tmp_path / run_id
        folder.mkdir()
        yield replace(runs.RunRecord.from_json(GOOD_RECORD), run_id=run_id, log_dir=str(folder), cwd=cwd,
                      host=socket.gethostname(), launcher_pid=process.pid, launcher_started_at=started,
                      started_at=started_at, ended_at=None, state="running")
    finally:
        process.kill()
        process.wait()


def test_status_shows_the_run_running_now_over_the_latest_from_this_folder(tmp_path, monkeypatch, capsys):
    from tfdist.cli.main import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    ended_here = runs.finished(make("old000", tmp_path, 1000.0, cwd=str(here)), "succeeded", {"steps": 3})
    # Its pid is the live one's too, from another start: a reused pid is no launcher.
    now = time.time()
    with live_launcher("live00", "/other/folder", tmp_path, now + 10) as live:
        reused = make("reused", tmp_path, now + 20, cwd=str(here), launcher_pid=live.launcher_pid,
                      launcher_started_at=live.launcher_started_at + 30)
        for record in (ended_here, live, reused):
            runs.save(record, os.environ)
        assert main(["status"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("showing run live00, the one running now (started from /other/folder)\n")
        assert "run live00 (j): running (started " in out
        assert main(["status", "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert document["schema_version"] == 1 and document["state"] == "running"
        assert document["run"]["run_id"] == "live00"
        assert document["run"]["launcher_started_at"] == live.launcher_started_at
        assert document["chosen"] == {"by": "running", "also_running": [],
                                      "reason": "showing run live00, the one running now (started from /other/folder)"}
        assert main(["status", "--list", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)["runs"]
        assert [(r["run_id"], r["current_state"]) for r in listed] == [
            ("reused", "lost"), ("live00", "running"), ("old000", "succeeded")]
        assert main(["status", "--json", "old000"]) == 0
        assert json.loads(capsys.readouterr().out)["chosen"] is None  # RUN given: nothing was chosen
        with live_launcher("live11", str(here), tmp_path, now + 30) as mine:
            runs.save(mine, os.environ)
            assert main(["status"]) == 0
            assert capsys.readouterr().out.startswith(
                "showing run live11, the one of 2 running now started from this folder; also running: live00 (from "
                "/other/folder, started ")
            monkeypatch.chdir(tmp_path)
            for argv in (["status"], ["status", "--json"], ["logs"]):
                assert main(argv) == 2
                captured = capsys.readouterr()
                assert captured.out == ""
                (line,) = captured.err.splitlines()
                assert "error: 2 runs are running now, none of them started from this folder: live11 (from " in line
                assert "live00 (from /other/folder" in line and "tfdist status live11" in line
    monkeypatch.chdir(here)
    assert main(["status"]) == 0  # both launchers gone: the latest started from this folder again
    out = capsys.readouterr().out
    assert out.startswith("showing run live11, the latest started from this folder\n") and ": lost (" in out
    assert "run live11 (j): lost" in out
