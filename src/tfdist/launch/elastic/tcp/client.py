"""The agent's end of the rendezvous connection: connect, prove the secret, join, a reader thread, keep-alives,
and loss detection.

Mechanism only; what the agent does with the messages is in ``agent.py``. The rendezvous counts as lost when the
connection closes or when nothing (not even a ``ping``) arrived for ``node_timeout`` seconds. Whatever answers on
the endpoint must prove the job secret before the agent says anything about the job (``auth.py``); one that
cannot (another program on the port, another job, a squatter) ends the agent with exit status 2.
"""
from __future__ import annotations

import queue
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from tfdist.cluster.address import format_address
from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.tcp import wire as P
from tfdist.launch.elastic.backend import FileSource, Lost, Refused, stdin_closed  # noqa: F401 - re-exported
from tfdist.status import ExitStatus
from tfdist.validate import printable

if TYPE_CHECKING:  # the server imports nothing of this module; the agent passes its server when it serves
    from tfdist.launch.elastic.tcp.server import RendezvousServer

PROGRESS_EVERY_S = 10.0  # a line this often while the endpoint does not answer
CLOSED_EARLY_S = 10.0  # an endpoint that closes every connection unanswered this long is not our rendezvous


class RendezvousLink:
    def __init__(self, host: str, ip: str, port: int, node_timeout: float, *, secret: bytes,
                 watch_stdin: bool = False, say: Callable[[str], None] = lambda _m: None,
                 progress_every: float = PROGRESS_EVERY_S, here: RendezvousServer | None = None) -> None:
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

    def _connect_socket(self, deadline: float, give_up: Callable[[], bool]) -> socket.socket:
        started = last_line = time.monotonic()
        why = "no answer"
        while True:
            try:
                return socket.create_connection((self.ip, self.port), timeout=2.0)
            except OSError as bad:
                why = bad.strerror or str(bad)
            if self.watch_stdin and stdin_closed():
                raise Refused("the launcher that started this agent is gone", int(ExitStatus.PREEMPTED))
            now = time.monotonic()
            if now > deadline or give_up():
                raise TimeoutError(f"no rendezvous at {self.where} in time ({why})")
            if now - last_line >= self._progress_every:
                last_line = now
                self._say(f"waiting for the rendezvous at {self.where}: {why} ({now - started:.0f}s of "
                          f"{deadline - started:.0f}s)")
            time.sleep(0.2)

    def connect(self, join: dict[str, Any], deadline: float, give_up: Callable[[], bool]) -> None:
        """Connect (retrying until ``deadline`` or ``give_up()``), prove the secret both ways, and join.

        Raises:
            Refused: refused, or not this job's rendezvous, or the launcher that started us is gone.
            TimeoutError: nobody answered in time.
        """
        first = M.encode(M.make("join", **join))
        sock, session = self._join_here(first) or self._handshake(first, deadline, give_up)
        # This thread reads the welcome itself (a hand-off from a reader thread cost more than it saved). The reader
        # thread starts now, while the server checks the join (its start is off the welcome's path), and waits at
        # `go` until the welcome was read; it then releases the channel, which writes what was queued meanwhile, in
        # order, from the reader's thread (no writer thread: the reader sends the keep-alives while it waits for
        # bytes, wire.Channel). Only a server that proved the secret (or the one this process serves) gets this far.
        patience = max(self.node_timeout, 5.0)
        channel = P.Channel(sock, session, send_timeout=patience, name="rdzv-agent",
                            keepalive=P.ping_interval(self.node_timeout), held=True)
        inbox: queue.Queue[M.Message | None] = queue.Queue()
        go = threading.Event()
        threading.Thread(target=self._read, args=(channel, inbox, go), daemon=True, name="rdzv-read").start()
        try:
            self._welcome(channel, patience)
        except BaseException:
            channel.close()
            raise
        finally:
            go.set()  # the reader goes on, or ends at once: the channel was closed
        self.channel = channel
        self._last_heard = time.monotonic()
        self._messages = inbox

    def _join_here(self, first: bytes) -> tuple[socket.socket, auth.Session] | None:
        """Joined to the rendezvous of this process (no handshake with itself), or None."""
        if self._here is None:
            return None
        try:
            return self._here.join_here(first)
        except OSError:
            return None  # closing, or out of descriptors: over TCP, as any other agent

    def _handshake(self, first: bytes, deadline: float,
                   give_up: Callable[[], bool]) -> tuple[socket.socket, auth.Session]:
        """Connected, the secret proved both ways and ``first`` (the join) sent: ``auth.agent_handshake``."""
        closing_since: float | None = None
        while True:
            sock = self._connect_socket(deadline, give_up)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                # The join goes in the same write as the agent's proof, after the server proved the secret.
                session = auth.agent_handshake(sock, self._secret, first=first)
                return sock, session
            except auth.ClosedEarly:
                # A busy server (too many connections waiting) closes without a word; so does a squatter.
                sock.close()
                closing_since = closing_since or time.monotonic()
                if time.monotonic() - closing_since < CLOSED_EARLY_S and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                bad: Exception = auth.AuthError(f"it closed every connection for {CLOSED_EARLY_S:g}s")
            except (auth.AuthError, OSError) as error:
                sock.close()
                bad = error
            raise Refused(f"{self.where} did not prove this job's secret ({bad}): not this job's rendezvous "
                          "(another program on the port, another job, or a different secret)",
                          int(ExitStatus.USAGE))

    def _welcome(self, channel: P.Channel, patience: float) -> M.Welcome:
        """The server's answer to the join: its welcome, or Refused / TimeoutError (the channel is then closed)."""
        try:
            # The socket times out after `patience`; a deadline before that ends the wait at that first timeout.
            answer = channel.receive(deadline=time.monotonic() + patience / 2)
        except TimeoutError:
            channel.close()
            raise TimeoutError(f"the rendezvous at {self.where} did not answer the join within {patience:g}s") \
                from None
        except (OSError, M.ProtocolError, auth.AuthError) as bad:
            channel.close(f"{bad}" or type(bad).__name__)
            answer = None
        if not isinstance(answer, M.Welcome):
            channel.close()
            if isinstance(answer, M.Refused):
                raise Refused(printable(answer.reason), answer.status)
            if answer is None and channel.dropped_reason:
                raise Refused(f"{self.where} answered with something that is not this protocol "
                              f"({channel.dropped_reason})", int(ExitStatus.USAGE))
            raise Refused("the rendezvous closed the connection", int(ExitStatus.TASK_FAILED))
        return answer

    def _read(self, channel: P.Channel, inbox: queue.Queue, go: threading.Event) -> None:
        go.wait()  # the joining thread read the welcome (or gave up and closed the channel)
        if channel.closed:
            return
        channel.release()  # writes what was queued while held; the keep-alives come from this reader from now on
        try:
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
        """Queue one message; a chunk (``file``) waits up to node_timeout for room (the upload's pace)."""
        if self.channel is None:
            return False
        bulk = isinstance(message, M.File)
        return self.channel.send(M.checked(message), wait=self.node_timeout if bulk else 0.0, bulk=bulk)

    def upload(self, request: M.Send, store: FileSource) -> None:
        if self.channel is not None:
            store.upload(self, request)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.drain(1.0)
            self.channel.close()
