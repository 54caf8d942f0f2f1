"""The /metrics + /healthz server against real sockets on loopback: exact paths, methods, bounded threads and
connections, timeouts, port checks."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, Counter

from tfdist.errors import TfdistError, UsageError
from tfdist.observability import server as srv


@pytest.fixture
def served():
    registry = CollectorRegistry()
    Counter("probe_hits", "A series to find on /metrics.", registry=registry).inc()
    state = {"healthy": True}
    server = srv.MetricsServer(registry, lambda: (state["healthy"], {"status": "ok" if state["healthy"] else "x"}),
                               0, request_seconds=0.3, idle_seconds=0.5)
    yield server, state
    server.close()


def _request(server, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=5)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def _wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_the_two_paths_answer(served):
    server, state = served
    status, _, body = _request(server, "GET", "/metrics")
    assert status == 200 and b"probe_hits_total 1.0" in body
    status, headers, body = _request(server, "GET", "/healthz")
    assert status == 200 and json.loads(body) == {"status": "ok"} and headers["Content-Type"] == "application/json"
    state["healthy"] = False
    assert _request(server, "GET", "/healthz")[0] == 503
    # Prometheus' own query form still works on the exact path.
    status, _, body = _request(server, "GET", "/metrics?name[]=probe_hits_total")
    assert status == 200 and b"probe_hits_total" in body


@pytest.mark.parametrize("path", ["/", "/healthz/", "/metrics/", "/metricsx", "/favicon.ico", "/healthz/../x",
                                  "/metrics%00"])
def test_any_other_path_is_404(served, path):
    server, _ = served
    status, _, body = _request(server, "GET", path)
    assert status == 404 and b"probe_hits" not in body


@pytest.mark.parametrize("method", ["POST", "DELETE", "PUT", "HEAD", "OPTIONS", "PATCH"])
@pytest.mark.parametrize("path", ["/metrics", "/healthz"])
def test_any_other_method_is_405(served, method, path):
    server, _ = served
    status, headers, _ = _request(server, method, path)
    assert status == 405 and headers["Allow"] == "GET"


def test_idle_connections_do_not_hold_threads(served):
    server, _ = served
    before = threading.active_count()
    idle = [socket.create_connection((server.host, server.port), timeout=5) for _ in range(300)]
    try:
        # While 300 connections sit idle, requests are still answered, and the thread count stays bounded.
        assert _request(server, "GET", "/metrics")[0] == 200
        assert threading.active_count() <= before + srv.WORKER_THREADS
    finally:
        for connection in idle:
            connection.close()


def test_idle_and_stalled_connections_are_closed(served):
    server, _ = served
    idle = socket.create_connection((server.host, server.port), timeout=5)
    stalled = socket.create_connection((server.host, server.port), timeout=5)
    stalled.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
    try:
        started = time.monotonic()
        assert idle.recv(1) == b""  # closed by the server after idle_seconds
        assert stalled.recv(1024) == b""  # its headers never came: closed after request_seconds, no answer
        assert time.monotonic() - started < 4  # well before the 5 s client timeout
    finally:
        idle.close()
        stalled.close()


def test_slow_clients_cannot_silence_healthz(served):
    """Clients that each send one byte just inside the old per-read timeout held every answering thread, so a
    liveness probe got no answer for as long as they kept it up; a whole-request deadline bounds them."""
    server, _ = served
    slow = [socket.create_connection((server.host, server.port), timeout=5) for _ in range(srv.WORKER_THREADS)]
    stop = threading.Event()
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 200

    def trickle() -> None:
        for offset in range(len(request)):  # about 40 s at most: far longer than any answer below needs
            for connection in slow:
                try:
                    connection.send(request[offset:offset + 1])
                except OSError:
                    pass  # closed by the server: keep the others going
            if stop.wait(0.2):  # two thirds of the fixture's 0.3 s: each byte comes just in time
                return

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        status, _, body = _request(server, "GET", "/healthz")
        assert status == 200 and json.loads(body) == {"status": "ok"}
        assert trickler.is_alive()  # answered while the slow clients were still sending
    finally:
        stop.set()
        trickler.join()
        for connection in slow:
            connection.close()


def test_a_head_longer_than_the_limit_is_dropped_unanswered(served):
    server, _ = served
    with socket.create_connection((server.host, server.port), timeout=5) as greedy:
        try:
            greedy.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * (srv.MAX_HEAD_BYTES + 10))
        except OSError:
            pass  # the server may close before the last bytes are taken
        assert greedy.recv(1024) == b""
    assert _request(server, "GET", "/healthz")[0] == 200


def test_connections_beyond_the_cap_close_the_oldest(served, monkeypatch):
    server, _ = served
    monkeypatch.setattr(srv, "MAX_CONNECTIONS", 3)
    sockets = [socket.create_connection((server.host, server.port), timeout=5) for _ in range(5)]
    try:
        assert sockets[0].recv(1) == b"" and sockets[1].recv(1) == b""  # the two oldest were closed
        assert _request(server, "GET", "/healthz")[0] == 200
    finally:
        for connection in sockets:
            connection.close()


def test_ipv6_loopback_is_served_with_a_bracketed_url():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this kernel")
    try:
        server = srv.MetricsServer(CollectorRegistry(), lambda: (True, {}), 0, "::1")
    except TfdistError as no_v6:
        pytest.skip(f"::1 cannot be bound here: {no_v6}")
    try:
        assert server.url == f"http://[::1]:{server.port}"
        assert _request(server, "GET", "/healthz")[0] == 200
    finally:
        server.close()


@pytest.mark.parametrize("port", [65536, -1, 99999, "9100x"])
def test_ports_are_checked_before_binding(port):
    with pytest.raises(UsageError, match="--launcher-metrics-port"):
        srv.MetricsServer(CollectorRegistry(), lambda: (True, {}), port, what="--launcher-metrics-port")


def test_a_busy_port_names_the_flag():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(TfdistError, match="--launcher-metrics-port"):
            srv.MetricsServer(CollectorRegistry(), lambda: (True, {}), holder.getsockname()[1],
                              what="--launcher-metrics-port")
