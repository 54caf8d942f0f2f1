"""Where the encrypted rendezvous' handshake spends its CPU (issue 34's 5 % goal): the parts of one join, in one
process, no sockets, against the floor that any forward-secret handshake pays on the join's path (two X25519
Diffie-Hellman computations in sequence: the server's before it can prove the secret, the agent's before it can
join), in the same run.

Each round times ``--joins`` handshakes part by part, then as many bare X25519 exchanges; the rounds alternate and the
figure is the median of the per-round ratios (the handshake's on-path CPU / the floor). Parts: the agent's hello
(taken from the key made ahead), the server's answer (Noise message 2: one DH, the key schedule, one tag), the
agent's finish (one DH, the key schedule, one tag), sealing and opening the join, and the spare keys made while
the peer answers (off the join's path, not counted).

    python bench/rdzv_handshake_cpu.py [--rounds 7] [--joins 400]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO  # noqa: E402

sys.path.insert(0, str(REPO / "src"))
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey  # noqa: E402

from tfdist.launch.elastic.tcp import auth  # noqa: E402

SECRET = bytes(range(32))
PARTS = ("agent hello", "server answer", "agent finish", "seal join", "open join", "spare keys (off path)")
ON_PATH = PARTS[:5]


def one_join() -> list[float]:
    clock = time.perf_counter
    t0 = clock()
    agent = auth.AgentHandshake(SECRET)
    t1 = clock()
    answer, server = auth.answer_hello(SECRET, agent.hello)
    t2 = clock()
    session = agent.finish(answer)
    t3 = clock()
    frame = session.seal(b"x" * 300)
    t4 = clock()
    at = [0]

    def receive(count: int) -> bytes:
        at[0] += count
        return frame[at[0] - count: at[0]]
    server.read_frame(receive)
    t5 = clock()
    auth.make_spares(server=True)
    auth.make_spares(server=False)
    t6 = clock()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5]


def floor(count: int) -> float:
    """Seconds for two X25519 exchanges (the forward-secret minimum on the join's path), median of ``count``."""
    private, public = X25519PrivateKey.generate(), X25519PrivateKey.generate().public_key()
    times = []
    for _ in range(count):
        start = time.perf_counter()
        private.exchange(public)
        private.exchange(public)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--joins", type=int, default=400)
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    auth.wire_key(SECRET)
    for _ in range(50):  # warm: caches, the first AES contexts
        one_join()
    parts: list[list[float]] = [[] for _ in PARTS]
    ratios, floors, paths = [], [], []
    for turn in range(args.rounds):
        first_floor = turn % 2 == 1  # alternate which one runs first
        base = floor(args.joins) if first_floor else None
        joins = [one_join() for _ in range(args.joins)]
        base = base if base is not None else floor(args.joins)
        path = statistics.median(sum(j[:len(ON_PATH)]) for j in joins)
        for index in range(len(PARTS)):
            parts[index].append(statistics.median(j[index] for j in joins))
        ratios.append(path / base)
        floors.append(base)
        paths.append(path)
    for name, values in zip(PARTS, parts):
        print(f"{name:24} {statistics.median(values) * 1e6:7.1f} us")
    print(f"on the join's path (both sides) {statistics.median(paths) * 1e6:.1f} us; floor (two X25519) "
          f"{statistics.median(floors) * 1e6:.1f} us; median ratio {statistics.median(ratios):.2f} "
          f"({args.rounds} rounds x {args.joins} joins)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
