"""The rendezvous' messages as typed values that check their own shape when decoded.

A peer is trusted with the job only after the handshake (``auth.py``); even then one bad message must cost that
peer its connection, never the server a thread. So :func:`decode` refuses, with :class:`ProtocolError` and a short
reason, anything that is not exactly one of the messages below: wrong types, out-of-range numbers, non-finite
numbers (``Infinity``, ``NaN``), nesting deeper than :data:`MAX_DEPTH`, over-long strings and lists, unknown keys'
wrong types. Numbers that are ids or counts are ints (``true`` is not a number here).
"""
from __future__ import annotations

import json
import re
import zlib
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from tfdist.cluster.address import check_host
from tfdist.cluster.placement import layout_word, role_list
from tfdist.errors import UsageError
from tfdist.launch.elastic.messages.fields import (  # noqa: F401 - the constants and Backup re-exported
    BACKUP_FILE, BACKUP_NAME, FILE_CHUNK, MAX_CHUNK_TEXT, MAX_ITEMS, MAX_REPORT, MAX_SLOTS, MAX_TEXT, SNAPSHOT_FILE, Backup,
    ProtocolError, _files, _flag, _int, _list, _maybe, _object, _roles, _snapshot, _text,
)
from tfdist.launch.elastic.messages.frame import nesting, parse_json, split_body, with_body  # noqa: F401 - nesting
from tfdist.launch.elastic.messages.machines import RoundMachines
from tfdist.launch.outcome import Outcome

VERSION = 1
SPOKEN = (VERSION,)
MAX_DEPTH = 5
@dataclass(frozen=True)
class Message:
    TYPE: ClassVar[str] = ""
    LOCAL: ClassVar[tuple[str, ...]] = ()  # fields set by the receiving end, never sent or read from the wire
    # Fields whose value writes its own JSON once (``.json``), spliced into every message that shares it: a round's
    # machines go to each of its members, and encoding them again per member was O(N) work N times.
    SHARED: ClassVar[tuple[str, ...]] = ()
    # The field (bytes) carried raw after the JSON header, never inside it (``body.py``); "": a plain JSON message.
    BODY: ClassVar[str] = ""

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Message":
        raise NotImplementedError

    def fields(self) -> dict[str, Any]:
        names = _NAMES.get(type(self))
        if names is None:  # once per class: dataclasses.fields() per message was most of encode()'s cost
            names = _NAMES[type(self)] = tuple(item.name for item in fields(self) if item.name not in self.LOCAL)
        out = {}
        for name in names:
            value = getattr(self, name)
            out[name] = asdict(value) if isinstance(value, Backup) else value.wire \
                if isinstance(value, RoundMachines) else value
        return out


_NAMES: dict[type, tuple[str, ...]] = {}


def _message(kind: str):  # noqa: ANN202 - a class decorator
    def register(cls: type[Message]) -> type[Message]:
        cls.TYPE = kind
        KINDS[kind] = cls
        return dataclass(frozen=True)(cls)
    return register


KINDS: dict[str, type[Message]] = {}
OUTCOMES = tuple(outcome.value for outcome in Outcome)


@_message("join")
class Join(Message):
    job: str
    name: str
    address: str
    slots: int
    node_rank: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    roles: list[str] = field(default_factory=list)  # the roles this machine is pinned to (empty: any)
    layout: str = ""  # the job's --chief/--ps/--evaluator (placement.counts_text), the same on every machine

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Join":
        versions = _object({} if raw.get("versions") is None else raw["versions"], "versions", 16)
        for key, value in versions.items():
            _text(key, "versions key", 64), _text(value, f"versions.{key[:20]}", 200)
        address = _text(raw.get("address"), "address", 256)
        try:  # it goes into every task's TF_CONFIG: a host name or an IP address, nothing else
            check_host(address, "address")
        except UsageError:
            raise ProtocolError("address: not a host name or IP address") from None
        return cls(job=_text(raw.get("job"), "job", 64), name=_text(raw.get("name"), "name", 256), address=address,
                   slots=_int(raw.get("slots"), "slots", 1, MAX_SLOTS),
                   node_rank=_maybe(_int, raw.get("node_rank"), "node_rank", 0, 9999), versions=dict(versions),
                   roles=_roles(role_list, raw.get("roles", []), "roles"),
                   layout=_roles(layout_word, raw.get("layout", ""), "layout"))


@_message("ready")
class Ready(Message):
    ports: list[int]
    backup: Backup | None = None
    snapshot: dict[str, Any] | None = None  # this machine's newest complete in-memory snapshot
    # The newest round this machine was sent (-1: none; the etcd link sets it): a coordinator that takes over tells
    # the ready that led into the running round (the machine is still in it) from one sent after it.
    after_round: int = -1

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Ready":
        ports = [_int(p, "ports[]", 1, 65535) for p in _list(raw.get("ports"), "ports", MAX_SLOTS)]
        return cls(ports=ports, backup=_maybe(Backup.check, raw.get("backup")),
                   snapshot=_maybe(_snapshot, raw.get("snapshot"), "snapshot"),
                   after_round=_int(raw.get("after_round", -1), "after_round", -1))


@_message("training")
class Training(Message):
    round: int

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Training":
        return cls(round=_int(raw.get("round"), "round"))


@_message("exited")
class Exited(Message):
    round: int
    outcome: Outcome  # the wire carries its value
    step: int | None = None
    detail: str = ""

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Exited":
        outcome = raw.get("outcome")
        if not isinstance(outcome, str) or outcome not in OUTCOMES:
            raise ProtocolError(f"outcome: expected one of {', '.join(OUTCOMES)}")
        return cls(round=_int(raw.get("round"), "round"), outcome=Outcome(outcome),
                   step=_maybe(_int, raw.get("step"), "step"), detail=_text(raw.get("detail", ""), "detail"))


@_message("ping")
class Ping(Message):
    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Ping":
        return cls()


def _chunk_name(value: Any) -> str:
    name = _text(value, "name", 200)
    if not BACKUP_FILE.fullmatch(name) and not SNAPSHOT_FILE.fullmatch(name):
        raise ProtocolError(f"name: {name[:80]!r} is not a backup file or a snapshot file")
    return name


@_message("file")
class File(Message):
    """A chunk as base64 in JSON: the etcd backend's form (its records are JSON); TCP sends :class:`Chunk`."""

    name: str
    data: str
    end: bool = False
    last: bool = False

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "File":
        return cls(name=_chunk_name(raw.get("name")), data=_text(raw.get("data"), "data", MAX_CHUNK_TEXT),
                   end=_flag(raw.get("end", False), "end"), last=_flag(raw.get("last", False), "last"))


@_message("chunk")
class Chunk(Message):
    """A chunk as raw bytes after a JSON header that says their length and CRC-32 (``body.py``): what the TCP wire
    carries, forwarded by the rendezvous without reading the bytes as text. The CRC catches a header that lies
    at the first hop; the file's SHA-256 (checked by the receiver) is what proves the copy."""

    BODY = "data"
    name: str
    data: bytes
    size: int
    crc32: int
    end: bool = False
    last: bool = False

    @classmethod
    def of(cls, name: str, data: bytes, *, end: bool = False, last: bool = False) -> "Chunk":
        return cls(name=name, data=data, size=len(data), crc32=zlib.crc32(data), end=end, last=last)

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Chunk":
        data = raw.get("data")
        if not isinstance(data, bytes):
            raise ProtocolError("data: expected a chunk's bytes after its header")
        size, crc = _int(raw.get("size"), "size", 0, FILE_CHUNK), _int(raw.get("crc32"), "crc32", 0, 2**32 - 1)
        if size != len(data):
            raise ProtocolError(f"size: the header says {size} bytes, the chunk has {len(data)}")
        if crc != zlib.crc32(data):
            raise ProtocolError("crc32: the chunk's bytes do not match its header's checksum")
        return cls(name=_chunk_name(raw.get("name")), data=data, size=size, crc32=crc,
                   end=_flag(raw.get("end", False), "end"), last=_flag(raw.get("last", False), "last"))


CHUNKS = (File, Chunk)  # the messages that carry a backup's or snapshot's bytes


@_message("welcome")
class Welcome(Message):
    node_id: int

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Welcome":
        return cls(node_id=_int(raw.get("node_id"), "node_id"))


@_message("refused")
class Refused(Message):
    reason: str
    status: int = 2
    versions: list[int] | None = None

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Refused":
        versions = raw.get("versions")
        return cls(reason=_text(raw.get("reason"), "reason"), status=_int(raw.get("status", 2), "status", 0, 255),
                   versions=None if versions is None else [_int(v, "versions[]") for v in _list(versions, "v", 16)])


@_message("round")
class Round(Message):
    """A round for one member: its own seat (``node_rank``, ``first_index``, what to restore) and the round's
    machines, which are the same for every member (:class:`RoundMachines`: written once, shared by all)."""

    SHARED = ("machines",)
    round: int
    node_rank: int
    world_size: int
    first_index: int
    machines: RoundMachines
    restore: dict[str, Any] | None = None
    snapshot: dict[str, Any] | None = None  # the in-memory snapshot copied here before the tasks start

    @property
    def workers(self) -> list[str]:
        """Every worker's address, in the order of the machines' node ranks and slots."""
        return self.machines.workers

    @property
    def nodes(self) -> list[list[Any]]:
        """The round's machines: ``[rank, name, address, slots, roles]`` each (read from the checked text at the
        first use: ``machines.count`` says how many without reading them)."""
        return self.machines.nodes

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Round":
        machines = RoundMachines.check(raw.get("machines"))
        restore = raw.get("restore")
        if restore is not None:
            backup = Backup.check({**_object(restore, "restore", 8), "fs": "0"}, "restore")
            if backup.name is None:
                raise ProtocolError("restore: names no checkpoint")
            restore = {"name": backup.name, "files": backup.files, "sizes": backup.sizes,
                       "from": _text(restore.get("from", ""), "restore.from", 300)}
        return cls(round=_int(raw.get("round"), "round"), node_rank=_int(raw.get("node_rank"), "node_rank"),
                   world_size=_int(raw.get("world_size"), "world_size", 1, 2**20),
                   first_index=_int(raw.get("first_index"), "first_index"),
                   machines=machines, restore=restore,
                   snapshot=_maybe(_snapshot, raw.get("snapshot"), "snapshot"))


@_message("send")
class Send(Message):
    round: int
    name: str
    files: dict[str, str]
    what: str = "backup"  # or "snapshot": which folder the files come from

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Send":
        name, what = _text(raw.get("name"), "name", 100), raw.get("what", "backup")
        if not BACKUP_NAME.fullmatch(name) or what not in ("backup", "snapshot"):
            raise ProtocolError("name: not a checkpoint name" if what in ("backup", "snapshot") else "what: unknown")
        return cls(round=_int(raw.get("round"), "round"), name=name, what=what,
                   files=_files(raw.get("files"), "files", SNAPSHOT_FILE if what == "snapshot" else BACKUP_FILE))


@_message("stop")
class Stop(Message):
    round: int
    graceful: bool
    reason: str = ""

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Stop":
        return cls(round=_int(raw.get("round"), "round"), graceful=_flag(raw.get("graceful"), "graceful"),
                   reason=_text(raw.get("reason", ""), "reason"))


@_message("finish")
class Finish(Message):
    LOCAL = ("print_report",)
    status: int
    report: str = ""
    coordinator: str = ""  # etcd: the member that coordinated (its machine prints the report); TCP: ""
    print_report: bool = False  # this machine prints the report (the etcd link sets it on the coordinator's)

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Finish":
        return cls(status=_int(raw.get("status"), "status", 0, 255),
                   report=_text(raw.get("report", ""), "report", MAX_REPORT),
                   coordinator=_text(raw.get("coordinator", ""), "coordinator", 64))


# -- encoding --------------------------------------------------------------------------------------------------
def encode(message: Message) -> bytes:
    """One frame's payload. The fields a message shares with others (:attr:`Message.SHARED`) are the bytes their
    value encoded once, after the others: the same JSON as if encoded here."""
    body = {"v": VERSION, "type": message.TYPE, **message.fields()}
    raw = body.pop(message.BODY) if message.BODY else None
    for name in message.SHARED:
        del body[name]
    head = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    if raw is not None:
        return with_body(head, raw)
    if not message.SHARED:
        return head
    return b"".join([head[:-1], *(b',"%s":%s' % (name.encode(), getattr(message, name).json)
                                  for name in message.SHARED), b"}"])


def decode(payload: bytes) -> Message:
    """One frame's payload -> a checked message. Raises ProtocolError, :class:`VersionError` for another version.
    A frame with a body (``body.py``): only its header is read as JSON; the body goes to the message's BODY field."""
    payload, body = split_body(payload)
    # Nesting never exceeds the number of opening brackets: most messages have too few to need the scan.
    if payload.count(b"[") + payload.count(b"{") > MAX_DEPTH and nesting(payload) > MAX_DEPTH:
        raise ProtocolError(f"nested deeper than {MAX_DEPTH} levels")
    raw = parse_json(payload)
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise ProtocolError("not a message object with a type")
    if type(raw.get("v")) is not int or raw["v"] != VERSION:
        raise VersionError(raw.get("v"))
    kind = KINDS.get(raw["type"])
    if kind is None:
        raise ProtocolError(f"unknown message type {raw['type'][:40]!r}")
    if (body is None) != (not kind.BODY) or (body is not None and kind.BODY in raw):
        raise ProtocolError(f"a {kind.TYPE} message " + ("needs a body after its header" if kind.BODY else "has no body"))
    if body is not None:
        raw[kind.BODY] = body
    return kind.check(raw)


class VersionError(ProtocolError):
    """The peer speaks another protocol version; answer with :data:`SPOKEN` (after the handshake only)."""

    def __init__(self, version: Any) -> None:
        shown = version if isinstance(version, int) and not isinstance(version, bool) else "unknown"
        super().__init__(f"protocol version {shown}; this tfdist speaks {', '.join(map(str, SPOKEN))}")


def make(kind: str, **fields: Any) -> Message:
    """The message ``kind`` with ``fields``, checked as a receiver would check it (we never send a bad one)."""
    cls = KINDS.get(kind)
    if cls is None:
        raise ProtocolError(f"unknown message type {kind!r}")
    return cls.check({"v": VERSION, "type": kind, **fields})


def checked(message: Message) -> Message:
    """``message`` as its receiver will check it (raises ProtocolError): a link checks what it sends, so a bad
    message fails where it was made, never at the peer (which would drop the connection)."""
    return type(message).check(message.fields())


def from_fields(raw: dict[str, Any]) -> Message:
    """The message ``raw`` (``{"type": ..., **fields}``, as the etcd backend carries it) checked as :func:`decode`
    checks a frame's. Raises ProtocolError."""
    kind = KINDS.get(raw.get("type")) if isinstance(raw.get("type"), str) else None
    if kind is None:
        raise ProtocolError(f"unknown message type {str(raw.get('type'))[:40]!r}")
    return kind.check(raw)


def as_dict(message: Message) -> dict[str, Any]:
    """``{"type": ..., **fields}``: the form the rendezvous' backup relay handles (``backup_relay.py``)."""
    return {"type": message.TYPE, **message.fields()}
