"""What the encrypted rendezvous costs: the handshake (connect to welcome) and a machine's join to its first round,
against the rendezvous before it (commit BASELINE: b8095d3, the HMAC wire of issue 20, authenticated but in the
clear; ``--baseline c69331f`` for the rendezvous before any authentication), in the same run.

One long-lived process per tree (that tree's sources first on the path, its own servers and agent-side links on
loopback); connect to welcome is measured against a server in the agent's own process (the machine that serves
the endpoint joins itself: today over a socket pair, ``RendezvousServer.join_here``, the baseline over loopback TCP;
also shown today over loopback TCP, as before that change) and against a server in a second process of the same
tree (how the other machines join). The trees take turns, a short batch each, many times, so
that both see the same load on a shared machine; each batch's result is a median, and each figure is the median
of the per-turn ratios (trust / baseline, goal <= 1.05). Also printed: the CPU time a join and leave costs the
measuring process (both sides when the server runs in it; the agent's alone otherwise: work moved off the joining
thread still counts there), connect to welcome with the agent's first message sent or queued in the window (a
thread the agent starts after connect() returns, or work that the server does when a member first speaks, shows
there), the load average before and after, and a floor: a plain TCP connect plus N round trips to a
thread-per-connection echo server in the same process (the authenticated join needs one round trip more than the
plain one).

    python bench/rdzv_trust.py [--turns 15] [--joins 40] [--starts 4] [--baseline REV | --baseline-tree DIR]

Without ``--baseline-tree`` the baseline's ``src`` is taken from git (``git archive BASELINE src``) into a temporary
folder, removed afterwards.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, TreeWorker, median, median_ratio, tree_from_git  # noqa: E402

BASELINE = "b8095d3"  # main before issue 34: mutual HMAC challenge-response, HMAC-SHA256 per frame

# One tree's worker: reads commands ("joins N", "starts M", "floor N K") on stdin, answers each with one JSON line
# (median milliseconds). Joins go to one server kept for the whole run; each job start has its own server.
WORKER = r"""
import json, os, socket, statistics, sys, threading, time
WORKER_SOURCE = os.environ["TFDIST_BENCH_WORKER_SOURCE"]
import importlib
def _room(*names):  # module names built at run time: the tree may be today's, the flat elastic/ or older
    return [importlib.import_module("tfdist.launch." + name) for name in names]
try:
    from tfdist.launch.elastic.tcp.server import RendezvousServer
    from tfdist.launch.elastic.rendezvous.membership import RendezvousSettings as Settings
    from tfdist.launch.elastic.tcp.client import RendezvousLink
    secret = {"secret": bytes(range(32))}
except ImportError:
    try:  # launch/elastic/ before issue 32's regroup
        _server, _policy, _client = _room("elastic" + ".server", "elastic" + ".membership", "elastic" + ".client")
        RendezvousServer, Settings, RendezvousLink = _server.RendezvousServer, _policy.RendezvousSettings, _client.RendezvousLink
        secret = {"secret": bytes(range(32))}
    except ImportError:
        from tfdist.launch.rdzv_server import RendezvousServer
        from tfdist.launch.elastic import Settings
        from tfdist.launch.rdzv_client import RendezvousLink
        secret = {}
try:  # typed sends (issue 32): the link takes message objects
    from tfdist.launch.elastic.messages import protocol as _M
    TYPED = hasattr(_M, "checked")
except ImportError:
    TYPED = False

def send(link, kind, **fields):
    link.send(_M.make(kind, **fields)) if TYPED else link.send(kind, **fields)

def join(i):
    return dict(job="bench", name=f"m{i}", node_rank=None, address="127.0.0.1", slots=1,
                versions={"python": "3", "tfdist": "x", "tensorflow": "2"})

import inspect
# Today's serving agent joins the server of its own process without TCP (agent.py passes it as `here`); the
# baseline's joined it over loopback like any other agent.
HERE = "here" in inspect.signature(RendezvousLink).parameters

def link(port, here=None):
    return RendezvousLink("127.0.0.1", "127.0.0.1", port, 10.0, **secret, **({"here": here} if here else {}))

CPU = {}

def joins(count, port, key, first=False, here=None):
    taken = []
    started = time.process_time()  # this process: the agent's side, and the server's when it runs here
    for i in range(count):
        t0 = time.perf_counter()
        one = link(port, here)
        one.connect(join(i), time.monotonic() + 10, lambda: False)
        if first:  # the agent's first message (a real agent's ready follows its welcome at once)
            send(one, "ping")
        taken.append(time.perf_counter() - t0)
        one.close()
    CPU[key] = (time.process_time() - started) / count * 1000
    return statistics.median(taken) * 1000

def starts(count):
    taken = []
    for _ in range(count):
        server = RendezvousServer(Settings(job="bench", min_nodes=2, max_nodes=2, first_round_wait=0.0,
                                           rdzv_timeout=1e6), "127.0.0.1", 0, **secret).start()
        port = server.address[1]
        t0 = time.perf_counter()
        links = [link(port), link(port)]
        for k, each in enumerate(links):
            each.connect(join(k), time.monotonic() + 10, lambda: False)
            send(each, "ready", ports=[20000 + k], backup=None)
        for each in links:
            while True:
                message = each.next_message(5.0)
                # dicts from the baseline's client, typed messages (messages.py) from today's
                if message is not None and (message["type"] if isinstance(message, dict) else message.TYPE) == "round":
                    break
        taken.append(time.perf_counter() - t0)
        for each in links:
            each.close()
        server.close()
    return statistics.median(taken) * 1000

def echo_server():
    listener = socket.create_server(("127.0.0.1", 0))
    def serve(conn):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                data = conn.recv(4096)
                if not data:
                    return
                conn.sendall(data)
    def accept():
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    return listener.getsockname()[1]

def floor(count, trips, port):
    taken = []
    for _ in range(count):
        t0 = time.perf_counter()
        sock = socket.create_connection(("127.0.0.1", port), timeout=2.0)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(trips):
            sock.sendall(b"x" * 64)
            sock.recv(4096)
        taken.append(time.perf_counter() - t0)
        sock.close()
    return statistics.median(taken) * 1000

server = RendezvousServer(Settings(job="bench", min_nodes=10**6, max_nodes=10**6, rdzv_timeout=1e6), "127.0.0.1", 0,
                          **secret).start()
if sys.argv[1:] == ["server"]:  # the rendezvous alone, for agents in another process (as on other machines)
    print(server.address[1], flush=True)
    sys.stdin.read()
    sys.exit(0)
import subprocess
other = subprocess.Popen([sys.executable, "-c", WORKER_SOURCE, "server"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
remote = int(other.stdout.readline())
port, echo = server.address[1], echo_server()
print("ready", flush=True)
for line in sys.stdin:
    what, *numbers = line.split()
    numbers = [int(n) for n in numbers]
    value = (joins(numbers[0], port, what, here=server if HERE else None) if what == "joins"
             else joins(numbers[0], port, what) if what == "tjoins" else joins(numbers[0], remote, what)
             if what == "rjoins" else joins(numbers[0], remote, what, first=True) if what == "fjoins"
             else CPU[numbers and "rjoins" or "joins"] if what == "cpu"
             else starts(numbers[0]) if what == "starts" else floor(numbers[0], numbers[1], echo))
    print(json.dumps(value), flush=True)
other.stdin.close()
other.wait(timeout=30)
"""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


SERVER_MODULES = ("elastic/tcp/server.py", "elastic/server.py", "rdzv_server.py")  # today's, issue 32's, older


def baseline_src(tree: Path | None, revision: str, scratch: Path) -> Path:
    if tree is not None:
        if not any((tree / "src" / "tfdist" / "launch" / module).exists() for module in SERVER_MODULES):
            raise SystemExit(f"--baseline-tree {tree}: no rendezvous server under src/tfdist/launch there")
        return tree
    return tree_from_git(revision, scratch)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=15, help="turns per tree (each a batch of joins and starts)")
    parser.add_argument("--joins", type=int, default=40, help="joins per turn")
    parser.add_argument("--starts", type=int, default=4, help="two-machine job starts per turn")
    parser.add_argument("--baseline", default=BASELINE, help=f"the revision to compare with (default {BASELINE})")
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="a checkout to compare with instead (e.g. /work/main), not taken from git")
    args = parser.parse_args()
    print(f"load average before: {load()} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="tfdist-bench-base-") as scratch:
        trees = {"baseline": baseline_src(args.baseline_tree, args.baseline, Path(scratch)), "trust": REPO}
        workers = {name: TreeWorker(tree, WORKER, close_timeout=30) for name, tree in trees.items()}
        seen: dict[str, dict[str, list[float]]] = {name: {"joins": [], "tjoins": [], "rjoins": [], "fjoins": [], "starts": [],
                                                           "floor1": [], "floor2": [],
                                                           "cpu": [], "rcpu": []}
                                                    for name in workers}
        try:
            for name, worker in workers.items():  # warm-up turn, not counted
                worker.ask(f"joins {args.joins}")
                worker.ask(f"rjoins {args.joins}")
            for turn in range(args.turns):
                order = list(workers.items()) if turn % 2 == 0 else list(reversed(workers.items()))
                for name, worker in order:
                    seen[name]["joins"].append(worker.ask(f"joins {args.joins}"))
                    seen[name]["cpu"].append(worker.ask("cpu"))
                    seen[name]["tjoins"].append(worker.ask(f"tjoins {args.joins}"))
                    seen[name]["rjoins"].append(worker.ask(f"rjoins {args.joins}"))
                    seen[name]["rcpu"].append(worker.ask("cpu 1"))
                    seen[name]["fjoins"].append(worker.ask(f"fjoins {args.joins}"))
                    seen[name]["floor1"].append(worker.ask(f"floor {args.joins} 1"))
                    seen[name]["floor2"].append(worker.ask(f"floor {args.joins} 2"))
                    if args.starts:
                        seen[name]["starts"].append(worker.ask(f"starts {args.starts}"))
                print(f"  turn {turn + 1}: connect to welcome (server in process / in another process) baseline "
                      f"{seen['baseline']['joins'][-1]:.3f} / {seen['baseline']['rjoins'][-1]:.3f} ms, trust "
                      f"{seen['trust']['joins'][-1]:.3f} / {seen['trust']['rjoins'][-1]:.3f} ms", flush=True)
        finally:
            for worker in workers.values():
                worker.close()
    print(f"{args.turns} turns x ({args.joins} joins, {args.starts} job starts) per tree, alternating; "
          f"load average after: {load()}")
    base, new = seen["baseline"], seen["trust"]
    rows = [("connect to welcome, server in the agent's process (the serving agent's join)", "joins"),
            ("connect to welcome over loopback TCP, server in the agent's process", "tjoins"),
            ("connect to welcome, server in another process", "rjoins"),
            ("connect to welcome and the first message queued, server in another process", "fjoins")] + ([("join to first round", "starts")] if args.starts else [])
    for label, key in rows:
        goal = "no agent joins so now: shown for comparison" if key == "tjoins" else "goal <= 1.05"
        print(f"{label}: baseline {median(base[key]):.3f} ms, trust {median(new[key]):.3f} ms, "
              f"median ratio {median_ratio(new[key], base[key]):.3f} ({goal})")
    # CPU, not latency: what a join costs the processes (work moved off the joining thread still counts here).
    for label, key in (("both sides (server in the agent's process)", "cpu"),
                       ("the agent's side alone (server in another process)", "rcpu")):
        print(f"CPU per join and leave, {label}: baseline {median(base[key]):.3f} ms, trust {median(new[key]):.3f} ms, "
              f"median ratio {median_ratio(new[key], base[key]):.3f}")
    floor1 = median(base["floor1"] + new["floor1"])
    floor2 = median(base["floor2"] + new["floor2"])
    extra = floor2 - floor1
    print(f"floor (same processes): TCP connect + 1 round trip {floor1:.3f} ms, + 2 round trips {floor2:.3f} ms; "
          f"the handshake's one more round trip alone ({extra:.3f} ms) puts the connect-to-welcome ratio at "
          f"~{1 + extra / median(base['joins']):.3f} at best")
    return 0


if __name__ == "__main__":
    sys.exit(main())
