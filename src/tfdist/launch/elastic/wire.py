"""The rendezvous' transport: one TCP connection per agent, authenticated frames both ways, a bounded sender.

Why this and not etcd or HTTP: the rendezvous must run wherever a user types ``tfdist launch``, with nothing else
installed, and it must notice a machine that silently drops off the network. One long-lived TCP connection per
agent carries requests, pushes (a new round, "stop now") and keep-alives both ways with the standard library alone.

A connection starts with the handshake of :mod:`tfdist.launch.elastic.auth` (nothing about the job before it);
then every message (:mod:`tfdist.launch.elastic.messages`) is one MAC'd frame of at most ``auth.MAX_FRAME`` bytes,
so a reader never holds more than one frame. Sending never blocks the caller: messages go into a bounded queue that
one writer thread drains, each frame with a deadline. A peer that stops reading fills its queue or misses the
deadline and loses its connection; nothing else waits for it.

Keep-alives: each side sends ``ping`` every :func:`ping_interval` and counts the peer as lost after
``node_timeout`` seconds without any message (a cut link closes nothing, so a closed connection is not enough).
"""
from __future__ import annotations

import queue
import socket
import threading
import time

from tfdist.launch.elastic import auth
from tfdist.launch.elastic.messages import Message, ProtocolError, decode, encode

FILE_CHUNK = 256 * 1024
QUEUE_FRAMES = 32
RESERVED = 8


def ping_interval(node_timeout: float) -> float:
    """Four keep-alives per timeout, so one delayed packet never counts as a lost machine."""
    return max(0.05, node_timeout / 4)


class Closed(Exception):
    """The peer closed the connection between two messages."""


class Channel:
    """One authenticated connection: queued sends drained by a writer thread, one reader (the caller)."""

    def __init__(self, sock: socket.socket, session: auth.Session, *, send_timeout: float,
                 queue_frames: int | None = None, name: str = "rdzv") -> None:
        self.sock = sock
        self._session = session
        self._outbox: queue.Queue[bytes | None] = queue.Queue(maxsize=queue_frames or QUEUE_FRAMES)
        self._closed = threading.Event()
        self.dropped_reason = ""
        # One timeout for both directions: a send's whole deadline (Python >= 3.5), and how often a blocked read
        # wakes to notice a closed channel (it just reads on).
        sock.settimeout(send_timeout)
        self._writer = threading.Thread(target=self._write, daemon=True, name=f"{name}-send")
        self._writer.start()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def send(self, message: Message, wait: float = 0.0, *, bulk: bool = False) -> bool:
        """Queue ``message``; False when the connection is gone. ``wait``: seconds to wait for room in the queue;
        without room in time the peer is too slow and its connection is closed. ``bulk`` (backup chunks) leaves
        :data:`RESERVED` places free, so keep-alives and orders still fit while a copy is under way."""
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
            return not self.closed
        except queue.Full:
            self.close("it does not read its messages")
            return False

    def _write(self) -> None:
        while True:
            payload = self._outbox.get()
            if payload is None or self.closed:
                return
            try:
                self.sock.sendall(self._session.seal(payload))
            except (OSError, ValueError) as bad:
                self.close("sending to it failed or missed its deadline" if isinstance(bad, OSError) else str(bad))
                return

    def _receive_exactly(self, count: int, first: bool) -> bytes:
        chunks, have = [], 0
        while have < count:
            try:
                chunk = self.sock.recv(min(count - have, 1 << 20))
            except socket.timeout:
                if self.closed:
                    raise Closed() from None
                continue
            if not chunk:
                if first and have == 0:
                    raise Closed()
                raise ProtocolError("the connection closed in the middle of a message")
            chunks.append(chunk)
            have += len(chunk)
            first = False
        return b"".join(chunks)

    def receive(self) -> Message | None:
        """The next message, or None once the connection closed. Raises ProtocolError, AuthError, OSError."""
        first = [True]

        def receive(count: int) -> bytes:
            data = self._receive_exactly(count, first[0])
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
        """Wait up to ``timeout`` for the queued messages to go out (a last ``finish`` or ``refused``)."""
        deadline_thread = self._writer
        try:
            self._outbox.put(None, timeout=timeout)
        except queue.Full:
            return
        deadline_thread.join(timeout)
