"""A fleet at once (issue 33): N agents arriving in one burst at one built-in rendezvous (min = max = N), against
the rendezvous before that work (commit BASELINE) in the same run, the trees taking turns.

Each agent is tfdist's own client (``RendezvousLink``) from its own loopback address (127.1.x.y: all of 127/8 is
loopback on Linux), the agents spread over ``--procs`` processes, one thread each, all released at the same wall
clock instant. The server runs in a process of its own. A fleet's agents have a process (and a machine) each; 32
processes by default, because at 128 agent threads to one interpreter (8 processes for 1,024) the agents' own GIL
hand-offs set the figure rather than the rendezvous: at N = 1,024 the agents' system time was 4.1 s against 1.3 s
with 32 processes, and the time to every round scattered from 5 to 12 s for the same tree. Per N and tree:

- admitted: agents welcomed (the others: what they were told, counted by message);
- burst to every round: from the release to the last agent's ``round`` message (none: no round formed, because
  some agent was refused and the job waits for min = max = N);
- loss to every other told: one member closes its connection; from then to the last other member's ``stop``;
- the server's threads, peak RSS (VmHWM) and CPU seconds (from its start to after the loss), and uptime's load.

    python bench/rdzv_scale.py [--sizes 16,64,256,1024] [--turns 1] [--procs 32] [--patience 20] [--baseline REV]
                               [--baseline-tree DIR]

Without ``--baseline-tree`` the baseline's ``src`` is taken from git (``git archive REV src``; REV: ``--baseline``,
by default BASELINE; another commit, such as the main a change starts from, measures that change alone).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PYTHON, REPO, median, tree_from_git  # noqa: E402

BASELINE = "d781fdb"  # main before issue 33's admission and retries

SERVER = r"""
import json, sys, threading, time
from tfdist.launch.elastic.tcp.server import RendezvousServer
from tfdist.launch.elastic.rendezvous.membership import RendezvousSettings
n, node_timeout = int(sys.argv[1]), float(sys.argv[2])
settings = RendezvousSettings(job="bench", min_nodes=n, max_nodes=n, node_timeout=node_timeout, rdzv_timeout=300.0,
                              first_round_wait=0.0)
server = RendezvousServer(settings, "127.0.0.1", 0, secret=bytes(range(32))).start()
print(json.dumps({"port": server.address[1]}), flush=True)
peak_threads = threading.active_count()
def watch():
    global peak_threads
    while True:
        peak_threads = max(peak_threads, threading.active_count())
        time.sleep(0.05)
threading.Thread(target=watch, daemon=True).start()
for line in sys.stdin:
    status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
    print(json.dumps({"threads": threading.active_count(), "peak_threads": peak_threads,
                      "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
                      "hwm_mib": int(status["VmHWM"].split()[0]) / 1024, "cpu_s": time.process_time()}), flush=True)
server.close()
"""

AGENTS = r"""
import json, socket, sys, threading, time
from tfdist.launch.elastic.tcp.client import RendezvousLink
from tfdist.launch.elastic.messages import protocol as M


def send(link, kind, **fields):  # typed sends (issue 32) where the tree has them; the baseline takes strings
    link.send(M.make(kind, **fields)) if hasattr(M, "checked") else link.send(kind, **fields)
port, first, count, go_at, patience = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
here = threading.local()
plain = socket.create_connection
def from_own_address(address, timeout=socket._GLOBAL_DEFAULT_TIMEOUT, source_address=None, **kw):
    # Both trees call socket.create_connection: each agent's thread connects from its own address.
    return plain(address, timeout, source_address or (here.source, 0), **kw)
socket.create_connection = from_own_address
out = [dict(welcomed=False, said="", welcome_at=None, round_at=None, stop_at=None) for _ in range(count)]
node_timeout = float(sys.argv[6])
links = [None] * count
rounds = threading.Barrier(count + 1)
lost = threading.Event()
def agent(i):
    g = first + i
    here.source = f"127.1.{g // 250}.{g % 250 + 1}"
    link = RendezvousLink("127.0.0.1", "127.0.0.1", port, node_timeout, secret=bytes(range(32)))
    time.sleep(max(0.0, go_at - time.time()))
    try:
        link.connect(dict(job="bench", name=f"m{g}", node_rank=None, address=here.source, slots=1,
                          versions={"python": "3", "tfdist": "x", "tensorflow": "2"}),
                     time.monotonic() + patience, lambda: False)
        out[i]["welcomed"] = True
        out[i]["welcome_at"] = time.time()
        links[i] = link
        send(link, "ready", ports=[20000 + g])
        end = time.monotonic() + patience
        while time.monotonic() < end:
            m = link.next_message(0.5)
            if isinstance(m, M.Round):
                out[i]["round_at"] = time.time()
                send(link, "training", round=m.round)
                break
    except Exception as bad:
        out[i]["said"] = f"{type(bad).__name__}: {bad}"[:160]
    if out[i]["welcomed"] and out[i]["round_at"] is None and not out[i]["said"]:
        out[i]["said"] = "welcomed, no round in time"
    rounds.wait()
    if links[i] is None or out[i]["round_at"] is None:
        return
    lost.wait()
    end = time.monotonic() + 15
    try:
        while time.monotonic() < end and links[i].channel is not None and not links[i].channel.closed:
            m = links[i].next_message(0.5)
            if isinstance(m, M.Stop):
                out[i]["stop_at"] = time.time()
                break
    except Exception:
        pass
threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(count)]
for t in threads:
    t.start()
rounds.wait()
print(json.dumps({"rounds": out}), flush=True)
command = sys.stdin.readline().strip()
lost_at = None
if command == "lose" and links[0] is not None:
    out[0]["round_at"] = None  # the lost one is not told
    lost_at = time.time()
    links[0].channel.close()
lost.set()
for t in threads:
    t.join(20)
print(json.dumps({"lost_at": lost_at, "agents": out, "cpu_s": time.process_time()}), flush=True)
"""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def one_run(tree: Path, n: int, procs: int, patience: float, node_timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    server = subprocess.Popen([PYTHON, "-c", SERVER, str(n), str(node_timeout)], env=env, text=True, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    port = json.loads(server.stdout.readline())["port"]  # type: ignore[union-attr]
    load_before = load()
    share = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    go_at = time.time() + 1.5 + 0.2 * procs  # every process has started its threads by then
    agents, first = [], 0
    for count in share:
        if count:
            agents.append(subprocess.Popen([PYTHON, "-c", AGENTS, str(port), str(first), str(count), str(go_at),
                                            str(patience), str(node_timeout)], env=env, text=True, stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE))
        first += count
    rounds = [json.loads(a.stdout.readline())["rounds"] for a in agents]  # type: ignore[union-attr]

    def stats() -> dict:
        server.stdin.write("stats\n")  # type: ignore[union-attr]
        server.stdin.flush()  # type: ignore[union-attr]
        return json.loads(server.stdout.readline())  # type: ignore[union-attr]

    at_rounds = stats()
    everyone = [r for part in rounds for r in part]
    all_round = all(r["round_at"] for r in everyone)
    for i, a in enumerate(agents):
        a.stdin.write("lose\n" if i == 0 and all_round else "stay\n")  # type: ignore[union-attr]
        a.stdin.flush()  # type: ignore[union-attr]
    finals = [json.loads(a.stdout.readline()) for a in agents]  # type: ignore[union-attr]
    at_end = stats()
    for a in agents:
        a.wait(30)
    server.stdin.close()  # type: ignore[union-attr]
    server.wait(30)
    told = [r for part in finals for r in part["agents"]]
    lost_at = finals[0]["lost_at"]
    said = collections.Counter(r["said"].split(" (")[0][:90] for r in everyone if r["said"])
    welcomes = [r["welcome_at"] for r in everyone if r["welcome_at"]]
    last_round = max((r["round_at"] for r in everyone if r["round_at"]), default=None)
    stops = [r["stop_at"] for r in told if r["round_at"]]
    return {
        "admitted": sum(r["welcomed"] for r in everyone), "said": dict(said),
        "with_round": sum(bool(r["round_at"]) for r in everyone),
        "to_welcome_s": (max(welcomes) - go_at) if len(welcomes) == n else None,
        "to_round_s": (last_round - go_at) if all_round and last_round else None,
        "loss_told_s": (max(stops) - lost_at) if lost_at and stops and all(stops) else None,
        "agents_cpu_s": sum(part["cpu_s"] for part in finals),
        "threads": max(at_rounds["peak_threads"], at_rounds["threads"]), "hwm_mib": at_end["hwm_mib"], "cpu_s": at_end["cpu_s"],
        "load": load_before,
    }


def baseline_src(tree: Path | None, scratch: Path, revision: str = BASELINE) -> Path:
    if tree is not None:
        return tree
    return tree_from_git(revision, scratch)


def _fmt(value: float | None, unit: str = "s") -> str:
    return "-" if value is None else f"{value:.2f} {unit}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,64,256,1024", help="burst sizes, comma-separated")
    parser.add_argument("--turns", type=int, default=1, help="runs per size and tree (alternating)")
    parser.add_argument("--procs", type=int, default=32, help="agent processes per run")
    parser.add_argument("--patience", type=float, default=20.0, help="each agent's deadline (--rdzv-timeout)")
    parser.add_argument("--node-timeout", type=float, default=30.0, help="keep-alive deadline, both sides")
    parser.add_argument("--baseline", default=BASELINE, help="the commit to compare with (default: %(default)s)")
    parser.add_argument("--baseline-tree", type=Path, default=None, help="a checkout of it (default: git archive)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load average before: {load()} ({os.cpu_count()} CPUs); baseline {args.baseline_tree or args.baseline}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="tfdist-bench-base-") as scratch:
        trees = {"baseline": baseline_src(args.baseline_tree, Path(scratch), args.baseline), "fleet": REPO}
        for n in sizes:
            seen: dict[str, list[dict]] = {name: [] for name in trees}
            for turn in range(args.turns):
                order = list(trees.items()) if turn % 2 == 0 else list(reversed(trees.items()))
                for name, tree in order:
                    run = one_run(tree, n, min(args.procs, n), args.patience, args.node_timeout)
                    seen[name].append(run)
                    print(f"N={n} {name:8}: admitted {run['admitted']}/{n} (last welcome {_fmt(run['to_welcome_s'])}), "
                          f"with a round {run['with_round']}, burst to every round "
                          f"{_fmt(run['to_round_s'])}, loss to every other told {_fmt(run['loss_told_s'])}, "
                          f"server threads {run['threads']}, peak RSS {run['hwm_mib']:.0f} MiB, "
                          f"CPU {run['cpu_s']:.2f} s (agents' processes {run['agents_cpu_s']:.1f} s), "
                          f"load before {run['load']}"
                          + (f"; refused: {run['said']}" if run["said"] else ""), flush=True)
            if args.turns > 1:
                for name, runs in seen.items():
                    def mid(key: str) -> float | None:
                        values = [r[key] for r in runs if r[key] is not None]
                        return median(values) if values else None
                    formed = sum(r["to_round_s"] is not None for r in runs)
                    print(f"N={n} {name}: medians: burst to every round {_fmt(mid('to_round_s'))} "
                          f"({formed}/{len(runs)} runs formed a round), loss to every other told "
                          f"{_fmt(mid('loss_told_s'))}, peak RSS {mid('hwm_mib'):.0f} MiB, server CPU "
                          f"{mid('cpu_s'):.2f} s, agents' CPU {mid('agents_cpu_s'):.1f} s", flush=True)
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
