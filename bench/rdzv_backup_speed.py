"""How fast a backup crosses the rendezvous: the copy of ``agent/backup_copy.py`` (the chief streams its chunks,
256 KiB of checkpoint each, in the tree's own form: raw after a JSON header (``chunk``) where the tree has it, else
base64 in JSON ``file`` messages, through its link; the server forwards each to the machine that lacks the backup)
on loopback, against commit BASELINE (b8095d3: the same path with HMAC-SHA256 frames, in
the clear) in the same run.

One worker process per tree (that tree's sources first on the path) holds the two agents' links; the rendezvous
runs in a second process of the same tree, as it would on another machine. Each copy has its own server (made
before the clock starts); the figure is checkpoint bytes received and decoded per second, from the first chunk
sent to the last one decoded, both hops (agent -> server -> agent). The trees take turns, and the ratio is the
median of the per-turn ratios (the machine is shared and noisy). Goal: >= 200 MB/s. Also shown: the wire alone (the
same frames sealed, sent over a socket pair and opened, no JSON or base64), which is the part the encryption changed.

    python bench/rdzv_backup_speed.py [--turns 7] [--mib 64] [--baseline REV | --baseline-tree DIR]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, TreeWorker, load, median, median_ratio, tree_from_git  # noqa: E402

BASELINE = "b8095d3"

WORKER = r"""
import base64, hashlib, json, os, socket, subprocess, sys, threading, time
from tfdist.launch.elastic.tcp.server import RendezvousServer
from tfdist.launch.elastic.rendezvous.membership import RendezvousSettings as Settings
from tfdist.launch.elastic.tcp.client import RendezvousLink
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.messages.fields import FILE_CHUNK
try:  # the tree's own chunk form, as backup_copy.stream_files sends it to the TCP link (raw after a header)
    from tfdist.launch.elastic.agent.backup_copy import chunk_bytes as body, chunk_message
    def chunk_of(name, chunk, end, last):
        return chunk_message(name, chunk, end=end, last=last, raw=RendezvousLink.RAW_CHUNKS)
except ImportError:  # older trees: base64 in JSON file messages
    def chunk_of(name, chunk, end, last):
        return M.File(name=name, data=base64.b64encode(chunk).decode("ascii"), end=end, last=last)
    def body(message):
        return base64.b64decode(message.data)
SECRET = bytes(range(32))
if sys.argv[1:] == ["server"]:  # one rendezvous per line read: its port, then it waits for the next line
    for line in sys.stdin:
        server = RendezvousServer(Settings(job="bench", min_nodes=2, max_nodes=2, node_timeout=30.0, first_round_wait=0.0,
                                           rdzv_timeout=1e6), "127.0.0.1", 0, secret=SECRET).start()
        print(server.address[1], flush=True)
        sys.stdin.readline()
        server.close()
    sys.exit(0)
other = subprocess.Popen([sys.executable, "-c", os.environ["TFDIST_BENCH_WORKER_SOURCE"], "server"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)

def join(rank):
    return dict(job="bench", name=f"m{rank}", node_rank=rank, address="127.0.0.1", slots=1,
                versions={"python": "3", "tfdist": "x", "tensorflow": "2"})

def until(link, kind):
    while True:
        message = link.next_message(30.0)
        if message is not None and message.TYPE == kind:
            return message

def copy(mib):
    data = os.urandom(1 << 20) * mib
    index = b'model_checkpoint_path: "ckpt-1"\n'
    files = {"checkpoint": index, "ckpt-1.index": data}
    backup = M.Backup("aa", "ckpt-1", {f: hashlib.sha256(d).hexdigest() for f, d in files.items()},
                      {f: len(d) for f, d in files.items()})
    other.stdin.write("start\n"); other.stdin.flush()
    port = int(other.stdout.readline())
    chief, receiver = (RendezvousLink("127.0.0.1", "127.0.0.1", port, 30.0, secret=SECRET) for _ in range(2))
    chief.connect(join(0), time.monotonic() + 30, lambda: False)
    receiver.connect(join(1), time.monotonic() + 30, lambda: False)
    chief.send(M.Ready(ports=[20000], backup=backup))
    receiver.send(M.Ready(ports=[20001], backup=M.Backup("bb")))
    until(chief, "send")
    def upload():
        chief.send(chunk_of("checkpoint", index, end=True, last=False))
        for offset in range(0, len(data), FILE_CHUNK):  # as backup_copy.stream_files: one chunk per message
            chunk = data[offset:offset + FILE_CHUNK]
            end = offset + len(chunk) >= len(data)
            chief.send(chunk_of("ckpt-1.index", chunk, end=end, last=end))
    started = time.perf_counter()
    threading.Thread(target=upload, daemon=True).start()
    got = 0
    while got < len(data):
        message = receiver.next_message(30.0)
        if message is not None and message.TYPE in ("file", "chunk") and message.name == "ckpt-1.index":
            got += len(body(message))
    elapsed = time.perf_counter() - started
    chief.close(); receiver.close()
    other.stdin.write("done\n"); other.stdin.flush()
    return len(data) / elapsed / 1e6

def wire_alone(mib):
    # The wire's own part: the chief's frames (a 256 KiB chunk's message, ~350 KB) sealed, sent over a socket pair
    # and opened, with no JSON or base64: what the encryption changed.
    from tfdist.launch.elastic.tcp import auth
    try:
        sender, reader = auth.pair_sessions()
    except TypeError:  # the HMAC wire's pair_sessions took the secret
        sender, reader = auth.pair_sessions(SECRET)
    payload = os.urandom(349606)  # M.encode of a file message of FILE_CHUNK bytes
    count = max(1, (mib << 20) // FILE_CHUNK)
    mine, theirs = socket.socketpair()
    def send():
        for _ in range(count):
            mine.sendall(sender.seal(payload))
    def receive(n):
        data = bytearray(n)
        view, have = memoryview(data), 0
        while have < n:
            have += theirs.recv_into(view[have:])
        return bytes(data)
    started = time.perf_counter()
    threading.Thread(target=send, daemon=True).start()
    for _ in range(count):
        assert len(reader.read_frame(receive)) == len(payload)
    elapsed = time.perf_counter() - started
    mine.close(); theirs.close()
    return count * FILE_CHUNK / elapsed / 1e6

print("ready", flush=True)
for line in sys.stdin:
    what, mib = line.split()
    print(json.dumps(copy(int(mib)) if what == "copy" else wire_alone(int(mib))), flush=True)
other.stdin.close()
other.wait(timeout=30)
"""


def baseline_src(tree: Path | None, revision: str, scratch: Path) -> Path:
    return tree if tree is not None else tree_from_git(revision, scratch)

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=7, help="copies per tree, alternating")
    parser.add_argument("--mib", type=int, default=64, help="checkpoint MiB per copy")
    parser.add_argument("--baseline", default=BASELINE, help=f"the revision to compare with (default {BASELINE})")
    parser.add_argument("--baseline-tree", type=Path, default=None, help="a checkout to compare with instead")
    args = parser.parse_args()
    print(f"load before: {load()}")
    with tempfile.TemporaryDirectory(prefix="tfdist-bench-backup-") as scratch:
        workers = {"baseline": TreeWorker(baseline_src(args.baseline_tree, args.baseline, Path(scratch)), WORKER),
                   "noise": TreeWorker(REPO, WORKER)}
        seen: dict[str, list[float]] = {name: [] for name in workers}
        alone: dict[str, list[float]] = {name: [] for name in workers}
        try:
            for worker in workers.values():  # warm-up, not counted
                worker.ask("copy 4")
            for turn in range(args.turns):
                order = list(workers.items()) if turn % 2 == 0 else list(reversed(workers.items()))
                for name, worker in order:
                    seen[name].append(worker.ask(f"copy {args.mib}"))
                    alone[name].append(worker.ask(f"wire {args.mib}"))
                print(f"  turn {turn + 1}: copy baseline {seen['baseline'][-1]:.0f} MB/s, this tree {seen['noise'][-1]:.0f} "
                      f"MB/s; the wire alone baseline {alone['baseline'][-1]:.0f} MB/s, this tree {alone['noise'][-1]:.0f} MB/s",
                      flush=True)
        finally:
            for worker in workers.values():
                worker.close()
    print(f"backup copy over loopback, {args.mib} MiB x {args.turns} per tree: baseline {args.baseline} "
          f"{median(seen['baseline']):.0f} MB/s, this tree {median(seen['noise']):.0f} MB/s, median ratio "
          f"{median_ratio(seen['noise'], seen['baseline']):.3f} (goal: >= 200 MB/s); load after: {load()}")
    print(f"the wire alone (frames of a chunk's message sealed, sent over a socket pair, opened; checkpoint MB/s): "
          f"baseline {median(alone['baseline']):.0f} MB/s, this tree {median(alone['noise']):.0f} MB/s, median ratio "
          f"{median_ratio(alone['noise'], alone['baseline']):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
