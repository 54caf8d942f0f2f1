"""A bench of this checkout side by side with the same bench of an older commit, in the same run (issue 19, item 6:
"bench/launch.py and bench/recovery.py within noise of today").

It makes a temporary ``git worktree`` of the baseline commit (default c69331f, the last commit before the launch room
was rebuilt; the worktree is removed at the end, on Ctrl-C and on SIGTERM too), then runs the named bench alternately
for the baseline and for this checkout, one round per call, several rounds (round 1: baseline first, round 2: current
first, ...). Each side runs its OWN copy of the bench script with its own src/ first on PYTHONPATH, under the same
Python (the one running this file). It parses the figures each call prints and ends with a table: figure | baseline
median | current median | median of the per-round ratios current/baseline, and the load average before and after.

Benches:
  launch    bench/launch.py parts (a) end-to-end wall time vs a hand-written shell start, and (b) teardown after a
            SIGKILL (plus the raw-TF survivor, which does not depend on tfdist), each call ``--rounds 1``. The current
            script would also run (c) and (d); it is given ``--only e2e,teardown`` when its --help offers it.
  recovery  bench/recovery.py fault trials, each call ``--trials 1 --skip-overhead --kinds K`` (and
            ``--skip-snapshot-overhead`` where the script has it; c69331f's copy does not). K = the kinds you ask for
            that BOTH copies know (c69331f: kill-cold, kill, hang, preempt; kill-nosnap is newer).

Output formats, as read in both copies (c69331f and main when this was written): both end with one JSON summary line
of the same shape (launch: e2e_ratio, teardown_median_s, raw_survivor_s; recovery: {kind: {figure: median}}), and
launch's _common.alternate prints "round N: tfdist = X" / "shell = X" the same way in both; those are what is parsed.
Differences: the current recovery.py also prints load-average lines (ignored here), and counts steps_lost differently
(newest heartbeat of any task after teardown, not clamped; c69331f: worker 1's heartbeat just before the fault,
clamped at 0), so steps_lost is marked as not comparable when the two copies differ in that way.

This is a bench, not a test: run it on an otherwise quiet machine. A round is one call per side. Seen on the shared
2-core machine under a load average of 10-20 (others' tests running): one launch call 5-6.5 min, one recovery call
with --kinds kill 5.5-6 min (each further kind adds roughly as much again); an idle machine is faster.

    /work/main/.venv/bin/python bench/side_by_side.py launch [--rounds 5] [--baseline c69331f] [--launch-job 1x10]
    /work/main/.venv/bin/python bench/side_by_side.py recovery [--rounds 5] [--kinds kill,hang] [--hang-timeout 5]
    (add --show-output to see every call's own output)
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from _common import PYTHON, REPO

SCRIPTS = {"launch": "bench/launch.py", "recovery": "bench/recovery.py"}
DEFAULT_BASELINE = "c69331f"
ROUND_LINE = re.compile(r"^\s*round \d+: (\S+) = ([-\d.infa]+)\s*$", re.M)
STEPS_LOST_NOTE = ("counted differently in the two copies (current: newest heartbeat of any task after teardown; "
                   "older: worker 1's heartbeat before the fault, clamped at 0): not comparable")


@dataclass
class Side:
    name: str  # "baseline" or "current"
    root: Path
    bench: str  # a key of SCRIPTS
    args: list[str] = field(default_factory=list)
    rounds: list[dict[str, float] | None] = field(default_factory=list)  # None: the call failed
    seconds: list[float] = field(default_factory=list)

    @property
    def script(self) -> Path:
        return self.root / SCRIPTS[self.bench]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _raise_interrupt(signum, frame):  # SIGTERM/SIGHUP take the same cleanup path as Ctrl-C
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def baseline_worktree(commit: str) -> Iterator[Path]:
    """A detached worktree of ``commit`` in a temporary folder, removed again whatever happens."""
    parent = Path(tempfile.mkdtemp(prefix="tfdist-side-by-side-"))
    path = parent / "baseline"
    try:
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(path), commit],
                       check=True, stdout=subprocess.DEVNULL)
        yield path
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(parent, ignore_errors=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def environment(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root / "src"), "TF_CPP_MIN_LOG_LEVEL": "2"}


def stop_group(process: subprocess.Popen) -> None:
    """Stop a call and everything it started: SIGINT (the bench and the launcher clean up), then SIGTERM, SIGKILL."""
    for sig, grace in ((signal.SIGINT, 15), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
            return


def call(side: Side, args: list[str], timeout: float, echo: str | None) -> tuple[int, str, float]:
    """Run the side's own bench script once; its exit status, output and seconds. Lines are echoed as they come
    (prefixed with ``echo``) when asked; a call past ``timeout`` is stopped and reads as exit 124."""
    started = time.perf_counter()
    process = subprocess.Popen([PYTHON, str(side.script), *args], cwd=side.root, env=environment(side.root),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        stop_group(process)

    watchdog = threading.Timer(timeout, expire)
    watchdog.start()
    lines: list[str] = []
    try:
        for line in process.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if echo is not None:
                print(f"{echo} {line}", end="", flush=True)
        process.wait()
    except BaseException:
        stop_group(process)
        raise
    finally:
        watchdog.cancel()
    seconds = time.perf_counter() - started
    if expired.is_set():
        lines.append(f"(no result within --call-timeout {timeout:.0f}s)\n")
        return 124, "".join(lines), seconds
    return process.returncode, "".join(lines), seconds


def help_text(side: Side) -> str:
    return subprocess.run([PYTHON, str(side.script), "--help"], cwd=side.root, env=environment(side.root),
                          capture_output=True, text=True, timeout=120).stdout


def kinds_known(source: str) -> list[str] | None:
    found = re.search(r'"--kinds",\s*default="([^"]+)"', source)
    return found.group(1).split(",") if found else None


def plan_args(bench: str, sides: list[Side], options: argparse.Namespace) -> list[str]:
    """Set each side's per-call arguments (only flags its own copy accepts); return the notes to print."""
    notes: list[str] = []
    if bench == "launch":
        for side in sides:
            side.args = ["--rounds", "1", "--raw-cap", str(options.raw_cap)]
            if options.launch_job:  # both copies take --epochs/--steps for (a)'s digits job
                epochs, steps = options.launch_job
                side.args += ["--epochs", str(epochs), "--steps", str(steps)]
            if "teardown" in help_text(side):
                side.args += ["--only", "e2e,teardown"]
        return notes
    wanted = options.kinds.split(",")
    for side in sides:
        known = kinds_known(side.script.read_text())
        if known is not None:
            dropped = [k for k in wanted if k not in known]
            if dropped:
                notes.append(f"kinds {','.join(dropped)} dropped: not in the {side.name} copy ({','.join(known)})")
            wanted = [k for k in wanted if k in known]
    if not wanted:
        raise SystemExit("bench/side_by_side.py: --kinds: no kind known to both copies; fix --kinds")
    for side in sides:
        side.args = ["--trials", "1", "--hang-timeout", str(options.hang_timeout), "--skip-overhead",
                     "--kinds", ",".join(wanted)]
        if "--skip-snapshot-overhead" in help_text(side):
            side.args.append("--skip-snapshot-overhead")
    counting = {"last_finished_step" in side.script.read_text() for side in sides}
    if len(counting) > 1:
        notes.append(f"steps_lost {STEPS_LOST_NOTE}")
    return notes


def figures(bench: str, output: str) -> dict[str, float]:
    """The figures one call printed: its JSON summary line (flattened) and, for launch, the per-round wall times."""
    found: dict[str, float] = {}
    summary = None
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                summary = json.loads(line)
                break
    if summary is None:
        return found
    for key, value in summary.items():
        if isinstance(value, dict):
            found.update({f"{key}: {k}": float(v) for k, v in value.items() if isinstance(v, (int, float))})
        elif isinstance(value, (int, float)):
            found[key] = float(value)
    if bench == "launch":
        for name, value in ROUND_LINE.findall(output):
            found[f"e2e_{name}_s"] = float(value)
    return found


def ratio(current: float, baseline: float) -> float | None:
    if baseline == 0 or not (math.isfinite(current) and math.isfinite(baseline)):
        return None
    return current / baseline


def median_of(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not values:
        return "-"
    text = f"{statistics.median(finite):.3f}" if finite else "inf"
    return text + (f" ({len(values) - len(finite)} inf)" if finite and len(finite) < len(values) else "")


def table(baseline: Side, current: Side, notes: list[str]) -> str:
    names: list[str] = []
    for round_figures in baseline.rounds + current.rounds:
        names += [n for n in (round_figures or {}) if n not in names]
    rows = [("figure", "baseline median", "current median", "median ratio cur/base", "rounds")]
    for name in names:
        base = [r[name] for r in baseline.rounds if r and name in r]
        cur = [r[name] for r in current.rounds if r and name in r]
        ratios = [q for b, c in zip(baseline.rounds, current.rounds) if b and c and name in b and name in c
                  if (q := ratio(c[name], b[name])) is not None]
        shown = f"{statistics.median(ratios):.3f}" if ratios else "n/a"
        if name.endswith("steps_lost") and any(STEPS_LOST_NOTE in n for n in notes):
            shown = "not comparable"
        rows.append((name, median_of(base), median_of(cur), shown, f"{len(base)}/{len(cur)}"))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def compare(bench: str, baseline_root: Path, options: argparse.Namespace) -> bool:
    baseline, current = Side("baseline", baseline_root, bench), Side("current", REPO, bench)
    for side in (baseline, current):
        if not side.script.exists():
            raise SystemExit(f"bench/side_by_side.py: {side.name} has no {SCRIPTS[bench]}; pick another --baseline")
    notes = plan_args(bench, [baseline, current], options)
    print(f"== {bench}: baseline {options.baseline} ({baseline_root}) vs current ({REPO}), {options.rounds} rounds")
    print(f"   baseline call: {SCRIPTS[bench]} {' '.join(baseline.args)}")
    print(f"   current call:  {SCRIPTS[bench]} {' '.join(current.args)}")
    for note in notes:
        print(f"   note: {note}")
    print(f"   load average before: {load()}", flush=True)
    for r in range(options.rounds):
        for side in (baseline, current) if r % 2 == 0 else (current, baseline):
            echo = f"   [{side.name} {r + 1}]" if options.show_output else None
            rc, output, seconds = call(side, side.args, options.call_timeout, echo)
            found = figures(bench, output) if rc == 0 else {}
            side.rounds.append(found or None)
            side.seconds.append(seconds)
            if found:
                shown = ", ".join(f"{k}={v:.3f}" for k, v in found.items())
                print(f"   round {r + 1} {side.name} ({seconds:.0f}s, load {load()}): {shown}", flush=True)
            else:
                tail = "\n".join(f"      {line}" for line in output.splitlines()[-20:])
                print(f"   round {r + 1} {side.name} FAILED (exit {rc}, {seconds:.0f}s); last lines:\n{tail}",
                      flush=True)
    print(f"   load average after: {load()}; seconds per call (median): baseline "
          f"{statistics.median(baseline.seconds):.0f}, current {statistics.median(current.seconds):.0f}")
    print(table(baseline, current, notes), flush=True)
    return all(baseline.rounds) and all(current.rounds)


def _job(text: str) -> tuple[int, int]:
    found = re.fullmatch(r"(\d+)x(\d+)", text)
    if not found or min(int(found.group(1)), int(found.group(2))) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected EPOCHSxSTEPS, e.g. 1x10")
    return int(found.group(1)), int(found.group(2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benches", nargs="*", metavar="BENCH",
                        help=f"which benches to compare: {' '.join(SCRIPTS)} (default: all)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="commit to compare with (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds, one call per side each")
    parser.add_argument("--kinds", default="kill,hang", help="recovery: faults to compare (default: %(default)s)")
    parser.add_argument("--hang-timeout", type=float, default=5.0, help="recovery: --hang-timeout for both copies")
    parser.add_argument("--raw-cap", type=float, default=60.0, help="launch: --raw-cap for both copies")
    parser.add_argument("--launch-job", type=_job, default=None, metavar="EPOCHSxSTEPS",
                        help="launch: (a)'s digits job for both copies, e.g. 1x10 for a shorter run (default: the "
                             "scripts' own, 2x30)")
    parser.add_argument("--call-timeout", type=float, default=1800.0, help="seconds one call may take")
    parser.add_argument("--show-output", action="store_true", help="print every call's own output")
    options = parser.parse_args()
    if options.rounds < 1:
        parser.error("--rounds: must be at least 1")
    unknown = [b for b in options.benches if b not in SCRIPTS]
    if unknown:
        parser.error(f"unknown bench {' '.join(unknown)}; choose from {' '.join(SCRIPTS)}")
    benches = list(dict.fromkeys(options.benches)) or list(SCRIPTS)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet",
                             f"{options.baseline}^{{commit}}"], capture_output=True, text=True).stdout.strip()
    if not commit:
        print(f"bench/side_by_side.py: --baseline {options.baseline}: not a commit of {REPO}; give a commit",
              file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)
    started = time.perf_counter()
    try:
        with baseline_worktree(commit) as root:
            ok = [compare(bench, root, options) for bench in benches]
    except KeyboardInterrupt:
        print("interrupted: the baseline worktree was removed", file=sys.stderr)
        return 130
    print(f"total {time.perf_counter() - started:.0f}s")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
