"""Typed rendezvous messages: every malformed shape is a ProtocolError with a reason, never another exception."""
from __future__ import annotations

import json

import pytest

from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.outcome import Outcome

SHA = "ab" * 32


def _raw(kind, **fields):
    return json.dumps({"v": 1, "type": kind, **fields}).encode()


def test_messages_round_trip():
    sent = [M.Join(job="j", name="n", address="10.0.0.1", slots=2, node_rank=0, versions={"tfdist": "1"}),
            M.Ready(ports=[1234], backup=M.Backup("ab12", "ckpt-3", {"checkpoint": SHA, "ckpt-3.index": SHA},
                                                 {"checkpoint": 10, "ckpt-3.index": 20})),
            M.Ready(ports=[1, 2], backup=None), M.Exited(round=0, outcome=Outcome.FAILED, step=None, detail="x"),
            M.File(name="ckpt-3.data-00000-of-00001", data="AAAA", end=True, last=True), M.Ping(),
            M.Stop(round=1, graceful=True, reason="r"), M.Finish(status=0, report="ok"), M.Welcome(node_id=4),
            M.Refused(reason="no", status=2, versions=[1]), M.Send(round=1, name="ckpt-3", files={"checkpoint": SHA})]
    for message in sent:
        assert M.decode(M.encode(message)) == message


@pytest.mark.parametrize("payload, words", [
    (b'{"v":1,"type":"exited","round":Infinity,"outcome":"failed"}', "Infinity"),
    (b'{"v":1,"type":"exited","round":1,"outcome":"failed","step":NaN}', "NaN"),
    (b'{"v":1,"type":"ping","x":' + b"[" * 100000 + b"]" * 100000 + b"}", "nested"),
    (b'{"v":1,"type":"ping","x":' + b"{\"a\":" * 50 + b"1" + b"}" * 51, "nested"),
    (_raw("join", job="j", name="n", address="a", slots=1, versions=[]), "versions"),
    (_raw("join", job="j", name="n", address="a", slots=True), "slots"),
    (_raw("join", job="j", name="n", address="a", slots=5000), "slots"),
    (_raw("join", job=["j"], name="n", address="a", slots=1), "job"),
    (_raw("ready", ports=[1], backup={"fs": "ab", "name": 99, "files": {}}), "name"),
    (_raw("ready", ports=[1], backup="ckpt-99"), "backup"),
    (_raw("ready", ports=[1], backup={"fs": "ab", "name": "ckpt-1", "files": {"../../etc/x": SHA},
                                      "sizes": {"../../etc/x": 1}}), "not a backup file"),
    (_raw("ready", ports=[1], backup={"fs": "ab", "name": "ckpt-1", "files": {"checkpoint": SHA}}), "sizes"),
    (_raw("ready", ports=["80"]), "ports"),
    (_raw("ready", ports=[1.5]), "ports"),
    (_raw("exited", round=0, outcome="exploded"), "outcome"),
    (_raw("file", name="/etc/passwd", data=""), "not a backup file"),
    (_raw("file", name="..", data=""), "not a backup file"),
    (_raw("file", name="ckpt-1.index", data="", last="yes"), "last"),
    (_raw("round", round=0, node_rank=0, world_size=1, first_index=0,
          machines={"nodes": "0 1 - 10.0.0.1 a", "workers": "10.0.0.1:1"},
          restore={"name": "ckpt-1", "files": {"x/y": SHA}, "sizes": {"x/y": 1}}), "not a backup file"),
    (_raw("shutdown"), "unknown message type"),
    (b"[1,2]", "not a message"),
    (b"\xff\xfe", "not a JSON"),
    (b'{"v":1,"type":"ping"', "not a JSON"),
    (b'{"v":1,"type":"training","round":' + b"9" * 5000 + b"}", "not a JSON"),
])
def test_malformed_messages_are_refused_with_a_reason(payload, words):
    with pytest.raises(M.ProtocolError, match=words):
        M.decode(payload)


@pytest.mark.parametrize("version", [2, 0, "1", None, True])
def test_another_version_is_named_with_the_versions_spoken(version):
    with pytest.raises(M.VersionError, match="this tfdist speaks 1"):
        M.decode(json.dumps({"v": version, "type": "join"}).encode())


def test_strings_do_not_count_as_nesting():
    assert M.nesting(b'{"a":"[[[[[[[[[[[[[[[[[[[\\"[[[[["}') == 1


@pytest.mark.parametrize("payload, depth", [
    (b'{"a":"\\\\"}', 1),  # an escaped backslash ends the string right after it
    (b'{"a":"\\\\\\"[["}', 1),  # backslash, then an escaped quote: still inside
    (b'{"a":["x",{"b":"]]]"}]}', 3),
    (b'{"a":"' + b"A" * 300_000 + b'","b":[[1]]}', 3),  # a chunk-sized string
    (b'[[["\\u005b"]]]', 3),
])
def test_nesting_skips_strings_with_their_escapes(payload, depth):
    assert M.nesting(payload) == depth
