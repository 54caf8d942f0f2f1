"""Snapshot folders left in memory by a launcher that died with its orphan watcher: the next launcher removes those
of this user whose launcher has certainly ended (pid and start time, in this pid namespace), in one line, and
nothing else -- not a live run's, not another namespace's or user's, never through a link. Folders live under a
private root here (tmp_path), never in /dev/shm."""
from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tfdist.launch.local.shm_folder import create_snapshot_folder, is_stale, removed_message
from tfdist.launch.process.identity import ProcessIdentity, has_ended, start_of, this_process

HERE = ProcessIdentity(pid=100, start=5000, namespace=77)
STARTS = {100: 5000, 200: 6000}  # the processes running, as the fake /proc says
DIR, LINK, FILE = stat.S_IFDIR | 0o700, stat.S_IFLNK | 0o777, stat.S_IFREG | 0o600
ME, OTHER_USER = 1000, 1001
NO_PID = 4194305  # above the kernel's largest pid_max (2**22): no process has it


@pytest.mark.parametrize("name, mode, uid, stale", [
    ("tfdist-job-ab12cd34-snapshots-300.1.77-k2j_9x0a", DIR, ME, True),       # pid free: its launcher ended
    ("tfdist-job-ab12cd34-snapshots-200.5999.77-k2j_9x0a", DIR, ME, True),    # pid reused by a later process
    ("tfdist-job-ab12cd34-snapshots-200.6000.77-k2j_9x0a", DIR, ME, False),   # its launcher runs
    ("tfdist-job-ab12cd34-snapshots-100.5000.77-k2j_9x0a", DIR, ME, False),   # this launcher's own
    ("tfdist-job-ab12cd34-snapshots-300.1.78-k2j_9x0a", DIR, ME, False),      # another pid namespace: may run
    ("tfdist-job-ab12cd34-snapshots-300.1.77-k2j_9x0a", DIR, OTHER_USER, False),  # another user's
    ("tfdist-job-ab12cd34-snapshots-300.1.77-k2j_9x0a", LINK, ME, False),     # a link, wherever it points
    ("tfdist-job-ab12cd34-snapshots-300.1.77-k2j_9x0a", FILE, ME, False),
    ("tfdist-job-ab12cd34-snapshots-k2j_9x0a", DIR, ME, False),               # no owner in the name (older tfdist)
    ("tfdist-x-snapshots-300.1.77-snapshots-200.6000.77-k2j_9x0a", DIR, ME, False),  # run id mimics an owner
    ("tfdist-x-snapshots-200.6000.77-snapshots-300.1.77-k2j_9x0a", DIR, ME, True),
    ("other-job-snapshots-300.1.77-k2j_9x0a", DIR, ME, False),
    ("tfdist-job-snapshots-300.1.77-k2j 9x0a", DIR, ME, False),
    ("tfdist-job-snapshots-300.1.77-k2j\n9x0a", DIR, ME, False),
    ("tfdist-job-snapshots-300..77-k2j_9x0a", DIR, ME, False),
    ("tfdist-job-snapshots-3" + "0" * 30 + ".1.77-k2j_9x0a", DIR, ME, False),
])
def test_which_folders_are_left_behind(name: str, mode: int, uid: int, stale: bool) -> None:
    assert is_stale(name, mode, uid, me=ME, here=HERE, start=STARTS.get) is stale


def test_an_identity_round_trips_through_its_token() -> None:
    assert ProcessIdentity.parse(HERE.token) == HERE and HERE.token == "100.5000.77"
    assert [ProcessIdentity.parse(t) for t in ("100.5000", "a.1.2", "1.2.3.4", "")] == [None] * 4


def test_start_times_of_real_processes(tmp_path: Path) -> None:
    here = this_process()
    assert here is not None and here.pid == os.getpid() and start_of(os.getpid()) == here.start
    assert start_of(NO_PID) is None
    assert not has_ended(here, here)
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 30
        while start_of(child.pid) is not None and time.monotonic() < deadline:  # exited, not reaped: a zombie
            time.sleep(0.01)
        assert start_of(child.pid) is None
    finally:
        child.wait(timeout=30)
    assert has_ended(ProcessIdentity(child.pid, 1, here.namespace), here)


def test_a_process_name_with_parentheses_and_spaces_is_read_right(tmp_path: Path) -> None:
    fields = ["S"] + ["0"] * 18 + ["424242"] + ["0"] * 30  # state, fields 4-21, start time (22), the rest
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text("7 (a) Z 1 (b) c) " + " ".join(fields) + "\n")
    assert start_of(7, proc=str(tmp_path)) == 424242
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "stat").write_text("8 (x) " + " ".join(["Z"] + fields[1:]) + "\n")
    assert start_of(8, proc=str(tmp_path)) is None  # a zombie has ended


def _plant(root: Path, owner: ProcessIdentity, payload: int = 0) -> Path:
    folder = root / f"tfdist-job-{owner.pid}-snapshots-{owner.token}-k2j_9x0a"
    folder.mkdir(mode=0o700)
    if payload:
        (folder / "snap-000000000001.tfsnap").write_bytes(os.urandom(payload))
    return folder


def test_the_next_launch_removes_left_folders_in_one_line_and_keeps_the_rest(tmp_path: Path) -> None:
    here = this_process()
    assert here is not None
    root, outside = tmp_path / "shm", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "precious").write_text("keep")
    dead = _plant(root, ProcessIdentity(NO_PID, 1, here.namespace), payload=1 << 20)
    os.symlink(outside / "precious", dead / "link-out")  # removed with the folder, never followed
    reused = _plant(root, ProcessIdentity(here.pid, here.start + 1, here.namespace))
    live = _plant(root, ProcessIdentity(os.getppid(), start_of(os.getppid()) or 0, here.namespace))
    foreign = _plant(root, ProcessIdentity(NO_PID, 1, here.namespace + 1))
    link = root / f"tfdist-job-link-snapshots-{NO_PID}.1.{here.namespace}-k2j_9x0a"
    os.symlink(outside, link)  # a link with a stale folder's name: neither it nor what it points to is touched
    legacy = root / "tfdist-job-snapshots-k2j_9x0a"
    legacy.mkdir()

    held = os.lstat(dead / "snap-000000000001.tfsnap").st_blocks * 512 / (1 << 20)  # what the line reports
    lines: list[str] = []
    made = create_snapshot_folder("next-run", root=str(root), say=lines.append)

    assert made is not None and Path(made).name.startswith(f"tfdist-next-run-snapshots-{here.token}-")
    assert not dead.exists() and not reused.exists()
    assert live.is_dir() and foreign.is_dir() and legacy.is_dir() and link.is_symlink()
    assert sorted(p.name for p in outside.iterdir()) == ["precious"] and (outside / "precious").read_text() == "keep"
    assert len(lines) == 1
    assert lines[0].startswith("removed 2 in-memory snapshot folders of runs whose launcher is gone "
                               f"({held:.1f} MiB of memory): ")
    assert str(dead) in lines[0] and str(reused) in lines[0] and "\n" not in lines[0]

    again: list[str] = []
    assert create_snapshot_folder("third-run", root=str(root), say=again.append) is not None
    assert again == []  # nothing left to remove, nothing said; both launchers' folders stay
    assert len([p for p in root.iterdir() if p.name.startswith(("tfdist-next-run-", "tfdist-third-run-"))]) == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's folder needs root")
def test_another_users_left_folder_is_not_ours_to_remove(tmp_path: Path) -> None:
    here = this_process()
    assert here is not None
    theirs = _plant(tmp_path, ProcessIdentity(NO_PID, 1, here.namespace))
    os.chown(theirs, 65534, 65534)
    lines: list[str] = []
    create_snapshot_folder("r", root=str(tmp_path), say=lines.append)
    assert theirs.is_dir() and lines == []


def test_the_line_names_a_few_and_counts_the_rest() -> None:
    removed = [(f"/dev/shm/tfdist-{n}-snapshots-1.1.1-a", 1 << 20) for n in range(5)]
    assert removed_message(removed) == ("removed 5 in-memory snapshot folders of runs whose launcher is gone "
                                        "(5.0 MiB of memory): /dev/shm/tfdist-0-snapshots-1.1.1-a, "
                                        "/dev/shm/tfdist-1-snapshots-1.1.1-a, /dev/shm/tfdist-2-snapshots-1.1.1-a "
                                        "and 2 more")
    assert removed_message(removed[:1]).startswith("removed 1 in-memory snapshot folder of runs")


def test_a_machine_agent_removes_them_too_and_says_so_through_its_say() -> None:
    from tfdist.launch.local.shm_folder import SHM_ROOT, WatchedSnapshotFolder

    here = this_process()
    if here is None or not os.access(SHM_ROOT, os.W_OK):
        pytest.skip("no writable /dev/shm here")
    dead = Path(SHM_ROOT) / f"tfdist-unit-test-left-{os.getpid()}-snapshots-{NO_PID}.1.{here.namespace}-k2j_9x0a"
    dead.mkdir(mode=0o700)
    lines: list[str] = []
    folder = WatchedSnapshotFolder("unit-test-agent", say=lines.append)
    try:
        assert not dead.exists()
        assert len(lines) == 1 and str(dead) in lines[0] and lines[0].startswith("removed ")
    finally:
        folder.remove()
        if dead.exists():
            dead.rmdir()
