"""Real etcd for tests: a 3-member cluster on the network-namespace machines (netns.py), or one member on loopback.

Debian's ``etcd-server`` (3.4) runs each member as machine ``i`` (``ip netns exec``), client port 2379 and peer port
2380 on the machine's address, data in a fresh temporary folder. The cluster token carries a random prefix, so two
clusters never merge. :meth:`EtcdCluster.close` kills every member it started and deletes the data folders, whatever
state a test left them in (the machines' own ``close`` deletes the namespaces).

Fault helpers: :meth:`EtcdCluster.leader` asks the members who leads (etcdctl, fixtures only), :meth:`kill` kills
a member, :meth:`pause`/:meth:`resume` freeze one (SIGSTOP: it holds its connections but answers nothing, as an
unreachable member does), and the machines' ``cut`` takes a member's machine off the network.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.netns import CleanedUpFixture, Machines

ETCD = "/usr/bin/etcd"
ETCDCTL = "/usr/bin/etcdctl"
CLIENT_PORT, PEER_PORT = 2379, 2380
# Test clocks: a leader is re-elected within about a second of being killed (etcd's defaults are 100 ms / 1 s).
TIMING = ["--heartbeat-interval", "100", "--election-timeout", "1000"]


def why_no_etcd() -> str | None:
    if not os.path.exists(ETCD) or not os.path.exists(ETCDCTL):
        return "etcd-server / etcd-client are not installed (.ci/system-deps.sh installs them)"
    try:
        import pyetcd  # noqa: F401
    except ImportError:
        return "the etcd client library is not installed (pip install 'tfdist[etcd]')"
    return None


def _wait_healthy(endpoints: list[str], command: list[str] | None = None, timeout: float = 30.0,
                  extra: list[str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        probe = (command or []) + [ETCDCTL, "--endpoints", ",".join(endpoints), "--dial-timeout", "1s",
                                   "--command-timeout", "2s", *(extra or []), "endpoint", "health"]
        done = subprocess.run(probe, capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"})
        if done.returncode == 0:
            return
        last = done.stderr.strip() or done.stdout.strip()
        time.sleep(0.2)
    raise RuntimeError(f"etcd at {','.join(endpoints)} did not become healthy: {last[-500:]}")


@dataclass
class EtcdCluster(CleanedUpFixture):
    """etcd members on ``machines`` (1-based machine numbers). Use as a context manager."""

    machines: Machines
    members: tuple[int, ...] = (1, 2, 3)
    token: str = field(default_factory=lambda: f"tfdist-test-{secrets.token_hex(4)}")
    datadir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tfdist-etcd-")))
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)

    def name(self, i: int) -> str:
        return f"m{i}"

    def endpoint(self, i: int) -> str:
        return f"{self.machines.address(i)}:{CLIENT_PORT}"

    @property
    def endpoints(self) -> str:
        """The ``--rdzv-endpoint`` value: every member."""
        return ",".join(self.endpoint(i) for i in self.members)

    def make(self) -> None:
        self.start()

    def start(self) -> None:
        peers = ",".join(f"{self.name(i)}=http://{self.machines.address(i)}:{PEER_PORT}" for i in self.members)
        for i in self.members:
            self._start_member(i, peers, "new")
        _wait_healthy([f"http://{self.endpoint(i)}" for i in self.members], self.machines.command(self.members[0], []))

    def _start_member(self, i: int, peers: str, state: str) -> None:
        address = self.machines.address(i)
        argv = [ETCD, "--name", self.name(i), "--data-dir", str(self.datadir / self.name(i)),
                "--listen-client-urls", f"http://{address}:{CLIENT_PORT}",
                "--advertise-client-urls", f"http://{address}:{CLIENT_PORT}",
                "--listen-peer-urls", f"http://{address}:{PEER_PORT}",
                "--initial-advertise-peer-urls", f"http://{address}:{PEER_PORT}",
                "--initial-cluster", peers, "--initial-cluster-state", state,
                "--initial-cluster-token", self.token, *TIMING]
        log = open(self.datadir / f"{self.name(i)}.log", "ab")  # noqa: SIM115 - kept open by the member
        with log:
            self.procs[i] = subprocess.Popen(self.machines.command(i, argv), stdout=log, stderr=log,
                                             stdin=subprocess.DEVNULL)

    def log(self, i: int) -> str:
        try:
            return (self.datadir / f"{self.name(i)}.log").read_text(errors="replace")
        except OSError:
            return ""

    # -- faults --------------------------------------------------------------------------------------------------
    def leader(self) -> int:
        """The machine number of the current leader (asked from a live member)."""
        alive = [i for i in self.members if self.procs.get(i) and self.procs[i].poll() is None]
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for i in alive:
                done = subprocess.run(self.machines.command(i, [
                    ETCDCTL, "--endpoints", ",".join(f"http://{self.endpoint(j)}" for j in alive),
                    "--dial-timeout", "1s", "--command-timeout", "2s", "endpoint", "status", "-w", "json"]),
                    capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"})
                if done.returncode != 0:
                    continue
                statuses = json.loads(done.stdout)
                for status in statuses:
                    if status["Status"]["header"]["member_id"] == status["Status"]["leader"]:
                        host = status["Endpoint"].split("//")[-1].split(":")[0]
                        return next(j for j in self.members if self.machines.address(j) == host)
            time.sleep(0.2)
        raise RuntimeError("no etcd leader found")

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)

    def pause(self, i: int) -> None:
        self.procs[i].send_signal(signal.SIGSTOP)

    def resume(self, i: int) -> None:
        self.procs[i].send_signal(signal.SIGCONT)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait()
        self.procs.clear()
        shutil.rmtree(self.datadir, ignore_errors=True)


def make_certificates(folder: Path) -> dict[str, str]:
    """A throw-away CA and a server certificate for 127.0.0.1 (openssl), as PEM paths: ca, cert, key."""
    paths = {name: str(folder / f"{name}.pem") for name in ("ca", "ca-key", "cert", "key", "csr")}
    run = lambda *argv: subprocess.run(["openssl", *argv], check=True, capture_output=True, timeout=60)  # noqa: E731
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
        "-subj", "/CN=tfdist test CA", "-keyout", paths["ca-key"], "-out", paths["ca"])
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", paths["key"], "-out", paths["csr"])
    extensions = folder / "san.cnf"
    extensions.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    run("x509", "-req", "-in", paths["csr"], "-CA", paths["ca"], "-CAkey", paths["ca-key"], "-CAcreateserial",
        "-days", "2", "-extfile", str(extensions), "-out", paths["cert"])
    return paths


class LocalEtcd(CleanedUpFixture):
    """One etcd member on loopback at free ports, for fast tests of the backend (no namespaces, no root).
    ``tls``: clients must use TLS (a CA made for the test; :attr:`certs` holds the PEM paths)."""

    def __init__(self, *, extra: tuple[str, ...] = (), tls: bool = False) -> None:
        self.datadir = Path(tempfile.mkdtemp(prefix="tfdist-etcd-"))
        self.client_port, self.peer_port = _free_port(), _free_port()
        self.extra = extra
        self.tls = tls
        self.certs: dict[str, str] = {}
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def make(self) -> None:
        self.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.endpoint}"

    def _ctl_tls(self) -> list[str]:
        return ["--cacert", self.certs["ca"]] if self.tls else []

    def start(self) -> None:
        peer = f"http://127.0.0.1:{self.peer_port}"
        tls = []
        if self.tls:
            self.certs = make_certificates(self.datadir)
            tls = ["--cert-file", self.certs["cert"], "--key-file", self.certs["key"]]
        argv = [ETCD, "--name", "solo", "--data-dir", str(self.datadir / "data"), "--listen-client-urls", self.url,
                "--advertise-client-urls", self.url, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"solo={peer}", "--initial-cluster-token", f"tfdist-{secrets.token_hex(4)}",
                *TIMING, *tls, *self.extra]
        with open(self.datadir / "etcd.log", "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        _wait_healthy([self.url], extra=self._ctl_tls())

    def etcdctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([ETCDCTL, "--endpoints", self.url, *self._ctl_tls(), *args], capture_output=True,
                              text=True, env={**os.environ, "ETCDCTL_API": "3"}, timeout=30)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
        shutil.rmtree(self.datadir, ignore_errors=True)


def _free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
