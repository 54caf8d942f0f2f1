"""What a machine reports before a multi-machine job starts, over the host-file driver's ssh session.

``python -m tfdist.launch.ssh.host_probe [--firewall] [--mesh PEER_IP] SCRIPT`` prints one ``TFDIST-PROBE {json}``
line: versions, the working directory, whether the script is there, and with ``--firewall`` why this host cannot load
the job's nftables table (null when it can), so the driver refuses before any agent starts. With ``--mesh`` it also
listens on this machine's address on the route to ``PEER_IP`` (the address its agent will advertise), reads one JSON
line from stdin listing every host's ``address:port``, connects to each, prints ``TFDIST-MESH {json}``
(``{"address:port": "ok" | error}``), and keeps listening until stdin closes, so the others can finish their checks.
Reads package metadata only: no TensorFlow import, so it takes milliseconds.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import socket
import sys

from tfdist.cluster.address import format_address, parse_address

# TensorFlow's distributions: any one of them provides `tensorflow`.
TENSORFLOW_DISTS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tensorflow-macos", "tf-nightly")
CONNECT_TIMEOUT_S = 3.0


def versions() -> dict[str, str]:
    """``{"python": ..., "tfdist": ..., "tensorflow": ...}`` of this interpreter."""
    from tfdist import __version__

    tensorflow = "not installed"
    for dist in TENSORFLOW_DISTS:
        try:
            tensorflow = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    return {"python": platform.python_version(), "tfdist": __version__, "tensorflow": tensorflow}


def _reach(target: str) -> str:
    try:
        host, port = parse_address(target, "peer")
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
        return "ok"
    except Exception as bad:  # noqa: BLE001 - any failure is the answer
        return getattr(bad, "strerror", None) or str(bad) or type(bad).__name__


def main(argv: list[str]) -> int:
    peer, firewall = None, argv[:1] == ["--firewall"]
    argv = argv[1:] if firewall else argv
    if argv[:1] == ["--mesh"]:
        peer, argv = argv[1], argv[2:]
    script = argv[0] if argv and argv[0] else None
    report: dict = {"versions": versions(), "cwd": os.getcwd(),
                    "script": None if script is None else os.path.isfile(script)}
    if firewall:
        from tfdist.launch.firewall.nft import find_nft, why_not

        report["firewall"] = why_not(find_nft())
    listener = None
    if peer is not None:
        from tfdist.launch.elastic.netaddr import route_address

        listener = socket.create_server((route_address(peer), 0), backlog=128)
        report["listen"] = format_address(*listener.getsockname()[:2])
    print("TFDIST-PROBE " + json.dumps(report, sort_keys=True), flush=True)
    if listener is None:
        return 0
    line = sys.stdin.readline()
    if not line:
        return 0
    targets = [t for t in json.loads(line) if t != report["listen"]]
    print("TFDIST-MESH " + json.dumps({t: _reach(t) for t in targets}, sort_keys=True), flush=True)
    sys.stdin.read()  # keep listening until the driver is done with everyone
    listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
