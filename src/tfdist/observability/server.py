"""``/metrics`` and ``/healthz`` on one port, for a training task and for the launcher.

The server is bounded, because the port may be reachable by anything on the network:

- exactly two paths: ``/metrics`` (Prometheus text format) and ``/healthz`` (JSON); any other path is 404 and any
  method but GET is 405, so a probe written as ``/healthz/`` fails loudly instead of reading the metrics page;
- idle and slow connections cost a socket, not a thread: one thread waits on all of them (``selectors``), reads
  each request's head without blocking, and hands a connection to a small pool only once its whole head has arrived;
  connections idle for :data:`IDLE_SECONDS`, and the oldest beyond :data:`MAX_CONNECTIONS`, are closed;
- a whole-request deadline, not a per-read timeout: from its first byte to the last byte of the answer, a request has
  :data:`REQUEST_SECONDS`, and its head at most :data:`MAX_HEAD_BYTES`. A per-read timeout let a few clients that
  send one byte just inside it hold every answering thread, so ``/healthz`` went silent and a liveness probe failed;
- the port is checked before binding, and a busy one names the flag or variable it came from. (``tfdist launch``
  warns about a non-loopback ``--metrics-host`` before anything starts.)
"""
from __future__ import annotations

import io
import json
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

from tfdist.cluster.address import check_port, format_address
from tfdist.errors import TfdistError

DEFAULT_HOST = "127.0.0.1"
METRICS_PATH = "/metrics"
HEALTH_PATH = "/healthz"
# Threads that answer requests: a scrape takes milliseconds, and two scrapers (Prometheus, a probe) are the norm.
WORKER_THREADS = 4
# Open connections kept waiting for a request; the oldest beyond this are closed.
MAX_CONNECTIONS = 128
IDLE_SECONDS = 30.0
# From a request's first byte to its answer's last: a probe or a scrape needs milliseconds.
REQUEST_SECONDS = 5.0
# A GET's request line and headers; anything longer is not a probe or a scraper.
MAX_HEAD_BYTES = 16 * 1024
_END_OF_HEAD = (b"\r\n\r\n", b"\n\n")

Health = Callable[[], tuple[bool, dict[str, Any]]]


def _plain(start_response: Callable[..., Any], status: str, text: str,
           extra: Iterable[tuple[str, str]] = ()) -> list[bytes]:
    body = (text + "\n").encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
                            *extra])
    return [body]


def make_app(registry: CollectorRegistry, health: Health) -> Callable[..., Iterable[bytes]]:
    """The WSGI application: ``GET /metrics``, ``GET /healthz``; 404 and 405 for everything else."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in (METRICS_PATH, HEALTH_PATH):
            return _plain(start_response, "404 Not Found", f"not found: tfdist serves {METRICS_PATH} and "
                                                           f"{HEALTH_PATH}")
        if environ.get("REQUEST_METHOD") != "GET":
            return _plain(start_response, "405 Method Not Allowed", "only GET is allowed", [("Allow", "GET")])
        if path == HEALTH_PATH:
            healthy, details = health()
            body = (json.dumps(details) + "\n").encode()
            start_response("200 OK" if healthy else "503 Service Unavailable",
                           [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        return metrics_app(environ, start_response)

    return app


class _Request:
    """A connection whose request head has arrived whole, and the moment its answer must be sent by."""

    def __init__(self, connection: socket.socket, head: bytes, deadline: float) -> None:
        self.connection, self.head, self.deadline = connection, head, deadline


class _QuietHandler(WSGIRequestHandler):
    """Answers from the head read by the selector and sends the answer in one write bounded by the deadline."""

    request: _Request

    def setup(self) -> None:
        self.connection = self.request.connection
        self.rfile = io.BytesIO(self.request.head)  # a body, if any, is never read: only GET is answered
        self.wfile = io.BytesIO()

    def finish(self) -> None:
        left = self.request.deadline - time.monotonic()
        if left <= 0:
            return
        # One sendall under one timeout bounds the whole write (the timeout is not reset per chunk sent).
        self.connection.settimeout(left)
        self.connection.sendall(self.wfile.getvalue())

    # One access-log line per scrape would flood the task's log.
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass


class _Waiting:
    """A connection the selector holds: when it came, the head read so far, and the deadline once a byte came."""

    def __init__(self, accepted_at: float) -> None:
        self.accepted_at = accepted_at
        self.head = bytearray()
        self.deadline: float | None = None

    def expired(self, now: float, idle_seconds: float) -> bool:
        if self.deadline is None:
            return now - self.accepted_at > idle_seconds
        return now > self.deadline


class _BoundedServer(WSGIServer):
    """A WSGI server whose connections wait in one selector until their request head is whole, and whose requests
    run in a fixed pool."""

    request_queue_size = MAX_CONNECTIONS  # the listen backlog: bursts of connections wait in the kernel

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, *, request_seconds: float,
                 idle_seconds: float) -> None:
        self.address_family = family
        self.request_seconds, self.idle_seconds = request_seconds, idle_seconds
        super().__init__(address, _QuietHandler)
        self._pool = ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="tfdist-metrics")
        self._waiting: dict[socket.socket, _Waiting] = {}  # insertion order is acceptance order
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._wake_reader, self._wake_writer = socket.socketpair()  # makes shutdown() end the wait at once

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self.socket, selectors.EVENT_READ)
                selector.register(self._wake_reader, selectors.EVENT_READ)
                while not self._stopping.is_set():
                    for key, _ in selector.select(min(poll_interval, self.request_seconds / 4)):
                        if key.fileobj is self._wake_reader:
                            continue
                        if key.fileobj is self.socket:
                            self._accept(selector)
                        elif not self._read(selector, key.fileobj):  # type: ignore[arg-type]
                            return
                    self._expire(selector)
                for connection in list(self._waiting):
                    self._drop(selector, connection)
        finally:
            self._stopped.set()

    def _accept(self, selector: selectors.BaseSelector) -> None:
        try:
            connection, _ = self.socket.accept()
        except OSError:
            return
        connection.setblocking(False)
        while len(self._waiting) >= MAX_CONNECTIONS:
            self._drop(selector, next(iter(self._waiting)))
        self._waiting[connection] = _Waiting(time.monotonic())
        selector.register(connection, selectors.EVENT_READ)

    def _read(self, selector: selectors.BaseSelector, connection: socket.socket) -> bool:
        """Read what arrived without blocking; hand the request to the pool once its head is whole.

        False when the pool no longer takes work (the interpreter is exiting)."""
        waiting = self._waiting[connection]
        try:
            chunk = connection.recv(MAX_HEAD_BYTES)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            chunk = b""
        if not chunk or len(waiting.head) + len(chunk) > MAX_HEAD_BYTES:
            self._drop(selector, connection)
            return True
        if waiting.deadline is None:
            waiting.deadline = time.monotonic() + self.request_seconds
        waiting.head += chunk
        if not any(end in waiting.head for end in _END_OF_HEAD):
            return True
        selector.unregister(connection)
        del self._waiting[connection]
        try:
            self._pool.submit(self._answer, _Request(connection, bytes(waiting.head), waiting.deadline))
        except RuntimeError:  # the interpreter is exiting: no more answers
            connection.close()
            return False
        return True

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        for connection, waiting in list(self._waiting.items()):
            if waiting.expired(now, self.idle_seconds):
                self._drop(selector, connection)

    def _drop(self, selector: selectors.BaseSelector, connection: socket.socket) -> None:
        self._waiting.pop(connection, None)
        try:
            selector.unregister(connection)
        except (KeyError, ValueError):
            pass
        connection.close()

    def _answer(self, request: _Request) -> None:
        try:
            self.finish_request(request, request.connection.getpeername())  # type: ignore[arg-type]
        except (OSError, ValueError):
            pass  # a client that went away or stopped reading is not the server's problem
        finally:
            self.shutdown_request(request.connection)

    def shutdown(self) -> None:
        self._stopping.set()
        self._wake_writer.send(b"x")
        self._stopped.wait()
        self._pool.shutdown(wait=True)
        self._wake_reader.close()
        self._wake_writer.close()


class MetricsServer:
    """``/metrics`` and ``/healthz`` on one port, served from a daemon thread.

    Args:
        registry: what ``/metrics`` exposes.
        health: returns ``(healthy, details)`` for ``/healthz``.
        port: TCP port; 0 picks a free one (see :attr:`port`).
        host: address to bind.
        what: the flag or variable the port came from, named in errors (``--metrics-port``).
        request_seconds: seconds a request may take from its first byte to its answer's last.
        idle_seconds: seconds a connection may stay open without sending a request.
    """

    def __init__(self, registry: CollectorRegistry, health: Health, port: int, host: str = DEFAULT_HOST, *,
                 what: str = "--metrics-port", request_seconds: float = REQUEST_SECONDS,
                 idle_seconds: float = IDLE_SECONDS) -> None:
        port = check_port(port, what, allow_zero=True)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._server = _BoundedServer((host, port), family, request_seconds=request_seconds,
                                          idle_seconds=idle_seconds)
        except OSError as failure:
            raise TfdistError(f"cannot serve metrics on {format_address(host, port)} ({what}): "
                              f"{failure.strerror or failure}",
                              hint=f"pick another {what}, or free that port") from None
        self._server.set_app(make_app(registry, health))
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="tfdist-metrics-accept",
                                         daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Base address, e.g. ``http://127.0.0.1:9100``."""
        return f"http://{format_address(self.host, self.port)}"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
