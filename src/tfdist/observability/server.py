"""``/metrics`` and ``/healthz`` on one port, for a training task and for the launcher.

The server is bounded, because the port may be reachable by anything on the network:

- exactly two paths: ``/metrics`` (Prometheus text format) and ``/healthz`` (JSON); any other path is 404 and any
  method but GET is 405, so a probe written as ``/healthz/`` fails loudly instead of reading the metrics page;
- idle connections cost a socket, not a thread: one thread waits on all of them (``selectors``) and hands a
  connection to a small pool only once a request has arrived; connections idle for :data:`IDLE_SECONDS`, and the
  oldest beyond :data:`MAX_CONNECTIONS`, are closed;
- every read and write has a :data:`IO_TIMEOUT_SECONDS` timeout;
- the port is checked before binding, and a busy one names the flag or variable it came from. (``tfdist launch``
  warns about a non-loopback ``--metrics-host`` before anything starts.)
"""
from __future__ import annotations

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
IO_TIMEOUT_SECONDS = 5.0

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


class _QuietHandler(WSGIRequestHandler):
    def setup(self) -> None:
        self.timeout = self.server.io_timeout  # type: ignore[attr-defined] - applied to the socket by setup()
        super().setup()

    # One access-log line per scrape would flood the task's log.
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass


class _BoundedServer(WSGIServer):
    """A WSGI server whose idle connections wait in one selector and whose requests run in a fixed pool."""

    request_queue_size = MAX_CONNECTIONS  # the listen backlog: bursts of connections wait in the kernel

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, *, io_timeout: float,
                 idle_seconds: float) -> None:
        self.address_family = family
        self.io_timeout, self.idle_seconds = io_timeout, idle_seconds
        super().__init__(address, _QuietHandler)
        self._pool = ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="tfdist-metrics")
        self._waiting: dict[socket.socket, float] = {}  # connection -> when it was accepted (insertion ordered)
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._wake_reader, self._wake_writer = socket.socketpair()  # makes shutdown() end the wait at once

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self.socket, selectors.EVENT_READ)
                selector.register(self._wake_reader, selectors.EVENT_READ)
                while not self._stopping.is_set():
                    for key, _ in selector.select(poll_interval):
                        if key.fileobj is self._wake_reader:
                            continue
                        if key.fileobj is self.socket:
                            self._accept(selector)
                        else:
                            connection = key.fileobj
                            selector.unregister(connection)
                            self._waiting.pop(connection, None)  # type: ignore[call-overload]
                            try:
                                self._pool.submit(self._answer, connection)
                            except RuntimeError:  # the interpreter is exiting: no more answers
                                connection.close()
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
        while len(self._waiting) >= MAX_CONNECTIONS:
            self._drop(selector, next(iter(self._waiting)))
        self._waiting[connection] = time.monotonic()
        selector.register(connection, selectors.EVENT_READ)

    def _expire(self, selector: selectors.BaseSelector) -> None:
        deadline = time.monotonic() - self.idle_seconds
        for connection, since in list(self._waiting.items()):
            if since >= deadline:
                break  # insertion order is acceptance order
            self._drop(selector, connection)

    def _drop(self, selector: selectors.BaseSelector, connection: socket.socket) -> None:
        self._waiting.pop(connection, None)
        try:
            selector.unregister(connection)
        except (KeyError, ValueError):
            pass
        connection.close()

    def _answer(self, connection: socket.socket) -> None:
        try:
            connection.settimeout(self.io_timeout)
            self.finish_request(connection, connection.getpeername())
        except (OSError, ValueError):
            pass  # a client that went away or stalled is not the server's problem
        finally:
            self.shutdown_request(connection)

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
        io_timeout: seconds any one read or write of a request may take.
        idle_seconds: seconds a connection may stay open without sending a request.
    """

    def __init__(self, registry: CollectorRegistry, health: Health, port: int, host: str = DEFAULT_HOST, *,
                 what: str = "--metrics-port", io_timeout: float = IO_TIMEOUT_SECONDS,
                 idle_seconds: float = IDLE_SECONDS) -> None:
        port = check_port(port, what, allow_zero=True)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._server = _BoundedServer((host, port), family, io_timeout=io_timeout, idle_seconds=idle_seconds)
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
