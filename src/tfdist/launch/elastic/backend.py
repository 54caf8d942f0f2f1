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

from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from tfdist.launch.elastic.messages.protocol import Message, Send

BACKENDS = ("tfdist", "etcd")


class Sender(Protocol):
    """Where an upload's chunks go: ``send(kind, **fields)``; False: stop sending."""

    def send(self, kind: str, **fields: Any) -> bool | None: ...


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

    def send(self, kind: str, **fields: Any) -> None:
        """Queue one message (never blocks on the network for long)."""

    def upload(self, request: Send, store: FileSource) -> None:
        """Stream the files a ``send`` request names from ``store``."""

    def close(self) -> None:
        """Leave: the rendezvous counts this machine as gone at once."""
