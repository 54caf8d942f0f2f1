"""Sealed etcd records: what an etcd reader cannot read and an etcd writer cannot forge or replay (pure rules).

etcd serves whoever may read and write the job's keys, so the job's own protection is end to end. Every record is
sealed with AES-256-GCM (``cryptography``) under the job secret's ``"etcd records"`` subkey
(``secret.subkey``), with a fresh random 96-bit nonce per record, so a reader of etcd (or of its backups and
history) learns nothing from a body: not the machines' names and addresses, not the worker lists, not a backup
chunk. The associated data binds the sealed body to three things the reader checks before it believes a record:

- the **etcd key** it was written at: a record copied to another key (another machine's inbox) does not open;
- the **run** (:class:`RunIdentity`): a record of an earlier or later run of the same job, or of another etcd
  cluster, does not open;
- its **position** in its key's sequence: a sender's message counter, a coordinator's (claim, counter), a round
  number. The position is written in the clear (it is no secret) and checked by the reader's rule
  (:func:`is_newer`), so a record put back at its own key after a newer one (a replayed ``round``) is refused.

Only job-wide records are sealed with no run (``run=""``): the ``run`` anchor itself and ``finish``, which has its
own rule (:func:`finish_applies`). Without a job secret records are plain JSON with the same key, run and position
checks (so honest runs keep apart), which anyone who can write etcd can forge.

Wire form (JSON): ``{"p": [position], "s": base64(nonce | ciphertext | tag)}``; without a secret ``{"p": [...],
"run": run, "key": key, "b": body}``. Anything else (junk, truncation, a flipped bit, a record sealed with another
secret) opens to None: the reader ignores it and says so once.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass
from typing import Any

NONCE_BYTES = 12  # 96 bits: GCM's own nonce size; random per record (2^-32 collision odds only after 2^32 records)
_DOMAIN = "tfdist etcd record v1"
Position = tuple[int, ...]


@dataclass(frozen=True)
class RunIdentity:
    """One run of a job in one etcd: the etcd cluster's id and the revision at which the run's anchor record
    (``<job>/run``) was created.

    Why an etcd revision rather than a random id carried in a record: a random id lives in a record, and a record is
    what a writer without the secret can copy. A replayed run record would make the agents of a new run adopt the
    old run's id, and then every saved record of that run (its ``finish``, its ``round`` messages) would open
    again. A key's *create revision* is assigned by etcd at the moment the key is created, grows with every write
    of the cluster and is never reused: a writer can put an old run record back, but only at a new revision, which
    names a new run whose records nobody has. Writing junk over the anchor keeps its create revision (a put on an
    existing key), so the run goes on undisturbed; deleting it starts a new run for the machines that join next,
    which is denial of service (any etcd writer can deny service by deleting keys) and never a replay.
    Agents of one run agree on it because they read the same key. The cluster id keeps records of another etcd
    cluster apart; an etcd whose data is wiped starts its revisions again, so a new etcd wants a new job secret.
    A finished run deletes its anchor (in the finish transaction), so the next run gets a new revision and the
    old run's records refuse nothing.
    """

    cluster: int
    revision: int

    def __str__(self) -> str:
        return f"{self.cluster & 0xFFFFFFFFFFFFFFFF:016x}-{self.revision}"


def _associated(key: str, run: str, position: Position) -> bytes:
    return json.dumps([_DOMAIN, key, run, list(position)], separators=(",", ":")).encode()


class Sealer:
    """Seals and opens one run's records (``run`` = ``str(RunIdentity)``, or "" for the job-wide ones)."""

    def __init__(self, secret: bytes | None, run: str = "") -> None:
        self.run = run
        self._secret = secret
        self._aead: Any = None
        if secret:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            from tfdist.launch.elastic.secret import subkey

            self._aead = AESGCM(subkey(secret, "etcd records"))

    def for_run(self, run: str) -> "Sealer":
        return Sealer(self._secret, run)

    def seal(self, key: str, body: dict[str, Any], position: Position = ()) -> bytes:
        text = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        if self._aead is None:
            record: dict[str, Any] = {"p": list(position), "run": self.run, "key": key, "b": body}
        else:
            nonce = os.urandom(NONCE_BYTES)
            sealed = self._aead.encrypt(nonce, text, _associated(key, self.run, position))
            record = {"p": list(position), "s": base64.b64encode(nonce + sealed).decode("ascii")}
        return json.dumps(record, separators=(",", ":")).encode()

    def open(self, key: str, raw: bytes) -> tuple[Position, dict[str, Any]] | None:
        """``(position, body)`` of the record sealed for ``key`` in this run, or None for anything else."""
        try:
            record = json.loads(raw)
            position = tuple(record["p"])
            if not all(type(p) is int for p in position):
                return None
            if self._aead is None:
                if record.get("run") != self.run or record.get("key") != key:
                    return None
                body = record["b"]
            else:
                blob = base64.b64decode(record["s"], validate=True)
                if len(blob) < NONCE_BYTES + 16:
                    return None
                from cryptography.exceptions import InvalidTag

                try:
                    text = self._aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:],
                                              _associated(key, self.run, position))
                except InvalidTag:
                    return None
                body = json.loads(text)
        except (ValueError, TypeError, KeyError, AttributeError, binascii.Error, UnicodeDecodeError):
            return None
        return (position, body) if isinstance(body, dict) else None


# -- the readers' rules ----------------------------------------------------------------------------------------------
def is_newer(position: Position, last: Position | None) -> bool:
    """A message is acted on only when its position is past the last one acted on at its key (positions compare
    as tuples: a coordinator's (claim, counter), and a later coordinator's claim is a later etcd revision)."""
    return last is None or position > last


FINISH_FRESH_S = 30.0  # how long a finish record says "the job is over" (its lease's TTL, keys.FINISH_TTL)
CLOCK_SKEW_S = 30.0  # clocks of one job's machines may differ by this much


def finish_applies(run_present: bool, finished_at: float, now: float) -> bool:
    """Whether a (sealed, opened) ``finish`` record tells a joining machine that the job is over.

    The finish transaction deletes the run's anchor, so a run anchor present means a later run started after that
    finish: its record is of an earlier run and refuses nothing. With no anchor the record tells late machines of
    the run that just ended, for as long as its lease lives; an old finish written back by someone (a writer without
    the secret cannot write a new one) is refused by its own sealed time, allowing for clock skew.
    """
    if run_present:
        return False
    return now - FINISH_FRESH_S - CLOCK_SKEW_S <= finished_at <= now + CLOCK_SKEW_S
