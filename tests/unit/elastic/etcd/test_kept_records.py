"""What a coordinator does about writes at its kept keys (kept_records.py): which are its own, which it answers with
its own record, when its claim is over; and which version a take-over uses. Pure: no etcd."""
from __future__ import annotations

import pytest

from tfdist.launch.elastic.etcd.kept_records import ClaimGone, KeptRecords, newest_opened
from tfdist.launch.elastic.etcd.keys import JobKeys, lease_name
from tfdist.launch.elastic.etcd.records import RunIdentity, Sealer
from tfdist.launch.elastic.etcd.store import Entry

RECORDS = Sealer(bytes(range(32)), str(RunIdentity(cluster=7, revision=3)))
KEYS = JobKeys("/tfdist", "j")
CLAIM, LEASE = 40, 0x1B
ME = lease_name(LEASE)


def _kept() -> KeptRecords:
    kept = KeptRecords(KEYS, RECORDS, CLAIM, ME, LEASE)
    kept.wrote([(KEYS.state, b"state-1", None), (KEYS.round, b"round-0", None)], revision=50)
    return kept


def _at(key: str, value: bytes, mod: int, *, lease: int = 0, create: int = CLAIM, deleted: bool = False) -> Entry:
    return Entry(key, value, create, mod, lease, deleted)


MY_CLAIM = RECORDS.seal(KEYS.coordinator, {"lease": ME})


@pytest.mark.parametrize("entry, answer", [
    (_at(KEYS.state, b"state-1", 50), None),  # its own write, reported by its watch
    (_at(KEYS.state, b"older", 49), None),  # an earlier write of its own, reported late
    (_at(KEYS.state, b"junk", 51), (KEYS.state, b"state-1", None)),  # junk: put back
    (_at(KEYS.state, b"", 52, deleted=True), (KEYS.state, b"state-1", None)),  # deleted by someone else
    (_at(KEYS.round, b"round-0-put-back", 51), (KEYS.round, b"round-0", None)),
    (_at(KEYS.coordinator, MY_CLAIM, 60, lease=LEASE), None),  # its claim, as it wrote it
], ids=["own", "own-late", "junk", "deleted", "round", "claim"])
def test_which_writes_the_coordinator_answers(entry, answer):
    assert _kept().answer(entry) == answer


@pytest.mark.parametrize("entry", [
    _at(KEYS.coordinator, b"junk", 61),  # junk over the claim: on no lease now
    _at(KEYS.coordinator, MY_CLAIM, 61),  # its own claim, put back on no lease (it would outlive its machine)
    _at(KEYS.coordinator, RECORDS.seal(KEYS.coordinator, {"lease": lease_name(9)}), 61, lease=LEASE),
], ids=["junk", "no-lease", "other-name"])
def test_anything_else_at_the_claim_is_answered_with_the_claim_on_its_lease(entry):
    key, value, lease = _kept().answer(entry)
    assert (key, lease) == (KEYS.coordinator, LEASE)
    assert RECORDS.open(key, value)[1] == {"lease": ME}


@pytest.mark.parametrize("entry", [
    _at(KEYS.coordinator, b"", 62, deleted=True),
    _at(KEYS.coordinator, MY_CLAIM, 70, lease=9, create=70),  # deleted and claimed again by another machine
], ids=["deleted", "claimed-again"])
def test_a_claim_deleted_or_made_again_is_over(entry):
    with pytest.raises(ClaimGone):
        _kept().answer(entry)


def test_nothing_written_yet_is_nothing_to_put_back():
    fresh = KeptRecords(KEYS, RECORDS, CLAIM, ME, LEASE)
    assert fresh.answer(_at(KEYS.state, b"junk", 51)) is None


def test_the_job_s_end_deleting_the_state_is_not_answered():
    kept = _kept()
    kept.wrote([], revision=80, deletes=(KEYS.state, KEYS.round))
    assert kept.answer(_at(KEYS.state, b"", 80, deleted=True)) is None
    assert kept.answer(_at(KEYS.state, b"junk", 81)) is None  # nothing of its own left to restore


@pytest.mark.parametrize("found, chosen", [
    ([(9, ((4, 2), {"n": "newest"})), (8, ((4, 1), {"n": "older"}))], (9, {"n": "newest"})),
    ([(9, None), (8, ((4, 3), {"n": "honest"}))], (8, {"n": "honest"})),  # junk on top
    ([(10, ((4, 1), {"n": "put back"})), (9, ((5, 2), {"n": "honest"})), (8, ((5, 1), {}))], (9, {"n": "honest"})),
    ([(10, ((5, 2), {"n": "put back"})), (9, ((5, 2), {"n": "honest"}))], (10, {"n": "put back"})),  # equal: same
    ([(9, None), (8, None)], None),
    ([], None),
], ids=["newest", "junk-on-top", "replay-on-top", "equal", "none-open", "empty"])
def test_a_take_over_uses_the_highest_position(found, chosen):
    assert newest_opened(found) == chosen
