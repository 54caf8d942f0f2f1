"""What a writer of etcd without the job secret can no longer do, against one real etcd member on loopback: put back
a finished run's ``finish`` (every later run was refused), put back a machine's earlier messages (a ``round``
started its workers a second time), write junk or an earlier run's records at the job's keys (junk at
``coordinator`` refused every later run); and what a reader can no longer read. Agents are the threads of
test_etcd_backend.py. Run under ``flock /tmp/tfdist-netns.lock`` with the other etcd tests."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import time

import pytest

from tests.integration.etcd_cluster import ETCDCTL, LocalEtcd, why_no_etcd
from tests.integration.test_etcd_backend import FakeAgent, close_links, settings  # noqa: F401 - fixture
from tfdist.launch.elastic.messages import protocol as M

pytestmark = [pytest.mark.skipif(why_no_etcd() is not None, reason=str(why_no_etcd()))]


@pytest.fixture()
def etcd():
    with LocalEtcd() as member:
        yield member


def _kvs(etcd: LocalEtcd, prefix: str, *extra: str) -> list[dict]:
    done = etcd.etcdctl("get", "--prefix", prefix, "-w", "json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout).get("kvs", [])


def _values(etcd: LocalEtcd, prefix: str) -> dict[str, bytes]:
    return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]) for kv in _kvs(etcd, prefix)}


def _history(etcd: LocalEtcd, key: str) -> list[bytes]:
    """Every value ``key`` held, oldest first (etcd keeps them until compacted)."""
    (latest,) = _kvs(etcd, key)
    values: list[bytes] = []
    for revision in range(int(latest["create_revision"]), int(latest["mod_revision"]) + 1):
        found = _kvs(etcd, key, f"--rev={revision}")
        value = base64.b64decode(found[0]["value"]) if found else b""
        if found and (not values or values[-1] != value):
            values.append(value)
    return values


def _put(etcd: LocalEtcd, key: str, value: bytes) -> None:
    """What a writer without the secret can do: put any bytes at any key (etcdctl reads the value from stdin)."""
    done = subprocess.run([ETCDCTL, "--endpoints", etcd.url, "put", key], input=value, capture_output=True,
                          env={**os.environ, "ETCDCTL_API": "3"}, timeout=30)
    assert done.returncode == 0, done.stderr


def _wait(condition, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_finish_written_back_after_its_time_never_refuses_a_later_run(etcd, monkeypatch):
    job = settings("again", 1, 1)
    assert FakeAgent(etcd, job, 0, succeed_after=0.1).start().outcome().status == 0
    saved = _values(etcd, "/tfdist/again/finish")["/tfdist/again/finish"]
    assert etcd.etcdctl("del", "/tfdist/again/finish").returncode == 0  # its lease ended
    _put(etcd, "/tfdist/again/finish", saved)  # a writer without the secret puts it back, for good
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 600)  # ten minutes on: the next run starts
    again = FakeAgent(etcd, job, 0, succeed_after=0.1).start().outcome()
    assert getattr(again, "status", None) == 0, again


def test_a_finish_written_back_never_ends_a_run_under_way(etcd):
    job = settings("during", 2, 2)
    alone = settings("during", 1, 1)
    assert FakeAgent(etcd, alone, 0, succeed_after=0.1).start().outcome().status == 0  # a first run of the job...
    saved = _values(etcd, "/tfdist/during/finish")["/tfdist/during/finish"]
    assert etcd.etcdctl("del", "/tfdist/during/finish").returncode == 0
    first = FakeAgent(etcd, job, 0, succeed_after=0.1).start()  # ...and a second one, its first machine waiting
    _wait(lambda: first.link is not None and first.link.coordinating, "the second run's first machine never joined")
    _put(etcd, "/tfdist/during/finish", saved)  # the first run's finish, put back while the second one forms
    second = FakeAgent(etcd, job, 1, succeed_after=0.1).start()
    outcomes = [first.outcome(), second.outcome()]
    assert [getattr(o, "status", o) for o in outcomes] == [0, 0], outcomes
    assert first.rounds()[0].world_size == 2


def test_a_machines_earlier_messages_written_back_never_start_a_round_twice(etcd):
    job = settings("replay", 2, 2)
    agents = [FakeAgent(etcd, job, i).start() for i in range(2)]
    for a in agents:
        a.wait_round(0)
    target = agents[1]
    inbox = f"/tfdist/replay/to/{target.link.name}"
    earlier = _history(etcd, inbox)  # its welcome and its round 0, as a reader of etcd saw them
    assert len(earlier) >= 2, earlier
    for value in earlier:
        _put(etcd, inbox, value)
    _wait(lambda: any("put back after a newer one" in line for line in target.said),
          f"the written-back messages were not refused: {target.messages} {target.said}")
    for a in agents:
        a.succeed_after = 0.1
    assert [a.outcome().status for a in agents] == [0, 0]
    assert [len([m for m in a.rounds() if m.round == 0]) for a in agents] == [1, 1], [a.messages for a in agents]


JUNK = (b"junk", b'{"p": [], "s": "AAAA"}', b'{"body": "{}", "mac": "00"}', b"\xff\x00")


def test_junk_and_an_earlier_runs_records_at_every_key_are_ignored_never_fatal(etcd):
    job = settings("junk", 2, 2)
    earlier = [FakeAgent(etcd, job, i).start() for i in range(2)]
    for a in earlier:
        a.wait_round(0)
    records = _values(etcd, "/tfdist/junk/")  # a whole run's records: anchor, claim, joins, messages, state, round
    assert {"/tfdist/junk/coordinator", "/tfdist/junk/state", "/tfdist/junk/round"} <= set(records), set(records)
    for a in earlier:
        a.succeed_after = 0.1
    assert [a.outcome().status for a in earlier] == [0, 0]
    keys = [*records, "/tfdist/junk/finish", "/tfdist/junk/nodes/00000000000000ff", "/tfdist/junk/to/0000000000000abc"]
    for position, key in enumerate(keys):  # the earlier run's records back at their keys, junk at the others
        _put(etcd, key, records.get(key, JUNK[position % len(JUNK)]))
    _put(etcd, "/tfdist/junk/coordinator", b"junk")  # the coordinator key's junk refused every later run
    later = [FakeAgent(etcd, job, i).start() for i in range(2)]
    for a in later:
        assert a.wait_round(0).world_size == 2
    for key in (f"/tfdist/junk/to/{later[0].link.name}", f"/tfdist/junk/from/{later[1].link.name}",
                "/tfdist/junk/coordinator", "/tfdist/junk/round", "/tfdist/junk/state"):  # and while it runs
        _put(etcd, key, records.get(key, b"junk"))
    for a in later:
        a.succeed_after = 0.1
    outcomes = [a.outcome() for a in later]
    assert [getattr(o, "status", o) for o in outcomes] == [0, 0], (outcomes, [a.said for a in later])
    assert all(m.round == 0 for a in later for m in a.rounds()), [a.rounds() for a in later]
    said = [line for a in later for line in a.said
            if line.startswith("ignored the record at /tfdist/junk/coordinator: it does not open")]
    assert 1 <= len(said) <= 2, said  # said once per machine, however often it was written


def _running_pair(etcd: LocalEtcd, name: str) -> list[FakeAgent]:
    agents = [FakeAgent(etcd, settings(name, 2, 2), i).start() for i in range(2)]
    for a in agents:
        assert a.wait_round(0).world_size == 2
    return agents


def _finished_in_round_0(agents: list[FakeAgent]) -> None:
    for a in agents:
        a.succeed_after = 0.1
    outcomes = [a.outcome() for a in agents]
    assert [getattr(o, "status", o) for o in outcomes] == [0, 0], (outcomes, [a.said for a in agents])
    assert all(m.round == 0 for a in agents for m in a.rounds()), ([a.rounds() for a in agents],
                                                                   [a.said for a in agents])


@pytest.mark.parametrize("value", [b"junk", None], ids=["junk", "earlier-state"])
def test_junk_at_the_state_then_at_the_coordinator_key_while_training_changes_nothing(etcd, value):
    # The order that split the job before: the state (and the round's record) unreadable or put back, then the live
    # claim overwritten with junk on no lease. Another machine cleared the "junk" claim at once, took over, read
    # the junk state, forgot the running round, and neither machine's exit was ever answered.
    agents = _running_pair(etcd, "order")
    state_key = "/tfdist/order/state"
    if value is None:  # the state as it was when the first machine joined (a valid record of this run, put back)
        value = _history(etcd, state_key)[0]
    keys = (state_key, "/tfdist/order/round", "/tfdist/order/coordinator")
    bad_of, put_at = dict(zip(keys, (value, b"junk", b"junk"))), {}
    for key in keys:
        _put(etcd, key, bad_of[key])
        put_at[key] = int(_kvs(etcd, key)[0]["mod_revision"])  # at most this key's foreign write (or later)

    def put_back() -> bool:  # each key written again after its foreign write, by the coordinator, not junk
        found = {k: _kvs(etcd, k)[0] for k in keys}
        return all(int(kv["mod_revision"]) > put_at[k] or base64.b64decode(kv["value"]) not in (b"junk", bad_of[k])
                   for k, kv in found.items())
    _wait(put_back, f"the coordinator did not put its records back: {_values(etcd, '/tfdist/order/')}")
    claim = _kvs(etcd, "/tfdist/order/coordinator")[0]
    assert int(claim.get("lease", 0)), claim  # on its machine's lease again: it goes if that machine goes
    _finished_in_round_0(agents)


def test_a_take_over_after_junk_at_the_state_finds_the_last_record_that_opens(etcd):
    # The coordinator's machine goes just after junk was written at the state: the machine that takes over reads the
    # state's earlier versions in etcd's history and carries on with the running round (it forgot it before).
    agents = _running_pair(etcd, "history")
    boss = next(a for a in agents if a.link.coordinating)
    (other,) = [a for a in agents if a is not boss]
    boss.link._closed.set()  # its coordinator stops writing (the machine stays in the round, as a member)
    _wait(lambda: not boss.link.coordinating, "the coordinator did not stop")
    _put(etcd, "/tfdist/history/state", b"junk")
    _put(etcd, "/tfdist/history/round", b"junk")
    boss.link.store.revoke(boss.link.lease)  # its claim goes with its lease; the other machine takes over
    _wait(lambda: other.link.coordinating, "nobody took over")
    _wait(lambda: any("took over at round 0" in line for line in other.said), f"no take-over: {other.said}")
    # Round 0 is adopted with its lost machine, so it is stopped (a coordinator that forgot it never stops it).
    _wait(lambda: any(m.TYPE == "stop" for m in other.messages), f"round 0 was not stopped: {other.messages}")
    assert not any("never recorded" in line for line in other.said), other.said


def test_an_etcd_reader_reads_nothing_of_the_jobs_records_nor_of_a_backup_chunk(etcd):
    job = settings("quiet", 2, 2)
    agents = [FakeAgent(etcd, job, i).start() for i in range(2)]
    for a in agents:
        a.wait_round(0)
    chunk = base64.b64encode(b"model weights").decode()
    sender = f"/tfdist/quiet/from/{agents[0].link.name}"
    before = _values(etcd, sender)[sender]
    agents[0].link.send(M.File(name="ckpt-1.index", data=chunk, end=True, last=True))
    _wait(lambda: _values(etcd, sender)[sender] != before, "the chunk never reached etcd")
    dump = b"\n".join(_values(etcd, "/tfdist/quiet/").values())
    for word in (b"127.0.0.", b"address", b"workers", b"ckpt-1", b"round", chunk.encode()):
        assert word not in dump, (word, dump[:400])
    for a in agents:
        a.succeed_after = 0.1
    assert [a.outcome().status for a in agents] == [0, 0]


def test_the_job_leaves_no_keys_and_with_compact_yes_no_history(etcd):
    job = settings("gone", 2, 2)
    agents = [FakeAgent(etcd, job, i, conf_pairs=("compact=yes",)).start() for i in range(2)]
    for a in agents:
        a.wait_round(0)
    (during,) = {int(kv["mod_revision"]) for kv in _kvs(etcd, "/tfdist/gone/round")}
    for a in agents:
        a.succeed_after = 0.1
    assert [a.outcome().status for a in agents] == [0, 0]
    left = _kvs(etcd, "/tfdist/gone/")
    assert left and all(int(kv.get("lease", 0)) for kv in left), left  # what is left goes with the finish's lease
    _wait(lambda: any("compacted etcd's history" in line for a in agents for line in a.said), "not compacted")
    old = etcd.etcdctl("get", "--prefix", "/tfdist/gone/", f"--rev={during}")
    assert old.returncode != 0 and "compacted" in old.stderr, (old.stdout[:300], old.stderr)


@pytest.mark.parametrize("pairs, chunk, compacted", [
    ((), True, True),  # the default, compact=auto: backup bytes crossed etcd, so its history goes at the end
    ((), False, False),  # nothing of a checkpoint in etcd: other clients' history is left alone
    (("compact=no",), True, False),
], ids=["auto-chunk", "auto-none", "no-chunk"])
def test_by_default_the_history_is_compacted_when_a_backup_crossed_etcd(etcd, pairs, chunk, compacted):
    job = settings("auto", 2, 2)
    agents = [FakeAgent(etcd, job, i, conf_pairs=pairs).start() for i in range(2)]
    for a in agents:
        a.wait_round(0)
    (during,) = {int(kv["mod_revision"]) for kv in _kvs(etcd, "/tfdist/auto/round")}
    if chunk:
        sender = f"/tfdist/auto/from/{agents[0].link.name}"
        before = _values(etcd, sender)[sender]
        agents[0].link.send(M.File(name="ckpt-1.index", data=base64.b64encode(b"weights").decode(), end=True,
                                   last=True))
        _wait(lambda: _values(etcd, sender)[sender] != before, "the chunk never reached etcd")
    for a in agents:
        a.succeed_after = 0.1
    assert [a.outcome().status for a in agents] == [0, 0]
    said = lambda: [line for a in agents for line in a.said]  # noqa: E731
    _wait(lambda: any("the job is over" in line for line in said()), "the coordinator never ended the job")
    assert any("compacted etcd's history" in line for line in said()) is compacted, said()
    old = etcd.etcdctl("get", "--prefix", "/tfdist/auto/", f"--rev={during}")
    assert (old.returncode != 0 and "compacted" in old.stderr) is compacted, (old.returncode, old.stderr)


def test_a_deleted_run_anchor_makes_the_machines_join_again_rather_than_wait_for_a_dead_run(etcd):
    # Deleting keys is denial of service (any etcd writer can): what must not happen is a machine left waiting for
    # ever on a run nobody can coordinate. The coordinator's machine goes, the next one takes over, finds the run's
    # anchor gone without a finish of this run, and its machine leaves to join a new run.
    job = settings("anchor", 1, 2)
    agents = [FakeAgent(etcd, job, i).start() for i in range(2)]
    for a in agents:
        a.wait_round(0)
    assert etcd.etcdctl("del", "/tfdist/anchor/run").returncode == 0
    boss = next(a for a in agents if a.link.coordinating)
    boss.link._closed.set()
    (survivor,) = [a for a in agents if a is not boss]
    lost = survivor.outcome()
    assert "anchor in etcd was deleted" in str(lost), (lost, survivor.said)
    assert getattr(lost, "graceful", False), lost  # its workers save first: etcd, not a peer, went wrong
