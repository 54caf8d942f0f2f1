"""One conductor for both rendezvous backends: a join -> a :class:`Node` (through :meth:`Join.check`, whatever
carried it), a member's message -> the policy, the policy's action -> typed messages per member. No sockets, no etcd.

Why one: the built-in server and the etcd coordinator used to do each of these in a copy of their own, and the
copies drifted apart (an etcd join record never went through ``Join.check``, so the address that lands in every
task's TF_CONFIG went unchecked on that path). What stays with a backend is how a member is reached: the
:class:`Members` port. The TCP server's port writes each message to that member's connection; the etcd
coordinator's gathers them and writes them, with the round's record and the policy's counters, in one transaction
guarded by its claim (:meth:`Members.commit`).

Not thread-safe: a backend calls :meth:`Conductor.admit` and :meth:`Conductor.on_message` under its own lock (the
TCP server) or from its one loop (the etcd coordinator); :meth:`Conductor.carry_out` works on the snapshot of the
members and the round the backend took with the action.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Protocol

from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.messages.machines import RoundMachines
from tfdist.launch.elastic.rendezvous.backup_relay import BackupRelay
from tfdist.launch.elastic.rendezvous.hang_collection import JobRecorder, round_members
from tfdist.launch.elastic.rendezvous.membership import MembershipPolicy
from tfdist.launch.elastic.rendezvous.membership_types import Finish, Node, RoundAction, StartRound, Stop
from tfdist.status import ExitStatus
from tfdist.validate import printable


class Members(Protocol):
    """How one backend reaches the members of its rendezvous."""

    def everyone(self) -> Iterable[int]:
        """The node ids of the members reachable now (a job's ``finish`` goes to each)."""

    def deliver(self, node_id: int, message: M.Message) -> None:
        """Send (or gather) ``message`` for ``node_id``; a member no longer reachable is skipped."""

    def commit(self, action: RoundAction) -> None:
        """Every message of ``action`` is delivered: make them one step (the etcd transaction; TCP: nothing)."""


@dataclass(frozen=True)
class Refusal:
    """A join refused: why (shown to the machine and on the operator's terminal) and the exit status it gets."""
    reason: str
    status: int = int(ExitStatus.USAGE)


def node_of(node_id: int, join: M.Join) -> Node:
    """What the policy knows of a machine that sent ``join`` (checked already). Names and versions are shown on the
    operator's terminal: escape codes and line breaks arrive as visible escapes."""
    return Node(node_id=node_id, name=printable(join.name or join.address, 200), address=join.address,
                slots=join.slots, requested_rank=join.node_rank, roles=tuple(join.roles), layout=join.layout,
                versions={printable(k, 40): printable(v, 100) for k, v in (join.versions or {}).items()})


class Conductor:
    """Feeds one job's :class:`MembershipPolicy` and carries out what it decides, for either backend."""

    def __init__(self, policy: MembershipPolicy, relay: BackupRelay, say: Callable[[str], None], *,
                 recorder: JobRecorder | None = None) -> None:
        self.policy = policy
        self.relay = relay
        self.recorder = recorder  # the flight recorder across machines (None: off, or a backend without it)
        self._say = say

    # -- joins ---------------------------------------------------------------------------------------------------
    def admit(self, node_id: int, join: M.Message | dict[str, Any]) -> Node | Refusal:
        """A machine's first word -> its :class:`Node`, admitted by the policy, or the :class:`Refusal` to send it.
        ``join``: a decoded frame (TCP) or a join record's fields (etcd): both go through ``Join.check``."""
        if isinstance(join, dict):
            try:
                join = M.Join.check(join)
            except M.ProtocolError as bad:
                return self._refused(None, f"not a message of this protocol: {bad}")
        if not isinstance(join, M.Join):
            return self._refused(None, "expected a join message first")
        node = node_of(node_id, join)
        refusal = self.policy.on_join(node, join.job)
        if refusal is not None:
            return self._refused(node, *refusal)
        return node

    def _refused(self, node: Node | None, reason: str, status: int = int(ExitStatus.USAGE)) -> Refusal:
        if node is not None:
            self._say(f"refused {node.label}: {reason}")
        return Refusal(reason, status)

    # -- messages ------------------------------------------------------------------------------------------------
    def on_message(self, node_id: int, message: M.Message, now: float) -> None:
        """A member's ``ready``, ``training`` or ``exited`` -> the policy (anything else is the backend's: chunks
        and evidence are forwarded outside its lock)."""
        match message:
            case M.Ready():
                self.policy.on_ready(node_id, tuple(message.ports),
                                     None if message.backup is None else asdict(message.backup), message.snapshot)
            case M.Training():
                self.policy.on_training(node_id, message.round)
            case M.Exited():
                self.policy.on_exited(node_id, message.round, message.outcome, message.step,
                                      printable(message.detail, M.MAX_TEXT), now)

    # -- actions -------------------------------------------------------------------------------------------------
    def carry_out(self, action: RoundAction, members: Members, nodes: dict[int, Node], round_: int, *,
                  coordinator: str = "") -> Finish | None:
        """Send ``action`` to the members it concerns (``nodes``, ``round_``: as the policy stood when it decided).
        Returns the job's :class:`Finish` (its report with the flight recorder's lines) when the job is over.
        ``coordinator``: the etcd member that coordinates (its machine prints the report)."""
        if isinstance(action, StartRound):
            self._start_round(action, members, nodes)
        elif isinstance(action, Stop):
            self._say(f"stopping round {round_}: {action.reason}")
            for node_id in action.node_ids:
                members.deliver(node_id, M.Stop(round=round_, graceful=action.graceful, reason=action.reason))
            members.commit(action)
        elif isinstance(action, Finish):
            if self.recorder is not None and self.recorder.report_lines():
                action = Finish(action.status, "\n".join([action.report.rstrip("\n"), *self.recorder.report_lines()]))
            for node_id in list(members.everyone()):
                members.deliver(node_id, M.Finish(status=action.status, report=action.report[-M.MAX_REPORT:],
                                                  coordinator=coordinator))
            members.commit(action)
            return action
        return None

    def _start_round(self, action: StartRound, members: Members, nodes: dict[int, Node]) -> None:
        if action.rejoin:  # a lost machine back in the running round: no new round, nothing to restore
            self._say(f"round {action.round}: {nodes[action.assignments[0].node_id].label} rejoins it")
        else:
            if self.recorder is not None:
                layout = next((n.layout for n in nodes.values() if n.layout), "")
                self.recorder.on_round(action.round, round_members(
                    action, {i: n.label for i, n in nodes.items()}, layout))
            self._say(f"round {action.round}: {len(action.nodes)} machine(s), {action.world_size} worker(s)")
        restore, copies = ({}, {}) if action.rejoin else (self.relay.plan(nodes, action),
                                                           self.relay.plan_snapshot(nodes, action))
        # Once per round, not per member: every member's message shares the machines and their encoded bytes.
        machines = RoundMachines.of(action.nodes, action.workers)
        for assignment in action.assignments:
            members.deliver(assignment.node_id, M.Round(
                round=action.round, node_rank=assignment.node_rank, world_size=action.world_size,
                first_index=assignment.first_index, machines=machines, restore=restore.get(assignment.node_id),
                snapshot=copies.get(assignment.node_id)))
        members.commit(action)
        if not action.rejoin:  # after the round's messages: the machine asked to upload knows the round
            self.relay.request_upload(action.round)
