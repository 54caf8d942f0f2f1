"""The hostile-value corpus and the harness that feeds it to a generator's CLI.

Every value is either refused (exit 2, one line on stderr naming the problem, nothing written, nothing on stdout) or
accepted, and then the test of that generator parses the output back with the real consumer and finds the value
exactly where it belongs. :class:`Tally` counts values and outcomes per generator for the report.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from tfdist.cli.main import main

# Commands the injection attempts run: a file named PWNED anywhere under the test folder means one succeeded.
PWN = "touch PWNED"
PIECES = {
    "newline": f"\n{PWN}\n", "cr": "\r", "crlf": "\r\n", "tab": "\t", "nul": "\0", "single-quote": "'",
    "double-quote": '"', "backtick": f"`{PWN}`", "dollar-paren": f"$({PWN})", "dollar-brace": "${HOME}",
    "semicolon": f";{PWN}", "hash": " #", "ampersand": f"&{PWN}&", "pipe": f"|{PWN}", "redirect": ">PWNED",
    "glob": "*", "tilde": "~", "backslash": "\\", "percent": "%j", "brace": "}", "colon": ":", "equals": "=",
    "slash": "/", "dotdot": "..", "dash": "--uid=0", "space": " x", "unicode": "é✓𝔘", "digits-arabic": "٣",
    "bidi": "\u202e", "zero-width": "\u200b", "line-separator": "\u2028", "next-line": "\x85", "escape": "\x1b[2J",
    "yaml": ": [x]", "json": '", "x": "', "dockerfile": "\nRUN touch PWNED",
}


def values(base: str, *, relative: bool = False) -> list[tuple[str, str]]:
    """Labelled hostile values derived from a valid ``base``: each piece alone, after and before the base, plus
    empty, 10 kB, and white space around the base. ``relative``: the value is a path that the test lets the tool
    create, so it must stay inside the test's folder (an absolute one gets a leading '.')."""
    found: dict[str, str] = {base: "base"}  # the control: proves the round-trip check runs
    for label, piece in PIECES.items():
        found.setdefault(piece, label)
        found.setdefault(base + piece, f"{label}-after")
        found.setdefault(piece + base, f"{label}-before")
    for label, value in (("empty", ""), ("10kB", base + "x" * 10_000), ("10kB-spaces", " " * 10_000),
                         ("leading-space", " " + base), ("trailing-space", base + " "),
                         ("trailing-newline", base + "\n"), ("leading-newline", "\n" + base)):
        found.setdefault(value, label)
    if relative:
        found = {("." + value if value.startswith("/") else value): label for value, label in found.items()}
    return [(label, value) for value, label in found.items()]


@dataclass
class Outcome:
    status: int
    out: str
    err: str
    created: list[Path]


def run_cli(argv: list[str], folder: Path, capsys: pytest.CaptureFixture[str]) -> Outcome:
    """Run ``tfdist ARGV`` in-process in ``folder`` and report what it left there."""
    folder.mkdir(parents=True, exist_ok=True)
    before = set(folder.rglob("*"))
    previous = os.getcwd()
    os.chdir(folder)
    try:
        status = main(argv)
    finally:
        os.chdir(previous)
    captured = capsys.readouterr()
    return Outcome(status, captured.out, captured.err, sorted(set(folder.rglob("*")) - before))


@dataclass
class Accepted:
    """A value the generator took: what to call it in a failure, the value, and where it ran."""

    what: str
    value: str
    folder: Path
    outcome: Outcome


def feed(generator: str, flag: str, base: str, argv_for: Callable[[str, str], list[str]], tmp_path: Path,
         capsys: pytest.CaptureFixture[str], *, relative: bool = False,
         prepare: Callable[[Path, str], None] | None = None) -> list[Accepted]:
    """Run the generator once per hostile value of ``flag`` (each in its own folder); check every refusal, tally it,
    and return the accepted values for the caller's round-trip checks (see :func:`confirm`)."""
    accepted = []
    for number, (label, value) in enumerate(values(base, relative=relative)):
        folder = tmp_path / str(number)
        if prepare is not None:
            prepare(folder, value)
        outcome = run_cli(argv_for(flag, value), folder, capsys)
        what = f"{flag} {label}: {value[:60]!r}"
        if outcome.status == 2:
            assert_refused_cleanly(outcome, what)
            TALLY.add(generator, flag, "refused")
            continue
        assert outcome.status == 0, (what, outcome.err)
        accepted.append(Accepted(what, value, folder, outcome))
    assert accepted, f"no value of {flag} was accepted: the round-trip check would never run"
    return accepted


def confirm(generator: str, flag: str, accepted: list[Accepted], check: Callable[[Accepted], None]) -> None:
    """Run the round-trip ``check`` on each accepted value, naming the value in a failure, and tally it."""
    for item in accepted:
        try:
            check(item)
        except (AssertionError, ValueError, StopIteration) as failure:
            raise AssertionError(f"{item.what}: {failure!r}") from None
        TALLY.add(generator, flag, "round-trip")
    TALLY.dump()


def assert_refused_cleanly(outcome: Outcome, what: str) -> None:
    """Exit 2, one line naming the problem, nothing written, nothing on stdout, no traceback."""
    assert outcome.status == 2, what
    assert outcome.out == "", what
    assert outcome.err.count("\n") == 1 and outcome.err.endswith("\n"), (what, outcome.err)
    assert "\r" not in outcome.err and "\0" not in outcome.err and "Traceback" not in outcome.err, what
    assert "error:" in outcome.err, (what, outcome.err)
    assert outcome.created == [], (what, outcome.created)


def assert_not_pwned(root: Path, what: str) -> None:
    hits = [p for p in root.rglob("PWNED")]
    assert hits == [], (what, hits)


def tool(name: str) -> str:
    """A consumer installed in the venv (dev extra) or on PATH; a missing one fails loudly rather than skipping."""
    found = Path(sys.executable).parent / name
    if found.exists():
        return str(found)
    located = shutil.which(name)
    assert located, f"{name} is needed for the hostile-input tests (pip install -e .[dev])"
    return located


def distinct(files: list[Path]) -> list[Path]:
    """One file per distinct content (integer flags give the same script for '2', ' 2' and '2 ')."""
    seen: dict[bytes, Path] = {}
    for path in files:
        seen.setdefault(path.read_bytes(), path)
    return list(seen.values())


def assert_shellcheck_clean(scripts: list[Path]) -> None:
    """shellcheck at its strictest (style), once over every distinct script."""
    lint = subprocess.run([tool("shellcheck"), "--severity=style", *map(str, distinct(scripts))],
                          capture_output=True, text=True, timeout=300)
    assert lint.returncode == 0, lint.stdout[-3000:]


@dataclass
class Tally:
    """Values tried per generator and flag, and how each ended."""

    counts: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)

    def add(self, generator: str, flag: str, outcome: str) -> None:
        per_flag = self.counts.setdefault(generator, {}).setdefault(flag, {"round-trip": 0, "refused": 0})
        per_flag[outcome] += 1

    def dump(self) -> None:
        target = os.environ.get("HOSTILE_COUNTS_FILE")
        if not target:
            return
        merged = json.loads(Path(target).read_text()) if Path(target).exists() else {}
        for generator, flags in self.counts.items():
            merged.setdefault(generator, {}).update(flags)
        Path(target).write_text(json.dumps(merged, indent=1, sort_keys=True))


TALLY = Tally()
