"""Benchmark of ``tfdist mirror test`` against 10 loopback mirrors with set latency and throughput.

Figures printed:
1. wall time of the concurrent probe (goal: <= timeout + 0.3 s) and of the same probe run one mirror after another,
   as chsrc does (alternating, several rounds; median ratio);
2. the share of trials in which the ranking picks the truly fastest mirror when the fastest is at least 20 % faster
   than the runner-up (goal: 100 %). "Truly fastest" uses the configured latency and rate in the same install model
   the ranking uses (REFERENCE_REQUESTS round trips plus REFERENCE_BYTES);
3. ``--package`` mode (``mirror test --package tensorflow==2.21.0``): the share of trials in which the ranking by
   time to the first MiB of the pinned wheel picks the truly fastest mirror for that download (configured latency
   plus 1 MiB at the configured rate, >= 20 % margin; goal 100 %), and its probe wall time.

Run: ``.venv/bin/python bench/mirror.py [--trials 50] [--rounds 5] [--timeout 3] [--package-trials 30]``
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.mirror.conftest_helpers import start_mirror  # noqa: E402
from tests.fixtures.mirror.loopback import Behaviour, LoopbackMirror, Wheel, _random_bytes  # noqa: E402
from tfdist.mirror.probe import (FIRST_BYTES, REFERENCE_BYTES, REFERENCE_REQUESTS, PackagePin, ProbeConfig,  # noqa: E402
                                 ProbeTarget, fastest, probe_all)

N_MIRRORS = 10
FILE_BYTES = 2 * 1024 * 1024


def true_cost(behaviour: Behaviour) -> float:
    """Expected install time of a mirror in the ranking's own model, from its configured latency and rate."""
    assert behaviour.rate is not None
    return REFERENCE_REQUESTS * behaviour.latency + REFERENCE_BYTES / behaviour.rate


def configure(mirrors: list[LoopbackMirror], rng: random.Random, margin: float) -> int:
    """Give every mirror a random latency and rate such that the best is >= ``margin`` faster than the runner-up;
    return the index of the truly fastest."""
    while True:
        behaviours = [Behaviour(latency=rng.uniform(0.005, 0.06), rate=rng.uniform(1.0e6, 6.0e6))
                      for _ in mirrors]
        costs = sorted((true_cost(b), i) for i, b in enumerate(behaviours))
        if costs[1][0] >= costs[0][0] * (1 + margin):
            for mirror, behaviour in zip(mirrors, behaviours):
                mirror.behaviour = behaviour
            return costs[0][1]


def concurrent(targets: list[ProbeTarget], config: ProbeConfig) -> tuple[float, list]:
    started = time.monotonic()
    results = probe_all(targets, config)
    return time.monotonic() - started, results


def sequential(targets: list[ProbeTarget], config: ProbeConfig) -> float:
    started = time.monotonic()
    for target in targets:
        probe_all([target], config)
    return time.monotonic() - started


def package_trials(trials: int, timeout: float, rng: random.Random) -> tuple[int, list, list[float]]:
    """Rank loopback mirrors by the time to the first MiB of a pinned wheel; return hits, misses and wall times."""
    from pip._vendor.packaging.tags import sys_tags

    tag = str(next(iter(sys_tags())))
    data = _random_bytes(2 * FIRST_BYTES, 3)
    wheel = Wheel(f"tensorflow-2.21.0-{tag}.whl", data, b"Metadata-Version: 2.1\nName: tensorflow\nVersion: 2.21.0\n")
    mirrors = [LoopbackMirror({"tensorflow": [wheel]}).start() for _ in range(N_MIRRORS)]
    targets = [ProbeTarget(f"m{i}", m.url) for i, m in enumerate(mirrors)]
    config = ProbeConfig(timeout=timeout, allow_insecure=True, package=PackagePin("tensorflow", "2.21.0"))
    hits, misses, walls = 0, [], []
    try:
        for trial in range(trials):
            while True:
                behaviours = [Behaviour(latency=rng.uniform(0.005, 0.2), rate=rng.uniform(1.5e6, 8.0e6))
                              for _ in mirrors]
                costs = sorted((b.latency + FIRST_BYTES / b.rate, i) for i, b in enumerate(behaviours))
                if costs[1][0] >= costs[0][0] * 1.2:
                    break
            for mirror, behaviour in zip(mirrors, behaviours):
                mirror.behaviour = behaviour
            started = time.monotonic()
            picked = fastest(probe_all(targets, config))
            walls.append(time.monotonic() - started)
            if picked is not None and picked.name == f"m{costs[0][1]}":
                hits += 1
            else:
                misses.append((trial, f"m{costs[0][1]}", picked.name if picked else None))
    finally:
        for mirror in mirrors:
            mirror.stop()
    return hits, misses, walls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--package-trials", type=int, default=30)
    args = parser.parse_args(argv)

    mirrors = [start_mirror(Behaviour(), size=FILE_BYTES) for _ in range(N_MIRRORS)]
    targets = [ProbeTarget(f"m{i}", m.url) for i, m in enumerate(mirrors)]
    config = ProbeConfig(timeout=args.timeout, allow_insecure=True)
    rng = random.Random(args.seed)
    try:
        configure(mirrors, rng, 0.2)
        walls, seqs, ratios = [], [], []
        for round_index in range(args.rounds):
            # Alternate the order so that warm-up and background load do not favour one side.
            if round_index % 2 == 0:
                wall, _ = concurrent(targets, config)
                seq = sequential(targets, config)
            else:
                seq = sequential(targets, config)
                wall, _ = concurrent(targets, config)
            walls.append(wall)
            seqs.append(seq)
            ratios.append(seq / wall)
            print(f"round {round_index + 1}: concurrent {wall:.2f} s, sequential {seq:.2f} s, ratio {seq / wall:.1f}x",
                  flush=True)
        # Worst case: one mirror never answers. The concurrent probe still ends at the deadline.
        mirrors[0].behaviour = Behaviour(fault="stall")
        stalled_wall, _ = concurrent(targets, config)
        stalled_seq = sequential(targets, config)
        print(f"one stalled mirror: concurrent {stalled_wall:.2f} s, sequential {stalled_seq:.2f} s", flush=True)
        hits, misses = 0, []
        for trial in range(args.trials):
            truth = configure(mirrors, rng, 0.2)
            wall, results = concurrent(targets, config)
            walls.append(wall)
            picked = fastest(results)
            if picked is not None and picked.name == f"m{truth}":
                hits += 1
            else:
                misses.append((trial, f"m{truth}", picked.name if picked else None))
        print()
        print(f"mirrors: {N_MIRRORS} loopback, file {FILE_BYTES // 1024} KiB, latency 5-60 ms, rate 1-6 MB/s, "
              f"timeout {args.timeout:g} s")
        print(f"concurrent probe wall time: median {statistics.median(walls):.2f} s, max {max(walls):.2f} s over "
              f"{len(walls)} probes (goal <= {args.timeout + 0.3:.1f} s): "
              f"{'PASS' if max(walls) <= args.timeout + 0.3 else 'FAIL'}")
        print(f"sequential (chsrc-style) wall time: median {statistics.median(seqs):.2f} s; "
              f"median ratio sequential/concurrent {statistics.median(ratios):.1f}x over {args.rounds} rounds")
        print(f"with one stalled mirror: concurrent {stalled_wall:.2f} s (goal <= {args.timeout + 0.3:.1f} s), "
              f"sequential {stalled_seq:.2f} s")
        print(f"ranking picked the truly fastest (>= 20 % margin): {hits}/{args.trials} = "
              f"{100 * hits / args.trials:.0f} % (goal 100 %)")
        for trial, truth, picked in misses:
            print(f"  miss: trial {trial}: truly fastest {truth}, picked {picked}")
    finally:
        for mirror in mirrors:
            mirror.stop()
    if args.package_trials:
        hits, misses, walls = package_trials(args.package_trials, args.timeout, rng)
        print(f"--package ranking (time to the first MiB of the pinned wheel, latency 5-200 ms, rate 1.5-8 MB/s): "
              f"picked the truly fastest (>= 20 % margin) {hits}/{args.package_trials} = "
              f"{100 * hits / args.package_trials:.0f} % (goal 100 %); probe wall time median "
              f"{statistics.median(walls):.2f} s, max {max(walls):.2f} s")
        for trial, truth, picked in misses:
            print(f"  miss: trial {trial}: truly fastest {truth}, picked {picked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
