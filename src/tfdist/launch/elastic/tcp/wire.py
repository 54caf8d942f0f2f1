"""The rendezvous' transport: one TCP connection per agent, authenticated frames both ways, a bounded sender.

Why this and not etcd or HTTP: the rendezvous must run wherever a user types ``tfdist launch``, with nothing else
installed, and it must notice a machine that silently drops off the network. One long-lived TCP connection per
agent carries requests, pushes (a new round, "stop now") and keep-alives both ways with the standard library alone.

A connection starts with the handshake of :mod:`tfdist.launch.elastic.tcp.auth` (nothing about the job before it);
then every message (:mod:`tfdist.launch.elastic.messages.protocol`) is one encrypted frame (a sealed length, then the
message in Noise messages of at most 65535 bytes) of at most ``auth.MAX_FRAME`` bytes, so a reader never holds more
than one frame. Sending never waits on the network: messages go into a bounded queue,
written at once by the sender with a non-blocking send when the socket takes them, else by a writer thread with a
deadline per frame (only a backup or snapshot chunk may wait, up to the ``wait`` it is sent with, for room in that
queue: the upload's pace). A peer that stops reading fills its queue or misses the deadline and loses its
connection; nothing else waits for it.

Keep-alives: each side sends ``ping`` every :func:`ping_interval` and counts the peer as lost after
``node_timeout`` seconds without any message (a cut link closes nothing, so a closed connection is not enough).
"""
from __future__ import annotations

import os
import queue
import select
import socket
import threading
import time

from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.messages import flight as _flight_messages  # noqa: F401 - registers dump, evidence
from tfdist.launch.elastic.messages.protocol import Message, Ping, ProtocolError, decode, encode
from tfdist.launch.elastic.messages.fields import FILE_CHUNK  # noqa: F401 - the wire's chunk is the protocol's

QUEUE_FRAMES = 32
RESERVED = 8
# What one read asks for beyond the bytes the frame still lacks: a small message's header and body (a keep-alive,
# ready, stop: tens to hundreds of bytes; often the next ones too) in one recv, so the reader holds at most one frame
# plus this. Small: each read allocates it (64 KiB: +13 MiB of the server's peak RSS with 1,024 members).
READ_AHEAD = 1 << 12


def ping_interval(node_timeout: float) -> float:
    """Four keep-alives per timeout, so one delayed packet never counts as a lost machine."""
    return max(0.05, node_timeout / 4)


class Closed(Exception):
    """The peer closed the connection between two messages."""


class Channel:
    """One authenticated connection: sends queued and written without waiting on the peer, one reader (the caller).

    Nothing on the join's path waits for a thread start or a hand-off that the plain join of the protocol before
    authentication did not have: a connection's first message is written by the thread that owns it (the agent's
    join is its proof and rides in the handshake's last write, ``auth.agent_handshake``; the server's welcome goes
    out through :meth:`send_now`).
    A message sent while no writer thread runs is written by the sender's thread when the socket takes it now (one
    non-blocking send); a writer thread, with the send deadline, starts only for what the socket cannot take at
    once (a peer that stops reading, a backup copy), so a connection of a few small messages each way (a member:
    pings, ready, rounds, reports) has no writer thread. ``held``: queue but write nothing until :meth:`send_now` or
    :meth:`release` (a keep-alive cannot overtake the welcome). ``keepalive``: the reader, while it waits for bytes,
    sends ``ping`` whenever nothing was sent for that many seconds (the agent's keep-alives: the agent always
    reads its connection, so they need no thread of their own).
    """

    def __init__(self, sock: socket.socket, session: auth.Session, *, send_timeout: float,
                 queue_frames: int | None = None, name: str = "rdzv", keepalive: float | None = None,
                 held: bool = False) -> None:
        self.sock = sock
        self._session = session
        self._outbox: queue.Queue[bytes | None] = queue.Queue(maxsize=queue_frames or QUEUE_FRAMES)
        self._closed = threading.Event()
        self.dropped_reason = ""
        self._name = name
        self._keepalive = keepalive
        # Who may seal the next frame (the sequence numbers need one sealer at a time): the writer once _go is set;
        # before that, only send_now. _go is set when the channel is neither held nor in send_now, or closed.
        self._start_lock = threading.Lock()  # guards the fields below; never held while sending
        self._held = held
        self._writing_now = False
        self._go = threading.Event()
        if not held:
            self._go.set()
        self._writer: threading.Thread | None = None
        self._remainder = b""  # the part of a frame written directly that did not fit: the writer's first bytes
        self._last_sent = time.monotonic()
        self._readable = select.poll()
        self._readable.register(sock, select.POLLIN)
        self._inbox = bytearray()  # bytes read and not yet taken: the rest of a read (bounded: see _receive_exactly)
        # One timeout for both directions: a send's whole deadline (Python >= 3.5), and how often a blocked read
        # wakes to notice a closed channel (it just reads on).
        sock.settimeout(send_timeout)
        self._wake_ms = None if send_timeout is None else send_timeout * 1000  # a reader's wait between checks

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def send(self, message: Message, wait: float = 0.0, *, bulk: bool = False) -> bool:
        """Queue ``message`` (written at once from this thread when no writer runs and the socket takes it now);
        False when the connection is gone. ``wait``: seconds to wait for room in the queue; without room in time the
        peer is too slow and its connection is closed. ``bulk`` (backup chunks) leaves :data:`RESERVED` places free,
        so keep-alives and orders still fit while a copy is under way."""
        if self.closed:
            return False
        payload = encode(message)
        deadline = time.monotonic() + wait
        if bulk:
            while self._outbox.qsize() >= self._outbox.maxsize - RESERVED and not self.closed:
                if time.monotonic() >= deadline:
                    self.close("it does not read its messages")
                    return False
                time.sleep(0.002)
        try:
            if wait > 0:
                self._outbox.put(payload, timeout=max(0.0, deadline - time.monotonic()))
            else:
                self._outbox.put_nowait(payload)
        except queue.Full:
            self.close("it does not read its messages")
            return False
        if self._writer is None:
            self._flush()
        return not self.closed

    def _flush(self) -> None:
        """Write what is queued from this thread, one non-blocking send per frame, while no writer thread runs and
        the socket takes bytes now (never a wait on the peer): a peer whose messages are few and small (the
        server's members: pings, rounds, stops; an agent's ready, reports and keep-alives) costs no writer thread.
        What the socket cannot take now goes to a writer started for it, which has the send deadline."""
        with self._start_lock:
            if self._writer is not None or self._held or self._writing_now:
                return
            self._writing_now = True  # the one sealer now (sequence numbers)
        try:
            while not self._remainder and not self.closed:
                try:
                    payload = self._outbox.get_nowait()
                except queue.Empty:
                    break
                if payload is None:
                    continue  # drain's end mark, for a writer: none runs
                frame = self._session.seal(payload)  # its sequence number is used up: it goes out, here or later
                try:
                    sent = self._send_without_waiting(frame)
                except BlockingIOError:  # the socket takes nothing now: the writer sends it, with the deadline
                    sent = 0
                self._last_sent = time.monotonic()
                with self._start_lock:
                    self._remainder = frame[sent:]  # the writer sends the rest first, before anything queued
        except (OSError, ValueError) as bad:
            self.close("sending to it failed" if isinstance(bad, OSError) else str(bad))
        finally:
            with self._start_lock:
                self._writing_now = False
            self._start_writer()  # only for what is left

    def _send_without_waiting(self, frame: bytes) -> int:
        """One write of ``frame``: the bytes the socket took now; BlockingIOError when it takes none. Not
        ``sock.send``: on a socket with a timeout (this one, for the reader and writer) Python polls before every send
        and waits up to that timeout for room, so each direct send cost a poll, and a full buffer a wait. The
        descriptor is non-blocking under a timeout, so a plain write never waits."""
        if self.sock.gettimeout() is None:  # a blocking socket (never made so here): only a flagged send is safe
            return self.sock.send(frame, socket.MSG_DONTWAIT)
        return os.write(self.sock.fileno(), frame)

    def send_now(self, message: Message) -> bool:
        """Write ``message`` from the caller's thread, ahead of anything queued, then release the channel: for the
        first message of a ``held`` channel; queued like any other when the channel is not held. False when the
        connection is gone or the write failed (the channel is then closed)."""
        with self._start_lock:
            direct = self._held and not self._writing_now
            self._writing_now = self._writing_now or direct
        if not direct:
            return self.send(message)
        try:
            if self.closed:
                return False
            self.sock.sendall(self._session.seal(encode(message)))
            self._last_sent = time.monotonic()
        except (OSError, ValueError) as bad:
            self.close("sending to it failed or missed its deadline" if isinstance(bad, OSError) else str(bad))
            return False
        finally:
            with self._start_lock:
                self._writing_now = self._held = False
                self._go.set()
            self._flush()
        return not self.closed

    def release(self) -> None:
        """Send what was queued while held (from this thread when the socket takes it); then as any channel."""
        with self._start_lock:
            self._held = False
            if not self._writing_now:
                self._go.set()
        self._flush()

    def _start_writer(self) -> None:
        with self._start_lock:
            # Held (a joining agent's channel until its reader releases it): a message sent meanwhile waits for the
            # release, which writes it, so no sender pays a thread start (the agent's first message follows its
            # welcome at once). Otherwise a writer starts only for what the socket could not take at once.
            if self._writer is not None or self._held or self._writing_now or (
                    self._outbox.empty() and not self._remainder):
                return
            self._writer = threading.Thread(target=self._write, daemon=True, name=f"{self._name}-send")
            self._writer.start()

    def _write(self) -> None:
        self._go.wait()
        with self._start_lock:
            rest, self._remainder = self._remainder, b""
        payload: bytes | None = b""
        while payload is not None and not self.closed:
            try:
                if rest:
                    self.sock.sendall(rest)
                    self._last_sent = time.monotonic()
                payload = self._outbox.get()
                rest = b"" if payload is None else self._session.seal(payload)
            except (OSError, ValueError) as bad:
                self.close("sending to it failed or missed its deadline" if isinstance(bad, OSError) else str(bad))
                return

    def _keep_alive(self, deadline: float | None) -> None:
        """The reader's wait for bytes on a channel with keep-alives: a ``ping`` whenever nothing was sent for that
        long (sent as any message: no thread of its own). Returns once something can be read."""
        assert self._keepalive is not None
        while True:
            now = time.monotonic()
            due = self._last_sent + self._keepalive - now
            if due <= 0:
                self._last_sent = now  # held (not yet welcomed): none is sent, the next one is due later
                if not self._held:
                    self.send(Ping())
                continue
            wait = due if deadline is None else max(0.0, min(due, deadline - now))
            if self._readable.poll(wait * 1000):
                return
            if self.closed:
                raise Closed()
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("no message in time")

    def _receive_exactly(self, count: int, first: bool, deadline: float | None) -> bytes:
        """``count`` bytes, from what an earlier read brought first. Each read asks for what is missing plus
        :data:`READ_AHEAD`, so a small frame's header and body (often several frames) come in one read, not one
        each, and never more is held than one frame (``count`` <= a frame's body) plus one read's worth. The wait
        for bytes is a poll of our own, and the read comes after it: Python allocates a recv's whole size before it
        waits, so an idle member would hold a read-ahead, and it polls again before reading."""
        inbox = self._inbox
        while len(inbox) < count:
            if self._keepalive is not None:
                self._keep_alive(deadline)
            elif not self._readable.poll(self._wake_ms):  # the socket's timeout: a closed channel is noticed
                if self.closed:
                    raise Closed()
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError("no message in time")
                continue
            try:
                chunk = self._read_now(count - len(inbox) + READ_AHEAD)
            except BlockingIOError:  # readable was a false alarm (it happens): wait again
                continue
            except socket.timeout:
                continue
            if not chunk:
                if first and not inbox:
                    raise Closed()
                raise ProtocolError("the connection closed in the middle of a message")
            inbox += chunk
        data = bytes(inbox[:count])
        del inbox[:count]
        return data

    def _read_now(self, size: int) -> bytes:
        """One read of what is there (after a poll said so). A plain read on the descriptor, non-blocking under the
        socket's timeout: ``sock.recv`` would poll once more first."""
        if self.sock.gettimeout():
            return os.read(self.sock.fileno(), size)
        return self.sock.recv(size)

    def receive(self, deadline: float | None = None) -> Message | None:
        """The next message, or None once the connection closed. Raises ProtocolError, AuthError, OSError;
        TimeoutError once ``deadline`` (monotonic; checked each time the socket's timeout passes) has passed."""
        first = [True]

        def receive(count: int) -> bytes:
            data = self._receive_exactly(count, first[0], deadline)
            first[0] = False
            return data

        try:
            payload = self._session.read_frame(receive)
        except Closed:
            return None
        return decode(payload)

    def close(self, reason: str = "") -> None:
        if self.closed:
            return
        self.dropped_reason = reason
        self._closed.set()
        self._go.set()  # a held writer wakes, sees the channel closed, and ends
        try:
            self._outbox.put_nowait(None)
        except queue.Full:
            pass
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the queued messages to go out (a last ``finish`` or ``refused``); the writer
        ends after them. Nothing queued and no writer yet (a connection closed right after its welcome): nothing to
        wait for, and no writer is started just to end."""
        self.release()  # what a held channel queued goes out now, from here when the socket takes it
        with self._start_lock:
            writer = self._writer
        if writer is None:
            return
        try:
            self._outbox.put(None, timeout=timeout)
        except queue.Full:
            return
        writer.join(timeout)
