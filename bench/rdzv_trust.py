"""What the authenticated rendezvous costs: the handshake (connect to welcome) and a machine's join to its first
round, against the rendezvous before it (a git worktree of BASELINE), in the same run.

Each measurement runs in its own process with one tree's sources first on the path, through that tree's own
server and agent-side link on loopback; trees alternate by round; the ratio is the median of per-round ratios
(trust / baseline, goal <= 1.05).

    python bench/rdzv_trust.py [--rounds 7] [--joins 200] [--starts 30] [--baseline-tree /work/wt/trust-baseline]

The baseline tree is made with ``git worktree add <tree> c69331f`` (and removed with ``git worktree remove``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PYTHON, REPO, alternate, median, median_ratio  # noqa: E402

BASELINE = "c69331f"

# One tree's measurement: N joins (connect -> welcome), then M job starts (first connect -> both machines have
# round 0); medians in milliseconds as JSON on stdout.
WORKER = r"""
import json, statistics, sys, time
joins, starts = int(sys.argv[1]), int(sys.argv[2])
try:
    from tfdist.launch.elastic.server import RendezvousServer
    from tfdist.launch.elastic.membership import RendezvousSettings as Settings
    from tfdist.launch.elastic.client import RendezvousLink
    secret = {"secret": bytes(range(32))}
except ImportError:
    from tfdist.launch.rdzv_server import RendezvousServer
    from tfdist.launch.elastic import Settings
    from tfdist.launch.rdzv_client import RendezvousLink
    secret = {}

def join(i):
    return dict(job="bench", name=f"m{i}", node_rank=None, address="127.0.0.1", slots=1,
                versions={"python": "3", "tfdist": "x", "tensorflow": "2"})

def link(port):
    return RendezvousLink("127.0.0.1", "127.0.0.1", port, 10.0, **secret)

server = RendezvousServer(Settings(job="bench", min_nodes=10**6, max_nodes=10**6, rdzv_timeout=1e6), "127.0.0.1", 0,
                          **secret).start()
port = server.address[1]
handshakes = []
for i in range(joins):
    t0 = time.perf_counter()
    one = link(port)
    one.connect(join(i), time.monotonic() + 10, lambda: False)
    handshakes.append(time.perf_counter() - t0)
    one.close()
server.close()

firsts = []
for i in range(starts):
    server = RendezvousServer(Settings(job="bench", min_nodes=2, max_nodes=2, first_round_wait=0.0,
                                       rdzv_timeout=1e6), "127.0.0.1", 0, **secret).start()
    port = server.address[1]
    t0 = time.perf_counter()
    links = [link(port), link(port)]
    for k, each in enumerate(links):
        each.connect(join(k), time.monotonic() + 10, lambda: False)
        each.send("ready", ports=[20000 + k], backup=None)
    for each in links:
        while True:
            message = each.next_message(5.0)
            if message is not None and message["type"] == "round":
                break
    firsts.append(time.perf_counter() - t0)
    for each in links:
        each.close()
    server.close()
print(json.dumps({"handshake_ms": statistics.median(handshakes) * 1000,
                  "first_round_ms": statistics.median(firsts) * 1000}))
"""


def measure(tree: Path, joins: int, starts: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run([PYTHON, "-c", WORKER, str(joins), str(starts)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tree)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--joins", type=int, default=200)
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--baseline-tree", type=Path, default=Path("/work/wt/trust-baseline"))
    args = parser.parse_args()
    if not (args.baseline_tree / "src" / "tfdist" / "launch" / "rdzv_server.py").exists():
        raise SystemExit(f"no baseline tree at {args.baseline_tree}: git worktree add {args.baseline_tree} {BASELINE}")
    seen: dict[str, list[dict[str, float]]] = {"baseline": [], "trust": []}

    def run(name: str, tree: Path):
        def once() -> float:
            result = measure(tree, args.joins, args.starts)
            seen[name].append(result)
            return result["handshake_ms"]
        return once

    print(f"{args.rounds} rounds x ({args.joins} joins, {args.starts} job starts) per tree, alternating")
    alternate(args.rounds, [("baseline", run("baseline", args.baseline_tree)), ("trust", run("trust", REPO))])
    for key, label in (("handshake_ms", "connect to welcome"), ("first_round_ms", "join to first round")):
        base = [r[key] for r in seen["baseline"]]
        new = [r[key] for r in seen["trust"]]
        print(f"{label}: baseline {median(base):.3f} ms, trust {median(new):.3f} ms, "
              f"median ratio {median_ratio(new, base):.3f} (goal <= 1.05)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
