"""Human output of ``tfdist mirror`` (rich tables) and the plain data behind ``--json``."""
from __future__ import annotations

import textwrap
from typing import Any, Sequence

from tfdist.mirror.backup import RestoreAction
from tfdist.mirror.catalog import Mirror
from tfdist.mirror.probe import ProbeResult
from tfdist.mirror.status import ToolStatus
from tfdist.mirror.switch import SwitchResult


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _speed(bps: float | None) -> str:
    if not bps:
        return "-"
    return f"{bps / 1e6:.2f} MB/s" if bps >= 1e5 else f"{bps / 1e3:.1f} kB/s"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def mirror_rows(mirrors: Sequence[Mirror]) -> list[dict[str, Any]]:
    """Plain data for ``mirror list --json``."""
    return [
        {
            "name": m.name, "title": m.title, "pip_index": m.pip_index,
            "conda_default_channels": list(m.conda_default_channels),
            "conda_custom_channels": dict(m.conda_custom_channels), "notes": list(m.notes),
            "sources": list(m.sources), "adhoc": m.adhoc,
        }
        for m in mirrors
    ]


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
        table.add_row(m.name, m.title, m.pip_index or "-", ", ".join(_conda_names(m)) or "-", "\n".join(m.notes))
    console.print(table)


def result_rows(results: Sequence[ProbeResult]) -> list[dict[str, Any]]:
    """Plain data for ``mirror test --json``."""
    return [
        {
            "rank": i + 1 if r.usable else None, "name": r.name, "index_url": r.index_url, "status": r.status,
            "ttfb_s": r.ttfb_s, "throughput_bytes_per_s": r.throughput_bps, "downloaded_bytes": r.downloaded,
            "estimate_s": r.estimate_s, "file_url": r.file_url, "error": r.error, "warnings": list(r.warnings),
        }
        for i, r in enumerate(results)
    ]


def results_table(results: Sequence[ProbeResult], *, title: str, ranked: bool) -> Any:
    """A rich table of probe results (live or final)."""
    from rich.table import Table

    table = Table(title=title)
    for column in ("#", "mirror", "status", "first byte", "throughput", "note"):
        table.add_column(column, overflow="fold")
    styles = {"ok": "green", "partial": "yellow", "error": "red", "timeout": "red", "pending": "cyan"}
    for i, r in enumerate(results):
        status = r.status if r.status != "pending" else r.phase
        note = r.error or "; ".join(r.warnings)
        table.add_row(str(i + 1) if ranked and r.usable else "", r.name,
                      f"[{styles.get(r.status, 'white')}]{status}[/]", _ms(r.ttfb_s), _speed(r.throughput_bps), note)
    return table


def print_results(results: Sequence[ProbeResult], wall_s: float) -> None:
    """The ranked table and the verdict."""
    console = _console()
    console.print(results_table(results, title=f"Mirror speed test ({wall_s:.1f} s)", ranked=True))
    best = next((r for r in results if r.usable), None)
    if best is None:
        console.print("[red]No mirror answered.[/] Check the network, or raise --timeout.")
    else:
        console.print(f"Fastest: [bold]{best.name}[/] - switch with: tfdist mirror use {best.name}")


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
    return {
        "mirror": result.mirror.name, "index": result.mirror.pip_index, "applied": result.applied,
        "changes": [
            {"tool": c.tool, "scope": c.scope, "path": str(c.file.path), "created": not c.file.exists,
             "changed": c.changed, "notes": list(c.notes), "diff": c.diff()}
            for c in result.changes
        ],
        "skipped": [{"tool": s.tool, "reason": s.reason} for s in result.skipped],
        "followups": list(result.followups),
    }


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
    if dry_run:
        console.print("(dry run: nothing was written)")
    elif any(c.changed for c in result.changes):
        console.print(f"Now using {result.mirror.name}. Undo with: tfdist mirror restore", markup=False)


def status_data(statuses: Sequence[ToolStatus], backups: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Plain data for ``mirror status --json``."""
    return {
        "tools": [
            {"tool": s.tool, "index": s.index, "mirror": s.mirror, "source": s.source, "problems": list(s.problems),
             **({"details": s.details} if s.details else {})}
            for s in statuses
        ],
        "backups": list(backups),
    }


def print_status(statuses: Sequence[ToolStatus], backups: Sequence[dict[str, Any]]) -> None:
    """What each tool uses and where that comes from."""
    from rich.table import Table

    table = Table(title="Package index in use")
    for column in ("tool", "mirror", "index / first channel", "from"):
        table.add_column(column, overflow="fold")
    for s in statuses:
        table.add_row(s.tool, s.mirror or "(other)", s.index or "-", s.source)
    console = _console()
    console.print(table)
    for s in statuses:
        for problem in s.problems:
            console.print(f"[yellow]warning[/] {s.tool}: {problem}")
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
