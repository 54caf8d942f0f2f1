"""What the agent needs from a rendezvous backend: one interface, two backends.

- ``tfdist`` (default): the built-in server, hosted by the machine that owns ``--rdzv-endpoint`` (or the host-file
  driver); :class:`tfdist.launch.elastic.tcp.client.RendezvousLink` talks to it over one TCP connection.
- ``etcd``: an etcd v3 cluster (``--rdzv-endpoint host:port[,host:port...]``); :class:`EtcdLink` carries the same
  messages through etcd keys, leases and watches, and the agents elect the machine that runs the policy.

Both deliver the same typed messages (``round``, ``stop``, ``finish``, ``send``, ``file``, ``dump``: the dataclasses
of ``messages.py`` and ``flight_messages.py``, checked on the way in) and take the same ones (``ready``,
``training``, ``exited``, ``evidence``), so the agent does not know which one it has.
"""
from __future__ import annotations

import os
import select
import sys
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from tfdist.launch.elastic.messages.protocol import Message, Send
    from tfdist.launch.elastic.rendezvous.hang_collection import JobRecorder
    from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings

BACKENDS = ("tfdist", "etcd")


class Sender(Protocol):
    """Where an upload's chunks go: ``send(message)`` (a ``file`` message; a ``chunk`` where the channel has
    ``RAW_CHUNKS = True``, ``backup_copy.stream_files``); False: stop sending."""

    def send(self, message: Message) -> bool | None: ...


class FileSource(Protocol):
    """A folder that streams the files a ``send`` request names (``BackupStore``, ``SnapshotCopy``)."""

    def upload(self, channel: Sender, request: Send) -> None: ...


class RendezvousBackend(Protocol):
    where: str  # for messages: the endpoint(s)

    def connect(self, join: dict[str, Any], deadline: float, give_up: Callable[[], bool]) -> None:
        """Reach the rendezvous and join (retrying until ``deadline`` or ``give_up()``).
        Raises Refused (exit with its status) or TimeoutError."""

    def next_message(self, timeout: float) -> Message | None:
        """The next message, or None after ``timeout``. Raises Lost when the rendezvous is gone; a Lost whose
        ``graceful`` is true lets the workers save first (the peers are not the ones that went away)."""

    def send(self, message: Message) -> None:
        """Queue one typed message, checked as its receiver will check it (never blocks on the network for long)."""

    def upload(self, request: Send, store: FileSource) -> None:
        """Stream the files a ``send`` request names from ``store``."""

    def close(self) -> None:
        """Leave: the rendezvous counts this machine as gone at once."""


class ServedRendezvous(Protocol):
    """The rendezvous an agent serves for the job (the built-in server), as the agent uses it."""
    endpoint: str

    def interrupt(self, signum: int) -> None: ...

    def wait(self, timeout: float | None = None) -> Any: ...

    def close(self) -> None: ...


class LinkConf(Protocol):
    """The settings of a backend other than the built-in one (the etcd backend's ``EtcdConf``)."""
    where: str  # for messages: the endpoint(s)


class Backends(Protocol):
    """How an agent gets its rendezvous, composed from above (``elastic/backends.py``): the agent package never
    imports a backend, so a third one needs no change to it."""

    def link(self, settings: RendezvousSettings, host: str, ip: str, port: int, *, conf: LinkConf | None,
             secret: bytes, watch_stdin: bool, say: Callable[[str], None],
             here: ServedRendezvous | None) -> RendezvousBackend:
        """This machine's link to the job's rendezvous at ``host`` (``ip``), ``port``, or through ``conf``'s
        backend; ``here``: the rendezvous this machine serves (joined without a handshake with itself)."""

    def serve(self, settings: RendezvousSettings, ip: str, port: int, *, secret: bytes, say: Callable[[str], None],
              recorder: JobRecorder | None) -> ServedRendezvous | None:
        """Serve the rendezvous on ``ip:port`` (None: this backend has no server). Raises OSError: taken."""


class Lost(Exception):
    """The rendezvous is gone (closed connection, or no keep-alive for node_timeout)."""

    graceful = False  # True: the rendezvous itself went away, not a peer: the workers save before they stop


class Refused(Exception):
    """The rendezvous (or whatever answered) will not have this agent; ``status`` is the agent's exit status."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


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
