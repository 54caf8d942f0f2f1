"""Run as ``python -I -S orphan_watcher.py RUN_ID [FOLDER]`` by the launcher (standard library only, so it starts in
milliseconds).

Reads ``group PGID`` lines from stdin. When stdin closes after a ``done`` line, the launcher cleaned up itself and
this exits. When it closes without one, the launcher died (``kill -9``): every announced process group is killed,
and every process whose environment carries ``TFDIST_RUN_ID=RUN_ID`` (a task's descendants that left its group);
then FOLDER (the run's shared-memory snapshots, named ``tfdist-...``) is removed, and every ``nft-table NAME`` line's
nftables table (``--firewall``) is deleted, so a killed launcher leaves no rule behind.
"""
import os
import shutil
import signal
import subprocess
import sys

NFT_TIMEOUT_S = 10.0


def _kill_run(run_id: str) -> None:
    mark = f"TFDIST_RUN_ID={run_id}".encode()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if mark in handle.read().split(b"\0"):
                    os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass


def _delete_table(name: str) -> None:
    # The name goes to nft as text it parses: only a tfdist table name (launch/firewall/rules.py) is passed on.
    if not name.startswith("tfdist-") or not all(c.isascii() and (c.isalnum() or c in "_.-") for c in name):
        return
    for nft in ("nft", "/usr/sbin/nft", "/sbin/nft"):
        try:
            subprocess.run([nft, "-f", "-"], input=f"table inet {name} {{}}\ndelete table inet {name}\n".encode(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=NFT_TIMEOUT_S, check=False)
            return
        except (OSError, subprocess.TimeoutExpired):
            continue


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe decides
    run_id = sys.argv[1]
    groups = set()
    tables = []
    done = False
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["group"] and len(words) == 2 and words[1].isdigit():
            groups.add(int(words[1]))
        elif words[:1] == ["nft-table"] and len(words) == 2:
            tables.append(words[1])
        elif words == ["done"]:
            done = True
    if done:
        return 0
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    _kill_run(run_id)
    if len(sys.argv) > 2 and os.path.basename(sys.argv[2].rstrip("/")).startswith("tfdist-"):
        shutil.rmtree(sys.argv[2], ignore_errors=True)
    for table in tables:
        _delete_table(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
