"""The etcd rendezvous' view of etcd: a thin, bounded client (its settings: ``conf.py``).

Client library: ``etcd-sdk-python`` (import name ``pyetcd``), a maintained fork of python-etcd3: synchronous, as the
agent's threads are; speaks etcd's v3 gRPC API (3.4 and later) with leases, transactions, watches, TLS and user
authentication, and fails over between the endpoints it is given. (``etcd3`` has had no release since 2020 and breaks
with current protobuf; ``aetcd`` and the Rust binding ``etcd-client-py`` are asyncio-only.) Every call here has a
deadline, and every failure is one of two exceptions: :class:`EtcdUnavailable` (retry elsewhere or later) and
:class:`EtcdRefused` (credentials or certificates are wrong: retrying cannot help).

Job secret: etcd serves whoever may read and write the job's keys, so confidentiality and authenticity are end to
end: every record is sealed (AES-GCM, bound to its key, its run and its position) by ``records.py``, and a reader
ignores any record that does not open (the bad writer is ignored, never the job).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from tfdist.launch.elastic.etcd.conf import EtcdConf
from tfdist.launch.elastic.etcd.txn import TXN_BYTES, TXN_OPS, chunks

WATCH_RETRY = 0.2


class EtcdUnavailable(Exception):
    """etcd did not answer in time (or no member is reachable): a retry may work."""


class EtcdRefused(Exception):
    """etcd refused us (user, password or certificates): a retry will not help."""


@dataclass(frozen=True)
class Entry:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int
    deleted: bool = False


# -- the client ------------------------------------------------------------------------------------------------------
class EtcdStore:
    """A connection to the etcd cluster. Thread-safe: the library's stubs are, and the endpoint switch is locked."""

    def __init__(self, conf: EtcdConf) -> None:
        self.conf = conf
        self._client: Any = None
        self._lock = threading.Lock()
        self._closed = False
        self._watches: list[Watch] = []  # stopped by close(): a watch must not outlive its connection
        self.cluster_id = 0  # the etcd cluster's id, from every read's header (part of records.RunIdentity)

    def connect(self) -> None:
        """Open the client (and log in). Raises EtcdUnavailable, EtcdRefused."""
        import grpc
        import pyetcd

        conf = self.conf
        creds = None
        if conf.cacert:
            read = lambda path: open(path, "rb").read() if path else None  # noqa: E731, SIM115
            creds = grpc.ssl_channel_credentials(read(conf.cacert), read(conf.key), read(conf.cert))
        options = [("grpc.keepalive_time_ms", 2000), ("grpc.keepalive_timeout_ms", 2000),
                   ("grpc.keepalive_permit_without_calls", 1), ("grpc.max_receive_message_length", 8 << 20)]
        endpoints = [pyetcd.Endpoint(host, port, secure=creds is not None, creds=creds, time_retry=1.0,
                                     opts=options) for host, port in conf.endpoints]
        try:
            client = pyetcd.MultiEndpointEtcd3Client(endpoints=endpoints, timeout=conf.timeout, user=conf.user,
                                                     password=conf.password, failover=True)
        except Exception as bad:  # noqa: BLE001 - the library raises grpc errors and its own, sorted below
            for endpoint in endpoints:
                endpoint.close()
            raise _sorted(bad) from None
        # Watches on a member cut off from its cluster's leader are cancelled rather than left silent.
        client.metadata = tuple(client.metadata or ()) + (("hasleader", "true"),)
        self._client = client
        self.call(lambda c: c.status())

    def call(self, operation: Callable[[Any], Any], attempts: int = 0) -> Any:
        """Run ``operation(client)``, failing over to the next member on an error, at most once per member."""
        tries = attempts or len(self.conf.endpoints)
        last: Exception | None = None
        for _ in range(tries):
            if self._closed or self._client is None:
                raise EtcdUnavailable("the etcd connection is closed")
            try:
                return operation(self._client)
            except Exception as bad:  # noqa: BLE001
                last = _sorted(bad)
                if isinstance(last, EtcdRefused):
                    raise last from None
        raise last or EtcdUnavailable("no etcd member answered")

    # -- keys ----------------------------------------------------------------------------------------------------
    def get_prefix(self, prefix: str) -> tuple[int, list[Entry]]:
        """(revision of the read, entries under ``prefix`` in key order)."""
        response = self.call(lambda c: c.get_prefix_response(prefix))
        self.cluster_id = int(response.header.cluster_id)
        return response.header.revision, [_entry(kv) for kv in response.kvs]

    def get(self, key: str) -> Entry | None:
        response = self.call(lambda c: c.get_response(key))
        self.cluster_id = int(response.header.cluster_id)
        return _entry(response.kvs[0]) if response.kvs else None

    def get_at(self, key: str, revision: int) -> Entry | None:
        """``key`` as it was at ``revision`` (an earlier version); None when it did not exist then or etcd's history
        was compacted past it. Raises EtcdUnavailable, EtcdRefused."""
        try:
            response = self.call(lambda c: c.get_response(key, revision=revision), attempts=1)
        except EtcdUnavailable as bad:
            if "compacted" in str(bad):
                return None
            raise
        return _entry(response.kvs[0]) if response.kvs else None

    def put(self, key: str, value: bytes, lease: int | None = None) -> int:
        """Write; returns the revision of the write."""
        return int(self.call(lambda c: c.put(key, value, lease=lease)).header.revision)

    def delete_prefix(self, prefix: str) -> None:
        self.call(lambda c: c.delete_prefix(prefix))

    def delete_if_unchanged(self, key: str, mod_revision: int) -> bool:
        """Delete ``key`` only while it still is the version written at ``mod_revision`` (junk being cleared must
        not take a record written since with it)."""
        def attempt(client: Any) -> Any:
            return client.transaction(compare=[client.transactions.mod(key) == mod_revision],
                                      success=[client.transactions.delete(key)], failure=[])
        succeeded, _ = self.call(attempt)
        return bool(succeeded)

    def compact(self, revision: int) -> None:
        """Drop etcd's history up to ``revision``: cluster-wide, every key's (see ``EtcdConf.compact``)."""
        self.call(lambda c: c.compact(revision), attempts=1)

    def create(self, key: str, value: bytes, lease: int | None = None) -> int | None:
        """Write ``key`` only when it does not exist; the write's revision, or None when it existed."""
        def attempt(client: Any) -> Any:
            return client.transaction(compare=[client.transactions.create(key) == 0],
                                      success=[client.transactions.put(key, value, lease=lease)], failure=[])
        succeeded, responses = self.call(attempt)
        return int(responses[0].response_put.header.revision) if succeeded else None

    def txn_if_created_at(self, guard: str, revision: int, puts: list[tuple[str, bytes, int | None]],
                          deletes: tuple[str, ...] = ()) -> int | None:
        """``puts`` (and prefix ``deletes``), in order, only while ``guard`` still is the key created at
        ``revision`` (the coordinator's claim: a former coordinator's writes fail). Within etcd's limits on one
        transaction (``txn.py``): a longer list is several, each guarded, the last holding the last puts and the
        deletes. The last transaction's revision, or None as soon as one found the guard gone (the writes before
        it stay: the next coordinator's take-over sorts them out)."""
        import pyetcd.utils as utils

        def attempt(chunk: list[tuple[str, bytes, int | None]], removes: tuple[str, ...]) -> Callable[[Any], Any]:
            def run(client: Any) -> Any:
                t = client.transactions
                ops = [t.put(k, v, lease=lease) for k, v, lease in chunk]
                ops += [t.delete(p, range_end=utils.prefix_range_end(utils.to_bytes(p))) for p in removes]
                return client.transaction(compare=[t.create(guard) == revision], success=ops, failure=[])
            return run

        cut = chunks(puts, TXN_OPS - len(deletes), TXN_BYTES)
        written = 0
        for index, chunk in enumerate(cut):
            succeeded, responses = self.call(attempt(chunk, deletes if index == len(cut) - 1 else ()))
            if not succeeded:
                return None
            headers = [getattr(r, r.WhichOneof("response")).header.revision for r in responses]
            written = int(max(headers, default=written))
        return written

    # -- leases --------------------------------------------------------------------------------------------------
    def grant(self, ttl: float) -> int:
        return int(self.call(lambda c: c.lease(max(1, int(round(ttl))))).id)

    def keepalive(self, lease: int) -> int:
        """Refresh ``lease``; its remaining TTL in seconds (<= 0: it expired)."""
        answers = self.call(lambda c: list(c.refresh_lease(lease)))
        return int(answers[0].TTL) if answers else 0

    def revoke(self, lease: int) -> None:
        self.call(lambda c: c.revoke_lease(lease), attempts=1)

    # -- watches -------------------------------------------------------------------------------------------------
    def watch(self, prefix: str, start_revision: int, on_entries: Callable[[list[Entry]], None],
              on_gap: Callable[[str], None]) -> "Watch":
        """Call ``on_entries`` with every change under ``prefix`` from ``start_revision`` on, in order; the watch
        is re-made on another member (from the next revision) when its member goes away. ``on_gap`` is called
        when changes were lost (compacted history): the caller re-reads."""
        watch = Watch(self, prefix, start_revision, on_entries, on_gap)
        with self._lock:
            self._watches.append(watch)
        return watch.start()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the connection and stop every watch made through it (their threads end within WATCH_RETRY)."""
        self._closed = True
        with self._lock:
            watches, self._watches = self._watches, []
        for watch in watches:
            watch.stop()
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a broken channel may raise; nothing to do about it
                pass


class Watch:
    def __init__(self, store: EtcdStore, prefix: str, start: int, on_entries: Callable[[list[Entry]], None],
                 on_gap: Callable[[str], None]) -> None:
        self.store, self.prefix, self.next_revision = store, prefix, start
        self.on_entries, self.on_gap = on_entries, on_gap
        self._id: Any = None
        self._stopped = threading.Event()
        self._generation = 0

    def start(self) -> "Watch":
        threading.Thread(target=self._establish, args=(self._generation,), daemon=True, name="etcd-watch").start()
        return self

    def _establish(self, generation: int) -> None:
        while not self._stopped.is_set() and generation == self._generation and not self.store.closed:
            try:
                self._id = self.store.call(lambda c: c.add_watch_prefix_callback(
                    self.prefix, lambda r, g=generation: self._on_response(r, g),
                    start_revision=self.next_revision, prev_kv=False), attempts=1)
                return
            except EtcdUnavailable:
                _fail_current(self.store)
            except Exception as bad:  # noqa: BLE001 - compacted, or the library's own
                if type(bad).__name__ == "RevisionCompactedError":
                    self.on_gap(f"etcd compacted the history of {self.prefix}")
                    return
            self._stopped.wait(WATCH_RETRY)

    def _on_response(self, response: Any, generation: int) -> None:
        if self._stopped.is_set() or generation != self._generation:
            return
        if isinstance(response, Exception):
            if type(response).__name__ == "RevisionCompactedError":
                self.on_gap(f"etcd compacted the history of {self.prefix}")
                return
            _fail_current(self.store)
            self._generation += 1
            threading.Thread(target=self._establish, args=(self._generation,), daemon=True,
                             name="etcd-rewatch").start()
            return
        entries = [_entry(event, deleted=type(event).__name__ == "DeleteEvent") for event in response.events]
        if entries:
            self.next_revision = entries[-1].mod_revision + 1
            self.on_entries(entries)

    def stop(self) -> None:
        """No more callbacks and no more re-watching (closing the client ends the watch in etcd)."""
        self._stopped.set()

    def cancel(self) -> None:
        self._stopped.set()
        if self._id is not None:
            try:
                self.store.call(lambda c: c.cancel_watch(self._id), attempts=1)
            except (EtcdUnavailable, EtcdRefused):
                pass


def _fail_current(store: EtcdStore) -> None:
    client = store._client
    if client is not None:
        try:
            client.endpoint_in_use.fail()
        except Exception:  # noqa: BLE001
            pass


def _entry(kv: Any, deleted: bool = False) -> Entry:
    key = kv.key.decode() if isinstance(kv.key, bytes) else str(kv.key)
    return Entry(key, bytes(kv.value), int(kv.create_revision), int(kv.mod_revision), int(kv.lease), deleted)


def _sorted(bad: Exception) -> Exception:
    """Library and gRPC errors -> EtcdUnavailable (retry) or EtcdRefused (do not)."""
    import grpc

    code = bad.code() if isinstance(bad, grpc.RpcError) and hasattr(bad, "code") else None
    detail = bad.details() if isinstance(bad, grpc.RpcError) and hasattr(bad, "details") else str(bad)
    about_access = any(word in str(detail) for word in ("auth", "user name", "permission denied", "password"))
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) or (
            code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION) and about_access):
        return EtcdRefused(f"etcd refused the request: {detail}")
    name = type(bad).__name__
    if name in ("ConnectionFailedError", "ConnectionTimeoutError", "NoServerAvailableError"):
        return EtcdUnavailable(f"etcd did not answer ({name})")
    return EtcdUnavailable(f"etcd request failed: {detail or name}")


def deadline_reached(deadline: float) -> bool:
    return time.monotonic() >= deadline
