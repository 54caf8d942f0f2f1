"""The rendezvous wire protocol: line-delimited JSON over one TCP connection per agent, version 1.

Why this and not etcd or HTTP: the rendezvous must run wherever a user types ``tfdist launch``, with nothing else
installed, and it must notice a machine that silently drops off the network. One long-lived TCP connection per
agent carries requests, pushes (a new round, "stop now") and keep-alives both ways with the standard library alone;
HTTP would need polling for the pushes, and etcd is a service to install and run.

Every message is one UTF-8 JSON object on one line, at most :data:`MAX_LINE` bytes, with ``"v"`` (the protocol
version) and ``"type"``. A peer that sees another major version closes the connection with a ``refused`` naming
both versions.

Agent -> rendezvous:
    ``join``     {job, name, node_rank|null, address, slots, versions{python,tfdist,tensorflow}, probe_port}
    ``ready``    {ports[slots], backup{step, files{name: sha256}}|null}    ready for the next round
    ``exited``   {round, outcome: succeeded|failed|preempted|stopped, step|null, detail}
    ``ping``     {}                                                      keep-alive
    ``file``     {name, data(base64), last}                              backup upload, when asked
Rendezvous -> agent:
    ``welcome``  {node_id}
    ``refused``  {reason, status}                                        then the connection is closed
    ``round``    {round, node_rank, world_size, cluster{worker[...]}, first_index, nodes[{rank,name,address}],
                  restore{step, files{name: sha256}, from}|null, shared_fs}
    ``send``     {round}                                                 upload your latest backup
    ``file``     {name, data(base64), last}                              backup download
    ``stop``     {round, graceful, reason}                               graceful: SIGTERM, save, exit 143
    ``finish``   {status, report}                                        the job is over: stop, exit ``status``
    ``ping``     {}

Keep-alives: each side sends ``ping`` every :func:`ping_interval` and counts the peer as lost after
``node_timeout`` seconds without any message (a cut link closes nothing, so a closed connection is not enough).
"""
from __future__ import annotations

import json
import socket
import threading
from typing import Any

VERSION = 1
MAX_LINE = 8 * 1024 * 1024
FILE_CHUNK = 1024 * 1024


class ProtocolError(Exception):
    """The peer sent something that is not a message of this protocol."""


def ping_interval(node_timeout: float) -> float:
    """Four keep-alives per timeout, so one delayed packet never counts as a lost machine."""
    return max(0.05, node_timeout / 4)


def encode(kind: str, **fields: Any) -> bytes:
    return (json.dumps({"v": VERSION, "type": kind, **fields}, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict[str, Any]:
    """One line -> message. Raises ProtocolError for anything else (wrong version included)."""
    try:
        message = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as bad:
        raise ProtocolError(f"not a JSON line: {bad}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("not a message object with a type")
    if message.get("v") != VERSION:
        raise ProtocolError(f"protocol version {message.get('v')!r}, this tfdist speaks {VERSION}")
    return message


class Channel:
    """One connection: thread-safe sends, line reads with a size cap."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._reader = sock.makefile("rb")
        self._lock = threading.Lock()
        self.closed = False

    def send(self, kind: str, **fields: Any) -> bool:
        """Send one message; False when the connection is gone."""
        data = encode(kind, **fields)
        with self._lock:
            if self.closed:
                return False
            try:
                self.sock.sendall(data)
                return True
            except OSError:
                self.closed = True
                return False

    def receive(self) -> dict[str, Any] | None:
        """The next message, or None at end of stream. Raises ProtocolError, OSError."""
        line = self._reader.readline(MAX_LINE + 1)
        if not line:
            return None
        if len(line) > MAX_LINE:
            raise ProtocolError("message longer than the protocol allows")
        return decode(line)

    def close(self) -> None:
        with self._lock:
            self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
