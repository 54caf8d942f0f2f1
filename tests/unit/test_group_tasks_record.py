"""The task group's ``tasks.json`` (which pid is which task) when two launchers write the same attempt folder at once:
machines that share a --log-dir (a shared file system, or the netns tests' one folder) start their rounds together."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

import tfdist.launch.local.group as group_module
from tfdist.launch.local.group import TaskGroup


def _group(folder, name: str, pid: int) -> SimpleNamespace:
    return SimpleNamespace(attempt_dir=str(folder),
                           procs=[SimpleNamespace(name=name, pid=pid, plan=SimpleNamespace(address="198.18.0.1:1"))])


def test_two_launchers_writing_one_attempt_folder_at_once_both_succeed(tmp_path, monkeypatch: pytest.MonkeyPatch):
    first, second = _group(tmp_path, "worker:0", 101), _group(tmp_path, "worker:1", 102)
    real_replace = os.replace
    calls = []

    def replace_after_the_other_wrote(src, dst):
        calls.append(src)
        if len(calls) == 1:  # the other launcher writes and renames its record between this one's write and rename
            TaskGroup._write_pids(second)
        real_replace(src, dst)

    monkeypatch.setattr(group_module.os, "replace", replace_after_the_other_wrote)
    TaskGroup._write_pids(first)  # before: FileNotFoundError (both used the one name tasks.json.tmp)
    assert len(set(calls)) == 2, "each writer has a temporary file of its own"
    assert json.loads((tmp_path / "tasks.json").read_text()) == [
        {"task": "worker:0", "pid": 101, "address": "198.18.0.1:1"}]
    assert os.listdir(tmp_path) == ["tasks.json"], "no temporary file left behind"
