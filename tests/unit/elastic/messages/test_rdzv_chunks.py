"""Issue 34: a backup's or snapshot's chunk crosses the TCP wire as raw bytes after a small typed JSON header
(``messages/frame.py``, ``protocol.Chunk``), and the rendezvous forwards it without reading the bytes as text; the
etcd backend's base64 ``file`` form is left as it was."""
from __future__ import annotations

import base64
import json
import os
import zlib
from types import SimpleNamespace

import pytest

from tests.unit.elastic.tcp.rdzv_peer import Peer, live_server, wait_until
from tfdist.launch.elastic.agent import backup_copy
from tfdist.launch.elastic.agent.backup_copy import BackupStore, receive_files
from tfdist.launch.elastic.messages import frame
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.messages.fields import FILE_CHUNK
from tfdist.launch.elastic.rendezvous.backup_relay import BackupRelay
from tfdist.launch.elastic.tcp import auth

DATA = os.urandom(FILE_CHUNK)
NAME = "ckpt-9.data-00000-of-00001"


def _header(**fields) -> bytes:
    return json.dumps({"v": M.VERSION, "type": "chunk", "name": NAME, "size": len(DATA), "crc32": zlib.crc32(DATA),
                       **fields}).encode()


def test_a_chunk_round_trips_as_its_raw_bytes_after_a_small_header():
    payload = M.encode(M.Chunk.of(NAME, DATA, end=True, last=True))
    assert payload.endswith(DATA) and len(payload) < len(DATA) + 200  # base64 in JSON was 4/3 of it and more
    assert len(payload) <= auth.MAX_FRAME
    assert M.decode(payload) == M.Chunk(name=NAME, data=DATA, size=len(DATA), crc32=zlib.crc32(DATA), end=True,
                                        last=True)
    assert M.decode(M.encode(M.Chunk.of("checkpoint", b""))).data == b""


@pytest.mark.parametrize("payload, reason", [
    (frame.with_body(_header(size=len(DATA) - 1), DATA), "size: the header says"),
    (frame.with_body(_header(), DATA[:-1]), "size: the header says"),
    (frame.with_body(_header(crc32=zlib.crc32(DATA) ^ 1), DATA), "crc32: the chunk's bytes do not match"),
    (frame.with_body(_header(), DATA[:-1] + bytes([DATA[-1] ^ 1])), "crc32"),
    (frame.with_body(_header(size=FILE_CHUNK + 1), DATA + b"x"), "size: expected a whole number"),
    (frame.with_body(_header(size=True), b"\x01"), "size: expected a whole number"),
    (frame.with_body(_header(name="../x"), DATA), "not a backup file"),
    (frame.with_body(_header(data="AAAA"), DATA), "needs a body"),  # the body field inside the header too
    (_header(), "needs a body after its header"),  # a chunk's header as a plain JSON message
    (frame.with_body(json.dumps({"v": M.VERSION, "type": "ping"}).encode(), b"x"), "a ping message has no body"),
    (frame.MARK + (5000).to_bytes(2, "big") + b"{}", "longer than its frame"),
    (frame.MARK + b"\x00", "longer than its frame"),
    (frame.with_body(b"[" * 4000, b""), "nested deeper"),
])
def test_a_header_that_lies_about_its_body_is_refused(payload, reason):
    with pytest.raises(M.ProtocolError, match=reason):
        M.decode(payload)


def test_the_etcd_form_stays_base64_in_json_and_a_raw_chunk_is_not_an_etcd_record():
    """etcd records are JSON (``from_fields``): ``file`` keeps its base64 ``data``; a ``chunk`` without its bytes
    is refused there as at the wire."""
    text = base64.b64encode(b"index").decode()
    assert M.from_fields({"type": "file", "name": "checkpoint", "data": text}) == M.File(name="checkpoint", data=text)
    with pytest.raises(M.ProtocolError, match="a chunk's bytes"):
        M.from_fields({"type": "chunk", "name": "checkpoint", "data": text, "size": 5, "crc32": 0})


class _Channel:
    def __init__(self, raw: bool | None) -> None:
        if raw is not None:
            self.RAW_CHUNKS = raw
        self.sent: list[M.Message] = []

    def send(self, message: M.Message) -> bool:
        self.sent.append(M.decode(M.encode(message)))  # as the wire carries it
        return True


@pytest.mark.parametrize("raw, kind", [(True, M.Chunk), (None, M.File)])
def test_an_upload_sends_raw_chunks_to_the_tcp_link_and_base64_to_any_other(tmp_path, raw, kind):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / NAME).write_bytes(DATA + DATA[:1000])
    (folder / "checkpoint").write_bytes(b'model_checkpoint_path: "ckpt-9"\n')
    channel = _Channel(raw)
    backup_copy.stream_files(str(folder), ["checkpoint", NAME], channel)
    assert {type(m) for m in channel.sent} == {kind} and [m.last for m in channel.sent] == [False, False, True]
    incoming = tmp_path / "in"
    incoming.mkdir()
    sizes = {n: (folder / n).stat().st_size for n in ("checkpoint", NAME)}
    queue = iter(channel.sent)
    assert receive_files(str(incoming), dict.fromkeys(sizes, "x"), sizes, lambda: next(queue)) is None
    assert (incoming / NAME).read_bytes() == DATA + DATA[:1000]


def test_the_tcp_link_asks_for_raw_chunks_and_the_etcd_link_keeps_base64():
    from tfdist.launch.elastic.etcd.link import _Rechunker
    from tfdist.launch.elastic.tcp.client import RendezvousLink

    assert RendezvousLink.RAW_CHUNKS is True
    assert getattr(_Rechunker, "RAW_CHUNKS", False) is False  # its records are JSON: base64 file messages


class _Counted:
    """``json`` and ``base64`` as the forward's path calls them: how many bytes each call handled."""

    def __init__(self, monkeypatch) -> None:
        self.sizes: list[tuple[str, int]] = []
        for module, name in ((frame.json, "loads"), (M.json, "dumps"), (base64, "b64decode"), (base64, "b64encode")):
            original = getattr(module, name)
            monkeypatch.setattr(module, name, self._wrap(name, original))

    def _wrap(self, name, original):
        def counted(value, *args, **kwargs):
            result = original(value, *args, **kwargs)
            self.sizes.append((name, len(value) if isinstance(value, (bytes, str)) else len(result)))
            return result
        return counted


def _relay_forward(chunk: M.Message, monkeypatch) -> tuple[list[tuple[str, int]], M.Message]:
    """A chunk as the rendezvous handles it (``server._on_message`` -> relay -> ``server._send``): decoded from the
    source's frame, forwarded, encoded for the receiver; what json and base64 were asked to do on the way."""
    payload = M.encode(chunk)
    forwarded: list[bytes] = []
    relay = BackupRelay(lambda target, kind, wait=0.0, **fields: forwarded.append(M.encode(M.make(kind, **fields))))
    node = SimpleNamespace(node_id=1, label="m1", here=True,
                           backup={"fs": "A", "name": "ckpt-9", "files": {NAME: "ab" * 32}, "sizes": {NAME: 1}})
    relay.plan({1: node, 2: SimpleNamespace(node_id=2, label="m2", backup=None)},
               SimpleNamespace(assignments=[SimpleNamespace(node_id=1, node_rank=0),
                                            SimpleNamespace(node_id=2, node_rank=1)]))
    counted = _Counted(monkeypatch)
    relay.on_upload(1, M.as_dict(M.decode(payload)))
    monkeypatch.undo()
    assert len(forwarded) == 1
    return counted.sizes, M.decode(forwarded[0])


def test_the_rendezvous_forwards_a_chunk_without_reading_its_bytes_as_text(monkeypatch):
    calls, received = _relay_forward(M.Chunk.of(NAME, DATA), monkeypatch)
    assert received.data == DATA
    assert [name for name, _ in calls] == ["loads", "dumps"]  # the header, read once and written once
    assert all(size < 300 for _, size in calls), calls  # and never the body: no base64, no JSON of 256 KiB


def test_the_base64_form_is_read_and_written_whole_by_the_relay(monkeypatch):
    """The check above can fail: the ``file`` form (etcd's) goes through JSON whole at the rendezvous."""
    calls, received = _relay_forward(M.File(name=NAME, data=base64.b64encode(DATA).decode()), monkeypatch)
    assert base64.b64decode(received.data) == DATA
    assert max(size for _, size in calls) > len(DATA)


@pytest.mark.parametrize("lie", ["size", "crc32"])
def test_a_member_whose_chunk_header_lies_is_dropped_and_the_job_goes_on(lie):
    said: list[str] = []
    with live_server(said=said, min_nodes=1, max_nodes=2) as server:
        bad = Peer(server)
        assert isinstance(bad.join("bad-one"), M.Welcome)
        bad.send_raw(frame.with_body(_header(**{lie: 7}), DATA))
        wait_until(lambda: any(line.startswith("lost node 1") for line in said), what="the member dropped")
        assert any(lie in line for line in said), said
        good = Peer(server)
        assert isinstance(good.join("good-one"), M.Welcome)
        good.send(M.Ready(ports=[2]))
        assert isinstance(good.receive((M.Round,)), M.Round)


def test_a_backup_crosses_a_live_rendezvous_as_raw_chunks(tmp_path):
    """Two members and a real server over loopback: the chief's chunks arrive as the bytes it sent."""
    data = os.urandom(3 * FILE_CHUNK + 17)
    files = {"checkpoint": b'model_checkpoint_path: "ckpt-9"\n', "ckpt-9.index": b"index", NAME: data}
    source = tmp_path / "a" / "backup" / "chief"
    source.mkdir(parents=True)
    for name, content in files.items():
        (source / name).write_bytes(content)
    manifest = BackupStore(str(tmp_path / "a"), "job").manifest()
    backup = M.Backup("aa", manifest["name"], manifest["files"], manifest["sizes"])
    with live_server(min_nodes=2, max_nodes=2, node_timeout=10.0) as server:
        chief, other = Peer(server), Peer(server)
        assert isinstance(chief.join("m0", rank=0), M.Welcome) and isinstance(other.join("m1", rank=1), M.Welcome)
        chief.send(M.Ready(ports=[1], backup=backup))
        other.send(M.Ready(ports=[2], backup=M.Backup("bb")))
        request = chief.receive((M.Send,))
        channel = SimpleNamespace(RAW_CHUNKS=True, send=lambda message: chief.send(message, wait=10) or True)
        BackupStore(str(tmp_path / "a"), "job").upload(channel, request)
        got: dict[str, bytes] = {}
        while True:
            message = other.receive((M.Chunk, M.File), timeout=30)
            assert isinstance(message, M.Chunk), message
            got[message.name] = got.get(message.name, b"") + message.data
            if message.last:
                break
    assert got == files
