"""`tfdist launch` across machines, as the command line sees it: bad flags and files are one line and exit 2, and
--host never puts an unreachable address into TF_CONFIG. Nothing here starts a process or sends a packet."""
from __future__ import annotations

import json

import pytest

from tests.conftest import REPO_ROOT
from tfdist.launch.options import parse_endpoint, parse_nnodes
from tfdist.cli.main import main
from tfdist.errors import UsageError

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::"])
def test_the_wildcard_host_is_listened_on_never_advertised(capsys, wildcard):
    assert main(["launch", "-n", "2", "--host", wildcard, "--dry-run", "--", FAKE, "x"]) == 0
    configs = [json.loads(line.split("=", 1)[1]) for line in capsys.readouterr().out.splitlines()
               if "TF_CONFIG=" in line]
    addresses = [a for c in configs for a in c["cluster"]["worker"]]
    assert len(addresses) == 4 and not any(a.startswith(("0.0.0.0", "[::]")) for a in addresses)


def test_a_host_that_is_not_this_machine_is_one_line_not_a_traceback(capsys):
    # 192.0.2.0/24 is TEST-NET-1: no machine has it; binding fails locally and nothing is sent.
    assert main(["launch", "--host", "192.0.2.10", "--dry-run", "--", FAKE, "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--host 192.0.2.10" in err and "not an address of this machine" in err


@pytest.mark.parametrize("argv, needle", [
    (["--nnodes", "2"], "--nnodes needs --rdzv-endpoint"),
    (["--nnodes", "3:2", "--rdzv-endpoint", "h:1"], "--nnodes '3:2'"),
    (["--nnodes", "two", "--rdzv-endpoint", "h:1"], "--nnodes 'two'"),
    (["--nnodes", "2", "--rdzv-endpoint", "h;x:1"], "--rdzv-endpoint"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:99999"], "--rdzv-endpoint"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--rdzv-insecure", "--rdzv-id", "a b"], "--rdzv-id 'a b'"),
    # Roles across machines: a fixed cluster spec (ParameterServerStrategy), --ps with its coordinator, pins with roles.
    (["--nnodes", "2:3", "--rdzv-endpoint", "h:1", "--chief", "--ps", "1"],
     "--nnodes 2:3 cannot be an elastic range with --chief/--ps/--evaluator"),
    (["--nnodes", "1:2", "--rdzv-endpoint", "h:1", "--evaluator"], "--nnodes 1:2 cannot be an elastic range"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--ps", "1"], "--ps 1 needs --chief"),
    (["--hosts", "a,b", "--ps", "2"], "--ps 2 needs --chief"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--node-roles", "ps"], "--node-roles pins this machine"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--chief", "--node-roles", "ps;x", "--rdzv-insecure", "--rdzv-id",
      "j"], "--node-roles: roles='ps;x' is not a list of roles"),
    (["--hosts", "a,b", "--chief", "--min-nodes", "1"], "--min-nodes 1 cannot be used with --chief/--ps/--evaluator"),
    (["--hosts", "a:1,b:1", "--chief", "--ps", "1"], "no slot left for a worker"),
    (["--hosts", "a:1,b:1", "--chief", "--ps", "2"], "no free slot for ps:1"),
    (["--hosts", "a", "--chief", "--node-roles", "ps"], "--node-roles is not supported across machines with "
                                                        "--hostfile"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--hosts", "a"], "two ways in"),
    (["--hosts", "a,a"], "host a is listed twice"),
    (["--hosts", "a", "--include", "b"], "--include: b is not in the host list"),
    (["--hosts", "a,b", "--min-nodes", "3"], "--min-nodes 3 is more than the 2 host(s)"),
    (["--hostfile", "/nonexistent/hosts"], "--hostfile /nonexistent/hosts: cannot read it"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--rdzv-insecure", "--rdzv-id", "j", "--node-address",
      "127.0.0.1"],
     "--node-address 127.0.0.1 cannot be reached from other machines"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--rdzv-conf", "user=a"], "--rdzv-conf is for --rdzv-backend etcd"),
    (["--hosts", "a,b", "--rdzv-backend", "etcd"], "--rdzv-backend etcd runs with --nnodes/--rdzv-endpoint"),
    (["--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e1:2379,,e2"], "has an empty member"),
    (["--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e1", "--rdzv-conf", "colour=red"],
     "--rdzv-conf 'colour=red'"),
    (["--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e1", "--rdzv-conf", "cacert=/nonexistent/ca"],
     "--rdzv-conf cacert=/nonexistent/ca"),
])
def test_bad_multi_machine_flags_are_one_line(capsys, argv, needle):
    assert main(["launch", *argv, "--", FAKE, "x"]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("text, expected", [("2", (2, 2)), ("2:4", (2, 4)), (" 1:1 ", (1, 1))])
def test_nnodes(text, expected):
    assert parse_nnodes(text) == expected


@pytest.mark.parametrize("text, expected", [("node1:29401", ("node1", 29401)), ("node1", ("node1", 29400)),
                                            ("198.18.0.1", ("198.18.0.1", 29400)), ("[::1]:5", ("::1", 5))])
def test_endpoint(text, expected):
    assert parse_endpoint(text) == expected


def test_endpoint_refuses_garbage():
    with pytest.raises(UsageError):
        parse_endpoint("-oProxyCommand=x:1")


# -- the job secret (issue 20) -----------------------------------------------------------------------------------------
def _secret_file(tmp_path, text="ab" * 32, mode=0o600):
    path = tmp_path / "job.secret"
    path.write_text(text + "\n")
    path.chmod(mode)
    return str(path)


def _refused(capsys, argv):
    assert main(["launch", "--nnodes", "2", "--rdzv-endpoint", "h:1", *argv, "--", FAKE, "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_without_a_secret_the_rendezvous_says_how_to_make_one(capsys):
    err = _refused(capsys, [])
    assert "--rdzv-secret-file" in err and "python -m tfdist.launch.elastic.secret PATH" in err
    assert "--rdzv-insecure" in err


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_secret_file_others_can_read_is_refused_naming_it(capsys, tmp_path, mode):
    path = _secret_file(tmp_path, mode=mode)
    err = _refused(capsys, ["--rdzv-secret-file", path])
    assert path in err and "group or others" in err


def test_a_short_secret_is_refused_naming_the_file(capsys, tmp_path):
    path = _secret_file(tmp_path, text="ab" * 8)
    err = _refused(capsys, ["--rdzv-secret-file", path])
    assert path in err and "at least 128 bits" in err


def test_the_secret_file_has_an_environment_twin(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TFDIST_LAUNCH_RDZV_SECRET_FILE", _secret_file(tmp_path, mode=0o644))
    assert "group or others" in _refused(capsys, [])


def test_insecure_mode_needs_a_job_id(capsys):
    assert "--rdzv-insecure needs --rdzv-id" in _refused(capsys, ["--rdzv-insecure"])


@pytest.mark.parametrize("text", ["00" * 32, "ab" * 16, "deadbeef" * 8, "0123456789abcdef" * 2])
def test_a_secret_that_is_not_random_is_refused_naming_the_file_and_the_fix(capsys, tmp_path, text):
    path = _secret_file(tmp_path, text=text)
    err = _refused(capsys, ["--rdzv-secret-file", path])
    assert path in err and "not hold a random job secret" in err
    assert "python -m tfdist.launch.elastic.secret PATH" in err


def test_a_secret_that_is_not_random_is_taken_with_rdzv_insecure(capsys, tmp_path):
    path = _secret_file(tmp_path, text="00" * 32)
    assert main(["launch", "--nnodes", "2", "--rdzv-endpoint", "198.18.0.1:29400", "--rdzv-secret-file", path,
                 "--rdzv-insecure", "--dry-run", "--", FAKE, "x"]) == 0, capsys.readouterr().err


def test_a_host_file_job_makes_its_own_secret(capsys):
    assert main(["launch", "--hosts", "a", "--rdzv-secret-file", "/x", "--", FAKE, "x"]) == 2
    err = capsys.readouterr().err
    assert "--rdzv-secret-file is not supported" in err and "fresh secret" in err


def test_the_documented_command_writes_a_new_secret_0600(tmp_path):
    import stat
    import subprocess
    import sys

    path = tmp_path / "job.secret"
    done = subprocess.run([sys.executable, "-m", "tfdist.launch.elastic.secret", str(path)], capture_output=True,
                          text=True, env={"PYTHONPATH": str(REPO_ROOT / "src")}, timeout=60)
    assert done.returncode == 0 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text().strip()) == 64
    again = subprocess.run([sys.executable, "-m", "tfdist.launch.elastic.secret", str(path)], capture_output=True,
                           text=True, env={"PYTHONPATH": str(REPO_ROOT / "src")}, timeout=60)
    assert again.returncode == 2 and "never overwritten" in again.stderr


@pytest.mark.parametrize("lines, needle", [
    ("a slots=2\nb slots=2 roles=boss\n", "hosts line 2: roles='boss' is not a list of roles"),
    ("a slots=2 roles=ps\n", "hosts: a has roles=ps, and the job has no --chief/--ps/--evaluator"),
])
def test_bad_roles_in_a_host_file_are_one_line_naming_file_and_line(capsys, tmp_path, lines, needle):
    hosts = tmp_path / "hosts"
    hosts.write_text(lines)
    assert main(["launch", "--hostfile", str(hosts), "--dry-run", "--", FAKE, "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle.replace("hosts", str(hosts), 1) in err and "Traceback" not in err


def test_a_host_file_dry_run_shows_where_each_role_runs_and_each_host_s_pins(capsys, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("198.18.0.1 slots=2\n198.18.0.2 slots=1 roles=ps\n198.18.0.3 slots=2\n")
    assert main(["launch", "--hostfile", str(hosts), "--chief", "--ps", "1", "--dry-run", "--", FAKE, "x"]) == 0
    out = capsys.readouterr().out
    assert "[host 198.18.0.1] node rank 0: chief:0, worker:0\n" in out
    assert "[host 198.18.0.2] node rank 1: ps:0 (pinned: ps)\n" in out
    assert "[host 198.18.0.3] node rank 2: worker:1, worker:2\n" in out
    ssh = [line for line in out.splitlines() if line.startswith("  ssh:")]
    # Every agent gets the job's roles; only the pinned host gets --node-roles.
    assert all("--chief" in line and "--ps 1" in line for line in ssh)
    assert ["--node-roles ps" in line for line in ssh] == [False, True, False]
    assert "5 task(s) planned on 3 host(s)" in out
