"""etcd's limits on one transaction, and the coordinator's writes cut to fit them (pure rules).

etcd refuses a transaction of more than ``--max-txn-ops`` writes (128 by default) or a request over
``--max-request-bytes`` (1.5 MiB by default). A round of N machines writes N round messages (each lists every
machine), the round's record and the state: 130 writes for 128 machines, and about 2.5 MiB for 256. So a long list
of writes is several transactions, each guarded by the coordinator's claim, cut from the end: the last one is the
fullest and holds the last writes, which are the ones that say what the others were for (the round's record and
the state, the finish record and the deletes of the run). A reader that watches mid-way sees some messages and
not yet that record: a machine acts on its own message only; a coordinator that takes over after a cut-short round
tells it from the messages in the outboxes (``run.announced_round``) and stops it.
"""
from __future__ import annotations

TXN_OPS = 128  # writes per transaction: etcd's --max-txn-ops default (a member started with less refuses more)
TXN_BYTES = 1024 * 1024  # bytes of keys and values per transaction: under --max-request-bytes (1.5 MiB), with room
# for the request's own framing
Put = tuple[str, bytes, "int | None"]


def chunks(puts: list[Put], ops: int, size: int) -> list[list[Put]]:
    """``puts`` in order, cut into runs of at most ``ops`` writes and ``size`` bytes (a single larger write is a run
    of its own: etcd judges it); at least one run (possibly empty), the last as full as the limits allow."""
    runs: list[list[Put]] = [[]]
    used = 0
    for put in reversed(puts):  # filled from the end: the last run is the fullest, the record goes with it
        weight = len(put[0]) + len(put[1])
        if runs[-1] and (len(runs[-1]) >= max(1, ops) or used + weight > size):
            runs.append([])
            used = 0
        runs[-1].append(put)
        used += weight
    return [list(reversed(run)) for run in reversed(runs)]
