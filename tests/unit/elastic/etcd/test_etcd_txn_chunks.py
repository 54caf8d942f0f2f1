"""The coordinator's writes within etcd's limits on one transaction (issue 33: a round of 256 machines): pure
chunking, in order, the last chunk the fullest (the round's record and state go in it, written last)."""
from __future__ import annotations

import pytest

from tfdist.launch.elastic.etcd.txn import TXN_BYTES, TXN_OPS, chunks


def _puts(count: int, size: int = 10) -> list[tuple[str, bytes, None]]:
    return [(f"k{i}", b"x" * size, None) for i in range(count)]


@pytest.mark.parametrize("count, expected", [(0, [0]), (1, [1]), (128, [128]), (130, [2, 128]), (300, [44, 128, 128])])
def test_at_most_txn_ops_writes_per_transaction_in_order(count, expected):
    puts = _puts(count)
    cut = chunks(puts, TXN_OPS, TXN_BYTES)
    assert [len(c) for c in cut] == expected and sum(cut, []) == puts


def test_at_most_txn_bytes_per_transaction_and_a_larger_write_alone():
    puts = _puts(10, size=40) + [("big", b"y" * 500, None)] + _puts(3, size=40)
    cut = chunks(puts, TXN_OPS, 100)
    assert sum(cut, []) == puts
    assert all(sum(len(k) + len(v) for k, v, _ in c) <= 100 or len(c) == 1 for c in cut)
    assert [("big", b"y" * 500, None)] in cut


def test_the_last_writes_end_the_last_transaction():
    puts = _puts(300) + [("round", b"r", None), ("state", b"s", None)]
    assert chunks(puts, TXN_OPS, TXN_BYTES)[-1][-2:] == puts[-2:]
