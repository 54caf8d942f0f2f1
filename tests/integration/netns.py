"""Test machines on one host: one Linux network namespace per "machine" on a bridge, an sshd in each.

Layout (see /work/shared/reference/multi-machine.md): a bridge ``br0`` lives in a namespace of its own, so the host's
own network is never touched; machine ``i`` (1-based) is namespace ``<prefix>m<i>`` with address ``198.18.0.<i>``
(RFC 2544's benchmarking range, never a real network) on a veth whose peer is a port of the bridge. Every name carries
a random per-cluster prefix, so parallel runs never collide. :meth:`Machines.close` kills every process still running
in the namespaces and deletes them, whatever state the test left them in; the launchers' orphan watchers are killed
last, after a few seconds to remove their runs' /dev/shm snapshot folders, and any ``/dev/shm/tfdist-*`` folder a
machine's process named that is still there is removed then (nothing else in /dev/shm is touched).

ssh: each machine runs Debian's ``sshd`` with a host key and an authorised key made for this cluster. The client
config (identity, no host-key prompts) is given to ``ssh`` through a private mount namespace that bind-mounts a
folder over ``/etc/ssh/ssh_config.d`` (:meth:`Machines.command`), so neither /etc nor /root is edited.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SUBNET = "198.18.0"
SSHD = "/usr/sbin/sshd"
SHM, SHM_PREFIX = "/dev/shm", "tfdist-"  # where launchers keep a run's in-memory snapshots (launch/local/shm_folder.py)
SNAPSHOT_DIR_VARIABLE = b"TFDIST_SNAPSHOT_DIR"
WATCHER_GRACE_S = 5.0  # how long close() lets the launchers' orphan watchers clean up after their launchers


def why_no_namespaces() -> str | None:
    """None when this process can make network namespaces, else the reason a test should give for skipping."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} (iproute2/util-linux) is not installed"
    probe = f"tfdprobe{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def why_no_sshd() -> str | None:
    if not os.path.exists(SSHD) or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "openssh-server / openssh-client are not installed (.ci/system-deps.sh installs them)"
    return None


def _run(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, text=True)


class CleanedUpFixture:
    """A test resource used with ``with``: ``make()`` on enter and ``close()`` on exit, and ``close()`` also when
    ``make()`` failed half-way, so a fixture that breaks while starting still deletes what it made."""

    def make(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self.make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Machines(CleanedUpFixture):
    """A set of emulated machines. Use as a context manager, or call :meth:`close` in a ``finally``."""

    count: int
    prefix: str = field(default_factory=lambda: f"tfd{secrets.token_hex(3)}")
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tfdist-netns-")))
    ssh: bool = False
    # machine -> {path as that machine sees it: this host's file or folder}, for everything ssh starts there.
    sshd_mounts: dict[int, dict[str, str]] = field(default_factory=dict)
    _sshd: dict[int, subprocess.Popen] = field(default_factory=dict)

    # -- names ---------------------------------------------------------------------------------------------------
    @property
    def switch(self) -> str:
        return f"{self.prefix}sw"

    def ns(self, i: int) -> str:
        return f"{self.prefix}m{i}"

    @staticmethod
    def address(i: int) -> str:
        return f"{SUBNET}.{i}"

    @property
    def namespaces(self) -> list[str]:
        return [self.switch] + [self.ns(i) for i in range(1, self.count + 1)]

    # -- life cycle ----------------------------------------------------------------------------------------------
    def make(self) -> None:
        self.create()

    def create(self) -> None:
        _run("ip", "netns", "add", self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i in range(1, self.count + 1):
            ns = self.ns(i)
            _run("ip", "netns", "add", ns)
            # veth names are per namespace once moved, but are created in ours: keep them unique and short (<= 15).
            inner, outer = f"{self.prefix}v{i}", f"{self.prefix}s{i}"
            _run("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
            _run("ip", "link", "set", inner, "netns", ns)
            _run("ip", "link", "set", outer, "netns", self.switch)
            _run("ip", "-n", self.switch, "link", "set", outer, "master", "br0")
            _run("ip", "-n", self.switch, "link", "set", outer, "up")
            _run("ip", "-n", ns, "link", "set", inner, "name", "eth0")
            _run("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        if self.ssh:
            self._start_sshd()

    def pids(self, i: int | None = None) -> list[int]:
        """Processes running in machine ``i`` (every machine and the switch when None)."""
        names = self.namespaces if i is None else [self.ns(i)]
        found: list[int] = []
        for name in names:
            out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
            found += [int(p) for p in out.split()]
        return found

    def sshd_pids(self) -> list[int]:
        """The sshd daemons (the machines' own services, not the job's), found by their pid files."""
        pids = []
        for path in self.ssh_dir.glob("sshd-*.pid") if self.ssh else []:
            try:
                pids.append(int(path.read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        return pids

    def close(self) -> None:
        """Kill everything running in the namespaces, delete them and the work folder. Safe to call twice."""
        for proc in self._sshd.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self._sshd.clear()
        held = held_shm_folders(self.pids())
        # Everything but the launchers' orphan watchers first: a watcher whose launcher died removes the run's
        # /dev/shm folder (and kills what the run left), as on a real machine whose launcher was SIGKILLed.
        self._kill_until_gone(lambda pid: not _is_orphan_watcher(pid))
        deadline = time.monotonic() + WATCHER_GRACE_S
        while time.monotonic() < deadline and self.pids():
            time.sleep(0.05)
        self._kill_until_gone(lambda pid: True)
        # What a watcher could not remove (none started, or one that hung): the folders the machines' processes
        # named, nothing else.
        for folder in held:
            folder.remove()
        for name in self.namespaces:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _kill_until_gone(self, which: Callable[[int], bool], machine: int | None = None,
                         before: Callable[[list[int]], object] = lambda pids: None) -> None:
        """SIGKILL the processes that ``which`` picks (on machine ``machine``, else on every machine) until none is
        left (at most 2.5 s of tries); ``before(pids)`` is called with each batch before it is killed."""
        for _ in range(50):
            pids = [pid for pid in self.pids(machine) if which(pid)]
            if not pids:
                return
            before(pids)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def go_down(self, i: int) -> None:
        """Machine ``i`` goes down: every process on it but its sshd is SIGKILLed (its orphan watchers too), and the
        ``/dev/shm/tfdist-*`` folders its processes named go with it, as a real machine's shared memory does (nothing
        on it is left to remove them, and close() no longer sees who named them)."""
        held: dict[Path, ShmFolder] = {}
        sshd = set(self.sshd_pids())
        self._kill_until_gone(lambda pid: pid not in sshd, machine=i,  # noting the folders before they die with them
                              before=lambda pids: held.update((f.path, f) for f in held_shm_folders(pids)))
        for folder in held.values():
            folder.remove()

    def existing(self) -> list[str]:
        """Namespaces of this cluster that still exist (the leak check)."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [line.split()[0] for line in listed.splitlines() if line.split() and
                line.split()[0].startswith(self.prefix)]

    # -- network faults ------------------------------------------------------------------------------------------
    def cut(self, i: int) -> None:
        """Cut machine ``i`` off the network (its processes keep running, its packets go nowhere)."""
        _run("ip", "-n", self.ns(i), "link", "set", "eth0", "down")

    def blackhole(self, i: int, j: int) -> None:
        """Machine ``i`` can no longer send to machine ``j`` (a one-way partition; both stay on the network)."""
        _run("ip", "-n", self.ns(i), "route", "add", "blackhole", f"{self.address(j)}/32")

    def reconnect(self, i: int) -> None:
        _run("ip", "-n", self.ns(i), "link", "set", "eth0", "up")

    # -- ssh -----------------------------------------------------------------------------------------------------
    @property
    def ssh_dir(self) -> Path:
        return self.workdir / "ssh"

    def _start_sshd(self) -> None:
        keys = self.ssh_dir
        keys.mkdir(mode=0o700)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host_key"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id_test"))
        conf_d = keys / "client.d"
        conf_d.mkdir()
        (conf_d / "tfdist-test.conf").write_text(
            f"Host {SUBNET}.*\n  IdentityFile {keys / 'id_test'}\n  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
            "  ConnectTimeout 3\n")
        os.makedirs("/run/sshd", exist_ok=True)
        for i in range(1, self.count + 1):
            config = keys / f"sshd-{i}.conf"
            config.write_text(
                f"ListenAddress {self.address(i)}\nPort 22\nHostKey {keys / 'host_key'}\n"
                f"AuthorizedKeysFile {keys / 'id_test.pub'}\nPermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                f"PidFile {keys / f'sshd-{i}.pid'}\nAcceptEnv none\nPrintMotd no\n"
                # Sessions get HOME from passwd: their tfdist state (run records) goes to this machine's own folder,
                # never to this host's real home.
                f"SetEnv XDG_STATE_HOME={self.workdir / f'state-m{i}'}\n")
            argv = [SSHD, "-D", "-e", "-f", str(config)]
            self._sshd[i] = subprocess.Popen(self.command(i, argv, private_dirs=self.sshd_mounts.get(i)),
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(1, self.count + 1):
            self._wait_for_port(i, 22)

    def _wait_for_port(self, i: int, port: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        probe = f"import socket; socket.create_connection(('{self.address(i)}', {port}), 0.5).close()"
        while time.monotonic() < deadline:
            if subprocess.run(["ip", "netns", "exec", self.ns(i), "python3", "-c", probe],
                              capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"sshd on machine {i} did not start listening")

    # -- running things as a machine ---------------------------------------------------------------------------
    def command(self, i: int, argv: list[str], *, private_dirs: dict[str, str] | None = None) -> list[str]:
        """``argv`` run as machine ``i``: in its network namespace, in a private mount namespace that gives ssh the
        test's client config and bind-mounts ``private_dirs`` (target path -> this machine's own folder or file)."""
        mounts = []
        if self.ssh:
            mounts.append((str(self.ssh_dir / "client.d"), "/etc/ssh/ssh_config.d"))
        for target, source in (private_dirs or {}).items():
            if not os.path.isfile(source):  # a folder (made if missing); a file is mounted over a file
                os.makedirs(source, exist_ok=True)
                os.makedirs(target, exist_ok=True)
            mounts.append((source, target))
        wrapped = ["ip", "netns", "exec", self.ns(i)]
        if not mounts:
            return wrapped + argv
        script = " && ".join(f"mount --bind {_q(s)} {_q(t)}" for s, t in mounts) + ' && exec "$@"'
        return wrapped + ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"] + argv


# -- the machines' shared memory --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShmFolder:
    """A ``/dev/shm/tfdist-*`` folder of this host that a machine's process named, with its identity (device and
    inode, as that process saw it) so that only that very folder is ever removed."""

    path: Path
    device: int
    inode: int

    def remove(self) -> None:
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return  # gone already
        if (now.st_dev, now.st_ino) == (self.device, self.inode):
            shutil.rmtree(self.path, ignore_errors=True)


def proc_words(pid: int, what: str) -> list[bytes] | None:
    """``pid``'s command line (``what="cmdline"``) or environment (``"environ"``) as its NUL-separated words, or
    None when the process is gone (or not ours to read)."""
    try:
        with open(f"/proc/{pid}/{what}", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return None


def _is_orphan_watcher(pid: int) -> bool:
    return any(word.endswith(b"orphan_watcher.py") for word in proc_words(pid, "cmdline") or ())


def held_shm_folders(pids: list[int]) -> list[ShmFolder]:
    """The ``/dev/shm/tfdist-*`` folders of this host that ``pids`` name: an orphan watcher's argument (the launcher's
    or agent's snapshot folder) or a task's ``TFDIST_SNAPSHOT_DIR``. A machine with a private /dev/shm (a bind mount,
    ``private_dirs``) names folders that are not this host's: those are skipped (seen through the process's own
    root, they are other folders than this host's of the same name)."""
    found: dict[Path, ShmFolder] = {}
    for pid in pids:
        words, environ = proc_words(pid, "cmdline"), proc_words(pid, "environ")
        if words is None or environ is None:
            continue
        words += [entry.split(b"=", 1)[1] for entry in environ if entry.startswith(SNAPSHOT_DIR_VARIABLE + b"=")]
        for word in words:
            path = Path(os.fsdecode(word).rstrip("/"))
            if path.parent != Path(SHM) or not path.name.startswith(SHM_PREFIX) or path in found:
                continue
            try:
                theirs = os.stat(f"/proc/{pid}/root{path}", follow_symlinks=False)
                ours = os.stat(path, follow_symlinks=False)
            except OSError:
                continue
            if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino):
                found[path] = ShmFolder(path, ours.st_dev, ours.st_ino)
    return list(found.values())


def _q(text: str) -> str:
    import shlex

    return shlex.quote(text)
