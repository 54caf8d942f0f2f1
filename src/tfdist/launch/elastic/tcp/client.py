"""The agent's end of the rendezvous connection: connect, prove the secret, join, a reader thread, keep-alives,
and loss detection.

Mechanism only; what the agent does with the messages is in ``agent.py``. The rendezvous counts as lost when the
connection closes or when nothing (not even a ``ping``) arrived for ``node_timeout`` seconds. Whatever answers on
the endpoint must prove the job secret before the agent says anything about the job (``auth.py``); one that
answers and cannot (another program on the port, another job, a different secret) ends the agent with exit status
2. Every other failure before the welcome (nobody listening, busy, closed, reset, timed out) is tried again with
jittered exponential back-off (``retry.py``) until the deadline (``--rdzv-timeout``), with a line every 10 s: a
thousand machines arriving in the same second wait their turn instead of quitting (issue 33).
"""
from __future__ import annotations

import queue
import random
import select
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from tfdist.cluster.address import format_address
from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.rendezvous.retry import PROGRESS_EVERY_S, Backoff, gave_up_text, progress_due, waiting_line
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import wire as P
from tfdist.launch.elastic.backend import FileSource, Lost, Refused, stdin_closed  # noqa: F401 - re-exported
from tfdist.status import ExitStatus
from tfdist.validate import printable

if TYPE_CHECKING:  # the server imports nothing of this module; the agent passes its server when it serves
    from tfdist.launch.elastic.tcp.server import RendezvousServer

CONNECT_TIMEOUT_S = 2.0  # one connect; then the back-off and another (a dropped SYN is retried by the kernel)


class _TryAgain(Exception):
    """A failure before the welcome that is not a proven refusal; its text says what happened."""


class RendezvousLink:
    """``source``: the local address to connect from (None: the system's choice; the tests give each agent its own
    loopback address, as a fleet's machines have)."""

    RAW_CHUNKS = True  # an upload's chunks go as raw bytes after a header (messages/frame.py), not base64 in JSON

    def __init__(self, host: str, ip: str, port: int, node_timeout: float, *, secret: bytes,
                 watch_stdin: bool = False, say: Callable[[str], None] = lambda _m: None,
                 progress_every: float = PROGRESS_EVERY_S, here: RendezvousServer | None = None,
                 source: str | None = None, backoff: Backoff = Backoff()) -> None:
        self.where = format_address(host, port)
        self.ip, self.port = ip, port
        self.node_timeout = node_timeout
        self.watch_stdin = watch_stdin
        self.channel: P.Channel | None = None
        self._secret = secret
        self._say = say
        self._progress_every = progress_every
        self._messages: queue.Queue[M.Message | None] = queue.Queue()
        self._last_heard = time.monotonic()
        self._here = here  # the rendezvous this process serves: joined over a socket pair, not TCP
        self._source = source
        self._backoff = backoff
        self.tries = 0  # connections tried by the last connect (the tests and the benchmark read it)

    def connect(self, join: dict[str, Any], deadline: float, give_up: Callable[[], bool]) -> None:
        """Connect, prove the secret both ways, and join; what fails before the welcome and is not a proven refusal
        is tried again (jittered back-off, a line every ``progress_every`` s) until ``deadline`` or ``give_up()``.

        Raises:
            Refused: refused, or not this job's rendezvous, or the launcher that started us is gone.
            TimeoutError: not let in in time (the message says what happened last).
        """
        first = M.encode(M.make("join", **join))
        started = last_line = time.monotonic()
        self.tries = 0
        while True:
            self.tries += 1
            try:
                return self._connect_once(first, deadline)
            except _TryAgain as again:
                what = str(again)
            if self.watch_stdin and stdin_closed():
                raise Refused("the launcher that started this agent is gone", int(ExitStatus.PREEMPTED))
            now = time.monotonic()
            pause = None if give_up() else self._backoff.pause(self.tries, random.random(), now, deadline)
            if pause is None:
                raise TimeoutError(gave_up_text(self.where, what, self.tries))
            if progress_due(now, last_line, self._progress_every):
                last_line = now
                self._say(waiting_line(self.where, what, self.tries, now - started, deadline - started))
            time.sleep(pause)

    def _connect_once(self, first: bytes, deadline: float) -> None:
        """One try: joined (``self.channel`` set and welcomed), or _TryAgain / Refused / TimeoutError."""
        sock, session = self._join_here(first) or self._handshake(first, deadline)
        # This thread reads the welcome itself (a hand-off from a reader thread cost more than it saved). The reader
        # thread starts now, while the server checks the join (its start is off the welcome's path), and waits at
        # `go` until the welcome was read. This thread then releases the channel (held: no keep-alive before the
        # welcome), so the agent's first message (its ready, at once) is written by the agent's own send, not when
        # the reader thread next runs (on a loaded machine, milliseconds later); no writer thread: the reader sends
        # the keep-alives while it waits for bytes (wire.Channel). Only a server that proved the secret (or the one
        # this process serves) gets this far.
        patience = max(self.node_timeout, 5.0)
        channel = P.Channel(sock, session, send_timeout=patience, name="rdzv-agent",
                            keepalive=P.ping_interval(self.node_timeout), held=True)
        inbox: queue.Queue[M.Message | None] = queue.Queue()
        go = threading.Event()
        threading.Thread(target=self._read, args=(channel, inbox, go), daemon=True, name="rdzv-read").start()
        try:
            self._welcome(channel, patience)
            channel.release()
        except BaseException:
            channel.close()
            raise
        finally:
            go.set()  # the reader goes on, or ends at once: the channel was closed
        self.channel = channel
        self._last_heard = time.monotonic()
        self._messages = inbox

    def _open(self, deadline: float) -> socket.socket:
        timeout = max(0.05, min(CONNECT_TIMEOUT_S, deadline - time.monotonic()))
        try:
            return socket.create_connection((self.ip, self.port), timeout=timeout,
                                            source_address=None if self._source is None else (self._source, 0))
        except socket.timeout:
            raise _TryAgain("the connect timed out") from None
        except OSError as bad:
            raise _TryAgain((bad.strerror or str(bad)).lower()) from None

    def _join_here(self, first: bytes) -> tuple[socket.socket, auth.Session] | None:
        """Joined to the rendezvous of this process (no handshake with itself), or None."""
        if self._here is None:
            return None
        try:
            return self._here.join_here(first)
        except OSError:
            return None  # closing, or out of descriptors: over TCP, as any other agent

    def _handshake(self, first: bytes, deadline: float) -> tuple[socket.socket, auth.Session]:
        """Connected, the secret proved both ways and ``first`` (the join) sent: ``auth.agent_handshake``. Raises
        Refused only when whatever answered failed to prove the job secret; _TryAgain for the rest."""
        sock = self._open(deadline)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # The join (sealed: it is the agent's proof) goes in one write, once the server proved the secret.
            timeout = max(0.05, min(auth.HANDSHAKE_S, deadline - time.monotonic()))
            return sock, auth.agent_handshake(sock, self._secret, timeout=timeout, first=first)
        except auth.Busy:
            why = "busy (no room for another handshake now)"
        except auth.Reset:
            why = "reset the connection during the handshake"
        except auth.ClosedEarly:
            why = "closed the connection during the handshake"
        except auth.HandshakeTimeout:
            why = "the handshake timed out"
        except auth.AuthError as bad:  # it answered, and not with this job's proof
            sock.close()
            raise Refused(f"{self.where} did not prove this job's secret ({bad}): not this job's rendezvous "
                          "(another program on the port, another job, or a different secret)",
                          int(ExitStatus.USAGE)) from None
        except ConnectionResetError:
            why = "reset the connection during the handshake"
        except OSError as bad:
            why = f"the handshake failed ({(bad.strerror or str(bad)).lower()})"
        sock.close()
        raise _TryAgain(why)

    def _welcome(self, channel: P.Channel, patience: float) -> M.Welcome:
        """The server's answer to the join: its welcome, or Refused / TimeoutError (the channel is then closed)."""
        try:
            # The socket times out after `patience`; a deadline before that ends the wait at that first timeout.
            answer = channel.receive(deadline=time.monotonic() + patience / 2)
        except TimeoutError:
            channel.close()
            raise _TryAgain(f"no answer to the join within {patience:g}s") from None
        except (M.ProtocolError, auth.AuthError) as bad:  # it proved the secret, then spoke something else
            channel.close(f"{bad}" or type(bad).__name__)
            raise Refused(f"{self.where} answered with something that is not this protocol ({bad})",
                          int(ExitStatus.USAGE)) from None
        except OSError as bad:
            channel.close()
            raise _TryAgain(f"the connection failed before the welcome ({(bad.strerror or str(bad)).lower()})") \
                from None
        if not isinstance(answer, M.Welcome):
            channel.close()
            if isinstance(answer, M.Refused):
                raise Refused(printable(answer.reason), answer.status)
            raise _TryAgain("closed the connection before the welcome")
        return answer

    def _read(self, channel: P.Channel, inbox: queue.Queue, go: threading.Event) -> None:
        go.wait()  # the joining thread read the welcome and released the channel (or gave up and closed it)
        if channel.closed:
            return
        try:  # the keep-alives come from this reader from now on
            while True:
                message = channel.receive()
                inbox.put(message)
                if message is None:
                    return
        except (OSError, M.ProtocolError, auth.AuthError) as bad:
            channel.close(f"{bad}" or type(bad).__name__)
            inbox.put(None)

    def next_message(self, timeout: float) -> M.Message | None:
        """The next message, as decoded and checked (``messages.py``), or None after ``timeout``. Raises Lost."""
        try:
            message = self._messages.get(timeout=timeout)
        except queue.Empty:
            if time.monotonic() - self._last_heard > self.node_timeout:
                raise Lost(f"no keep-alive for {self.node_timeout:g}s") from None
            return None
        if message is None:
            raise Lost("connection closed")
        self._last_heard = time.monotonic()
        return message

    def send(self, message: M.Message) -> bool:
        """Queue one message; a chunk (``chunk``, ``file``) waits up to node_timeout for room (the upload's pace)."""
        if self.channel is None:
            return False
        bulk = isinstance(message, M.CHUNKS)
        return self.channel.send(M.checked(message), wait=self.node_timeout if bulk else 0.0, bulk=bulk)

    def upload(self, request: M.Send, store: FileSource) -> None:
        if self.channel is not None:
            store.upload(self, request)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.drain(1.0)
            self.channel.close()
