"""``mirror test``: probe every mirror at once and rank them.

Each mirror gets its own thread that (1) fetches the simple-index page of a real project and times the first byte,
(2) checks that the PEP 658 ``.metadata`` file the page advertises really exists (mirrors that lack it make pip and
uv fail with 404), and (3) downloads the project's newest wheel, bounded by ``max_bytes``, to measure throughput.
It asks with the User-Agent of each tool being switched (:mod:`tfdist.mirror.agents`; conda's at a conda channel):
a mirror whose firewall answers one of them with HTTP 403 is blocked for that tool and never picked
(tuna/issues#2603).
All probes share one deadline, so the whole test takes about one timeout however many mirrors there are; a probe
still running at the deadline is judged on what it managed so far.
"""
from __future__ import annotations

import base64
import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence
from urllib.parse import urlsplit

from tfdist import __version__
from tfdist.mirror.agents import ToolAgent
from tfdist.mirror.pages import PackagePin, parse_pin, pick_pinned, pick_wheel  # noqa: F401 (parse_pin re-exported)
from tfdist.mirror.urls import split_credentials

CHUNK = 64 * 1024
PAGE_LIMIT = 16 * 1024 * 1024
# Ranking estimates the time of a typical install: REFERENCE_REQUESTS round trips (index pages, metadata) plus
# REFERENCE_BYTES of wheels. Installing TensorFlow with its CUDA wheels is ~40 projects and several hundred MB, so
# bandwidth dominates, but a mirror with a much longer round trip still loses to one of equal bandwidth.
REFERENCE_REQUESTS = 20
REFERENCE_BYTES = 64 * 1024 * 1024
FIRST_BYTES = 1024 * 1024  # --package: time to the first MiB of the wheel users will really download


@dataclass(frozen=True)
class ProbeTarget:
    """A mirror to probe: its name, PEP 503 index root and, for conda's User-Agent check, a conda channel."""

    name: str
    index_url: str
    conda_channel: str | None = None


@dataclass(frozen=True)
class ProbeConfig:
    """How to probe.

    Attributes:
        timeout: seconds for the whole probe (all mirrors run concurrently within it).
        project: the project whose simple page is fetched and whose newest wheel is downloaded.
        max_bytes: download at most this many bytes of the wheel.
        allow_insecure: allow plain-http URLs and https->http redirects.
        ssl_context: TLS settings (default: the system trust store; certificates are always verified).
        check_metadata: also check the advertised PEP 658 ``.metadata`` file.
        package: when set, measure this exact release instead (``--package NAME==VERSION``): the wheel of that
            version that best fits this machine, timed from the request to its first ``first_bytes``.
        first_bytes: how much of the package's wheel to time (1 MiB).
        agents: the tools being switched and their User-Agents; the first one not refused runs the speed probe,
            each other one fetches the index page as that tool would. Empty: tfdist's own User-Agent only.
    """

    timeout: float = 5.0
    project: str = "pip"
    max_bytes: int = 4 * 1024 * 1024
    allow_insecure: bool = False
    ssl_context: ssl.SSLContext | None = None
    check_metadata: bool = True
    package: "PackagePin | None" = None
    first_bytes: int = FIRST_BYTES
    agents: tuple[ToolAgent, ...] = ()


@dataclass(frozen=True)
class ProbeResult:
    """What one mirror's probe found.

    ``status`` is ``ok`` (index and download measured), ``partial`` (index reachable but no throughput figure),
    ``blocked`` (every tool's User-Agent got HTTP 403), ``error`` or ``timeout``. ``blocked_for`` names the tools
    whose User-Agent got HTTP 403: such a mirror is never picked.
    """

    name: str
    index_url: str
    status: str = "pending"
    phase: str = "connecting"
    ttfb_s: float | None = None
    downloaded: int = 0
    throughput_bps: float | None = None
    file_url: str | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()
    estimate_s: float | None = None
    first_mib_s: float | None = None  # --package: seconds from the file request to its first MiB (or its end)
    blocked_for: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """Whether pip and uv could use this mirror (its index page answered each of them)."""
        return self.status in ("ok", "partial") and not self.blocked_for


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects (MirrorZ redirects to a campus mirror) but never from https down to http."""

    def __init__(self, allow_insecure: bool) -> None:
        self.allow_insecure = allow_insecure

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        if not self.allow_insecure and urlsplit(req.full_url).scheme == "https" and urlsplit(newurl).scheme != "https":
            raise urllib.error.URLError(f"refused redirect from https to {urlsplit(newurl).scheme}")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")  # credentials go to the index's own origin only
        return new


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.rsplit("@", 1)[-1].lower()


def _basic_auth(credentials: tuple[str, str] | None) -> dict[str, str]:
    if credentials is None:
        return {}
    token = base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode("utf-8")).decode("ascii")
    return {"Authorization": f"Basic {token}"}


class _Probe:
    """Mutable state of one running probe; the worker thread writes, the waiting thread snapshots."""

    def __init__(self, target: ProbeTarget) -> None:
        self.lock = threading.Lock()
        self.result = ProbeResult(name=target.name, index_url=target.index_url)
        self.first_byte_at: float | None = None
        self.first_chunk = 0
        self.last_byte_at: float | None = None
        self.done = threading.Event()

    def update(self, **changes: object) -> None:
        with self.lock:
            self.result = replace(self.result, **changes)  # type: ignore[arg-type]

    def snapshot(self, now: float, final: bool) -> ProbeResult:
        with self.lock:
            result = self.result
            first, last, first_chunk = self.first_byte_at, self.last_byte_at, self.first_chunk
        throughput = result.throughput_bps
        if throughput is None and first is not None and last is not None and last > first:
            throughput = (result.downloaded - first_chunk) / (last - first)
        if final and not self.done.is_set():
            if result.ttfb_s is None:
                return replace(result, status="timeout", error=result.error or "no answer before the deadline",
                               phase="done")
            result = replace(result, warnings=(*result.warnings, "download cut off at the deadline"))
        status = result.status
        if final and status == "pending":
            status = "ok" if throughput else "partial"
            if not throughput:
                result = replace(result, warnings=(*result.warnings, "download too short to measure throughput"))
        estimate = None
        if throughput and result.ttfb_s is not None:
            estimate = REFERENCE_REQUESTS * result.ttfb_s + REFERENCE_BYTES / throughput
        if final:
            return replace(result, status=status, throughput_bps=throughput, estimate_s=estimate, phase="done")
        return replace(result, throughput_bps=throughput, estimate_s=estimate)


def _describe(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}".strip()
    reason = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted ({reason.verify_message})"
    if isinstance(reason, ssl.SSLError):
        return f"TLS error ({reason.reason or reason})"
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "stalled: no data before the deadline"
    if isinstance(reason, ConnectionResetError):
        return "connection reset by the server"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, (http.client.RemoteDisconnected, http.client.IncompleteRead)):
        return "connection closed early"
    if isinstance(reason, socket.gaierror):
        return f"host not found ({reason.strerror})"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason)


def _run(target: ProbeTarget, config: ProbeConfig, context: ssl.SSLContext, state: _Probe, deadline: float) -> None:
    handlers: list[urllib.request.BaseHandler] = [_Redirects(config.allow_insecure)]
    handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    # urllib cannot connect to user:password@host; send the credentials as basic auth, as pip does, and only to
    # the index's own origin.
    index_url, credentials = split_credentials(target.index_url)
    index_agents = [a for a in config.agents if a.tool != "conda"]
    conda = next((a for a in config.agents if a.tool == "conda"), None)
    agents = index_agents or [ToolAgent("tfdist", __version__, f"tfdist-mirror/{__version__}")]
    plain = {"Accept": "text/html", "Accept-Encoding": "identity"}
    agent = agents[0]

    def headers_for(url: str) -> dict[str, str]:
        auth = _basic_auth(credentials) if _origin(url) == _origin(index_url) else {}
        return {**plain, "User-Agent": agent.user_agent, **auth}

    def remaining() -> float:
        return max(0.05, deadline - time.monotonic())

    try:
        project = config.package.project if config.package else config.project
        page_url = f"{index_url.rstrip('/')}/{project}/"
        page, final_url = None, page_url
        for agent in agents:  # the first tool the mirror does not refuse runs the speed probe
            started = time.monotonic()
            try:
                with opener.open(urllib.request.Request(page_url, headers=headers_for(page_url)),
                                 timeout=remaining()) as response:
                    state.update(ttfb_s=time.monotonic() - started, phase="index")
                    final_url = response.geturl()
                    page = response.read(PAGE_LIMIT)
                break
            except urllib.error.HTTPError as refused:
                if refused.code != 403 or not index_agents:
                    raise
                state.update(blocked_for=(*state.result.blocked_for, agent.tool),
                             warnings=(*state.result.warnings, _refused(agent)))
        if page is None:
            state.update(status="blocked", phase="done", error="; ".join(_refused(a) for a in agents), warnings=())
            return
        for other in agents[agents.index(agent) + 1:]:
            if _refuses(opener, page_url, {**headers_for(page_url), "User-Agent": other.user_agent}, remaining()):
                state.update(blocked_for=(*state.result.blocked_for, other.tool),
                             warnings=(*state.result.warnings, _refused(other)))
        if conda is not None and target.conda_channel:  # conda fetches <channel>/<subdir>/repodata.json
            channel_url = f"{target.conda_channel.rstrip('/')}/noarch/repodata.json"
            if _refuses(opener, channel_url, {**plain, "User-Agent": conda.user_agent}, remaining()):
                state.update(blocked_for=(*state.result.blocked_for, "conda"),
                             warnings=(*state.result.warnings, _refused(conda)))
        if config.package is not None:
            file_url, has_metadata = pick_pinned(page, final_url, config.package)
            if file_url is None:
                pin = config.package
                state.update(status="error", phase="done",
                             error=f"no wheel of {pin.name}=={pin.version} for this machine on the index page")
                return
        else:
            file_url, has_metadata = pick_wheel(page, final_url)
        if file_url is None:
            state.update(status="partial", error=f"no wheel of {config.project!r} on the index page", phase="done")
            return
        state.update(file_url=file_url)
        headers = headers_for(file_url)
        if config.check_metadata and has_metadata:
            state.update(phase="metadata")
            try:
                with opener.open(urllib.request.Request(file_url + ".metadata", headers=headers),
                                 timeout=remaining()) as response:
                    response.read(PAGE_LIMIT)
            except urllib.error.HTTPError as missing:
                state.update(warnings=(f"advertised .whl.metadata answers HTTP {missing.code}: pip and uv will fail "
                                       "on this mirror (like tuna/issues#2415)",))
        state.update(phase="download")
        requested = time.monotonic()
        limit = config.first_bytes if config.package is not None else config.max_bytes
        with opener.open(urllib.request.Request(file_url, headers=headers), timeout=remaining()) as response:
            received = 0
            while received < limit and time.monotonic() < deadline:
                try:
                    chunk = response.read1(min(CHUNK, limit - received))  # type: ignore[attr-defined]
                except (socket.timeout, TimeoutError):
                    if not received:
                        raise
                    # Data stopped flowing: judge the mirror on what arrived before the deadline.
                    state.update(warnings=(*state.result.warnings, "download cut off at the deadline"))
                    break
                if not chunk:
                    if config.package is not None:
                        state.update(first_mib_s=time.monotonic() - requested)  # a file smaller than a MiB
                    break
                now = time.monotonic()
                received += len(chunk)
                with state.lock:
                    if state.first_byte_at is None:
                        # Throughput is measured after the first chunk, so connection set-up is not counted.
                        state.first_byte_at, state.first_chunk = now, len(chunk)
                    state.last_byte_at = now
                    state.result = replace(state.result, downloaded=received)
                if config.package is not None and received >= limit:
                    state.update(first_mib_s=now - requested)
        state.update(phase="done")
    except Exception as error:  # noqa: BLE001 - every failure of a remote mirror becomes its result
        state.update(status="error", error=_describe(error), phase="done")
    finally:
        state.done.set()


def _refused(agent: ToolAgent) -> str:
    return (f"HTTP 403 to {agent.tool} {agent.version}'s User-Agent: blocked for {agent.tool}, which would report "
            "no versions here (like tuna/issues#2603)")


def _refuses(opener: urllib.request.OpenerDirector, url: str, headers: dict[str, str], timeout: float) -> bool:
    """Whether the index page answers these headers with HTTP 403 (any other outcome is the speed probe's)."""
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
            response.read(CHUNK)
    except urllib.error.HTTPError as error:
        return error.code == 403
    except Exception:  # noqa: BLE001 - a timeout or reset here says nothing about the User-Agent
        return False
    return False


def probe_all(targets: Sequence[ProbeTarget], config: ProbeConfig,
              on_update: Callable[[list[ProbeResult]], None] | None = None,
              clock: Callable[[], float] = time.monotonic) -> list[ProbeResult]:
    """Probe every target concurrently and return the results ranked best first.

    Args:
        targets: the mirrors to probe.
        config: timeout, project and download bound.
        on_update: called about ten times a second with the current (unranked) results, for live progress.
        clock: monotonic clock (injectable for tests).
    """
    deadline = clock() + config.timeout
    # One shared TLS context: loading the trust store once per thread would cost a noticeable part of the timeout.
    context = config.ssl_context or ssl.create_default_context()
    probes = [_Probe(target) for target in targets]
    for target, state in zip(targets, probes):
        threading.Thread(target=_run, args=(target, config, context, state, deadline), name=f"probe-{target.name}",
                         daemon=True).start()
    while True:
        now = clock()
        if all(p.done.is_set() for p in probes) or now >= deadline:
            break
        if on_update is not None:
            on_update([p.snapshot(now, final=False) for p in probes])
        next(p for p in probes if not p.done.is_set()).done.wait(min(0.1, max(0.0, deadline - now)))
    now = clock()
    results = [p.snapshot(now, final=True) for p in probes]
    if on_update is not None:
        on_update(results)
    return rank(results)


def rank(results: Sequence[ProbeResult]) -> list[ProbeResult]:
    """Order results best first: measured mirrors by estimated fetch time, then reachable ones by latency,
    then mirrors that refuse a tool, then failures, by name."""

    def key(result: ProbeResult) -> tuple[int, float, str]:
        if result.usable and result.first_mib_s is not None:
            return (0, result.first_mib_s, result.name)  # --package: the download users will really make
        if result.usable and result.status == "ok" and result.estimate_s is not None:
            return (1, result.estimate_s, result.name)
        if result.usable and result.ttfb_s is not None:
            return (2, result.ttfb_s, result.name)
        return (3 if result.blocked_for else 4, 0.0, result.name)

    return sorted(results, key=key)


def fastest(results: Sequence[ProbeResult]) -> ProbeResult | None:
    """The best usable mirror in ranked ``results``, if any."""
    for result in rank(results):
        if result.usable:
            return result
    return None


@dataclass(frozen=True)
class ProbeReport:
    """The ranked results and the wall time of the whole probe."""

    results: tuple[ProbeResult, ...]
    wall_s: float
    timeout: float
    extra: dict[str, object] = field(default_factory=dict)
