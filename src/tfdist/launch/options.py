"""Every option of ``tfdist launch``, typed, built once from the command line: :class:`LaunchOptions`.

The CLI parses flags into one :class:`LaunchOptions` (each default is written here, once; the CLI's flags take their
defaults from :data:`DEFAULTS`). This module is a leaf of the launch room: it reads and writes options and nothing
else. Turning them into what the launcher runs (a ``LaunchSpec``, an ``AgentSpec``, the rendezvous' settings) is
:mod:`tfdist.launch.entry.compose`'s job, which knows the rooms those live in.

- :meth:`LaunchOptions.agent_args`: the flags the host-file driver passes to every host's agent over ssh;
- :meth:`LaunchOptions.to_argv` and :func:`from_argv`, its inverse (``from_argv(o.to_argv()) == o`` for every ``o``).

:data:`OPTIONS` is plain data, one entry per option: its flag, how its value is written, and whether the host-file
driver forwards it to the agents. Which options work in which way across machines, and the refusals, are the table
``tfdist.launch.entry.parity.ACROSS_MACHINES`` (one row per option, same names; a test keeps the two in step).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from tfdist.errors import UsageError

if TYPE_CHECKING:
    from tfdist.cluster.placement import RoleCounts

DEFAULT_RDZV_PORT = 29400
#: The CLI's parameter behind a field, where the names differ (Click's name for ``--env`` is ``env_pairs``).
CLI_PARAMETER: Mapping[str, str] = {"env": "env_pairs"}
_NNODES = re.compile(r"([0-9]{1,4})(?::([0-9]{1,4}))?")
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class LaunchOptions:
    """What ``tfdist launch`` was asked to do, as typed values (``--help`` says what each means)."""

    target: tuple[str, ...] = ()  # the script (or module, or program) and its arguments
    module: bool = False
    no_python: bool = False
    dry_run: bool = False
    # one machine's task group
    workers: int = 1
    ps: int = 0
    chief: bool = False
    evaluator: bool = False
    max_restarts: int = 3
    restart_after_training: bool = False
    restart_window: float = 0.0
    backoff: float = 1.0
    log_dir: str | None = None
    tee: bool = False
    port_base: int | None = None
    host: str = "127.0.0.1"
    env: tuple[str, ...] = ()  # KEY=VALUE as typed (parsed and checked by the conversions)
    gpus_per_task: int | None = None
    nccl_debug: bool = False
    tf_log_level: str = "auto"
    grace_period: float = 30.0
    hang_timeout: float = 300.0
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    launcher_metrics_port: int | None = None
    job_name: str = "tfdist"
    allow_keras3: bool = False
    warm_spares: bool = True
    bootstrap: bool = True
    thread_caps: bool = False
    flight_recorder: bool = True
    firewall: bool = False  # --firewall: launch/firewall/
    live: bool | None = None  # None: when stderr is a terminal
    # across machines
    hostfile: str | None = None
    hosts: str | None = None
    include: str | None = None
    exclude: str | None = None
    host_cooldown_range: str = "10:300"  # LOW:HIGH seconds before a lost host-file host is probed again
    host_discovery_script: str | None = None
    min_nodes: int | None = None
    nnodes: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_backend: str = "tfdist"  # or "etcd"
    rdzv_conf: tuple[str, ...] = ()  # KEY=VALUE settings of the etcd backend
    rdzv_id: str | None = None
    rdzv_secret_file: str | None = None  # "-": the first line of stdin (how the host-file driver hands it over)
    rdzv_insecure: bool = False
    node_rank: int | None = None
    node_address: str | None = None
    node_name: str | None = None
    node_roles: str | None = None  # the roles this machine is pinned to, as a host file's roles= (chief,ps)
    node_timeout: float = 10.0
    rdzv_timeout: float = 300.0
    rdzv_last_call: float = 3.0
    checkpoint_dir: str | None = None
    agent_watch_stdin: bool = False

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LaunchOptions:
        """From the CLI's parsed parameters (one per field, same names but ``env_pairs`` for ``env``; sequences
        become tuples)."""
        by_parameter = {parameter: name for name, parameter in CLI_PARAMETER.items()}
        renamed = {by_parameter.get(k, k): v for k, v in params.items()}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in renamed.items()})

    @property
    def mode(self) -> Mode:
        if self.hostfile or self.hosts or self.host_discovery_script:
            return Mode.HOSTFILE
        if self.nnodes or self.rdzv_endpoint:
            return Mode.RENDEZVOUS
        return Mode.SINGLE

    def env_pairs(self) -> tuple[tuple[str, str], ...]:
        """``--env`` as (name, value) pairs. Raises UsageError naming a bad pair."""
        return parse_env_pairs(self.env)

    def role_counts(self) -> RoleCounts | None:
        """The job's ``--chief/--ps/--evaluator`` as the placement rule takes them (None: workers only)."""
        from tfdist.cluster.placement import RoleCounts

        if not (self.chief or self.ps or self.evaluator):
            return None
        return RoleCounts(chief=self.chief, ps=self.ps, evaluator=self.evaluator)

    def agent_args(self) -> tuple[str, ...]:
        """The flags every host's agent gets from the host-file driver, each with its single-machine meaning there.
        Options forwarded "always" are written even at their defaults, so a host's own environment twins or config
        file cannot change what the job was started with; the driver adds each host's place and the target."""
        forwarded = LaunchOptions(**{spec.name: getattr(self, spec.name) for spec in OPTIONS if spec.forward})
        args = forwarded.to_argv(explicit={spec.name for spec in OPTIONS if spec.forward == ALWAYS})
        return tuple(args[:-1])  # without the "--" that ends the flags

    def to_argv(self, *, explicit: frozenset[str] | set[str] = frozenset()) -> list[str]:
        """Flags for every option that differs from its default (or is named in ``explicit``), then ``--`` and the
        target. :func:`from_argv` reads it back."""
        argv: list[str] = []
        for spec in OPTIONS:
            if spec.name == "target":
                continue
            value = getattr(self, spec.name)
            if value == getattr(DEFAULTS, spec.name) and spec.name not in explicit:
                continue
            argv += spec.render(value)
        return [*argv, "--", *self.target]


DEFAULTS = LaunchOptions()


# -- one entry per option ---------------------------------------------------------------------------------------------
class Mode(str, Enum):
    SINGLE = "single"  # tfdist launch on this machine
    RENDEZVOUS = "rendezvous"  # --nnodes/--rdzv-endpoint: the same command on every machine, one agent each
    HOSTFILE = "hostfile"  # --hostfile/--hosts: this machine starts an agent on every host over ssh


ALWAYS, CHANGED = "always", "changed"  # how the host-file driver forwards an option to the agents


@dataclass(frozen=True)
class OptionSpec:
    """One option: its field, its flag(s), how its value is written, whether the agents get it."""

    name: str  # the LaunchOptions field
    flag: str  # the long flag; "" for the target
    forward: str = ""  # ALWAYS, CHANGED (when not the default) or "": the host-file driver's agents get it
    parse: Callable[[str], Any] | None = None  # takes a value; None: a flag (bool)
    negative: str = ""  # "--no-..." of a flag pair
    short: str = ""
    repeated: bool = False

    def render(self, value: Any) -> list[str]:
        if self.parse is None:
            if value is None:
                return []
            return [self.flag] if value else [self.negative] if self.negative else []
        if self.repeated:
            return [word for item in value for word in (self.flag, str(item))]
        return [] if value is None else [self.flag, str(value)]


def _o(name: str, parse: Callable[[str], Any] | None = None, *, flag: str = "", **more: Any) -> OptionSpec:
    return OptionSpec(name, flag or "--" + name.replace("_", "-"), parse=parse, **more)


OPTIONS: tuple[OptionSpec, ...] = (
    _o("target", flag=""),
    _o("module", short="-m"),
    _o("no_python"),
    _o("dry_run"),
    _o("workers", int, short="-n"),  # across machines: tasks per machine (the driver gives each host its slots)
    _o("ps", int, forward=CHANGED),  # every agent places the job's roles by the same rule
    _o("chief", forward=CHANGED),
    _o("evaluator", forward=CHANGED),
    _o("max_restarts", int, forward=ALWAYS),
    _o("restart_after_training"),
    _o("restart_window", float),  # across machines: the rendezvous' (the driver serves it)
    _o("backoff", float),
    _o("log_dir", str, forward=CHANGED),
    _o("tee", forward=CHANGED),
    _o("port_base", int, forward=CHANGED),
    _o("host", str),
    _o("env", str, forward=CHANGED, repeated=True),
    _o("gpus_per_task", int, forward=CHANGED),
    _o("nccl_debug", forward=CHANGED),
    _o("tf_log_level", str, forward=ALWAYS),
    _o("grace_period", float, forward=ALWAYS),
    _o("hang_timeout", float, forward=ALWAYS),
    _o("metrics_port", int, forward=CHANGED),
    _o("metrics_host", str, forward=ALWAYS),
    _o("launcher_metrics_port", int, forward=CHANGED),
    _o("job_name", str, forward=CHANGED),  # else each agent labels its run with the job id
    _o("allow_keras3", forward=CHANGED),
    _o("warm_spares", forward=CHANGED, negative="--no-warm-spares"),
    _o("bootstrap", negative="--no-bootstrap"),
    _o("thread_caps", forward=CHANGED, negative="--no-thread-caps"),
    _o("flight_recorder", forward=CHANGED, negative="--no-flight-recorder"),
    _o("firewall", forward=CHANGED),  # each agent loads its own machine's table
    _o("live", negative="--no-live"),
    _o("hostfile", str),
    _o("hosts", str),
    _o("include", str),
    _o("exclude", str),
    _o("host_cooldown_range", str),
    _o("host_discovery_script", str),
    _o("min_nodes", int),
    _o("nnodes", str),
    _o("rdzv_endpoint", str),
    _o("rdzv_backend", str),
    _o("rdzv_conf", str, repeated=True),
    _o("rdzv_id", str),
    _o("rdzv_secret_file", str),  # host file: "-", the fresh secret on each agent's stdin
    _o("rdzv_insecure"),
    _o("node_rank", int),
    _o("node_address", str),
    _o("node_name", str),
    _o("node_roles", str),  # host file: the driver gives each host its line's roles=
    _o("node_timeout", float, forward=ALWAYS),
    _o("rdzv_timeout", float, forward=ALWAYS),
    _o("rdzv_last_call", float, forward=ALWAYS),
    _o("checkpoint_dir", str, forward=CHANGED),
    _o("agent_watch_stdin"),  # hidden: set by the host-file driver over ssh
)
BY_NAME: Mapping[str, OptionSpec] = {spec.name: spec for spec in OPTIONS}


def from_argv(argv: Sequence[str]) -> LaunchOptions:
    """The inverse of :meth:`LaunchOptions.to_argv`: flags (``--flag VALUE`` or ``--flag=VALUE``) up to ``--`` or the
    first word that is not a flag, then the target. Raises UsageError naming an unknown flag or a bad value."""
    by_word = {w: spec for spec in OPTIONS for w in (spec.flag, spec.short, spec.negative) if w}
    values: dict[str, Any] = {}
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-"):
            break
        flag, has_value, inline = word.partition("=")
        spec = by_word.get(flag)
        if spec is None:
            raise UsageError(f"{flag}: not an option of tfdist launch")
        if spec.parse is None:
            values[spec.name] = flag != spec.negative
            i += 1
            continue
        if has_value:
            text, i = inline, i + 1
        elif i + 1 < len(words):
            text, i = words[i + 1], i + 2
        else:
            raise UsageError(f"{flag} needs a value")
        try:
            value = spec.parse(text)
        except ValueError:
            raise UsageError(f"{flag} {text!r} is not a valid value") from None
        values[spec.name] = (*values.get(spec.name, ()), value) if spec.repeated else value
    return replace(DEFAULTS, **values, target=tuple(words[i:]))


# -- values of the multi-machine flags --------------------------------------------------------------------------------
def parse_nnodes(text: str) -> tuple[int, int]:
    """``2`` -> (2, 2); ``2:3`` -> (2, 3). Raises UsageError naming --nnodes."""
    match = _NNODES.fullmatch(text.strip())
    if not match:
        raise UsageError(f"--nnodes {text!r} is not N or MIN:MAX", hint="e.g. --nnodes 2 or --nnodes 2:4")
    low = int(match.group(1))
    high = int(match.group(2) or low)
    if low < 1 or high < low:
        raise UsageError(f"--nnodes {text!r}: need 1 <= MIN <= MAX", hint="e.g. --nnodes 2:4")
    return low, high


def parse_endpoint(text: str) -> tuple[str, int]:
    """``node1:29400`` -> ("node1", 29400); ``node1`` -> ("node1", 29400). Raises UsageError naming the flag."""
    from tfdist.cluster import parse_address

    text = text.strip()
    has_port = text.rpartition(":")[2].isdigit() and (not text.startswith("[") or "]:" in text)
    return parse_address(text if has_port else f"{text}:{DEFAULT_RDZV_PORT}", "--rdzv-endpoint")


def job_id(text: str) -> str:
    if not _JOB.fullmatch(text):
        raise UsageError(f"--rdzv-id {text!r} is not a job id", hint="letters, digits, '.', '_', '-' (max 64)")
    return text


def parse_env_pairs(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``["A=1", "B=x=y"]`` -> ``(("A", "1"), ("B", "x=y"))``.

    Raises:
        UsageError: a pair has no ``=`` or an empty name.
    """
    result = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name or not name.replace("_", "a").isalnum():
            raise UsageError(f"--env {pair!r} is not KEY=VALUE", hint="write it as --env NAME=value")
        result.append((name, value))
    return tuple(result)
