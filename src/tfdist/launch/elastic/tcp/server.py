"""The rendezvous server: one thread that accepts and authenticates (``admission.py``), one thread per member after
its welcome (started by a thread of their own, ``rdzv-start``), one loop that ticks the policy.

Mechanism only: every rule lives in :mod:`tfdist.launch.elastic.rendezvous.membership`. The loop also watches keep-alives: a
machine that sends nothing for ``node_timeout`` seconds is lost even though its connection looks open (a cut cable
closes nothing). Served by the agent on the machine that owns the ``--rdzv-endpoint`` address, or by the host-file
driver.

What a stranger can do to it is bounded (``admission.py`` and ``admission_rules.py`` hold the rules): a connection
must finish the handshake (``auth.py``) within ``auth.HANDSHAKE_S`` seconds and then join; room for unauthenticated
connections and the listen backlog scale with the job's ``--nnodes`` max; a connection that sent a well-formed
hello is never evicted for a newcomer (a newcomer finding no room is told "busy" and tries again), and a source
address is held to :data:`PENDING_PER_SOURCE` only after it failed a handshake, so a NAT'd fleet is not. A
connection stops counting once it proved the secret. No message is sent while the state lock is held (each peer's sends are
written with one non-blocking send or queued, ``wire.py``); a peer whose messages do not fit the protocol, or that
stops reading, loses its own connection. The agent of the machine that serves the endpoint joins in-process
(:meth:`RendezvousServer.join_here`).
Every loop reports what went wrong and goes on; ``accept`` survives running out of file descriptors. The
handshakes, the joins and the welcomes are served by the accept thread, never waiting on a peer: no thread start
and no hand-off on a join's path (a refusal, which waits for its reader, goes out on a thread of its own).
"""
from __future__ import annotations

import ipaddress
import itertools
import queue
import socket
import threading
import time
from typing import Callable

from tfdist.cluster.address import format_address
from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.tcp.admission import PENDING_PER_SOURCE, PENDING_TOTAL, Admission  # noqa: F401 - the caps
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import wire as P
from tfdist.launch.elastic.rendezvous.backup_relay import BackupRelay
from tfdist.launch.elastic.rendezvous.conductor import Conductor, Refusal
from tfdist.launch.elastic.messages.flight import Evidence
from tfdist.launch.elastic.rendezvous.hang_collection import JobRecorder
from tfdist.launch.elastic.rendezvous.membership import Finish, MembershipPolicy, RendezvousSettings
from tfdist.launch.elastic.rendezvous.membership_types import RoundAction


def listen_socket(host: str, port: int) -> socket.socket:
    """A listener of ``host``'s address family (an IPv6 endpoint gets an IPv6 listener)."""
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    return socket.create_server((host, port), family=family, reuse_port=False)


class RendezvousServer:
    """Serve one job's rendezvous on ``host:port`` until the job is finished. ``secret``: the job secret."""

    def __init__(self, settings: RendezvousSettings, host: str, port: int, *, secret: bytes,
                 say: Callable[[str], None] = lambda _m: None, recorder: JobRecorder | None = None) -> None:
        self.settings = settings
        self.recorder = recorder  # the flight recorder across machines (None: off)
        self.policy = MembershipPolicy(settings, time.monotonic())
        self._secret = secret
        self._say = say
        self._lock = threading.RLock()
        self._channels: dict[int, P.Channel] = {}
        self._last_seen: dict[int, float] = {}
        self._ids = itertools.count(1)
        self._listener = listen_socket(host, port)
        self.address = self._listener.getsockname()[:2]
        self.finished = threading.Event()
        self._closing = threading.Event()  # joins after the job finished are refused ("over") until then
        self._admission = Admission(lambda: self._listener.accept(), self._listener, secret, admitted=self._admitted,
                                    say=say, closing=self._closing, nodes=settings.max_nodes)
        self._pending = self._admission.pending  # unauthenticated connections per source address
        self._waiting = self._admission.waiting  # the same connections, oldest first
        self.result: Finish | None = None
        self.relay = BackupRelay(self._send, say)
        self.conductor = Conductor(self.policy, self.relay, say, recorder=recorder)
        self._threads: list[threading.Thread] = []
        # Members whose thread is due, for rdzv-start: Thread.start waits until the new thread runs, which under a
        # burst on a loaded machine cost the accept thread about 0.5 ms a member (0.5 s of the admission of 1,024 in
        # bench/rdzv_scale.py), time in which it served no handshake. None: the server closed.
        self._to_start: queue.SimpleQueue[tuple[int, P.Channel] | None] = queue.SimpleQueue()
        self.send_timeout = max(5.0, settings.node_timeout)

    @property
    def endpoint(self) -> str:
        return format_address(*self.address)

    # -- life cycle ----------------------------------------------------------------------------------------------
    def start(self) -> "RendezvousServer":
        for target, name in ((self._admission.run, "rdzv-accept"), (self._tick_loop, "rdzv-tick"),
                             (self._start_members, "rdzv-start")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def interrupt(self, signum: int) -> None:
        with self._lock:
            self.policy.interrupt(signum, time.monotonic())

    def member_names(self) -> set[str]:
        """The names of the machines that are members now (the host-file driver brings back the others)."""
        with self._lock:
            return {node.name for node in self.policy.nodes.values()}

    def wait(self, timeout: float | None = None) -> Finish | None:
        self.finished.wait(timeout)
        return self.result

    def close(self) -> None:
        self.finished.set()
        self._closing.set()
        self._to_start.put(None)
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            channels = list(self._channels.values())
        for channel in channels:
            channel.drain(1.0)
            channel.close()

    # -- connections ---------------------------------------------------------------------------------------------
    def join_here(self, join: bytes) -> tuple[socket.socket, auth.Session]:
        """For the agent in this process (the machine that serves the endpoint joins its own rendezvous): its end of
        a socket pair and its keys, admitted with ``join`` (a join message's payload) as a connection that proved
        the secret over TCP is: the same policy, welcome, sealed frames, keep-alives and loss detection, without a
        handshake with itself over loopback. Raises OSError (closing, or no descriptors left): join over TCP."""
        if self._closing.is_set():
            raise OSError("the rendezvous is closing")
        mine, theirs = socket.socketpair()
        agent_session, server_session = auth.pair_sessions()
        try:
            self._admitted(theirs, server_session, join, here=True)
        except BaseException:
            mine.close()
            theirs.close()
            raise
        return mine, agent_session

    def _admitted(self, sock: socket.socket, session: auth.Session, payload: bytes, *, here: bool = False) -> None:
        """On the accept thread (``admission.py``): a connection proved the secret and sent ``payload``, its join.
        The welcome is written here, without waiting; the member's own thread starts when it first speaks (``here``:
        on the thread of the agent of this process, which hands its connection to the accept thread to watch)."""
        node_id = next(self._ids)
        # Held until the welcome is written (send_now): nothing queued meanwhile goes out before it.
        channel = P.Channel(sock, session, send_timeout=self.send_timeout, name=f"rdzv-{node_id}", held=True)
        try:
            join = M.decode(payload)
        except M.VersionError as other:
            return self._refuse_later(channel, str(other), versions=list(M.SPOKEN))
        except M.ProtocolError as bad:
            return self._refuse_later(channel, f"not a message of this protocol: {bad}")
        with self._lock:
            node = self.conductor.admit(node_id, join)
            if not isinstance(node, Refusal):
                node.here = here  # the serving machine's own agent: its backup decides a first round (restore_point)
                self._channels[node_id] = channel
                self._last_seen[node_id] = time.monotonic()
        if isinstance(node, Refusal):
            return self._refuse_later(channel, node.reason, node.status)
        sock.setblocking(False)  # this thread never waits on a peer: a ~100-byte welcome fits an empty buffer
        welcomed = channel.send_now(M.Welcome(node_id=node_id))
        sock.settimeout(self.send_timeout)
        if not welcomed:
            self._drop(node_id, channel, channel.dropped_reason or "the welcome could not be sent")
            return
        self._say(f"{node.label} joined ({node.slots} worker(s))")
        park = self._admission.park_soon if here else self._admission.park
        park(sock, lambda: channel.closed, lambda gone: self._start_member(node_id, channel, gone))

    def _start_member(self, node_id: int, channel: P.Channel, gone: bool) -> None:
        """On the accept thread: the member spoke (rdzv-start starts its thread; what it said waits in the socket),
        or its connection is gone (no thread)."""
        if gone:
            self._drop(node_id, channel, channel.dropped_reason or "its agent closed the connection")
            return
        self._to_start.put((node_id, channel))

    def _start_members(self) -> None:
        """rdzv-start: each member's own thread, in the order they first spoke, until the server closes."""
        while (due := self._to_start.get()) is not None:
            node_id, channel = due
            try:
                threading.Thread(target=self._serve_member, args=(node_id, channel), daemon=True,
                                 name="rdzv-conn").start()
            except RuntimeError as bad:  # cannot start a thread: this member is dropped, not the job
                self._drop(node_id, channel, f"cannot serve it: {bad}")

    def _refuse_later(self, channel: P.Channel, reason: str, status: int = 2,
                      versions: list[int] | None = None) -> None:
        """A refusal waits for the refused peer to read it: on a thread of its own, not the accept thread."""
        threading.Thread(target=self._refuse, args=(channel, reason, status, versions), daemon=True,
                         name="rdzv-refuse").start()

    def _serve_member(self, node_id: int, channel: P.Channel) -> None:
        reason = "its agent closed the connection"
        try:
            while True:
                message = channel.receive()
                if message is None:
                    break
                self._on_message(node_id, message)
        except M.ProtocolError as bad:
            reason = f"sent something that is not a message of this protocol ({bad})"
            self._refuse(channel, f"not a message of this protocol: {bad}", close=False)
        except (OSError, auth.AuthError) as bad:
            reason = "the rendezvous closed its connection" if channel.closed else f"bad connection: {bad}"
        except Exception as bad:  # noqa: BLE001 - one peer's trouble never ends the server
            reason = f"internal error while serving it: {bad!r}"
            self._say(f"node {node_id}: {reason}")
        self._drop(node_id, channel, channel.dropped_reason or reason)

    def _refuse(self, channel: P.Channel | None, reason: str, status: int = 2, versions: list[int] | None = None,
                *, close: bool = True) -> None:
        if channel is None:
            return
        channel.send(M.Refused(reason=reason, status=status, versions=versions))
        channel.drain(1.0)
        if close:
            channel.close()

    def _drop(self, node_id: int, channel: P.Channel | None, reason: str) -> None:
        with self._lock:
            known = self._channels.pop(node_id, None) is not None
            self._last_seen.pop(node_id, None)
            over = self.finished.is_set()  # agents leave once the job is over: no loss to report
            if known and not over:
                self.policy.on_lost(node_id, reason, time.monotonic())
        if known and self.recorder is not None:
            self.recorder.on_lost(node_id)
        if known and not over:
            self._say(f"lost node {node_id}: {reason}")
        if channel is not None:
            channel.close()

    def _on_message(self, node_id: int, message: M.Message) -> None:
        now = time.monotonic()
        if isinstance(message, M.CHUNKS):  # forwarded outside the lock: the receivers' queues may make it wait
            self._seen(node_id, now)  # a chunk is a sign of life, even while the forwarding waits
            patience = min(self.send_timeout, self.settings.node_timeout / 2)
            self.relay.on_upload(node_id, M.as_dict(message), deadline=now + patience)
            now = time.monotonic()
        if isinstance(message, Evidence):  # outside the lock: it asks the other machines for theirs
            self._seen(node_id, now)
            if self.recorder is not None:
                self.recorder.on_evidence(node_id, message, self._send_message)
            return
        with self._lock:
            if node_id in self._channels:
                self._last_seen[node_id] = now
            self.conductor.on_message(node_id, message, now)

    def _seen(self, node_id: int, now: float) -> None:
        with self._lock:
            if node_id in self._channels:
                self._last_seen[node_id] = now

    def _send_message(self, node_id: int, message: M.Message) -> bool:
        with self._lock:
            channel = self._channels.get(node_id)
        return channel is not None and channel.send(message)

    def _send(self, node_id: int, kind: str, wait: float = 0.0, **fields: object) -> bool:
        """For the relay: one message to ``node_id``; ``wait`` > 0 is a chunk that may wait for room."""
        with self._lock:
            channel = self._channels.get(node_id)
        return channel is not None and channel.send(M.make(kind, **fields), wait=wait, bulk=wait > 0)

    # -- the loop ------------------------------------------------------------------------------------------------
    def _tick_loop(self) -> None:
        interval = P.ping_interval(self.settings.node_timeout)
        last_ping = 0.0
        while not self.finished.is_set():
            try:
                last_ping = self._tick(interval, last_ping)
            except Exception as bad:  # noqa: BLE001 - the loop must go on: it is the job's clock
                self._say(f"rendezvous loop: {bad!r} (going on)")
            time.sleep(0.02)

    def _tick(self, interval: float, last_ping: float) -> float:
        now = time.monotonic()
        silent: list[tuple[int, P.Channel, float]] = []
        if self.recorder is not None:
            self.recorder.poll(now)  # a collection that is complete or past its deadline: the report, once
        # While the flight recorder waits for the machines' stacks, the round's next step (stop, finish) waits too.
        held = self.recorder is not None and self.recorder.busy(now)
        with self._lock:
            for node_id, seen in list(self._last_seen.items()):
                if node_id in self._channels and now - seen > self.settings.node_timeout:
                    self.policy.on_lost(node_id, f"no keep-alive for {self.settings.node_timeout:g}s", now)
                    silent.append((node_id, self._channels.pop(node_id), now - seen))
            actions = [] if held else self.policy.tick(now)
            channels = dict(self._channels)
            nodes = dict(self.policy.nodes)
            round_ = self.policy.round
        for node_id, channel, quiet in silent:
            self._say(f"node {node_id}: no keep-alive for {quiet:.1f}s")
            if self.recorder is not None:
                self.recorder.on_lost(node_id)
            channel.close()
        members = _Channels(channels)
        for action in actions:
            finish = self.conductor.carry_out(action, members, nodes, round_)
            if finish is not None:
                self.result = finish
                self.finished.set()
        if now - last_ping >= interval:
            last_ping = now
            for channel in channels.values():
                channel.send(M.Ping())
        return last_ping


class _Channels:
    """The TCP server's :class:`~tfdist.launch.elastic.rendezvous.conductor.Members` port: each message goes out on
    that member's connection at once (``channels``: as they stood when the policy decided)."""

    def __init__(self, channels: dict[int, P.Channel]) -> None:
        self._channels = channels

    def everyone(self) -> list[int]:
        return list(self._channels)

    def deliver(self, node_id: int, message: M.Message) -> None:
        channel = self._channels.get(node_id)
        if channel is not None:
            channel.send(message)

    def commit(self, action: RoundAction) -> None:
        """Each message went out as it was delivered: nothing to gather."""
