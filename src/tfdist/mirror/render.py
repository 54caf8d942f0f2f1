"""Human output of ``tfdist mirror`` (rich tables) and the plain data behind ``--json``.

Every string shown or emitted goes through :func:`~tfdist.mirror.urls.mask_secrets`, so an index password never
reaches a terminal, a log or a JSON consumer.
"""
from __future__ import annotations

import textwrap
from typing import Any, Sequence

from tfdist.mirror.backup import RestoreAction
from tfdist.mirror.catalog import Mirror
from tfdist.mirror.probe import ProbeResult
from tfdist.mirror.status import ToolStatus
from tfdist.mirror.switch import SwitchResult
from tfdist.mirror.urls import mask_data, mask_secrets


class _MaskingConsole:
    """A rich console whose printed strings and table cells are masked."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(highlight=False, soft_wrap=True)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console.print(*[mask_secrets(o) if isinstance(o, str) else o for o in objects], **kwargs)

    def __getattr__(self, name: str) -> Any:  # width, size...: the wrapped console's
        return getattr(self.console, name)


def _console() -> Any:
    return _MaskingConsole()


def _row(table: Any, *cells: Any) -> None:
    """Add a row of plain text: masked, and never read as rich markup (``[global]`` stays visible)."""
    from rich.markup import escape

    table.add_row(*[escape(mask_secrets(c)) if isinstance(c, str) else c for c in cells])


def _speed(bps: float | None) -> str:
    if not bps:
        return "-"
    return f"{bps / 1e6:.2f} MB/s" if bps >= 1e5 else f"{bps / 1e3:.1f} kB/s"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def mirror_rows(mirrors: Sequence[Mirror]) -> list[dict[str, Any]]:
    """Plain data for ``mirror list --json``."""
    return mask_data([
        {
            "name": m.name, "title": m.title, "pip_index": m.pip_index,
            "conda_default_channels": list(m.conda_default_channels),
            "conda_custom_channels": dict(m.conda_custom_channels), "notes": list(m.notes),
            "sources": list(m.sources), "adhoc": m.adhoc, "aliases": list(m.aliases),
            "sync_status": m.sync_status.__dict__ if m.sync_status else None,
        }
        for m in mirrors
    ])  # type: ignore[return-value]


# Below this many columns the catalog table could only fit by breaking index addresses: a list is printed instead.
_TABLE_WIDTH = 140


def _conda_names(m: Mirror) -> list[str]:
    return (["defaults"] if m.conda_default_channels else []) + list(m.conda_custom_channels)


def _print_list_narrow(mirrors: Sequence[Mirror], console: Any) -> None:
    for m in mirrors:
        console.print(f"{m.name}  {m.title}", markup=False, highlight=False)
        console.print(f"  index: {m.pip_index or '-'}", markup=False, highlight=False, overflow="ignore", crop=False)
        console.print(f"  conda: {', '.join(_conda_names(m)) or '-'}", markup=False, highlight=False)
        for note in m.notes:  # wrapped here, between words: the console soft-wraps (mid-word) otherwise
            console.print(textwrap.fill(note, width=max(40, console.width), initial_indent="  note:  ",
                                        subsequent_indent="         ", break_long_words=False), markup=False)


def print_list(mirrors: Sequence[Mirror]) -> None:
    """The catalog as a table."""
    from rich.table import Table

    console = _console()
    if console.width < _TABLE_WIDTH:
        _print_list_narrow(mirrors, console)
        return
    table = Table(title="Package mirrors", show_lines=False)
    for column in ("name", "title", "pip / uv index", "conda", "notes"):
        # An index address is copied as a whole: it is never broken; the prose columns wrap between words instead.
        table.add_column(column, overflow="fold", no_wrap=column in ("name", "pip / uv index"))
    for m in mirrors:
        _row(table, m.name + (f" ({', '.join(m.aliases)})" if m.aliases else ""), m.title, m.pip_index or "-",
             ", ".join(_conda_names(m)) or "-", "\n".join(m.notes))
    console.print(table)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _sync(extra: dict[str, Any] | None, name: str) -> tuple[Any, float | None]:
    state = ((extra or {}).get("sync") or {}).get(name)
    if state is None:
        return None, None
    return state, state.age_s((extra or {}).get("now", 0.0))


def result_rows(results: Sequence[ProbeResult], extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Plain data for ``mirror test --json``."""
    rows = []
    for i, r in enumerate(results):
        state, age = _sync(extra, r.name)
        rows.append({
            "rank": i + 1 if r.usable else None, "name": r.name, "index_url": r.index_url, "status": r.status,
            "ttfb_s": r.ttfb_s, "throughput_bytes_per_s": r.throughput_bps, "downloaded_bytes": r.downloaded,
            "estimate_s": r.estimate_s, "first_mib_s": r.first_mib_s, "file_url": r.file_url, "error": r.error,
            "warnings": list(r.warnings), "blocked_for": list(r.blocked_for),
            "sync": None if state is None else {"state": state.state, "age_s": age,
                                                "last_success_unix": state.last_success, "error": state.error},
        })
    return mask_data(rows)  # type: ignore[return-value]


def results_table(results: Sequence[ProbeResult], *, title: str, ranked: bool, extra: dict[str, Any] | None = None,
                  package: str | None = None) -> Any:
    """A rich table of probe results (live or final)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    columns = ["#", "mirror", "status", "first byte", "first MiB" if package else "throughput", "PyPI synced", "note"]
    for column in columns:
        table.add_column(column, overflow="fold")
    styles = {"ok": "green", "partial": "yellow", "error": "red", "timeout": "red", "pending": "cyan",
              "blocked": "red"}
    for i, r in enumerate(results):
        status = r.status if r.status != "pending" else r.phase
        if r.blocked_for:
            status = "blocked for " + ", ".join(r.blocked_for)
        note = r.error or "; ".join(r.warnings)
        state, age = _sync(extra, r.name)
        synced = "-" if state is None else (f"{_age(age)} ago ({state.state})" if age is not None
                                            else (state.state or "unknown"))
        speed = (f"{r.first_mib_s:.2f} s" if r.first_mib_s is not None else "-") if package else \
            _speed(r.throughput_bps)
        _row(table, str(i + 1) if ranked and r.usable else "", r.name,
             Text(status, style="red" if r.blocked_for else styles.get(r.status, "white")), _ms(r.ttfb_s), speed,
             synced, note)
    return table


def print_results(results: Sequence[ProbeResult], wall_s: float, extra: dict[str, Any] | None = None,
                  package: str | None = None) -> None:
    """The ranked table and the verdict."""
    console = _console()
    what = f" for {package}" if package else ""
    console.print(results_table(results, title=f"Mirror speed test{what} ({wall_s:.1f} s)", ranked=True,
                                extra=extra, package=package))
    for r in results:
        if r.blocked_for:
            console.print(f"{r.name} answers {' and '.join(r.blocked_for)} with HTTP 403 (a firewall on its "
                          "User-Agent): blocked for it, never picked", markup=False)
    best = next((r for r in results if r.usable), None)
    if best is None:
        console.print("[red]No mirror answered.[/] Check the network, or raise --timeout.")
    else:
        console.print(f"Fastest{what}: [bold]{best.name}[/] - switch with: tfdist mirror use {best.name}")


class LiveProgress:
    """Live-updating table while the probe runs (only on a terminal)."""

    def __init__(self) -> None:
        from rich.live import Live

        self.live = Live(console=_console(), refresh_per_second=10, transient=True)

    def __enter__(self) -> "LiveProgress":
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def update(self, results: list[ProbeResult]) -> None:
        """Show the current state of every probe."""
        self.live.update(results_table(results, title="Probing mirrors...", ranked=False))


def switch_data(result: SwitchResult) -> dict[str, Any]:
    """Plain data for ``mirror use --json``."""
    return mask_data({  # type: ignore[return-value]
        "mirror": result.mirror.name, "index": result.mirror.pip_index, "applied": result.applied,
        "changes": [
            {"tool": c.tool, "scope": c.scope, "path": str(c.file.path), "created": not c.file.exists,
             "changed": c.changed, "notes": list(c.notes), "diff": c.diff()}
            for c in result.changes
        ],
        "skipped": [{"tool": s.tool, "reason": s.reason} for s in result.skipped],
        "followups": list(result.followups),
        "took_effect": result.took_effect,
        "overridden": [{"tool": o.tool, "command": o.command, "index": o.index, "source": o.source}
                       for o in result.overridden],
        "mismatches": [{"tool": o.tool, "command": o.command, "index": o.index, "source": o.source}
                       for o in result.mismatches],
        "unverified": list(result.unverified),
    })


def print_switch(result: SwitchResult, *, dry_run: bool) -> None:
    """Diffs (dry run) or a summary of what was written."""
    console = _console()
    for change in result.changes:
        if dry_run:
            if change.changed:
                console.print(change.diff(), end="", markup=False)
            else:
                console.print(f"{change.tool}: {change.file.path} already uses {result.mirror.name}", markup=False)
        else:
            verb = "unchanged" if not change.changed else ("created" if not change.file.exists else "updated")
            console.print(f"{change.tool}: {verb} {change.file.path}", markup=False)
        for note in change.notes:
            console.print(f"  note: {note}", markup=False)
    for skip in result.skipped:
        console.print(f"{skip.tool}: skipped ({skip.reason})", markup=False)
    for line in result.followups:
        console.print(line, markup=False)
    for item in result.overridden:
        console.print(f"{item.tool}: not in effect: {item.describe()}", markup=False)
    for item in result.mismatches:
        index = item.index or "its built-in default"
        console.print(f"{item.tool}: mismatch: '{item.command}' uses {index} according to {item.source}",
                      markup=False)
    for line in result.unverified:
        console.print(f"not verified: {line}", markup=False)
    if dry_run:
        console.print("(dry run: nothing was written)")
    elif not result.took_effect:
        console.print(f"The files were written, but {result.mirror.name} is NOT in effect for the commands above. "
                      "Remove what overrides it, or undo with: tfdist mirror restore", markup=False)
    else:
        console.print(f"Now using {result.mirror.name}. Undo with: tfdist mirror restore", markup=False)


STATUS_SCHEMA_VERSION = 2  # 2: one row per real command, with the file:line or variable that decides it


def status_data(statuses: Sequence[ToolStatus], backups: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Plain data for ``mirror status --json``."""
    from tfdist.mirror.status import mirror_of

    return mask_data({  # type: ignore[return-value]
        "tools": [
            {"tool": s.tool, "mirror": s.mirror, "index": s.index, "source": s.source,
             "commands": [{"command": c.command, "index": c.index, "mirror": mirror_of(c), "source": c.source}
                          for c in s.commands],
             "problems": list(s.problems)}
            for s in statuses
        ],
        "backups": list(backups),
    })


def print_status(statuses: Sequence[ToolStatus], backups: Sequence[dict[str, Any]]) -> None:
    """What each real command uses and where that comes from."""
    from rich.table import Table

    from tfdist.mirror.status import mirror_of

    table = Table(title="Package index each command will use")
    for column in ("command", "mirror", "index / channel", "set by"):
        table.add_column(column, overflow="fold")
    for s in statuses:
        for c in s.commands:
            label = c.command if c.command.startswith(s.tool) else f"{s.tool} {c.command}"
            _row(table, label, mirror_of(c) or "(other)", c.index or "-", c.source)
    console = _console()
    console.print(table)
    for s in statuses:
        for problem in s.problems:
            from rich.markup import escape

            console.print(f"[yellow]warning[/] {s.tool}: {escape(problem)}")
    if backups:
        console.print(f"{len(backups)} file(s) changed by tfdist can be restored with 'tfdist mirror restore':")
        for b in backups:
            console.print(f"  {b['tool']}: {b['path']}" + ("" if b["existed"] else " (created by tfdist)"),
                          markup=False)


def print_restore(actions: Sequence[RestoreAction], *, dry_run: bool) -> None:
    """What restore did."""
    console = _console()
    if not actions:
        console.print("Nothing to restore: tfdist has not changed any file.")
        return
    for a in actions:
        verb = {"restored": "restored", "deleted": "removed (did not exist before)",
                "already-absent": "already absent"}[a.action]
        prefix = "would be " if dry_run and a.action != "already-absent" else ""
        console.print(f"{a.entry.tool}: {a.entry.path} {prefix}{verb}", markup=False)
        if a.note:
            console.print(f"  note: {a.note}", markup=False)
