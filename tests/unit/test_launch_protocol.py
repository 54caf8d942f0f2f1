"""The launcher-to-task protocol: records round-trip, hostile files are refused quietly, the registry is complete."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.errors import UsageError
from tfdist import protocol as P
from tests.conftest import REPO_ROOT


def plan(**kw) -> P.TaskPlan:
    base = dict(task_type="worker", task_index=1, address="127.0.0.1:5", tf_config="{}",
                command=P.Command("train.py", ("--x",), interpreter="py"), run_id="r", attempt=2, max_restarts=3,
                job_name="j", heartbeat_path="/l/hb", error_path="/l/err")
    base.update(kw)
    return P.TaskPlan(**base)


def test_heartbeat_round_trips_with_progress_fields(tmp_path):
    path = str(tmp_path / "hb")
    record = P.HeartbeatRecord(step=12, time=100.5, loss=0.25, total_steps=400, examples=768)
    assert P.write_heartbeat(path, record)
    assert P.read_heartbeat(path) == record
    P.write_heartbeat(path, P.HeartbeatRecord(step=13, time=1.0, state=P.TaskState.FINISHED))
    got = P.read_heartbeat(path)
    assert got is not None and got.finished and got.step == 13 and got.v == P.PROTOCOL_VERSION


@pytest.mark.parametrize("text, expected", [
    ("7\n", (7, False)), ("7 finished\n", (7, True)), (" finished\n", (None, True)),  # the pre-version-1 format
    ('{"step": -3, "state": "bogus", "loss": "x"}', (None, False)), ("[1, 2]", None), ("not json at all", None),
    ('{"step": true}', (None, False)),
])
def test_heartbeat_reader_takes_old_format_and_survives_garbage(tmp_path, text, expected):
    path = tmp_path / "hb"
    path.write_text(text)
    got = P.read_heartbeat(str(path))
    assert (None if got is None else (got.step, got.finished)) == expected


def test_missing_files_read_as_none(tmp_path):
    assert P.read_heartbeat(str(tmp_path / "none")) is None
    assert P.read_error(str(tmp_path / "none")) is None


def test_error_record_from_exception_round_trips(tmp_path):
    try:
        raise ValueError("boom")
    except ValueError as exc:
        record = P.ErrorRecord.from_exception(exc)
    path = str(tmp_path / "err.json")
    assert P.write_error(path, record)
    got = P.read_error(path)
    assert got == record and got.type == "ValueError" and "raise ValueError" in got.traceback


def test_writer_never_raises_where_it_cannot_write(tmp_path):
    assert P.write_heartbeat(str(tmp_path / "missing" / "hb"), P.HeartbeatRecord(step=1, time=0.0)) is False


def test_command_is_structured_not_sliced():
    script = P.Command("t.py", ("a",), interpreter="py")
    module = P.Command("pkg.m", ("a",), interpreter="py", module=True)
    program = P.Command("/bin/prog", ("a",))
    assert script.argv() == ["py", "-u", "t.py", "a"] and script.script_argv() == ["t.py", "a"]
    assert module.argv() == ["py", "-u", "-m", "pkg.m", "a"] and module.script_argv() == ["-m", "pkg.m", "a"]
    assert program.argv() == ["/bin/prog", "a"] and not program.is_python and program.program == "/bin/prog"


def test_plan_renders_protocol_environment_and_metrics_only_when_asked():
    env = plan().environment()
    assert env[P.HEARTBEAT_FILE] == "/l/hb" and env[P.ERROR_FILE] == "/l/err" and env[P.RESTART_COUNT] == "2"
    assert env[P.TASK_TYPE] == "worker" and env[P.TASK_INDEX] == "1" and P.METRICS_PORT not in env
    env = plan(metrics_port=9000, metrics_host="::1", extra_env={"MY": "1"}).environment()
    assert env[P.METRICS_PORT] == "9000" and env[P.METRICS_HOST] == "::1" and env["MY"] == "1"
    assert set(plan().protocol_env()) <= P.PROTECTED


@pytest.mark.parametrize("name", sorted(P.PROTECTED))
def test_protocol_variables_cannot_be_overridden(name):
    with pytest.raises(UsageError, match=re.escape(f"--env {name}")):
        P.refuse_protected(["OK", name])
    with pytest.raises(UsageError):
        plan(extra_env={name: "x"}).environment()


def test_user_may_still_choose_launcher_defaults():
    P.refuse_protected([P.LEGACY_KERAS, P.CUDA_VISIBLE_DEVICES, "OMP_NUM_THREADS"])


def test_every_tfdist_variable_in_the_source_is_registered():
    """One registry: a TFDIST_* name written anywhere under src/ must be in it (flag twins are built, not written)."""
    names = set()
    for path in (REPO_ROOT / "src" / "tfdist").rglob("*.py"):
        names |= set(re.findall(r"\bTFDIST_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")))
    from tfdist.cli.main import COMMANDS

    twins = tuple(f"TFDIST_{name.upper().replace('-', '_')}_" for name in COMMANDS)  # TFDIST_<COMMAND>_<FLAG>
    names = {n for n in names if not n.startswith(twins)}
    missing = sorted(n for n in names if n not in P.VARIABLES)
    assert not missing, f"add these to tfdist.protocol.variables.REGISTRY: {missing}"


def test_the_docs_table_of_variables_is_generated_from_the_registry():
    page = (REPO_ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    assert P.TABLE_BEGIN in page and P.TABLE_END in page
    table = page.split(P.TABLE_BEGIN, 1)[1].split(P.TABLE_END, 1)[0].strip()
    assert table == P.render_env_table(), "regenerate with: python -m tfdist.protocol"


def test_protocol_imports_neither_tensorflow_nor_the_launcher():
    # Only tfdist.errors, tfdist.status and tfdist.frozen may come with it, the variables included (the runtime inside
    # a training script imports it).
    code = ("import sys, tfdist.protocol, tfdist.protocol.variables; "
            "bad = [m for m in sys.modules if m == 'tensorflow' or (m.startswith('tfdist.') "
            "and not m.startswith('tfdist.protocol') "
            "and m not in ('tfdist.errors', 'tfdist.status', 'tfdist.frozen'))]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(REPO_ROOT)).stdout
    assert out.strip() == "[]"


def test_loaded_library_modules_are_libraries_only(tmp_path):
    import json as stdlib_module
    import types

    mine = types.ModuleType("mytrain")
    mine.__file__ = str(tmp_path / "mytrain.py")
    names = P.loaded_library_modules({"json": stdlib_module, "mytrain": mine, "__main__": stdlib_module,
                                      "json._private": stdlib_module, "builtin": types.ModuleType("builtin")})
    assert names == ["json"]
    hb = str(tmp_path / "w.heartbeat")
    assert P.write_modules(hb, ["json", "numpy.linalg", "bad name", "os;rm"]) and P.read_modules(hb) == \
        ["json", "numpy.linalg"]
    assert P.read_modules(str(tmp_path / "none")) == []


# -- phases: what the hang verdict learns from ------------------------------------------------------------------------
def test_a_heartbeat_with_phases_reads_back_as_written(tmp_path):
    from tfdist.protocol.records import HeartbeatRecord, Phase, PhaseStats, read_heartbeat, write_heartbeat

    record = HeartbeatRecord(step=3, time=10.0, phase=Phase.BETWEEN, phase_since=9.5,
                             phase_stats={Phase.STEP: PhaseStats(n=2, p99=0.06, max=0.07),
                                          Phase.STARTUP: PhaseStats(n=1, p99=4.0, max=4.0)})
    path = str(tmp_path / "hb")
    assert write_heartbeat(path, record)
    assert read_heartbeat(path) == record


@pytest.mark.parametrize("phase, stats, expected_phase, expected_stats", [
    ("warp", {"step": {"n": 1, "p99": 0.1, "max": 0.1}}, None, {"step"}),  # an unknown phase is no phase
    ("step", {"step": {"n": 1, "p99": 5.0, "max": 1.0}}, "step", None),  # p99 above the longest: not a measurement
    ("step", {"step": {"n": 0, "p99": 0.1, "max": 0.1}}, "step", None),  # no finished phase
    ("step", {"step": {"n": 1, "p99": -1.0, "max": 0.1}}, "step", None),  # a negative duration
    ("step", {"step": {"n": 1, "p99": 1.0, "max": 1e9}}, "step", None),  # beyond any real duration
    ("step", {"fold": {"n": 1, "p99": 1.0, "max": 1.0}, "step": "x"}, "step", None),  # unknown kind, not a mapping
    (7, [1, 2], None, None),
])
def test_hostile_phase_fields_are_left_out(tmp_path, phase, stats, expected_phase, expected_stats):
    import json

    from tfdist.protocol.records import read_heartbeat

    path = tmp_path / "hb"
    path.write_text(json.dumps({"v": 1, "step": 4, "time": 1.0, "phase": phase, "phase_stats": stats}))
    record = read_heartbeat(str(path))
    assert record is not None and record.step == 4
    assert (record.phase.value if record.phase else None) == expected_phase
    assert (set(p.value for p in record.phase_stats) if record.phase_stats else None) == expected_stats
