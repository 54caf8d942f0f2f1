"""A throw-away single-node Slurm cluster for tests: munged + slurmctld + slurmd, in a temporary directory.

Nothing is installed and nothing system-wide is touched: the cluster has its own slurm.conf (passed through
SLURM_CONF), its own munge key and socket, its own ports and state directory, so it never collides with a real
/etc/slurm or with another test session. As root without systemd this works with SlurmUser=root,
proctrack/linuxproc, task/none and select/cons_tres; munged runs as the munge user. :meth:`SlurmCluster.stop`
stops every daemon and every process started for a job (found by the SLURM_CONF they inherited).
"""
from __future__ import annotations

import atexit
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo", "scancel")


class SlurmUnavailable(RuntimeError):
    """Slurm cannot be started here; the message says why (used as the skip reason)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


class SlurmCluster:
    """One node named after this host, partition ``debug``, all CPUs of this machine."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tfdist-slurm-"))
        self.conf = self.root / "slurm.conf"
        self.processes: dict[str, subprocess.Popen] = {}
        self.hostname = socket.gethostname().split(".")[0]
        self._stopped = False

    # ------------------------------------------------------------------------------------------------ start

    def check_prerequisites(self) -> None:
        missing = [name for name in BINARIES if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
        if missing:
            raise SlurmUnavailable(f"Slurm/munge not installed (missing {', '.join(missing)}); "
                                   "run .ci/system-deps.sh (apt-get install slurm-wlm munge)")
        if os.geteuid() != 0:
            raise SlurmUnavailable("the test Slurm runs with SlurmUser=root and needs root")
        try:
            pwd.getpwnam("munge")
        except KeyError:
            raise SlurmUnavailable("no 'munge' user (the munge package creates it)") from None

    def env(self) -> dict[str, str]:
        """The environment for Slurm client commands (and the jobs they submit) against this cluster."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        path = env.get("PATH", "")
        if "/usr/sbin" not in path.split(":"):
            env["PATH"] = f"{path}:/usr/sbin" if path else "/usr/sbin"
        return env

    def _start_munge(self) -> Path:
        munge_dir = self.root / "munge"
        munge_dir.mkdir()
        user = pwd.getpwnam("munge")
        key = munge_dir / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        os.chown(key, user.pw_uid, user.pw_gid)
        os.chown(munge_dir, user.pw_uid, user.pw_gid)
        # munged wants its socket directory searchable by all and its key readable only by itself.
        munge_dir.chmod(0o711)
        self.root.chmod(0o711)
        socket_path = munge_dir / "munge.socket"
        log = open(self.root / "munged.out", "wb")
        self.processes["munged"] = subprocess.Popen(
            ["munged", "--foreground", f"--key-file={key}", f"--socket={socket_path}",
             f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={munge_dir / 'munged.log'}",
             f"--seed-file={munge_dir / 'munged.seed'}"],
            user=user.pw_uid, group=user.pw_gid, extra_groups=[], stdout=log, stderr=subprocess.STDOUT,
            env=self.env(), start_new_session=True)
        self._wait_for(lambda: socket_path.exists(), 10, "munged", self.root / "munged.out")
        return socket_path

    def _write_conf(self, munge_socket: Path) -> None:
        for name in ("state", "spool", "log"):
            (self.root / name).mkdir()
        cpus = os.cpu_count() or 1
        # A fresh random first job id gives each test session its own TensorFlow port range.
        first_job_id = random.randrange(1000, 900_000)
        self.conf.write_text("\n".join([
            "ClusterName=tfdisttest",
            f"SlurmctldHost={self.hostname}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire is also how long a requeued job waits before it may start again (default 120 s).
            f"AuthInfo=socket={munge_socket},cred_expire=10",
            "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SwitchType=switch/none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MailProg=/bin/true",
            f"FirstJobId={first_job_id}",
            "MinJobAge=600",
            "KillWait=10",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'log' / 'slurmd.log'}",
            f"NodeName={self.hostname} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def _wait_for(self, ready, timeout: float, what: str, log: Path) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise SlurmUnavailable(f"{name} exited with {process.returncode}: {_tail(log)}")
            if ready():
                return
            time.sleep(0.2)
        raise SlurmUnavailable(f"{what} did not come up within {timeout:.0f} s: {_tail(log)}")

    def query(self, *argv: str, timeout: float = 20) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster."""
        return subprocess.run(list(argv), env=self.env(), capture_output=True, text=True, timeout=timeout)

    def start(self) -> "SlurmCluster":
        """Start munged, slurmctld and slurmd; raise :class:`SlurmUnavailable` when that is not possible."""
        self.check_prerequisites()
        # Also stop at interpreter exit, should the test session end without running the fixture's finaliser.
        atexit.register(self.stop)
        munge_socket = self._start_munge()
        self._write_conf(munge_socket)
        for daemon, argv in (("slurmctld", ["slurmctld", "-D", "-i"]), ("slurmd", ["slurmd", "-D"])):
            log = open(self.root / f"{daemon}.out", "wb")
            self.processes[daemon] = subprocess.Popen(argv, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                                      start_new_session=True)

        def idle() -> bool:
            try:
                out = self.query("sinfo", "-h", "-o", "%T", timeout=5).stdout.split()
            except subprocess.TimeoutExpired:
                return False
            return "idle" in out

        self._wait_for(idle, 60, "the Slurm node", self.root / "log" / "slurmctld.log")
        return self

    # ------------------------------------------------------------------------------------------------- jobs

    def submit(self, script: Path, *, cwd: Path, env: dict[str, str] | None = None) -> int:
        """``sbatch`` a script; return the job id."""
        full_env = self.env()
        full_env.update(env or {})
        result = subprocess.run(["sbatch", "--parsable", str(script)], cwd=cwd, env=full_env, capture_output=True,
                                text=True, timeout=30)
        if result.returncode != 0:
            raise RuntimeError(f"sbatch failed ({result.returncode}): {result.stderr.strip()}")
        return int(result.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job`` as a dictionary (JobState, ExitCode, Restarts, ...)."""
        out = self.query("scontrol", "show", "job", "-o", str(job_id)).stdout
        fields: dict[str, str] = {}
        for word in out.split():
            key, sep, value = word.partition("=")
            if sep:
                fields.setdefault(key, value)
        return fields

    def wait(self, job_id: int, timeout: float, *, states: tuple[str, ...] = ("COMPLETED", "FAILED", "CANCELLED",
                                                                               "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                                                                               "BOOT_FAIL", "DEADLINE")) -> dict:
        """Poll until the job reaches one of ``states``; return its record. Raises TimeoutError."""
        deadline = time.monotonic() + timeout
        record: dict[str, str] = {}
        while time.monotonic() < deadline:
            record = self.job(job_id)
            if record.get("JobState") in states:
                return record
            time.sleep(1)
        subprocess.run(["scancel", str(job_id)], env=self.env(), capture_output=True, timeout=30)
        raise TimeoutError(f"job {job_id} still {record.get('JobState')} after {timeout:.0f} s")

    # ------------------------------------------------------------------------------------------------- stop

    def _own_processes(self) -> list[psutil.Process]:
        """Processes started for this cluster's jobs (slurmstepd, tasks): they carry our SLURM_CONF."""
        mine = []
        for process in psutil.process_iter(["pid"]):
            if process.pid == os.getpid():
                continue
            try:
                if process.environ().get("SLURM_CONF") == str(self.conf):
                    mine.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return mine

    def stop(self) -> None:
        """Cancel every job, stop the daemons and anything left of the jobs, delete the directory (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        if self.conf.exists() and "slurmctld" in self.processes:
            try:
                self.query("scancel", "--user", "root", timeout=10)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    if not self.query("squeue", "-h", "-o", "%i", timeout=5).stdout.strip():
                        break
                    time.sleep(0.5)
            except (subprocess.TimeoutExpired, OSError):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            process = self.processes.get(name)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        leftovers = self._own_processes()
        for process in leftovers:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(leftovers, timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)
