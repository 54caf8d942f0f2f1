"""LaunchOptions: one typed record of `tfdist launch`'s flags, its defaults written once, its conversions (in
entry.compose), the argv round trip (its own reader and the CLI's parser agree), and the per-mode support table.
Nothing is started."""
from __future__ import annotations

import ast
import dataclasses

import click
import pytest

from tests.conftest import REPO_ROOT
from tfdist.cli.launch import command as launch_command
from tfdist.cli.main import main
from tfdist.errors import UsageError
from tfdist.launch.elastic.agent.spec import AgentSpec
from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings
from tfdist.launch.entry.compose import agent_spec, launch_spec, rendezvous_settings
from tfdist.launch.entry.parity import ACROSS_MACHINES
from tfdist.launch.options import ALWAYS, BY_NAME, CHANGED, DEFAULTS, OPTIONS, LaunchOptions, Mode, from_argv
from tfdist.launch.spec import LaunchSpec, Timeouts
from tfdist.protocol import Command

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")
COMMAND = Command(target=FAKE, args=("x",), interpreter="/usr/bin/python3")

# Every field away from its default (what a long command line would say).
EVERYTHING = LaunchOptions(
    target=("train.py", "--epochs", "3", "--", "-x"), module=True, no_python=False, dry_run=True, workers=3, ps=2,
    chief=True, evaluator=True, max_restarts=4, restart_after_training=True, restart_window=60.5, backoff=0.25,
    log_dir="/tmp/logs a", tee=True,
    port_base=20000, host="0.0.0.0", env=("A=1", "B=two words", "C="), gpus_per_task=2, nccl_debug=True,
    tf_log_level="error", grace_period=12.5, hang_timeout=0.0, metrics_port=9100, metrics_host="::1",
    launcher_metrics_port=9200, job_name="digits", allow_keras3=True, warm_spares=False, bootstrap=False,
    thread_caps=True, live=False,
    hostfile="hosts.txt", hosts="a,b:2", include="a", exclude="b", host_cooldown_range="1:2",
    host_discovery_script="/bin/hosts", min_nodes=1, nnodes="2:4",
    rdzv_endpoint="10.0.0.1:29400", rdzv_backend="etcd", rdzv_conf=("prefix=/x", "timeout=3"), rdzv_id="job-1",
    rdzv_secret_file="/s", rdzv_insecure=True, node_rank=0, node_address="10.0.0.2", node_name="m2",
    node_timeout=2.5, rdzv_timeout=30.0, rdzv_last_call=0.0, checkpoint_dir="/ckpt", agent_watch_stdin=True)
CLI_NAME = {"env": "env_pairs"}  # the Click parameter behind a field, where the names differ


def _cli_parse(argv: list[str]) -> LaunchOptions:
    """What the real command line makes of ``argv`` (Click's parser, defaults and types), without running it."""
    with launch_command.make_context("launch", list(argv)) as ctx:
        return LaunchOptions.from_params(ctx.params)


# -- the table ---------------------------------------------------------------------------------------------------------
def test_the_table_has_one_entry_per_option_in_field_order():
    assert [spec.name for spec in OPTIONS] == [f.name for f in dataclasses.fields(LaunchOptions)]
    words = [w for spec in OPTIONS for w in (spec.flag, spec.short, spec.negative) if w]
    assert len(words) == len(set(words))
    assert {spec.forward for spec in OPTIONS} <= {"", ALWAYS, CHANGED}


def test_every_cli_flag_of_launch_is_in_the_table_with_the_same_flags_and_default():
    params = {p.name: p for p in launch_command.params}
    assert set(params) == {CLI_NAME.get(name, name) for name in BY_NAME}
    for spec in OPTIONS:
        param = params[CLI_NAME.get(spec.name, spec.name)]
        if isinstance(param, click.Option):
            assert spec.flag in param.opts, spec.name
            assert not spec.short or spec.short in param.opts, spec.name
            assert not spec.negative or spec.negative in param.secondary_opts, spec.name
    # the command line's defaults are the options' defaults (the flags take them from DEFAULTS)
    assert _cli_parse(["t.py"]) == dataclasses.replace(DEFAULTS, target=("t.py",))


def test_every_option_has_a_row_in_the_across_machines_table():
    # Which option works in which way across machines is the parity table's; it must know every option.
    options = {CLI_NAME.get(spec.name, spec.name) for spec in OPTIONS if spec.name != "target"}
    assert options == set(ACROSS_MACHINES)
    assert all(set(row) == {Mode.HOSTFILE.value, Mode.RENDEZVOUS.value} for row in ACROSS_MACHINES.values())


# -- defaults, written once --------------------------------------------------------------------------------------------
def test_the_specs_take_their_defaults_from_the_options():
    agent = AgentSpec(job="j", endpoint_host="h", endpoint_port=1, min_nodes=1, max_nodes=1, slots=1, command=COMMAND)
    assert (agent.node_timeout, agent.rdzv_timeout, agent.first_round_wait, agent.grace_period, agent.hang_timeout,
            agent.max_restarts) == (DEFAULTS.node_timeout, DEFAULTS.rdzv_timeout, DEFAULTS.rdzv_last_call,
                                    DEFAULTS.grace_period, DEFAULTS.hang_timeout, DEFAULTS.max_restarts)
    assert agent.max_restarts == _cli_parse(["t.py"]).max_restarts  # the CLI's --max-restarts default
    rdzv = RendezvousSettings(job="j", min_nodes=1, max_nodes=1)
    assert (rdzv.node_timeout, rdzv.rdzv_timeout, rdzv.first_round_wait, rdzv.max_restarts) == (
        DEFAULTS.node_timeout, DEFAULTS.rdzv_timeout, DEFAULTS.rdzv_last_call, DEFAULTS.max_restarts)
    assert (Timeouts().grace, Timeouts().hang) == (DEFAULTS.grace_period, DEFAULTS.hang_timeout)


def test_the_node_timeout_default_is_written_once():
    src = REPO_ROOT / "src" / "tfdist"
    owners = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and node.target.id == "node_timeout" and isinstance(node.value, ast.Constant)):
                owners.append(str(path.relative_to(src)))
            if (isinstance(node, ast.keyword) and node.arg == "default" and isinstance(node.value, ast.Constant)
                    and node.value.value == 10.0):
                owners.append(str(path.relative_to(src)))
    assert owners == ["launch/options.py"]


# -- argv round trip ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [
    DEFAULTS, EVERYTHING, dataclasses.replace(DEFAULTS, target=("-script-like", "a")),
    dataclasses.replace(DEFAULTS, live=True, warm_spares=False, target=("t.py",)),
    dataclasses.replace(DEFAULTS, env=("K=V",), no_python=True, module=False, target=("/bin/true",)),
], ids=["defaults", "everything", "dash-target", "switches", "program"])
def test_argv_round_trips_through_both_readers(options):
    argv = options.to_argv()
    assert from_argv(argv) == options
    assert _cli_parse(argv) == options


def test_only_changed_options_are_written():
    assert DEFAULTS.to_argv() == ["--"]
    assert dataclasses.replace(DEFAULTS, workers=2, target=("t.py",)).to_argv() == ["--workers", "2", "--", "t.py"]


@pytest.mark.parametrize("argv, needle", [
    (["--frobnicate"], "--frobnicate"), (["--workers"], "--workers needs a value"),
    (["--workers", "two"], "--workers 'two'"), (["--node-timeout=x"], "--node-timeout 'x'"),
])
def test_from_argv_refuses_what_it_cannot_read(argv, needle):
    with pytest.raises(UsageError, match=needle):
        from_argv(argv)


def test_from_argv_reads_short_and_inline_forms():
    got = from_argv(["-n", "2", "-m", "--node-timeout=4", "--env", "A=1", "--env", "B=2", "pkg.mod", "--x"])
    assert (got.workers, got.module, got.node_timeout, got.env, got.target) == (
        2, True, 4.0, ("A=1", "B=2"), ("pkg.mod", "--x"))


# -- the agents' flags ------------------------------------------------------------------------------------------------
def test_the_agents_get_the_forwarded_options_and_nothing_else():
    args = list(EVERYTHING.agent_args())
    for reader in (from_argv, _cli_parse):
        got = reader([*args, "--", "t.py"])
        for spec in OPTIONS:
            expected = getattr(EVERYTHING if spec.forward else DEFAULTS, spec.name)
            assert getattr(got, spec.name) == (("t.py",) if spec.name == "target" else expected), spec.name


def test_always_forwarded_values_are_explicit_even_at_their_defaults():
    # A host's own TFDIST_LAUNCH_* twins or tfdist.toml must not change what the job was started with.
    args = list(DEFAULTS.agent_args())
    for flag, value in (("--node-timeout", "10.0"), ("--max-restarts", str(DEFAULTS.max_restarts)),
                        ("--grace-period", "30.0"),
                        ("--rdzv-last-call", "3.0"), ("--tf-log-level", "auto"), ("--metrics-host", "127.0.0.1")):
        assert args[args.index(flag) + 1] == value
    assert "--job-name" not in args and "--warm-spares" not in args  # at their defaults: each agent's own


# -- conversions -------------------------------------------------------------------------------------------------------
def test_launch_spec_carries_every_single_machine_option():
    spec = launch_spec(EVERYTHING, COMMAND, host="10.1.1.1")
    assert isinstance(spec, LaunchSpec) and spec.command == COMMAND and spec.host == "10.1.1.1"
    assert spec.timeouts == Timeouts(grace=12.5, hang=0.0)
    assert spec.env == (("A", "1"), ("B", "two words"), ("C", ""))
    for name in ("workers", "ps", "chief", "evaluator", "max_restarts", "restart_window", "backoff", "log_dir", "tee",
                 "port_base", "gpus_per_task", "nccl_debug", "metrics_port", "metrics_host", "launcher_metrics_port",
                 "job_name", "allow_keras3", "warm_spares", "thread_caps", "bootstrap", "restart_after_training"):
        assert getattr(spec, name) == getattr(EVERYTHING, name), name
    assert launch_spec(DEFAULTS, COMMAND).host == DEFAULTS.host


def test_agent_spec_and_rendezvous_settings_come_from_the_same_values():
    options = dataclasses.replace(EVERYTHING, hostfile=None, hosts=None, rdzv_backend="tfdist")
    agent = agent_spec(options, COMMAND, job="job-1", secret=b"k" * 32, legacy_keras=True, versions={"tfdist": "0"})
    assert (agent.job, agent.endpoint_host, agent.endpoint_port, agent.min_nodes, agent.max_nodes, agent.slots) == (
        "job-1", "10.0.0.1", 29400, 2, 4, 3)
    assert (agent.node_timeout, agent.rdzv_timeout, agent.first_round_wait, agent.max_restarts, agent.grace_period,
            agent.hang_timeout) == (2.5, 30.0, 0.0, 4, 12.5, 0.0)
    assert agent.warm_spares is False and agent.watch_stdin and agent.versions == {"tfdist": "0"}
    assert agent.secret == b"k" * 32
    settings = rendezvous_settings(options, "job-1", 2, 4)
    assert (settings.node_timeout, settings.rdzv_timeout, settings.first_round_wait, settings.max_restarts) == (
        2.5, 30.0, 0.0, 4)
    assert settings.stop_timeout == 12.5 + 2.5 + 5
    assert (settings.restart_window, settings.backoff) == (60.5, 0.25)
    assert (agent.restart_window, agent.backoff, agent.port_base, agent.launcher_metrics_port) == (
        60.5, 0.25, 20000, 9200)


@pytest.mark.parametrize("restarts, nnodes, warm", [(0, "2", False), (1, "2", True), (0, "2:3", True)])
def test_agent_warm_spares_only_when_a_next_round_can_come(restarts, nnodes, warm):
    options = dataclasses.replace(DEFAULTS, max_restarts=restarts, nnodes=nnodes, rdzv_endpoint="h:1")
    assert agent_spec(options, COMMAND, job="j", secret=b"", legacy_keras=False).warm_spares is warm


@pytest.mark.parametrize("changes, mode", [
    ({}, Mode.SINGLE), ({"nnodes": "2"}, Mode.RENDEZVOUS), ({"rdzv_endpoint": "h"}, Mode.RENDEZVOUS),
    ({"hosts": "a"}, Mode.HOSTFILE), ({"hostfile": "f", "nnodes": "2"}, Mode.HOSTFILE),
])
def test_mode(changes, mode):
    assert dataclasses.replace(DEFAULTS, **changes).mode is mode
