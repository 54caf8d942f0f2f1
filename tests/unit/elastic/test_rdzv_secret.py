"""The job secret file: made 0600, refused when others can read it or it is too short, never overwritten."""
from __future__ import annotations

import os
import stat

import pytest

from tfdist.errors import UsageError
from tfdist.launch.elastic import secret


def test_a_new_secret_file_is_0600_and_256_bits(tmp_path):
    path = tmp_path / "job.secret"
    secret.write_new(str(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    value = secret.load(str(path))
    assert len(value) * 8 == 256
    assert [p.name for p in tmp_path.iterdir()] == ["job.secret"]  # no temporary left behind


def test_an_existing_secret_is_never_overwritten(tmp_path):
    path = tmp_path / "job.secret"
    secret.write_new(str(path))
    before = path.read_text()
    with pytest.raises(UsageError, match="exists"):
        secret.write_new(str(path))
    assert path.read_text() == before


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o602])
def test_a_secret_others_can_access_is_refused_naming_the_file(tmp_path, mode):
    path = tmp_path / "job.secret"
    path.write_text(os.urandom(32).hex() + "\n")
    path.chmod(mode)
    with pytest.raises(UsageError) as refused:
        secret.load(str(path))
    assert str(path) in refused.value.one_line() and "chmod 600" in refused.value.one_line()


@pytest.mark.parametrize("text, words", [("ab" * 15, "120-bit"), ("", "does not hold"), ("zz" * 32, "does not hold"),
                                         ("abc" * 11, "does not hold"), ("\xff" * 40, "does not hold")])
def test_a_short_or_malformed_secret_is_refused(tmp_path, text, words):
    path = tmp_path / "job.secret"
    path.write_bytes(text.encode("latin-1"))
    path.chmod(0o600)
    with pytest.raises(UsageError, match=words) as refused:
        secret.load(str(path))
    assert str(path) in refused.value.one_line()


def test_exactly_128_bits_is_enough(tmp_path):
    path = tmp_path / "job.secret"
    value = bytes.fromhex("5be0c3a9177e42d08f6a1c93e4b2750d")
    path.write_text(value.hex())
    path.chmod(0o600)
    assert secret.load(str(path)) == value


# (secret, why it is not random): one byte, short repeats up to 8 bytes, too few distinct values; "" for random ones
WEAKNESS = [
    (bytes(32), "every byte is 00"),
    (b"\xab" * 16, "every byte is ab"),
    (b"\xde\xad" * 16, "first 2 bytes"),
    (bytes.fromhex("deadbeef") * 8, "first 4 bytes (deadbeef)"),
    (bytes.fromhex("0123456789abcdef") * 4, "first 8 bytes"),
    (bytes.fromhex("0123456789abcdef") * 2, "first 8 bytes"),  # 128 bits long, 64 of them
    (bytes(range(7)) * 4 + bytes(range(4)), "first 7 bytes"),  # a repeat cut short still repeats
    (bytes([1, 2, 3, 4, 5, 6, 7]) * 4 + bytes([9, 9, 9, 9]), "only 8 distinct byte values in 32"),
    (bytes([0] * 15 + [1] * 17), "only 2 distinct byte values in 32"),
    (bytes.fromhex("5be0c3a9177e42d08f6a1c93e4b2750d"), ""),
    (bytes(range(32)), ""),  # a counting secret has distinct bytes and no short period: the rule cannot see it
    (bytes(range(9)) * 4, "only 9 distinct byte values in 36"),  # past MAX_PERIOD, caught by the distinct count
]


@pytest.mark.parametrize("value, why", WEAKNESS, ids=[f"{v.hex()[:12]}x{len(v)}" for v, _ in WEAKNESS])
def test_a_secret_that_is_plainly_not_random_is_named_by_weakness(value, why):
    found = secret.weakness(value)
    assert (why in found and found) if why else found == ""


def test_new_secrets_pass_the_randomness_rule():
    assert [secret.weakness(secret.new_secret()) for _ in range(200)] == [""] * 200


@pytest.mark.parametrize("text", ["00" * 32, "ff" * 16, "deadbeef" * 4, "0123456789abcdef" * 2])
def test_a_pattern_secret_is_refused_naming_the_file_and_the_fix_unless_insecure(tmp_path, text):
    path = tmp_path / "job.secret"
    path.write_text(text + "\n")
    path.chmod(0o600)
    with pytest.raises(UsageError, match="not hold a random job secret") as refused:
        secret.load(str(path))
    line = refused.value.one_line()
    assert str(path) in line and secret.NEW_SECRET_COMMAND in line and "\n" not in line
    assert secret.load(str(path), weak_ok=True) == bytes.fromhex(text)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    path = tmp_path / "job.secret"
    os.mkfifo(path, 0o600)
    with pytest.raises(UsageError, match="not a regular file"):
        secret.load(str(path))


def test_a_missing_file_is_one_line_naming_it(tmp_path):
    with pytest.raises(UsageError, match="cannot read it") as refused:
        secret.load(str(tmp_path / "nope"))
    assert "nope" in refused.value.one_line()


def test_the_derived_job_id_is_stable_and_depends_on_the_secret():
    one, two = b"a" * 16, b"b" * 16
    assert secret.derived_job_id(one) == secret.derived_job_id(one)
    assert secret.derived_job_id(one) != secret.derived_job_id(two)
    assert one.hex() not in secret.derived_job_id(one)


def test_each_purpose_has_its_own_subkey_and_the_secret_keys_nothing_itself():
    job = bytes(range(32))
    keys = {purpose: secret.subkey(job, purpose) for purpose in secret.PURPOSES}
    assert len(set(keys.values())) == len(secret.PURPOSES)
    assert job not in keys.values()
    assert all(len(key) == 32 for key in keys.values())
    assert secret.subkey(job, "etcd records") == keys["etcd records"]
    assert secret.subkey(bytes(32), "etcd records") != keys["etcd records"]
    # the job id anyone can read is a truncated subkey of its own, not a MAC of some other key's input
    assert secret.derived_job_id(job) == "job-" + keys["job id"][:6].hex()


def test_an_unknown_subkey_purpose_is_refused():
    with pytest.raises(ValueError, match="purpose"):
        secret.subkey(bytes(32), "rendezvous-wire")
