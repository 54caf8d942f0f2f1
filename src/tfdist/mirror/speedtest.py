"""``mirror test`` and the check before ``mirror use``: the concurrent probe plus, where mirrors publish it, their
PyPI sync age, all within one timeout."""
from __future__ import annotations

import sys
import threading
import time
from typing import Sequence

from tfdist.errors import TfdistError, UsageError
from tfdist.mirror.agents import ToolAgent, agents_for
from tfdist.mirror.catalog import Mirror, SyncSource, probe_defaults
from tfdist.mirror.probe import PackagePin, ProbeConfig, ProbeReport, ProbeTarget, probe_all
from tfdist.mirror.syncstatus import SyncState, fetch_all
from tfdist.mirror.urls import mask_secrets

CHECK_BYTES = 64 * 1024  # the check before `use` proves the mirror serves files; it does not rank


def probe_agents(tools: Sequence[str] | None = None) -> tuple[ToolAgent, ...]:
    """The User-Agents to probe with: those of the installed pip, uv and conda among ``tools`` (``None``: all)."""
    from tfdist.mirror.paths import TOOLS, ConfigPaths

    return agents_for([t for t in TOOLS if tools is None or t in tools], conda_root=ConfigPaths.from_env().conda_root)


def config_for(timeout: float, allow_insecure: bool, max_bytes: int | None = None,
               package: PackagePin | None = None, tools: Sequence[str] | None = None) -> ProbeConfig:
    """The probe settings for ``mirror test`` / ``use``: it asks as the installed pip and uv among ``tools`` do
    (``None``: both).

    Raises:
        UsageError: ``timeout`` outside (0, 600].
    """
    if not 0 < timeout <= 600:
        raise UsageError(f"--timeout {timeout} is out of range", hint="give seconds between 0 and 600")
    defaults = probe_defaults()
    return ProbeConfig(timeout=timeout, project=defaults.project, max_bytes=max_bytes or defaults.max_bytes,
                       allow_insecure=allow_insecure, package=package, agents=probe_agents(tools))


def _target(mirror: Mirror) -> ProbeTarget:
    """What to probe: the PyPI index, and the first ``defaults`` channel for conda's User-Agent check."""
    return ProbeTarget(mirror.name, mirror.pip_index or "", next(iter(mirror.conda_default_channels), None))


def run(mirrors: Sequence[Mirror], config: ProbeConfig, sync: dict[str, SyncSource] | None = None,
        live: bool = False) -> ProbeReport:
    """Probe ``mirrors`` and fetch the sync state of those that publish one, concurrently, in one timeout.

    ``report.extra["sync"]`` maps mirror name -> :class:`SyncState`; ``report.extra["now"]`` is the wall-clock
    time the ages are measured against.
    """
    targets = [_target(m) for m in mirrors if m.pip_index]
    if not targets:
        raise UsageError("no mirror to probe", hint="check --only")
    sources = {m.name: m.sync_status for m in mirrors if m.sync_status is not None}
    sources.update({k: v for k, v in (sync or {}).items() if any(m.name == k for m in mirrors)})
    states: dict[str, SyncState] = {}
    fetcher = threading.Thread(target=lambda: states.update(fetch_all(sources, config.timeout)), daemon=True)
    started = time.monotonic()
    fetcher.start()
    if live and sys.stdout.isatty():
        from tfdist.mirror.render import LiveProgress

        with LiveProgress() as progress:
            results = probe_all(targets, config, on_update=progress.update)
    else:
        results = probe_all(targets, config)
    fetcher.join(max(0.0, started + config.timeout - time.monotonic()) + 0.3)
    return ProbeReport(results=tuple(results), wall_s=time.monotonic() - started, timeout=config.timeout,
                       extra={"sync": dict(states), "now": time.time()})


def check_before_use(mirror: Mirror, timeout: float, allow_insecure: bool,
                     tools: Sequence[str] | None = None) -> None:
    """Refuse a mirror that does not answer, cannot serve a file or refuses a tool being switched (HTTP 403 to its
    User-Agent), before any config is changed.

    Raises:
        TfdistError: the mirror is unreachable or broken (exit status 1); the message says how to override.
    """
    if not mirror.pip_index:
        return
    config = ProbeConfig(timeout=timeout, project=probe_defaults().project, max_bytes=CHECK_BYTES,
                         allow_insecure=allow_insecure, check_metadata=True, agents=probe_agents(tools))
    (result,) = probe_all([_target(mirror)], config)
    broken = [w for w in result.warnings if ".whl.metadata" in w or "HTTP 403 to" in w]
    if not broken and not result.blocked_for and (result.status == "ok" or
                                                  (result.status == "partial" and result.file_url)):
        return
    problem = result.error or "; ".join(broken or result.warnings) or result.status
    raise TfdistError(
        f"mirror {mirror.name} ({mask_secrets(mirror.pip_index)}) failed the check before switching: {problem}; "
        "nothing was changed",
        hint="check the network or the URL, or pass --no-check to switch anyway",
        reference="mirror-check-failed",
    )
