"""`tfdist k8s`: the written manifests (golden files), output handling, errors."""
from __future__ import annotations

import functools


import pytest
import yaml

from tfdist.cli.main import main
from tests import goldens


CASES = {
    "tfjob.yaml": ["--kind", "tfjob", "--workers", "2", "--chief", "--ps", "1", "--evaluator",
                   "--gpus-per-worker", "1", "--checkpoint-pvc", "digits-ckpt"],
    # The default kind: no --kind.
    "jobset.yaml": ["--workers", "2", "--chief", "--evaluator", "--gpus-per-worker", "1",
                    "--checkpoint-pvc", "digits-ckpt", "--max-restarts", "4"],
    "indexed-job.yaml": ["--kind", "indexed-job", "--workers", "3", "--checkpoint-pvc", "digits-ckpt",
                         "--namespace", "ml"],
}
COMMAND = ["--", "python", "examples/digits.py", "--epochs", "5"]


check_golden = functools.partial(goldens.check_golden, "k8s")


@pytest.mark.parametrize("name", CASES)
def test_golden_manifests(tmp_path, capsys, name):
    out = tmp_path / name
    argv = ["k8s", "--name", "digits", "--image", "registry.example/digits:1", *CASES[name], "-o", str(out), *COMMAND]
    assert main(argv) == 0
    assert f"apply with: kubectl apply -f {out}" in capsys.readouterr().err
    check_golden(name, out.read_text())


def test_stdout_and_emptydir_note(capsys):
    assert main(["k8s", "--name", "x", "--image", "i:1", "-n", "1", "--", "python", "t.py"]) == 0
    captured = capsys.readouterr()
    documents = list(yaml.safe_load_all(captured.out))
    assert [d["kind"] for d in documents] == ["JobSet"]  # the default needs no Kubeflow Trainer v1
    assert captured.err.splitlines() == ["tfdist k8s: note: no --checkpoint-pvc: checkpoints go to an emptyDir and "
                                         "die with each pod, so a restarted job starts from scratch"]


@pytest.mark.parametrize("how", ["flag", "twin"])
def test_a_tfjob_on_request_with_a_one_line_note(capsys, monkeypatch, how):
    argv = ["k8s", "--name", "x", "--image", "i:1", "-n", "1", "--checkpoint-pvc", "c"]
    if how == "flag":
        argv += ["--kind", "tfjob"]
    else:
        monkeypatch.setenv("TFDIST_K8S_KIND", "tfjob")
    assert main([*argv, "--", "python", "t.py"]) == 0
    captured = capsys.readouterr()
    assert [d["kind"] for d in yaml.safe_load_all(captured.out)] == ["TFJob"]
    (note,) = captured.err.splitlines()
    assert note.startswith("tfdist k8s: note: a TFJob needs Kubeflow Trainer v1") and "--kind jobset" in note


def test_the_kind_twin_picks_another_default(capsys, monkeypatch):
    monkeypatch.setenv("TFDIST_K8S_KIND", "indexed-job")
    assert main(["k8s", "--name", "x", "--image", "i:1", "-n", "2", "--", "python", "t.py"]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)] == ["Service", "Job"]


def test_command_options_after_double_dash_are_the_commands(capsys):
    assert main(["k8s", "--name", "x", "--image", "i:1", "--kind", "jobset", "--checkpoint-pvc", "c", "--workers", "2",
                 "--", "python", "t.py", "--workers", "9"]) == 0
    (jobset,) = yaml.safe_load_all(capsys.readouterr().out)
    (worker,) = jobset["spec"]["replicatedJobs"]
    assert worker["template"]["spec"]["completions"] == 2
    container = worker["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-4:] == ["python", "t.py", "--workers", "9"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--name", "x", "--image", "i:1", "-n", "1"], "Missing argument"),
    (["--name", "x", "--image", "i:1", "--", "t"], "Missing option '-n' / '--workers'"),
    (["--name", "X", "--image", "i:1", "-n", "1", "--", "t"], "--name 'X' is not a DNS label"),
    (["--name", "x\n", "--image", "i:1", "-n", "1", "--", "t"], "--name 'x\\n' is not a DNS label"),
    (["--name", "x", "--image", "i:1", "-n", "1", "--namespace", "n" * 100, "--", "t"], "--namespace"),
    (["--name", "x", "--image", "i:1", "-n", "1", "--checkpoint-pvc", "c" * 300, "--", "t"], "--checkpoint-pvc"),
    (["--name", "x", "--image", "i:1", "-n", "1", "--checkpoint-pvc", "a..b", "--", "t"], "--checkpoint-pvc"),
    (["--name", "x", "--image", "i:1", "-n", "2", "--kind", "indexed-job", "--ps", "1", "--", "t"], "never completes"),
    (["--name", "x", "--image", "i:1", "-n", "1", "--kind", "cronjob", "--", "t"], "Invalid value"),
])
def test_errors(capsys, argv, message):
    assert main(["k8s", *argv]) == 2
    assert message in capsys.readouterr().err


def test_existing_output_is_refused_then_replaced_with_force_keeping_a_bak(tmp_path, capsys):
    out = tmp_path / "job.yaml"
    out.write_text("# hand-written\n")
    argv = ["k8s", "--name", "x", "--image", "i:1", "-n", "1", "-o", str(out)]
    assert main([*argv, "--", "t"]) == 2
    assert "exists" in capsys.readouterr().err and out.read_text() == "# hand-written\n"
    assert main([*argv, "--force", "--", "t"]) == 0
    assert yaml.safe_load(out.read_text())["kind"] == "JobSet"
    assert (tmp_path / "job.yaml.bak").read_text() == "# hand-written\n"


def test_output_into_a_missing_folder_is_one_line_exit_2(tmp_path, capsys):
    out = tmp_path / "missing" / "job.yaml"
    assert main(["k8s", "--name", "x", "--image", "i:1", "-n", "1", "-o", str(out), "--", "t"]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err and err.count("\n") == 1
