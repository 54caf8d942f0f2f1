"""The agent's end of the rendezvous connection: connect and join, a reader thread, keep-alives, and loss detection.

Mechanism only; what the agent does with the messages is in ``agent.py``. The rendezvous counts as lost when the
connection closes or when nothing (not even a ``ping``) arrived for ``node_timeout`` seconds.
"""
from __future__ import annotations

import os
import queue
import select
import socket
import sys
import threading
import time
from typing import Any, Callable

from tfdist.launch.elastic import wire as P
from tfdist.status import ExitStatus


class Lost(Exception):
    """The rendezvous is gone (closed connection, or no keep-alive for node_timeout)."""

    graceful = False  # True: the rendezvous itself went away, not a peer: the workers save before they stop


class Refused(Exception):
    """The rendezvous (or whatever answered) will not have this agent; ``status`` is the agent's exit status."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class RendezvousLink:
    def __init__(self, host: str, ip: str, port: int, node_timeout: float, *, watch_stdin: bool = False) -> None:
        self.where = f"{host}:{port}"
        self.ip, self.port = ip, port
        self.node_timeout = node_timeout
        self.watch_stdin = watch_stdin
        self.channel: P.Channel | None = None
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._last_heard = time.monotonic()

    def connect(self, join: dict[str, Any], deadline: float, give_up: Callable[[], bool]) -> None:
        """Connect (retrying until ``deadline`` or ``give_up()``) and join.

        Raises:
            Refused: refused, or not a rendezvous, or the launcher that started us is gone.
            TimeoutError: nobody answered in time.
        """
        while True:
            try:
                sock = socket.create_connection((self.ip, self.port), timeout=2.0)
                break
            except OSError:
                if self.watch_stdin and stdin_closed():
                    raise Refused("the launcher that started this agent is gone", int(ExitStatus.PREEMPTED)) \
                        from None
                if time.monotonic() > deadline or give_up():
                    raise TimeoutError(f"no rendezvous at {self.where} in time") from None
                time.sleep(0.2)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(max(self.node_timeout, 5.0))
        channel = P.Channel(sock)
        channel.send("join", **join)
        try:
            answer = channel.receive()
        except (OSError, P.ProtocolError) as bad:
            channel.close()
            raise Refused(f"{self.where} is not a tfdist rendezvous ({bad})", int(ExitStatus.USAGE)) from None
        if answer is None or answer["type"] == "refused":
            channel.close()
            reason = "the rendezvous closed the connection" if answer is None else answer["reason"]
            raise Refused(reason, int(answer.get("status", 2)) if answer else int(ExitStatus.TASK_FAILED))
        sock.settimeout(None)
        self.channel = channel
        self._last_heard = time.monotonic()
        self._messages = queue.Queue()
        threading.Thread(target=self._read, args=(channel, self._messages), daemon=True, name="rdzv-read").start()
        threading.Thread(target=self._ping, args=(channel,), daemon=True, name="rdzv-ping").start()

    def _read(self, channel: P.Channel, inbox: queue.Queue) -> None:
        try:
            while True:
                message = channel.receive()
                inbox.put(message)
                if message is None:
                    return
        except (OSError, P.ProtocolError):
            inbox.put(None)

    def _ping(self, channel: P.Channel) -> None:
        interval = P.ping_interval(self.node_timeout)
        while channel.send("ping"):
            time.sleep(interval)

    def next_message(self, timeout: float) -> dict[str, Any] | None:
        """The next message, or None after ``timeout``. Raises Lost."""
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

    def send(self, kind: str, **fields: Any) -> None:
        if self.channel is not None:
            self.channel.send(kind, **fields)

    def upload(self, request: dict[str, Any], store: Any) -> None:
        if self.channel is not None:
            store.upload(self.channel, request)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()


def stdin_closed() -> bool:
    """True once stdin is at its end (the ssh session of the host-file launcher closed it)."""
    try:
        readable, _, _ = select.select([sys.stdin], [], [], 0)
    except (ValueError, OSError):
        return True
    if not readable:
        return False
    try:
        return os.read(sys.stdin.fileno(), 1024) == b""
    except OSError:
        return True
