"""Where one job's rendezvous lives in etcd: the key layout, shared by the agent's link and the coordinator.

Under ``<prefix>/<job>/`` (every record sealed with the job secret for one run and one position, see
``records.py``)::

    run             the run's anchor: its create revision names the run (records.RunIdentity); deleted at the end
    nodes/<lease>   a machine's join record, attached to its lease (TTL = --node-timeout): the membership
    from/<lease>    the machine's latest message to the coordinator (ready, training, exited, backup chunks)
    to/<lease>      the coordinator's latest message to that machine (welcome, refused, round, stop, finish, ...)
    coordinator     which machine runs the policy now, attached to that machine's lease
    state           the policy's counters (round, restarts, failures, left-out machines), for the next coordinator
    round           the current round's members and ranks
    finish          the job's result, on a short lease (late machines are told the job is over); the finish
                    transaction also puts every machine's last message on that lease, so the job leaves no keys

``<lease>`` is the lease id in hex: one key per agent session. Every change is one etcd revision, and watches deliver
every revision in order, so a key rewritten for each message loses none of them while its watch is open; a watch
re-made after a member failure resumes from the next revision.
"""
from __future__ import annotations

from dataclasses import dataclass

FINISH_TTL = 30.0  # how long late machines are told "the job is over" before the job id can be used again


@dataclass(frozen=True)
class JobKeys:
    prefix: str
    job: str

    @property
    def root(self) -> str:
        return f"{self.prefix}/{self.job}/"

    @property
    def nodes(self) -> str:
        return self.root + "nodes/"

    @property
    def inbox(self) -> str:
        return self.root + "from/"

    @property
    def outbox(self) -> str:
        return self.root + "to/"

    @property
    def run(self) -> str:
        return self.root + "run"

    @property
    def coordinator(self) -> str:
        return self.root + "coordinator"

    @property
    def state(self) -> str:
        return self.root + "state"

    @property
    def round(self) -> str:
        return self.root + "round"

    @property
    def finish(self) -> str:
        return self.root + "finish"

    def node(self, lease: str) -> str:
        return self.nodes + lease

    def from_node(self, lease: str) -> str:
        return self.inbox + lease

    def to_node(self, lease: str) -> str:
        return self.outbox + lease

    @staticmethod
    def lease_of(key: str) -> str:
        return key.rsplit("/", 1)[-1]


def lease_name(lease: int) -> str:
    return f"{lease & 0xFFFFFFFFFFFFFFFF:016x}"
