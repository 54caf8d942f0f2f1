"""Copying the survivors' in-memory snapshot to machines that lack it: the choice rule (pure, table-tested), the
receiving end against hostile manifests and chunks, and the copy through a live rendezvous (tests/unit/elastic/tcp/rdzv_peer.py)
with honest and dishonest members. Snapshot files are real ones (tfdist.runtime.snapshots.store writes them)."""
from __future__ import annotations

import base64
import hashlib
from types import SimpleNamespace

import numpy as np
import pytest

from tests.unit.elastic.tcp.rdzv_peer import live_server, member, next_of
from tests.unit.elastic.agent.test_backup_transfer import Pipe, _checked
from tfdist.launch.elastic.agent import backup_copy
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.rendezvous.backup_relay import BackupRelay
from tfdist.launch.elastic.agent.snapshot_copy import SnapshotCopy
from tfdist.protocol.snapshot_file import snapshot_name
from tfdist.launch.elastic.rendezvous.snapshot_plan import SnapshotCopyPlan, plan_snapshot_copy
from tfdist.runtime.snapshots.format import ArraySpec
from tfdist.runtime.snapshots.store import SnapshotStore

SPECS = [ArraySpec("dense/kernel:0", "<f4", (4, 3)), ArraySpec("step:0", "<i8", ())]


def write_snapshot(folder, step: int, *, shift: float = 0.0) -> bytes:
    folder.mkdir(parents=True, exist_ok=True)
    arrays = [np.arange(12, dtype=np.float32).reshape(4, 3) + step + shift, np.array(step, dtype=np.int64)]
    return SnapshotStore(folder).write(step, arrays, SPECS, {"epoch": 0}).read_bytes()


def claim(step: int, digest: str = "a" * 64, size: int = 10) -> dict:
    name = snapshot_name(step)
    return {"step": step, "files": {name: digest}, "sizes": {name: size}}


# -- the choice rule -------------------------------------------------------------------------------------------------
C = claim
CASES = [
    # (claims, members, last round {node: rank}) -> (step, source, targets) or None
    ("first round: nobody survived anything", {1: C(9), 2: None}, [1, 2], {}, None),
    ("a joiner gets the survivors' newest", {1: C(20), 2: C(20), 3: None}, [1, 2, 3], {1: 0, 2: 1}, (20, 1, (3,))),
    ("survivors' writers lag: the newest wins, the laggard gets it too",
     {1: C(18), 2: C(20), 3: None}, [1, 2, 3], {1: 0, 2: 1}, (20, 2, (1, 3))),
    ("a machine that comes back with an abandoned future is a receiver, never a source",
     {1: C(20), 2: C(20), 3: C(60)}, [1, 2, 3], {1: 0, 2: 1}, (20, 1, (3,))),
    ("the same step with other bytes (another run's) is copied over",
     {1: C(20), 3: C(20, "b" * 64)}, [1, 3], {1: 0}, (20, 1, (3,))),
    ("the sender: lowest node rank of the last round, not the lowest id",
     {4: C(20), 7: C(20), 9: None}, [4, 7, 9], {7: 0, 4: 1}, (20, 7, (9,))),
    ("everyone has it: nothing to copy", {1: C(20), 2: C(20)}, [1, 2], {1: 0, 2: 1}, None),
    ("survivors without snapshots (snapshots off): nothing", {1: None, 2: None, 3: None}, [1, 2, 3], {1: 0, 2: 1},
     None),
    ("a lost survivor is no source", {1: C(20), 2: C(25), 3: None}, [1, 3], {1: 0, 2: 1}, (20, 1, (3,))),
    ("a claim naming another step's file is not believed",
     {1: {"step": 30, "files": {snapshot_name(31): "a" * 64}, "sizes": {snapshot_name(31): 1}}, 2: C(20), 3: None},
     [1, 2, 3], {1: 0, 2: 1}, (20, 2, (1, 3))),
    ("a claim with two files is not believed",
     {1: {"step": 30, "files": {snapshot_name(30): "a" * 64, snapshot_name(29): "a" * 64},
          "sizes": {snapshot_name(30): 1, snapshot_name(29): 1}}, 2: None}, [1, 2], {1: 0, 2: 1}, None),
]


@pytest.mark.parametrize("why, claims, members, last, expected", CASES, ids=[c[0] for c in CASES])
def test_the_choice_rule(why, claims, members, last, expected):
    plan = plan_snapshot_copy(claims, members, last)
    if expected is None:
        assert plan is None, why
    else:
        assert isinstance(plan, SnapshotCopyPlan) and (plan.step, plan.source, plan.targets) == expected, why
        assert plan.files == claims[plan.source]["files"] and plan.sizes == claims[plan.source]["sizes"]


def test_the_agent_sees_the_files_the_runtime_writes(tmp_path):
    write_snapshot(tmp_path, 10**11 + 7)
    write_snapshot(tmp_path, 3)
    assert SnapshotCopy(str(tmp_path)).steps() == SnapshotStore(tmp_path).steps() == [10**11 + 7, 3]
    assert SnapshotCopy(str(tmp_path)).manifest()["step"] == 10**11 + 7


# -- the receiving end -----------------------------------------------------------------------------------------------


def _file(name: str, data: bytes, **flags) -> dict:
    return {"type": "file", "name": name, "data": base64.b64encode(data).decode(), **flags}


def copy_of(tmp_path, *, edit=None, copy_changes=None, own_step: int | None = 33, max_bytes=None):
    """Upload step 20 from machine a, take it in on machine b (which holds ``own_step`` of its own)."""
    write_snapshot(tmp_path / "a", 20)
    source = SnapshotCopy(str(tmp_path / "a"))
    target = SnapshotCopy(str(tmp_path / "b"), **({"max_bytes": max_bytes} if max_bytes else {}))
    (tmp_path / "b").mkdir()
    if own_step is not None:
        write_snapshot(tmp_path / "b", own_step, shift=0.5)
    manifest = source.manifest()
    pipe = Pipe()
    source.upload(pipe, M.Send(round=1, name="snap-000000000020", files=manifest["files"], what="snapshot"))
    if edit:
        edit(pipe.messages)
    queue = iter(pipe.messages)
    said: list[str] = []
    other = target.await_restore({**manifest, "from": "m1", **(copy_changes or {})},
                                 lambda: _checked(next(queue, None)), said.append)
    return other, target, said


def test_an_honest_copy_lands_whole_and_loads(tmp_path):
    other, target, said = copy_of(tmp_path)
    assert other is None and target.steps() == [20]  # its own step 33 (not the survivors') was dropped
    assert said == [f"copied the snapshot of step 20 from m1 ({(tmp_path / 'a' / snapshot_name(20)).stat().st_size}"
                    " bytes, SHA-256 and CRC checked)"]
    snapshot = SnapshotStore(tmp_path / "b").load(20)
    assert snapshot.step == 20 and float(snapshot.arrays[0][0, 0]) == 20.0
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [snapshot_name(20)]  # no .incoming left


def _forge(messages, data: bytes) -> None:
    """Replace the upload by ``data`` in one chunk."""
    messages[:] = [_file(messages[0]["name"], data, end=True, last=True)]


def _self_consistent(data: bytes) -> dict:
    """A manifest that matches ``data`` exactly (what a member with the secret can always make)."""
    name = snapshot_name(20)
    return {"files": {name: hashlib.sha256(data).hexdigest()}, "sizes": {name: len(data)}}


GARBAGE = b"not a snapshot at all" * 10


@pytest.mark.parametrize("why, edit, changes, words", [
    ("a path instead of a snapshot's name", None, {"files": {"../../etc/passwd": "a" * 64},
                                                   "sizes": {"../../etc/passwd": 5}}, "not one snapshot's"),
    ("two files", None, {"files": {snapshot_name(20): "a" * 64, snapshot_name(19): "a" * 64},
                         "sizes": {snapshot_name(20): 5, snapshot_name(19): 5}}, "not one snapshot's"),
    ("the file of another step than the one named", None, {"step": 21}, "not one snapshot's"),
    ("a size that is not a number", None, {"sizes": {snapshot_name(20): "5"}}, "not one snapshot's"),
    ("bytes flipped in transit", lambda m: _forge(m, b"x" * len(base64.b64decode(m[0]["data"]))), None,
     "checksum mismatch"),
    ("more bytes than declared", lambda m: m[:] + [m[0].update(last=False), m.append(_file(m[0]["name"], b"+",
                                                                                          last=True))], None,
     "bigger than its manifest says"),
    ("a chunk of a file not in the manifest", lambda m: m.insert(0, _file(snapshot_name(99), b"x")), None,
     "unexpected file"),
    ("fewer bytes than declared", lambda m: m.__setitem__(0, _file(m[0]["name"], b"abc", last=True)), None,
     "missing or short"),
    ("a self-consistent manifest over bytes that are no snapshot", lambda m: _forge(m, GARBAGE),
     _self_consistent(GARBAGE), "not a snapshot"),
])
def test_a_hostile_copy_is_not_restored_and_leaves_no_snapshot(tmp_path, why, edit, changes, words):
    other, target, said = copy_of(tmp_path, edit=edit, copy_changes=changes)
    assert other is None and len(said) == 1, why
    assert words in said[0] and said[0].endswith("not restored (the tasks resume from a step every machine has, "
                                                 "else the durable checkpoint)"), said
    names = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert snapshot_name(20) not in names and not [n for n in names if n.startswith(".incoming")], names


def test_a_real_snapshot_of_another_step_offered_under_this_steps_name_is_refused(tmp_path):
    step5 = write_snapshot(tmp_path / "other", 5)
    other, target, said = copy_of(tmp_path, edit=lambda m: _forge(m, step5), copy_changes=_self_consistent(step5))
    assert target.steps() == [] and "mixed: the file is named for step 20 but holds step 5" in said[0]


def test_a_copy_over_the_total_limit_is_refused_before_anything_is_dropped_or_written(tmp_path):
    other, target, said = copy_of(tmp_path, max_bytes=100)
    assert target.steps() == [33] and "over the 100-byte limit" in said[0]


def test_a_copy_that_stalls_hits_its_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(backup_copy, "MIN_DEADLINE_S", 0.2)
    other, target, said = copy_of(tmp_path, edit=lambda m: m.clear())
    assert target.steps() == [] and "did not finish in time" in said[0]


def test_a_stop_during_the_copy_is_handed_back_and_nothing_is_kept(tmp_path):
    stop = {"type": "stop", "round": 1, "graceful": False, "reason": "lost node 1"}
    other, target, said = copy_of(tmp_path, edit=lambda m: m.__setitem__(slice(None), [stop]))
    assert other == M.Stop(round=1, graceful=False, reason="lost node 1") and target.steps() == [] and said == []


# -- the rendezvous' side: plan, order after the backup, forwarding -------------------------------------------------
def _node(node_id, snapshot=None, backup=None):
    return SimpleNamespace(node_id=node_id, label=f"m{node_id}", snapshot=snapshot, backup=backup)


def _round(*ids):
    return SimpleNamespace(assignments=[SimpleNamespace(node_id=i, node_rank=r) for r, i in enumerate(ids)])


def test_the_relay_asks_the_sender_after_the_backup_went_through_and_forwards_only_its_chunks():
    sent = []
    relay = BackupRelay(lambda *a, **k: sent.append((a, k)) or True)
    relay.plan_snapshot({1: _node(1), 2: _node(2)}, _round(1, 2))  # round 0: no survivors yet
    backup = {"fs": "aa", "name": "ckpt-3", "files": {"checkpoint": "c" * 64}, "sizes": {"checkpoint": 1}}
    nodes = {1: _node(1, claim(20), backup), 2: _node(2, claim(20), backup), 3: _node(3)}
    restore, copies = relay.plan(nodes, _round(1, 2, 3)), relay.plan_snapshot(nodes, _round(1, 2, 3))
    assert sorted(restore) == [3] and sorted(copies) == [3] and copies[3]["step"] == 20 and copies[3]["from"] == "m1"
    relay.request_upload(1)
    assert [a for a, _ in sent] == [(1, "send")] and "what" not in sent[0][1]  # the backup first
    relay.on_upload(1, {"name": "checkpoint", "data": "", "end": True, "last": True})
    assert sent[-1] == ((1, "send"), {"round": 1, "name": "snap-000000000020", "files": claim(20)["files"],
                                      "what": "snapshot"})
    chunk = {"name": snapshot_name(20), "data": "", "end": True, "last": True}
    del sent[:]
    relay.on_upload(2, chunk)  # not the sender
    relay.on_upload(1, {**chunk, "name": snapshot_name(21)})  # not the planned file
    relay.on_upload(1, chunk)
    assert sent == [((3, "file"), chunk)]


def test_the_snapshot_is_asked_for_once_with_its_round_when_the_backup_went_through_before_its_request_returned():
    """The backup's source can be the rendezvous' own machine: its last chunk reaches the relay on a member's thread
    before the send of the backup's request returns. The snapshot's request then went out without its round and
    was never sent again: its receiver waited for it and the round never started there (a CI hang of
    test_without_a_shared_filesystem_a_restart_resumes_from_the_copied_backup)."""
    sent: list = []
    relay: BackupRelay

    def send(*a, **k):
        sent.append((a, k))
        if a == (1, "send") and k.get("what") is None:  # the source uploads at once
            relay.on_upload(1, {"name": "checkpoint", "data": "", "end": True, "last": True})
        return True

    relay = BackupRelay(send)
    relay.plan({1: _node(1), 2: _node(2), 3: _node(3)}, _round(1, 2, 3))  # round 0: 1 held worker 0
    relay.plan_snapshot({1: _node(1), 2: _node(2), 3: _node(3)}, _round(1, 2, 3))
    backup = {"fs": "aa", "name": "ckpt-3", "files": {"checkpoint": "c" * 64}, "sizes": {"checkpoint": 1}}
    nodes = {1: _node(1, claim(10), backup), 3: _node(3, claim(17), {**backup, "fs": "bb", "name": None})}
    restore, copies = relay.plan(nodes, _round(1, 3)), relay.plan_snapshot(nodes, _round(1, 3))
    assert sorted(restore) == [3] and sorted(copies) == [1] and copies[1]["from"] == "m3"  # each the other's source
    relay.request_upload(1)
    requests = [(a[0], k) for a, k in sent if a[1] == "send"]
    assert [n for n, _ in requests] == [1, 3] and ((3, "file"), {"name": "checkpoint", "data": "", "end": True,
                                                                 "last": True}) in sent
    assert requests[1][1] == {"round": 1, "name": "snap-000000000017", "files": claim(17)["files"],
                              "what": "snapshot"}


# -- through a live rendezvous ---------------------------------------------------------------------------------------
class PeerChannel:
    """What the agent's link is to ``SnapshotCopy.upload``: chunks sent as messages of this peer."""

    def __init__(self, peer) -> None:
        self.peer = peer

    def send(self, message: M.Message) -> bool:
        self.peer.send(message, wait=5.0)
        return True


def _receive(peer):
    def receive():
        return peer.receive(timeout=5.0)
    return receive


def _two_training_and_a_joiner(server):
    """Members a and b train round 0; c joins, so the rendezvous stops a and b (they answer with their Ready)."""
    a, b = member(server, "a", rank=0), member(server, "b", rank=1)
    next_of(a, M.Round), next_of(b, M.Round)
    for peer in (a, b):
        peer.send(M.Training(round=0))
    c = member(server, "c", rank=2)
    next_of(a, M.Stop), next_of(b, M.Stop)
    return a, b, c


@pytest.mark.parametrize("dishonest", [None, "joiner-claims-newer", "bystander-injects", "sender-lies-on-size"])
def test_a_joiner_gets_the_survivors_snapshot_through_the_rendezvous(tmp_path, dishonest):
    folders = {n: tmp_path / n for n in "abc"}
    for n in "ab":
        write_snapshot(folders[n], 20)
    if dishonest == "joiner-claims-newer":
        write_snapshot(folders["c"], 99, shift=7.0)
    folders["c"].mkdir(exist_ok=True)
    said: list[str] = []
    with live_server(min_nodes=2, max_nodes=3, node_timeout=10.0, said=said) as server:
        a, b, c = _two_training_and_a_joiner(server)
        for n, peer in (("a", a), ("b", b)):
            claim_ = SnapshotCopy(str(folders[n])).manifest()
            if dishonest == "sender-lies-on-size" and n == "a":
                name = snapshot_name(20)
                claim_ = {**claim_, "sizes": {name: claim_["sizes"][name] - 8}}
            peer.send(M.Ready(ports=[29000], snapshot=claim_))
        c.send(M.Ready(ports=[29001], snapshot=SnapshotCopy(str(folders["c"])).manifest()))
        copy = next_of(c, M.Round).snapshot
        assert copy is not None and copy["step"] == 20 and copy["from"] == "a (127.0.0.1)", copy
        assert next_of(b, M.Round).snapshot is None
        request = next_of(a, M.Send)
        assert request.what == "snapshot" and list(request.files) == [snapshot_name(20)]
        if dishonest == "bystander-injects":  # b is a member, but not the sender: its chunks are dropped
            b.send(M.File(name=snapshot_name(20), data=base64.b64encode(b"forged").decode(), end=True, last=True),
                   wait=5.0)
        SnapshotCopy(str(folders["a"])).upload(PeerChannel(a), request)
        lines: list[str] = []
        assert SnapshotCopy(str(folders["c"])).await_restore(copy, _receive(c), lines.append) is None
    assert any("copying snapshot of step 20 from a (127.0.0.1) to c (127.0.0.1)" in s for s in said), said
    if dishonest == "sender-lies-on-size":
        assert SnapshotCopy(str(folders["c"])).steps() == [] and "bigger than its manifest says" in lines[0]
    else:
        assert lines == [f"copied the snapshot of step 20 from a (127.0.0.1) "
                         f"({(folders['a'] / snapshot_name(20)).stat().st_size} bytes, SHA-256 and CRC checked)"]
        assert (folders["c"] / snapshot_name(20)).read_bytes() == (folders["a"] / snapshot_name(20)).read_bytes()
        assert SnapshotCopy(str(folders["c"])).steps() == [20]  # the joiner's own "newer" one is gone


def test_a_sender_that_dies_mid_copy_stops_the_round_and_another_survivor_sends_the_next(tmp_path):
    folders = {n: tmp_path / n for n in "abc"}
    for n in "ab":
        write_snapshot(folders[n], 20)
    write_snapshot(folders["c"], 7)  # the joiner's own, older: dropped before the copy
    said: list[str] = []
    with live_server(min_nodes=2, max_nodes=3, node_timeout=10.0, said=said) as server:
        a, b, c = _two_training_and_a_joiner(server)
        for n, peer in (("a", a), ("b", b)):
            peer.send(M.Ready(ports=[29000], snapshot=SnapshotCopy(str(folders[n])).manifest()))
        c.send(M.Ready(ports=[29001], snapshot=SnapshotCopy(str(folders["c"])).manifest()))
        copy = next_of(c, M.Round).snapshot
        assert copy["from"] == "a (127.0.0.1)"
        next_of(b, M.Round)
        request = next_of(a, M.Send)
        a.send(M.File(name=snapshot_name(20), data=base64.b64encode(b"TFDSNAP1").decode()),
               wait=5.0)  # the first bytes, then the sender's machine is gone
        a.close()
        lines: list[str] = []
        stopped = SnapshotCopy(str(folders["c"])).await_restore(copy, _receive(c), lines.append)
        assert isinstance(stopped, M.Stop) and lines == []
        assert SnapshotCopy(str(folders["c"])).steps() == []  # no partial copy, and its own older one dropped
        assert not [p for p in folders["c"].iterdir() if p.name.startswith(".incoming")]
        next_of(b, M.Stop)
        for n, peer in (("b", b), ("c", c)):
            peer.send(M.Ready(ports=[29002], snapshot=SnapshotCopy(str(folders[n])).manifest()))
        again = next_of(c, M.Round)
        assert again.round == 2 and again.snapshot["from"] == "b (127.0.0.1)" and again.snapshot["step"] == 20
        SnapshotCopy(str(folders["b"])).upload(PeerChannel(b), next_of(b, M.Send))
        assert SnapshotCopy(str(folders["c"])).await_restore(again.snapshot, _receive(c), lines.append) is None
        assert SnapshotCopy(str(folders["c"])).steps() == [20] and "from b (127.0.0.1)" in lines[0]
