"""The sealing rules of the etcd records (records.py) and what the agent makes of the coordinator key (run.py):
which records open, which positions are acted on, when a finish ends anything. Pure: no etcd."""
from __future__ import annotations

import base64
import json

import pytest

from tfdist.launch.elastic.etcd.keys import lease_name
from tfdist.launch.elastic.etcd.records import (CLOCK_SKEW_S, FINISH_FRESH_S, RunIdentity, Sealer, finish_applies,
                                                is_newer)
from tfdist.launch.elastic.etcd.run import PUT_BACK, OnceSaid, claim_verdict
from tfdist.launch.elastic.etcd.store import Entry

SECRET = bytes(range(32))
RUN = str(RunIdentity(cluster=0xABC, revision=41))
KEY = "/tfdist/j/to/00000000000000b1"
BODY = {"type": "round", "round": 3, "workers": ["10.0.0.7:20000"], "name": "trainer-7"}


def _flip(raw: bytes) -> bytes:
    record = json.loads(raw)
    blob = bytearray(base64.b64decode(record["s"]))
    blob[len(blob) // 2] ^= 1
    return json.dumps({**record, "s": base64.b64encode(bytes(blob)).decode()}).encode()


def _truncate(raw: bytes) -> bytes:
    record = json.loads(raw)
    return json.dumps({**record, "s": record["s"][:20]}).encode()


def _reposition(raw: bytes) -> bytes:
    return json.dumps({**json.loads(raw), "p": [9, 99]}).encode()


SEALED = Sealer(SECRET, RUN).seal(KEY, BODY, (7, 2))


@pytest.mark.parametrize("why, opener, key, raw, opens", [
    ("the record as written", Sealer(SECRET, RUN), KEY, SEALED, True),
    ("another job secret", Sealer(b"another secret of 32 bytes......", RUN), KEY, SEALED, False),
    ("another run of the job", Sealer(SECRET, str(RunIdentity(0xABC, 42))), KEY, SEALED, False),
    ("another etcd cluster", Sealer(SECRET, str(RunIdentity(0xABD, 41))), KEY, SEALED, False),
    ("copied to another key", Sealer(SECRET, RUN), "/tfdist/j/to/00000000000000b2", SEALED, False),
    ("its position changed in the clear", Sealer(SECRET, RUN), KEY, _reposition(SEALED), False),
    ("one bit flipped", Sealer(SECRET, RUN), KEY, _flip(SEALED), False),
    ("truncated", Sealer(SECRET, RUN), KEY, _truncate(SEALED), False),
    ("cut in half", Sealer(SECRET, RUN), KEY, SEALED[: len(SEALED) // 2], False),
    ("junk", Sealer(SECRET, RUN), KEY, b"\x00\xffjunk", False),
    ("the job-wide sealer for a run's record", Sealer(SECRET, ""), KEY, SEALED, False),
    ("plain record where a sealed one is due", Sealer(SECRET, RUN), KEY, Sealer(None, RUN).seal(KEY, BODY), False),
    ("the old HMAC-signed form", Sealer(SECRET, RUN), KEY, b'{"body": "{}", "mac": "00"}', False),
    ("position not integers", Sealer(SECRET, RUN), KEY, b'{"p": ["1"], "s": "AAAA"}', False),
])
def test_which_records_open(why, opener, key, raw, opens):
    opened = opener.open(key, raw)
    assert (opened == ((7, 2), BODY)) is opens, why
    if not opens:
        assert opened is None, why


def test_a_sealed_record_tells_an_etcd_reader_nothing_of_its_body():
    raw = Sealer(SECRET, RUN).seal(KEY, BODY, (7, 2))
    for word in ("round", "trainer-7", "10.0.0.7", "workers"):
        assert word.encode() not in raw
    assert set(json.loads(raw)) == {"p", "s"}


def test_every_record_has_its_own_nonce():
    sealer = Sealer(SECRET, RUN)
    nonces = {base64.b64decode(json.loads(sealer.seal(KEY, BODY))["s"])[:12] for _ in range(50)}
    assert len(nonces) == 50


@pytest.mark.parametrize("why, opener, key, opens", [
    ("same run and key", Sealer(None, RUN), KEY, True),
    ("another run", Sealer(None, "other"), KEY, False),
    ("another key", Sealer(None, RUN), KEY + "x", False),
])
def test_without_a_secret_records_still_keep_runs_and_keys_apart(why, opener, key, opens):
    assert (opener.open(key, Sealer(None, RUN).seal(KEY, BODY, (1,))) is not None) is opens, why


@pytest.mark.parametrize("position, last, newer", [
    ((1,), None, True),
    ((2,), (1,), True),
    ((1,), (1,), False),  # the same message written back
    ((1,), (2,), False),  # an older one written back
    ((7, 1), (5, 900), True),  # a later coordinator (its claim is a later etcd revision) counts from 1 again
    ((5, 899), (5, 900), False),
    ((5, 901), (5, 900), True),
])
def test_only_positions_past_the_last_one_are_acted_on(position, last, newer):
    assert is_newer(position, last) is newer


NOW = 1_000_000.0


@pytest.mark.parametrize("why, run_present, at, applies", [
    ("just finished, no run since", False, NOW - 1, True),
    ("at the edge of its lease and the skew", False, NOW - FINISH_FRESH_S - CLOCK_SKEW_S, True),
    ("an old finish written back", False, NOW - FINISH_FRESH_S - CLOCK_SKEW_S - 1, False),
    ("a day old", False, NOW - 86400, False),
    ("the writer's clock a little ahead", False, NOW + CLOCK_SKEW_S, True),
    ("from the far future", False, NOW + CLOCK_SKEW_S + 1, False),
    ("a fresh finish while a later run is on", True, NOW - 1, False),
])
def test_when_a_finish_says_the_job_is_over(why, run_present, at, applies):
    assert finish_applies(run_present, at, NOW) is applies, why


ME, OTHER = 0xB1, 0xB2
CLAIM = "/tfdist/j/coordinator"


def _claim(lease: int, names: int | None = None, opens: bool = True) -> tuple[object, Entry]:
    entry = Entry(CLAIM, b"", create_revision=9, mod_revision=9, lease=lease)
    named = lease if names is None else names
    return ((((), {"lease": lease_name(named)}) if opens else None), entry)


@pytest.mark.parametrize("why, claim, coordinating, verdict", [
    ("another machine's live claim", _claim(OTHER), False, "valid"),
    ("my own claim while I coordinate", _claim(ME), True, "valid"),
    ("my own claim put back while I do not", _claim(ME), False, "clear"),
    ("junk with no lease (blocked every later run)", _claim(0, OTHER, opens=False), False, "clear"),
    ("a claim record with no lease", _claim(0, OTHER), False, "clear"),
    ("a claim naming another lease than its own", _claim(OTHER, names=ME), False, "wait"),
    ("junk on my lease", _claim(ME, opens=False), False, "clear"),
    ("junk on another machine's lease: it clears it", _claim(OTHER, opens=False), False, "wait"),
])
def test_what_a_machine_does_about_the_coordinator_key(why, claim, coordinating, verdict):
    opened, entry = claim
    assert claim_verdict(opened, entry, ME, coordinating) == verdict, why  # type: ignore[arg-type]


def test_an_unreadable_key_is_said_once():
    said: list[str] = []
    junk = OnceSaid(said.append)
    for _ in range(3):
        junk("/tfdist/j/coordinator")
    junk("/tfdist/j/run")
    junk("/tfdist/j/to/b1", PUT_BACK)
    junk("/tfdist/j/to/b1", PUT_BACK)
    assert len(said) == 3 and "/tfdist/j/coordinator" in said[0] and "put back" in said[2]
    assert junk.unopened == ["/tfdist/j/coordinator", "/tfdist/j/run"]
