"""The agent's end of the etcd rendezvous (``--rdzv-backend etcd``): the same calls and messages as the built-in
backend's link, carried by etcd keys, leases and watches.

Membership is a lease: the agent's join record is attached to a lease with a TTL of ``--node-timeout`` that a
thread keeps alive; a machine that stops refreshing it (dead, cut off) is dropped by etcd itself, and the
coordinator sees the delete in its watch. There is no rendezvous server: every agent campaigns to be the
coordinator (create-if-absent on one key attached to its lease); the winner runs the same policy as the built-in
server (``etcd_coordinator.py``) and any other agent takes over when its lease goes. So losing any machine, the
first one included, or etcd's leader, stops at most the current round, never the job.

Every record is sealed for this run and its position (``records.py``); the run is the one ``run.join_run`` finds or
starts. A message from the coordinator is acted on only when its position is past the last one, so one put back
(a ``round`` again) is refused; anything that does not open is ignored with one line per key, never fatal.

The rendezvous counts as lost when etcd did not answer for ``node_timeout`` seconds or this machine's lease is gone
(``Lost``, graceful: the workers save at the current step first, as etcd itself -- not a peer -- is what went away).
"""
from __future__ import annotations

import queue
import random
import threading
import time
from dataclasses import replace
from typing import Any, Callable

from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.backend import FileSource, Lost, Refused, stdin_closed
from tfdist.launch.elastic.etcd.keys import JobKeys, lease_name
from tfdist.launch.elastic.etcd.kept_records import CLAIM_REPAIR_S
from tfdist.launch.elastic.etcd.records import Position, RunIdentity, Sealer, is_newer
from tfdist.launch.elastic.etcd.run import PUT_BACK, JobOver, OnceSaid, claim_verdict, join_run
from tfdist.launch.elastic.etcd.store import Entry, EtcdRefused, EtcdStore, EtcdUnavailable
from tfdist.launch.elastic.etcd.conf import EtcdConf
from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings
from tfdist.launch.elastic.rendezvous.retry import Backoff, progress_due
from tfdist.status import ExitStatus

OUTBOX_SIZE = 64  # messages (backup chunks included) waiting for etcd; a full outbox makes the sender wait
ETCD_CHUNK = 384 * 1024  # raw bytes per backup chunk: base64, JSON, sealing and base64 again (about 700 KiB)
# stay under etcd's 1.5 MiB request limit
JOIN_BACKOFF = Backoff(first=0.2, cap=2.0)  # a join etcd cut short is tried again: the built-in backend's rule, slower start


class EtcdLost(Lost):
    """etcd (not a peer) went away, or dropped this machine: the workers save before they stop."""

    graceful = True


class EtcdLink:
    """One agent session in one job's etcd rendezvous. Same calls as the built-in ``RendezvousLink``."""

    def __init__(self, conf: EtcdConf, settings: RendezvousSettings, *, secret: bytes | None = None,
                 watch_stdin: bool = False, say: Callable[[str], None] = lambda _m: None) -> None:
        self.conf, self.settings = conf, settings
        self.jobwide = Sealer(secret)  # the job-wide records (run anchor, finish); self.records: this run's
        self.records = self.jobwide
        self.run: RunIdentity | None = None
        self.keys = JobKeys(conf.prefix, settings.job)
        self.where = f"etcd {conf.where}"
        self.watch_stdin = watch_stdin
        self.say = say
        self.junk = OnceSaid(say)
        self._last_to: Position | None = None
        self.store = EtcdStore(conf)
        self.lease = 0
        self.name = ""
        self._inbox: queue.Queue[M.Message] = queue.Queue()
        self._outbox: queue.Queue[dict[str, Any] | None] = queue.Queue(OUTBOX_SIZE)
        self._closed = threading.Event()
        self._last_ok = time.monotonic()
        self._expired = False
        self._expired_why = "this machine's etcd lease expired"
        self._seq = 0
        self._round_seen = -1
        self._watches: list[Any] = []
        self._coordinator_gone = threading.Event()
        self._campaigner: threading.Thread | None = None
        self.coordinating = False

    # -- joining -------------------------------------------------------------------------------------------------
    def connect(self, join: dict[str, Any], deadline: float, give_up: Callable[[], bool]) -> None:
        """Reach etcd (retrying until ``deadline``), take a lease, publish the join record, and wait for the
        coordinator's answer. Raises Refused, TimeoutError."""
        while True:
            try:
                self.store.connect()
                break
            except EtcdRefused as refused:
                raise Refused(f"{refused} (check --rdzv-conf user=/password_file=/cacert=/cert=/key=)",
                              int(ExitStatus.USAGE)) from None
            except EtcdUnavailable:
                self.store.close()
                self.store = EtcdStore(self.conf)
                if self.watch_stdin and stdin_closed():
                    raise Refused("the launcher that started this agent is gone", int(ExitStatus.PREEMPTED)) \
                        from None
                if time.monotonic() > deadline or give_up():
                    raise TimeoutError(f"no etcd answered at {self.conf.where} in time") from None
                time.sleep(0.2)
        failures, said = 0, time.monotonic()
        while True:  # the rule of rendezvous/retry.py, as for the built-in backend: what is not a refusal is tried again
            try:
                self._join(join)
                break
            except EtcdUnavailable as bad:  # etcd slow or away (a fleet joining at once), or the lease ran out
                failures += 1
                self._abandon_join()
                now = time.monotonic()
                if give_up() or now >= deadline:
                    self.close()
                    raise TimeoutError(f"etcd at {self.conf.where} stopped answering while joining ({bad}; "
                                       f"{failures} tries)") from None
                pause = JOIN_BACKOFF.pause(failures, random.random(), now, deadline) or 0.0
                if progress_due(now, said):
                    said = now
                    self.say(f"etcd at {self.conf.where} did not let this machine join yet ({bad}): trying again")
                time.sleep(pause)
            except EtcdRefused as refused:
                self.close()
                raise Refused(f"{refused} (check --rdzv-conf user=/password_file=)", int(ExitStatus.USAGE)) from None
        self._last_ok = time.monotonic()
        for target, name in ((self._keep_alive, "etcd-lease"), (self._send_loop, "etcd-send")):
            threading.Thread(target=target, daemon=True, name=name).start()
        self._campaigner = threading.Thread(target=self._campaign, daemon=True, name="etcd-campaign")
        self._campaigner.start()
        while True:
            try:
                answer = self._inbox.get(timeout=0.2)
            except queue.Empty:
                self._check_alive()
                if time.monotonic() > deadline or give_up():
                    self.close()
                    unopened = self.junk.unopened
                    hint = (f" (ignored unreadable records at {', '.join(unopened[:3])}"
                            f"{', ...' if len(unopened) > 3 else ''}: every machine needs the same job secret)"
                            ) if unopened else ""
                    raise TimeoutError(f"no coordinator answered in etcd at {self.conf.where} in time{hint}") \
                        from None
                continue
            if isinstance(answer, M.Refused):
                self.close()
                raise Refused(answer.reason, answer.status)
            if isinstance(answer, M.Welcome):
                return

    def _join(self, join: dict[str, Any]) -> None:
        """Find the run, take a lease, open this machine's inbox and watches, publish the join record. Raises
        Refused (the job is over), EtcdUnavailable, EtcdRefused."""
        try:
            self.run = join_run(self.store, self.keys, self.jobwide, self.junk)
        except JobOver:
            self.close()
            raise Refused("the job is over", int(ExitStatus.USAGE)) from None
        self.records = self.jobwide.for_run(str(self.run))
        self.lease = self.store.grant(self.settings.node_timeout)
        self.name = lease_name(self.lease)
        revision = self.store.put(self.keys.from_node(self.name), self._seal_from({"type": "hello"}),
                                  lease=self.lease)
        self._watches.append(self.store.watch(self.keys.to_node(self.name), revision + 1, self._on_to,
                                              self._on_gap))
        self._watches.append(self.store.watch(self.keys.coordinator, revision + 1, self._on_coordinator,
                                              lambda _why: self._coordinator_gone.set()))
        self.store.put(self.keys.node(self.name), self.records.seal(self.keys.node(self.name), join),
                       lease=self.lease)

    def _abandon_join(self) -> None:
        """Undo a join that etcd cut short: its watches and its lease go (with the keys on it), so the next try is
        a new session and no half-made one is left for the coordinator."""
        for watch in self._watches:
            watch.cancel()
        self._watches = []
        if self.lease:
            try:
                self.store.revoke(self.lease)
            except (EtcdUnavailable, EtcdRefused):
                pass  # it expires after --node-timeout, and its keys with it
        self.lease, self.name = 0, ""

    # -- receiving -----------------------------------------------------------------------------------------------
    def _on_to(self, entries: list[Entry]) -> None:
        for entry in entries:
            if entry.deleted:
                continue
            opened = self.records.open(entry.key, entry.value)
            if opened is None or not isinstance(opened[1].get("type"), str):
                self.junk(entry.key)
                continue
            position, raw = opened
            if not is_newer(position, self._last_to):  # put back after a newer one: acted on already
                self.junk(entry.key, PUT_BACK)
                continue
            self._last_to = position
            try:  # checked as the built-in backend checks a frame: the agent gets the same typed messages
                message = M.from_fields(raw)
            except M.ProtocolError as bad:
                self.say(f"dropped a message at {entry.key}: not a message of this protocol ({bad})")
                continue
            if isinstance(message, M.Round):
                self._round_seen = max(self._round_seen, message.round)
            if isinstance(message, M.Finish) and message.coordinator == self.name:
                message = replace(message, print_report=True)  # the coordinator's machine prints the report
            self._inbox.put(message)

    def _on_gap(self, why: str) -> None:
        self._expired = True  # missed messages cannot be recovered: leave and join again
        self.say(f"{why}: joining again")

    def next_message(self, timeout: float) -> M.Message | None:
        """The next message from the coordinator, checked (``messages.py``), or None after ``timeout``. Raises
        Lost."""
        try:
            message = self._inbox.get(timeout=timeout)
        except queue.Empty:
            self._check_alive()
            return None
        return None if isinstance(message, M.Welcome) else message

    def _check_alive(self) -> None:
        if self._expired:
            raise EtcdLost(self._expired_why)
        silent = time.monotonic() - self._last_ok
        if silent > self.settings.node_timeout:
            raise EtcdLost(f"etcd at {self.conf.where} did not answer for {silent:.0f}s")

    # -- sending -------------------------------------------------------------------------------------------------
    def send(self, message: M.Message) -> None:
        if isinstance(message, M.Ping) or self._closed.is_set():
            return
        message = M.checked(message)
        if isinstance(message, M.Ready):  # a coordinator that takes over tells which round this ready follows
            message = replace(message, after_round=self._round_seen)
        self._outbox.put(M.as_dict(message))

    def upload(self, request: M.Send, store: FileSource) -> None:
        """Stream the backup files the coordinator asked for (``send``), in chunks etcd accepts."""
        store.upload(_Rechunker(self), request)

    def _seal_from(self, message: dict[str, Any]) -> bytes:
        self._seq += 1
        return self.records.seal(self.keys.from_node(self.name), message, (self._seq,))

    def _send_loop(self) -> None:
        while not self._closed.is_set():
            message = self._outbox.get()
            if message is None:
                return
            while not self._closed.is_set():
                try:
                    self.store.put(self.keys.from_node(self.name), self._seal_from(message), lease=self.lease)
                    self._last_ok = time.monotonic()
                    break
                except EtcdUnavailable:
                    self._closed.wait(0.2)
                except EtcdRefused:
                    self._expired = True
                    return

    # -- the lease -----------------------------------------------------------------------------------------------
    def _keep_alive(self) -> None:
        interval = max(0.2, self.settings.node_timeout / 4)
        wait = interval
        while not self._closed.wait(wait):
            try:
                left = self.store.keepalive(self.lease)
            except (EtcdUnavailable, EtcdRefused):
                wait = 0.1  # another member may answer (a leader election takes about a second): ask again soon
                continue
            if left <= 0:
                self._expired = True
                return
            self._last_ok, wait = time.monotonic(), interval

    # -- coordination --------------------------------------------------------------------------------------------
    def _on_coordinator(self, entries: list[Entry]) -> None:
        if entries:  # gone, or rewritten (possibly with junk): look again
            self._coordinator_gone.set()

    def _campaign(self) -> None:
        from tfdist.launch.elastic.etcd.coordinator import Coordinator

        while not self._closed.is_set() and not self._expired:
            self._coordinator_gone.clear()
            if self._closed.is_set():  # close() set both after the loop's check: it must not wait a node_timeout
                return
            try:
                claimed = self.store.create(self.keys.coordinator, self.records.seal(
                    self.keys.coordinator, {"lease": self.name}), lease=self.lease)
                if claimed is None and self._clear_junk_claim():
                    continue
            except (EtcdUnavailable, EtcdRefused):
                claimed = None
            if claimed is not None:
                self.coordinating = True
                self.say("coordinating the rendezvous in etcd")
                try:
                    ended = Coordinator(self.store, self.keys, self.settings, self.records, self.run, claimed,
                                       self.name, say=lambda m: self.say(f"coordinator: {m}"), stop=self._closed,
                                       compact=self.conf.compact, lease=self.lease).run()
                finally:
                    self.coordinating = False
                if ended == "gone":  # someone deleted the run's anchor: leave, and join the new run
                    self._expired_why = "the run's anchor in etcd was deleted (a new run begins)"
                    self._expired = True
                if ended:
                    return  # the run is over (its finish is on its way to every machine): nothing to coordinate
                self._release(claimed)
                continue
            # Someone else coordinates: wait for its key to go (the watch), re-checking now and then.
            self._coordinator_gone.wait(max(1.0, self.settings.node_timeout))

    def _release(self, claimed: int) -> None:
        """A coordinator that stepped down while this machine stays (etcd refused a write, a watch lost history)
        gives up its claim, if it still is this one's, so that any machine may coordinate at once: kept, it would
        hold the key for as long as this machine's lease lives, and nobody would coordinate the job."""
        if self._closed.is_set() or self._expired:
            return  # leaving: the lease's revoke deletes the claim
        try:
            self.store.txn_if_created_at(self.keys.coordinator, claimed, [], deletes=(self.keys.coordinator,))
        except (EtcdUnavailable, EtcdRefused):
            pass  # etcd is away: the claim goes with this machine's lease if it does not come back

    def _clear_junk_claim(self) -> bool:
        """Look at the coordinator key after a failed claim; True when junk was cleared (claim again now)."""
        entry = self.store.get(self.keys.coordinator)
        if entry is None:
            return True
        verdict = claim_verdict(self.records.open(entry.key, entry.value), entry, self.lease, self.coordinating)
        if verdict == "valid":
            return False
        self.junk(entry.key)
        if verdict == "clear" and entry.lease == 0 and self._closed.wait(CLAIM_REPAIR_S):
            return False  # (a live coordinator puts its claim back over junk meanwhile: kept_records.py)
        return verdict == "clear" and self.store.delete_if_unchanged(entry.key, entry.mod_revision)

    def close(self) -> None:
        """Leave: stop this link's threads, its watches and its connection (also after its threads were stopped
        some other way: the watches and the connection are released here only)."""
        if self.store.closed:
            return
        self._closed.set()
        self._coordinator_gone.set()  # wakes the campaign thread now rather than after node_timeout
        try:
            self._outbox.put_nowait(None)
        except queue.Full:
            pass
        for watch in self._watches:
            watch.cancel()
        campaigner = self._campaigner
        if campaigner is not None and campaigner is not threading.current_thread():
            # A coordinator still at work finishes its last request first: this machine reads the job's finish as
            # soon as it is written, and the compaction after it (or the last write of a stepping-down coordinator)
            # would meet a closed connection. Bounded: a tick, then one etcd request.
            campaigner.join(self.conf.timeout + 1.0)
        if self.lease:
            try:
                self.store.revoke(self.lease)  # leaving: the coordinator sees this machine go at once
            except (EtcdUnavailable, EtcdRefused):
                pass
        self.store.close()


class _Rechunker:
    """Looks like a channel to ``BackupStore.upload``; re-cuts its chunks to sizes etcd accepts."""

    def __init__(self, link: EtcdLink) -> None:
        self.link = link

    def send(self, message: M.Message) -> bool:
        import base64

        if not isinstance(message, M.File):
            self.link.send(message)
            return True
        data = base64.b64decode(message.data)
        pieces = [data[i:i + ETCD_CHUNK] for i in range(0, len(data), ETCD_CHUNK)] or [b""]
        for position, piece in enumerate(pieces):
            final = position == len(pieces) - 1
            self.link.send(M.File(name=message.name, data=base64.b64encode(piece).decode("ascii"),
                                  end=message.end and final, last=message.last and final))
        return True
