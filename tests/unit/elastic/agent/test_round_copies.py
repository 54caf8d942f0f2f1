"""A round's copies on the agent's side (agent/round_copies.py): the real agent taking in a round whose backup it
is to send and whose snapshot it is to receive, its link a stand-in that plays the rendezvous' part (the relay
asks for the snapshot only once the backup's last chunk went through)."""
from __future__ import annotations

import collections
from types import SimpleNamespace

from tests.unit.elastic.agent.test_agent_in_process import Machine
from tests.unit.elastic.agent.test_backup_transfer import Pipe, _checked, write_backup
from tests.unit.elastic.rendezvous.test_snapshot_copy import write_snapshot
from tfdist.launch.elastic.agent.phases import AgentPhase
from tfdist.launch.elastic.agent.snapshot_copy import SnapshotCopy
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.messages.machines import RoundMachines
from tfdist.protocol.snapshot_file import snapshot_name


class RelayLink:
    """The agent's link, the rendezvous played by the test: what it reads comes from ``incoming``; the backup's
    upload, once done, puts the snapshot's chunks in (as the relay asks the snapshot's source then)."""

    where = "stand-in"

    def __init__(self, incoming: list[M.Message], after_backup: list[M.Message]) -> None:
        self.incoming = collections.deque(incoming)
        self.after_backup = after_backup
        self.uploaded: list[tuple[M.Send, list[dict]]] = []
        self.sent: list[M.Message] = []

    def next_message(self, timeout: float) -> M.Message | None:
        assert self.incoming, "the agent waits for a message nobody will send"
        return self.incoming.popleft()

    def upload(self, request: M.Send, store) -> None:
        chunks = Pipe()
        store.upload(chunks, request)
        self.uploaded.append((request, chunks.messages))
        if request.what == "backup" and chunks.messages and chunks.messages[-1]["last"]:
            self.incoming.extend(self.after_backup)

    def send(self, message: M.Message) -> None:
        self.sent.append(message)


def test_the_backups_source_sends_it_while_it_waits_for_the_snapshot_and_then_starts_the_round(tmp_path):
    own, survivor = tmp_path / "own-snapshots", tmp_path / "survivor"
    write_snapshot(own, 10)
    write_snapshot(survivor, 17)
    copy = {**SnapshotCopy(str(survivor)).manifest(), "from": "m3"}
    chunks = Pipe()
    SnapshotCopy(str(survivor)).upload(chunks, M.Send(round=1, name="snap-000000000017", files=copy["files"],
                                                      what="snapshot"))
    machine = Machine(tmp_path, 1, checkpoint_dir=str(tmp_path / "model"))
    agent = machine.agent
    write_backup(tmp_path / "model", 3)  # this machine held worker 0: it wrote the backup
    backup = agent.backups.manifest()
    assert backup["name"] == "ckpt-3"
    request = M.Send(round=1, name="ckpt-3", files=backup["files"])
    agent.link = link = RelayLink([M.Ping(), request], [_checked(m) for m in chunks.messages])
    agent.snapshots = SimpleNamespace(path=str(own))
    agent._start_round(M.Round(round=1, node_rank=0, world_size=2, first_index=0, snapshot=copy,
                               machines=RoundMachines.of([(0, "m1", "10.0.0.1", 1, ()), (1, "m3", "10.0.0.3", 1, ())],
                                                         ["10.0.0.1:2000", "10.0.0.3:2000"])))
    assert [r for r, _ in link.uploaded] == [request]  # the backup went out during the snapshot's wait
    assert {m["name"] for m in link.uploaded[0][1]} == set(backup["files"])
    assert SnapshotCopy(str(own)).steps() == [17]  # the survivor's snapshot came in, checked; its own one dropped
    assert (own / snapshot_name(17)).read_bytes() == (survivor / snapshot_name(17)).read_bytes()
    (group,) = machine.groups
    assert group.calls == ["start"] and agent.phase is AgentPhase.RUNNING and agent._deferred is None
