"""The etcd rendezvous' coordinator: the built-in server's loop, fed by etcd watches instead of TCP connections.

Mechanism only: every rule is :class:`MembershipPolicy`'s, the same object the built-in server ticks, so both
backends share min/max nodes, rounds, elastic loss and growth, failure blame and the restart budget. What differs:

- a machine joins by writing ``nodes/<lease>`` and is lost when etcd deletes it (its lease expired or it left);
- messages arrive as writes of ``from/<lease>`` and go out as writes of ``to/<lease>``;
- rounds, stops and the job's end are written in transactions guarded by this coordinator's claim (the
  ``coordinator`` key's create revision), so a coordinator that lost its claim can no longer write anything; as
  few as etcd's limits allow (``txn.py``), what says what the messages were for (round record, state) last;
- the policy's counters are written to ``state`` as they change, so a coordinator that takes over (the previous
  one's machine was lost) carries on with the same round numbers, restart budget and left-out machines, adopts the
  running round when all its machines are still there, and otherwise stops it, as the built-in server would for a
  lost machine;
- every record is sealed for the run and positioned (``records.py``): a machine's messages by its counter, this
  coordinator's and its state by (claim, counter), the round's record by its number; what does not open is ignored,
  once said; what anyone else writes over its claim, state or round record it answers with its own again, and a
  take-over reads those two from etcd's history (``kept_records.py``).
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

from tfdist.launch.elastic.etcd.keys import FINISH_TTL, JobKeys
from tfdist.launch.elastic.etcd.kept_records import ClaimGone, KeptRecords, read_kept
from tfdist.launch.elastic.etcd.records import Position, RunIdentity, Sealer, is_newer
from tfdist.launch.elastic.etcd.run import PUT_BACK, OnceSaid, announced_round
from tfdist.launch.elastic.etcd.store import Entry, EtcdRefused, EtcdStore, EtcdUnavailable
from tfdist.launch.elastic.rendezvous.conductor import Conductor, Refusal
from tfdist.launch.elastic.rendezvous.membership_types import (
    Finish, Phase, RendezvousSettings, RoundAction, StartRound, Stop,
)
from tfdist.launch.elastic.rendezvous.membership import MembershipPolicy
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.rendezvous.backup_relay import BackupRelay
from tfdist.launch.outcome import Outcome

TICK = 0.05
AGES = ("left_out", "restart_ages", "next_round_in")  # time-relative: a change alone is no reason to write the state


class Coordinator:
    def __init__(self, store: EtcdStore, keys: JobKeys, settings: RendezvousSettings, records: Sealer,
                 run: RunIdentity | None, claim: int, me: str, *, say: Callable[[str], None], stop: threading.Event,
                 compact: str = "auto", lease: int = 0) -> None:
        self.store, self.keys, self.settings, self.records, self.run_id = store, keys, settings, records, run
        self.claim, self.me, self.say, self.stop, self.compact = claim, me, say, stop, compact
        self.junk = OnceSaid(say)
        self._sent = 0  # this coordinator's message counter: to/ positions are (claim, counter)
        self._carried_chunks = False  # backup chunks crossed etcd in this run (compact=auto compacts at the end)
        self._states = 0  # and its state's: the state's positions are (claim, counter) too (kept_records.py)
        self.kept = KeptRecords(keys, records, claim, me, lease)
        self.policy = MembershipPolicy(settings, time.monotonic())
        self.lease_of: dict[int, str] = {}
        self.id_of: dict[str, int] = {}
        self.seen_seq: dict[str, Position] = {}
        self.events: queue.Queue[Entry | str] = queue.Queue()
        self.relay = BackupRelay(self._send_plain, say)
        self.conductor = Conductor(self.policy, self.relay, say)
        self._members = _Transaction(self)
        self._state_written = ""
        self._last_ok = time.monotonic()

    # -- the loop ------------------------------------------------------------------------------------------------
    def run(self) -> str:
        """Coordinate until the job is over, the claim is lost, etcd is gone for node_timeout, or ``stop``. Returns
        ``"over"`` when the run ended (its finish is on its way to every machine), ``"gone"`` when its anchor was
        deleted without a finish (the machines must join again: a new run), else ``""`` (campaign again)."""
        watches = []
        try:
            revision = self._take_over()
            for prefix in (self.keys.nodes, self.keys.inbox, *self.kept.watched):
                watches.append(self.store.watch(prefix, revision + 1, self._on_entries,
                                                lambda why: self.events.put(why)))
            while not self.stop.is_set():
                if not self._step():
                    return "over"
        except _RunOver as over:
            self.say(f"stepping down: {over}")
            return over.how
        except (_ClaimLost, ClaimGone) as lost:
            self.say(f"stepping down: {lost}")
        finally:
            for watch in watches:
                watch.cancel()

    def _step(self) -> bool:
        deadline = time.monotonic() + TICK
        while True:
            try:
                item = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if isinstance(item, str):  # the watch lost history: start over from what etcd holds now
                raise _ClaimLost(item)
            self._on_event(item)
        now = time.monotonic()
        for action in self.policy.tick(now):
            if self.conductor.carry_out(action, self._members, self.policy.nodes, self.policy.round,
                                        coordinator=self.me) is not None:
                self.say(f"the job is over, exit status {action.status}")
                return False
        self._save_state()
        return self.policy.phase is not Phase.DONE

    def _on_entries(self, entries: list[Entry]) -> None:
        for entry in entries:
            self.events.put(entry)

    # -- taking over ---------------------------------------------------------------------------------------------
    def _take_over(self) -> int:
        revision, entries = self._guarded(lambda: self.store.get_prefix(self.keys.root))
        by_key = {e.key: e for e in entries}
        anchor = by_key.get(self.keys.run)
        if self.run_id is not None and (anchor is None or anchor.create_revision != self.run_id.revision):
            opened = by_key.get(self.keys.finish) and self.records.for_run("").open(self.keys.finish,
                                                                                   by_key[self.keys.finish].value)
            if opened and opened[1].get("run") == str(self.run_id):
                raise _RunOver("the job is over", "over")
            raise _RunOver(f"the run's anchor {self.keys.run} was deleted: the machines join a new run", "gone")
        state, record = (self._guarded(lambda key=key: read_kept(self.store, self.records, by_key.get(key), self.say))
                         for key in (self.keys.state, self.keys.round))
        policy = self.policy
        now = time.monotonic()
        policy.adopt(state, now)
        self._carried_chunks = bool(state.get("carried_chunks"))
        latest: dict[str, dict[str, Any]] = {}
        for entry in entries:
            if entry.key.startswith(self.keys.inbox):
                opened = self._open_positioned(entry)
                if opened is not None:
                    latest[JobKeys.lease_of(entry.key)] = opened[1]
                    self.seen_seq[JobKeys.lease_of(entry.key)] = opened[0]
        for entry in sorted((e for e in entries if e.key.startswith(self.keys.nodes)),
                            key=lambda e: e.create_revision):
            self._join(entry, welcome=latest.get(JobKeys.lease_of(entry.key), {}).get("type") == "hello")
        stale = {JobKeys.lease_of(e.key) for e in entries if e.key.startswith(self.keys.outbox)} - set(self.id_of)
        for lease in stale:  # messages to machines of an earlier session or run
            self._delete_outbox(lease)
        if state:
            self.say(f"took over at round {policy.round} ({len(policy.nodes)} machine(s) present)")
        members = [(str(m), str(label)) for m, label in zip(record.get("members", []), record.get("labels", []))] \
            if record.get("round") == policy.round else []
        phase = str(state.get("phase", "waiting"))
        outboxes = {JobKeys.lease_of(e.key): self._open(e) or {} for e in entries
                    if e.key.startswith(self.keys.outbox) and JobKeys.lease_of(e.key) in self.id_of}
        announced, receivers = announced_round(outboxes, policy.round)
        if receivers:  # a round cut short between its transactions (txn.py): its receivers run it, so stop it
            self.say(f"round {announced} reached {len(receivers)} machine(s) but was never recorded: stopping it")
            policy.round, phase = announced, "stopping"
            members = [(lease, policy.nodes[self.id_of[lease]].label) for lease in receivers]
        if members and phase in ("running", "stopping", "finishing"):
            self._adopt(members, latest, phase, now)
        else:
            self._feed_ready(latest, -1)
        return revision

    def _adopt(self, members: list[tuple[str, str]], latest: dict[str, dict[str, Any]], phase: str, now: float) -> None:
        """Carry on with the running round: its machines still there stay in it; the missing ones are lost."""
        self.policy.adopt_round([(self.id_of.get(lease), label, latest.get(lease, {}).get("type") == "training")
                                 for lease, label in members], phase, now)
        self._feed_ready(latest, self.policy.round)

    def _feed_ready(self, latest: dict[str, dict[str, Any]], round_: int) -> None:
        """Replay each machine's latest message: exits of the adopted round, and who is ready for the next."""
        now = time.monotonic()
        for lease, message in latest.items():
            node_id = self.id_of.get(lease)
            node = self.policy.nodes.get(node_id) if node_id is not None else None
            if node is None:
                continue
            checked = self._checked(node.node_id, message)
            if isinstance(checked, M.Exited):
                self.conductor.on_message(node.node_id, checked, now)
            elif isinstance(checked, M.Ready):
                if node.in_round:
                    if checked.after_round < round_:
                        continue  # the ready that led into this round: the machine is still in it
                    self.policy.on_exited(node.node_id, round_, Outcome.STOPPED, None, "stopped while the coordinator "
                                          "moved", now)
                self.conductor.on_message(node.node_id, checked, now)

    # -- events --------------------------------------------------------------------------------------------------
    def _on_event(self, entry: Entry) -> None:
        self._last_ok = time.monotonic()
        if entry.key in self.kept.watched:
            answer = self.kept.answer(entry)  # someone else wrote over this coordinator's own record: put it back
            if answer is not None:
                self.junk(entry.key, "is not this coordinator's record: put this coordinator's back")
                self._txn([answer])
            return
        lease = JobKeys.lease_of(entry.key)
        if entry.key.startswith(self.keys.nodes):
            if entry.deleted:
                node_id = self.id_of.pop(lease, None)
                if node_id is not None:
                    self.lease_of.pop(node_id, None)
                    self.policy.on_lost(node_id, f"its etcd lease expired (no keep-alive for "
                                        f"{self.settings.node_timeout:g}s) or it left", time.monotonic())
                    self.say(f"lost {lease}")
                    self._delete_outbox(lease)
            elif lease not in self.id_of:
                self._join(entry, welcome=True)
            return
        if entry.deleted or lease not in self.id_of:
            return
        opened = self._open_positioned(entry)
        if opened is None:
            return
        position, message = opened
        if not is_newer(position, self.seen_seq.get(lease)):
            self.junk(entry.key, PUT_BACK)
            return
        self.seen_seq[lease] = position
        self._dispatch(self.id_of[lease], message, time.monotonic())

    def _join(self, entry: Entry, *, welcome: bool) -> None:
        """A join record -> the conductor, checked as the built-in server checks a join frame (``Join.check``)."""
        lease = JobKeys.lease_of(entry.key)
        join = self._open(entry)
        if join is None:
            return
        node_id = entry.create_revision
        node = self.conductor.admit(node_id, join)
        if isinstance(node, Refusal):
            self._send_plain_lease(lease, M.Refused(reason=node.reason, status=node.status))
            return
        self.id_of[lease], self.lease_of[node_id] = node_id, lease
        if welcome:
            self._send_plain_lease(lease, M.Welcome(node_id=node_id))
            self.say(f"{node.label} joined ({node.slots} worker(s))")

    def _dispatch(self, node_id: int, record: dict[str, Any], now: float) -> None:
        message = self._checked(node_id, record)
        if isinstance(message, M.File):
            self._carried_chunks = True
            self.relay.on_upload(node_id, M.as_dict(message))
        elif message is not None:
            self.conductor.on_message(node_id, message, now)

    def _checked(self, node_id: int, record: dict[str, Any]) -> M.Message | None:
        """A member's record, checked as the built-in server checks a frame; None: nothing to act on."""
        if record.get("type") == "hello":  # opens a machine's outbox (etcd/link.connect): nothing to act on
            return None
        try:
            return M.from_fields(record)
        except M.ProtocolError as bad:
            self.say(f"dropped a malformed {str(record.get('type'))[:40]!r} message from node {node_id}: {bad}")
            return None

    # -- actions: the conductor's Members port (_Transaction) writes them -------------------------------------------
    def commit(self, action: RoundAction, messages: list[tuple[str, M.Message]]) -> None:
        """``action``'s messages, guarded by the claim, with what it changes: the round's record and the policy's
        counters, or the job's end, written last (in as few transactions as etcd's limits allow, ``txn.py``; sealed
        here, in the order they are written: their positions only go forward)."""
        keys = self.keys
        puts = [self.message_put(lease, message) for lease, message in messages]
        if isinstance(action, StartRound):
            ids = ([i for i, n in self.policy.nodes.items() if n.in_round] if action.rejoin
                   else [a.node_id for a in action.assignments])
            chosen = [n for n in ids if n in self.lease_of]
            record = {"round": action.round, "members": [self.lease_of[n] for n in chosen],
                      "labels": [self.policy.nodes[n].label for n in chosen]}
            self._txn(puts + [(keys.round, self.records.seal(keys.round, record, (action.round,)), None),
                              self._state_put()])
        elif isinstance(action, Stop):
            self._txn(puts + [self._state_put()])
        elif isinstance(action, Finish):
            # Every machine's last message goes on the finish's lease, so the job's keys are gone after FINISH_TTL;
            # the run's anchor goes now, so the next run is a new one (records.RunIdentity).
            finish_lease = self._guarded(lambda: self.store.grant(FINISH_TTL))
            puts = [(key, value, finish_lease) for key, value, _ in puts]
            body = {"status": action.status, "at": time.time(), "run": str(self.run_id)}
            puts.append((keys.finish, self.records.for_run("").seal(keys.finish, body), finish_lease))
            ended = self._txn(puts, deletes=(keys.state, keys.round, keys.run))
            if self.compact == "yes" or (self.compact == "auto" and self._carried_chunks):
                self._compact(ended)

    def message_put(self, lease: str, message: M.Message) -> tuple[str, bytes, int | None]:
        key = self.keys.to_node(lease)
        self._sent += 1
        return key, self.records.seal(key, M.as_dict(message), (self.claim, self._sent)), None

    def _compact(self, revision: int) -> None:
        """``--rdzv-conf compact=yes`` (or ``auto``, the default, once backup chunks crossed etcd): drop etcd's history
        up to the job's end, where the chunks and every earlier version of the job's records lie (cluster-wide:
        a watch of another client that still starts before that revision is told it lost history; watches that
        caught up are not touched, so ``auto`` does it only when checkpoint bytes are at stake)."""
        try:
            self.store.compact(revision)
            self.say(f"compacted etcd's history up to revision {revision}")
        except (EtcdUnavailable, EtcdRefused) as bad:
            self.say(f"etcd's history was not compacted ({bad}): the job's sealed records stay in it")

    def _send_plain(self, node_id: int, kind: str, **fields: Any) -> None:
        """For the relay: one message to ``node_id`` at once, outside any transaction."""
        lease = self.lease_of.get(node_id)
        if lease is not None:
            self._send_plain_lease(lease, M.make(kind, **fields))

    def _send_plain_lease(self, lease: str, message: M.Message) -> None:
        key, value, _ = self.message_put(lease, message)
        self._guarded(lambda: self.store.put(key, value))

    def _delete_outbox(self, lease: str) -> None:
        self._guarded(lambda: self.store.delete_prefix(self.keys.to_node(lease)))

    # -- the policy's counters -----------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return {**self.policy.export(time.monotonic()), "carried_chunks": self._carried_chunks}

    def _state_put(self) -> tuple[str, bytes, None]:
        self._states += 1
        value = self.records.seal(self.keys.state, self._state(), (self.claim, self._states))
        self._state_written = _stable(self._state())
        return self.keys.state, value, None

    def _save_state(self) -> None:
        if _stable(self._state()) != self._state_written and self.policy.phase is not Phase.DONE:
            self._txn([self._state_put()])

    # -- etcd calls ----------------------------------------------------------------------------------------------
    def _txn(self, puts: list[tuple[str, bytes, int | None]], deletes: tuple[str, ...] = ()) -> int:
        revision = self._guarded(lambda: self.store.txn_if_created_at(self.keys.coordinator, self.claim, puts,
                                                                       deletes))
        if revision is None:
            raise _ClaimLost("another machine coordinates now")
        self.kept.wrote(puts, int(revision), deletes)
        return int(revision)

    def _guarded(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` until it succeeds; step down when etcd is gone for node_timeout."""
        while True:
            try:
                result = call()
                self._last_ok = time.monotonic()
                return result
            except EtcdRefused as refused:
                raise _ClaimLost(str(refused)) from None
            except EtcdUnavailable as bad:
                if self.stop.is_set() or time.monotonic() - self._last_ok > self.settings.node_timeout:
                    raise _ClaimLost(f"etcd did not answer ({bad})") from None
                self.stop.wait(0.1)

    def _open(self, entry: Entry | None) -> dict[str, Any] | None:
        opened = self._open_positioned(entry)
        return None if opened is None else opened[1]

    def _open_positioned(self, entry: Entry | None) -> tuple[Position, dict[str, Any]] | None:
        if entry is None:
            return None
        opened = self.records.open(entry.key, entry.value)
        if opened is None:
            self.junk(entry.key)
        return opened


class _Transaction:
    """The etcd coordinator's :class:`~tfdist.launch.elastic.rendezvous.conductor.Members` port: an action's messages
    are gathered, then written, guarded by the claim, with what the action changes (:meth:`Coordinator.commit`)."""

    def __init__(self, coordinator: Coordinator) -> None:
        self._coordinator = coordinator
        self._messages: list[tuple[str, M.Message]] = []

    def everyone(self) -> list[int]:
        return list(self._coordinator.lease_of)

    def deliver(self, node_id: int, message: M.Message) -> None:
        lease = self._coordinator.lease_of.get(node_id)
        if lease is not None:
            self._messages.append((lease, message))

    def commit(self, action: RoundAction) -> None:
        messages, self._messages = self._messages, []
        self._coordinator.commit(action, messages)


class _ClaimLost(Exception):
    """This coordinator must stop: another one took over, or etcd cannot be reached."""


class _RunOver(_ClaimLost):
    """This coordinator's run ended (its anchor is gone): nobody coordinates it again."""

    def __init__(self, why: str, how: str) -> None:
        super().__init__(why)
        self.how = how


def _stable(state: dict[str, Any]) -> str:
    import json

    return json.dumps({k: v for k, v in state.items() if k not in AGES}, sort_keys=True)
