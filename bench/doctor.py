"""Benchmark: ``tfdist doctor --json`` against importing TensorFlow to ask for its GPUs.

Both run as whole processes, alternating, several rounds; the script prints each command's median wall time,
CPU time and peak RSS (from the child's own rusage, its reaped children included: ldconfig, ptxas), the median
of the per-round ratios for wall and CPU time with their range, and the load average before and after (on a shared
machine wall time follows the load; CPU time much less). Goals: >= 40x faster, <= 0.25 s and <= 60 MiB for the
doctor.

Run: .venv/bin/python bench/doctor.py [--rounds 7]

Byte-code: an installed package has its .pyc files; a checkout run with PYTHONDONTWRITEBYTECODE=1 would compile
tfdist on every start. By default the children share a temporary PYTHONPYCACHEPREFIX, filled by one untimed
warm-up round, so both commands run from cached byte-code as they would when installed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
GOAL_RATIO, GOAL_SECONDS, GOAL_MIB = 40.0, 0.25, 60.0


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float, float, int]:
    """Run ``argv``; return (wall seconds, CPU seconds, peak RSS MiB, exit status)."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, child.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (each runs both commands)")
    parser.add_argument("--no-pycache", action="store_true", help="keep the inherited byte-code settings")
    args = parser.parse_args()
    env = dict(os.environ)
    cache = None
    if not args.no_pycache:
        cache = tempfile.TemporaryDirectory(prefix="tfdist-bench-pyc-")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache.name
    commands = {
        "tfdist doctor --json": [str(BIN / "tfdist"), "doctor", "--json"],
        "import tensorflow; list GPUs": [
            str(BIN / "python"),
            "-c",
            "import tensorflow as tf; print(tf.config.list_physical_devices('GPU'))",
        ],
    }
    # Reference only (not in the ratio): the CLI's own floor, what any tfdist command pays before doing anything.
    floor_argv = [str(BIN / "tfdist"), "--version"]
    load_before = os.getloadavg()[0]
    for argv in [*commands.values(), floor_argv]:  # warm-up: page cache and byte-code, not timed
        run_once(argv, env)
    results: dict[str, list[tuple[float, float, float, int]]] = {name: [] for name in commands}
    for round_index in range(args.rounds):
        order = list(commands) if round_index % 2 == 0 else list(reversed(commands))  # alternate who goes first
        for name in order:
            results[name].append(run_once(commands[name], env))
    floor = [run_once(floor_argv, env) for _ in range(args.rounds)]
    print(f"{args.rounds} rounds, alternating; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, "
          f"on {os.cpu_count()} CPUs")
    medians = {}
    for name, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        rss = statistics.median(r[2] for r in runs)
        medians[name] = (wall, cpu, rss)
        statuses = sorted({r[3] for r in runs})
        print(f"  {name:32s} wall {wall:6.3f} s   cpu {cpu:6.3f} s   peak RSS {rss:6.1f} MiB   exit {statuses}")
    floor_wall, floor_cpu = statistics.median(r[0] for r in floor), statistics.median(r[1] for r in floor)
    print(f"  {'(reference) tfdist --version':32s} wall {floor_wall:6.3f} s   cpu {floor_cpu:6.3f} s")
    doctor, baseline = results["tfdist doctor --json"], results["import tensorflow; list GPUs"]
    ratios = [b[0] / d[0] for d, b in zip(doctor, baseline, strict=True)]
    ratio = statistics.median(ratios)
    cpu_ratios = [b[1] / d[1] for d, b in zip(doctor, baseline, strict=True) if d[1] > 0]
    cpu_ratio = statistics.median(cpu_ratios)
    wall, _, rss = medians["tfdist doctor --json"]
    print(f"  speed-up (median of per-round ratios): wall {ratio:.1f}x (rounds {min(ratios):.1f}-{max(ratios):.1f}), "
          f"cpu {cpu_ratio:.1f}x (rounds {min(cpu_ratios):.1f}-{max(cpu_ratios):.1f})")
    checks = [
        (f"wall speed-up >= {GOAL_RATIO:g}x", ratio >= GOAL_RATIO),
        (f"cpu speed-up >= {GOAL_RATIO:g}x", cpu_ratio >= GOAL_RATIO),
        (f"doctor wall <= {GOAL_SECONDS} s", wall <= GOAL_SECONDS),
        (f"doctor peak RSS <= {GOAL_MIB:g} MiB", rss <= GOAL_MIB),
    ]
    for label, ok in checks:
        print(f"  goal {label}: {'met' if ok else 'NOT met'}")
    if cache is not None:
        cache.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
