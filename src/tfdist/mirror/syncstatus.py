"""How long ago a mirror last finished syncing PyPI, from the status document the mirror site publishes.

Two formats, both read from their projects' own code and docs:

* tunasync (``tuna/tunasync`` ``internal/status_web.go``, ``WebMirrorStatus``): a JSON array of jobs, each with
  ``name``, ``status`` (``success``, ``syncing``, ``failed``...), ``last_update_ts`` (Unix time of the last
  successful sync) and ``last_ended_ts``. TUNA and BFSU publish it at ``/static/tunasync.json``.
* MirrorZ (``mirrorz-org/mirrorz`` README, data format 1.x): ``{"mirrors": [{"cname", "status"}]}`` where
  ``status`` concatenates ``[A-Z](\\d+)?`` items: ``S<ts>`` success (last successful end), ``Y<ts>`` syncing,
  ``F<ts>`` failed, ``P<ts>`` paused, ``U`` unknown, and ``O<ts>`` (the last success while syncing or failed).
"""
from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tfdist import __version__
from tfdist.mirror.catalog import SyncSource

DOCUMENT_LIMIT = 8 * 1024 * 1024
_MIRRORZ_ITEM = re.compile(r"([A-Z])(\d*)")
_MIRRORZ_STATES = {"S": "success", "Y": "syncing", "F": "failed", "P": "paused", "U": "unknown"}


@dataclass(frozen=True)
class SyncState:
    """A mirror's PyPI sync state: ``state`` as the site words it, the Unix time of the last successful sync
    (``None`` if the document gives none) and, when that could not be read, why."""

    state: str | None = None
    last_success: float | None = None
    error: str | None = None

    def age_s(self, now: float) -> float | None:
        """Seconds since the last successful sync."""
        return None if self.last_success is None else max(0.0, now - self.last_success)


def parse_tunasync(document: Any, job: str) -> SyncState:
    """Read job ``job`` from a tunasync status array."""
    if not isinstance(document, list):
        return SyncState(error="not a tunasync status array")
    for item in document:
        if isinstance(item, dict) and item.get("name") == job:
            stamp = item.get("last_update_ts")
            last = float(stamp) if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) and stamp > 0 \
                else None
            return SyncState(state=str(item.get("status") or "unknown"), last_success=last)
    return SyncState(error=f"no job {job!r} in the status document")


def parse_mirrorz_status(text: str) -> SyncState:
    """Decode one MirrorZ status string such as ``S1612195849X1612196849N``."""
    items = _MIRRORZ_ITEM.findall(text or "")
    if not items or "".join(f"{k}{v}" for k, v in items) != text:
        return SyncState(error=f"unreadable MirrorZ status {text!r}")
    main = next(((k, v) for k, v in items if k in _MIRRORZ_STATES), None)
    if main is None:
        return SyncState(error=f"no main state in MirrorZ status {text!r}")
    state = _MIRRORZ_STATES[main[0]]
    last = float(main[1]) if main[0] == "S" and main[1] else None
    if last is None:
        old = next((v for k, v in items if k == "O" and v), None)
        last = float(old) if old else None
    return SyncState(state=state, last_success=last)


def parse_mirrorz(document: Any, cname: str) -> SyncState:
    """Read mirror ``cname`` from a ``mirrorz.json`` document."""
    mirrors = document.get("mirrors") if isinstance(document, dict) else None
    if not isinstance(mirrors, list):
        return SyncState(error="not a mirrorz.json document")
    for item in mirrors:
        if isinstance(item, dict) and str(item.get("cname", "")).lower() == cname.lower():
            return parse_mirrorz_status(str(item.get("status", "")))
    return SyncState(error=f"no mirror {cname!r} in mirrorz.json")


PARSERS: dict[str, Callable[[Any, str], SyncState]] = {"tunasync": parse_tunasync, "mirrorz": parse_mirrorz}


def fetch(source: SyncSource, timeout: float) -> SyncState:
    """Download and parse one status document (certificates verified; a failure becomes ``error``)."""
    request = urllib.request.Request(source.url, headers={"User-Agent": f"tfdist-mirror/{__version__}",
                                                          "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            document = json.loads(response.read(DOCUMENT_LIMIT))
    except Exception as error:  # noqa: BLE001 - a site without a readable status just has no sync age
        return SyncState(error=f"status document unavailable ({getattr(error, 'reason', error)})")
    return PARSERS[source.format](document, source.name)


def fetch_all(sources: Mapping[str, SyncSource], timeout: float) -> dict[str, SyncState]:
    """Fetch every mirror's status concurrently; all done within about ``timeout`` seconds."""
    results: dict[str, SyncState] = {}
    deadline = time.monotonic() + timeout

    def one(name: str, source: SyncSource) -> None:
        results[name] = fetch(source, max(0.05, deadline - time.monotonic()))

    threads = [threading.Thread(target=one, args=item, daemon=True) for item in sources.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()) + 0.2)
    return {name: results.get(name, SyncState(error="no answer before the deadline")) for name in sources}
