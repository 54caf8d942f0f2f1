"""What one machine's agent needs (a leaf: the launch options build it, the agent reads it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tfdist.launch.elastic.agent.node_group import TaskOptions
from tfdist.launch.elastic.backend import LinkConf
from tfdist.launch.options import DEFAULTS
from tfdist.protocol import Command

if TYPE_CHECKING:
    from tfdist.cluster.placement import RoleCounts


@dataclass(frozen=True)
class AgentSpec:
    """What one machine's agent needs. ``command`` is what every local task runs."""

    job: str
    endpoint_host: str
    endpoint_port: int
    min_nodes: int
    max_nodes: int
    slots: int
    command: Command
    node_rank: int | None = None
    node_address: str | None = None
    node_name: str | None = None
    node_timeout: float = DEFAULTS.node_timeout
    rdzv_timeout: float = DEFAULTS.rdzv_timeout
    first_round_wait: float = DEFAULTS.rdzv_last_call
    grace_period: float = DEFAULTS.grace_period
    hang_timeout: float = DEFAULTS.hang_timeout
    gpus_per_task: int | None = None
    warm_spares: bool = False  # keep processes with TensorFlow imported for the next round (process/spare_pool.py)
    max_restarts: int = DEFAULTS.max_restarts
    env: tuple[tuple[str, str], ...] = ()
    log_dir: str | None = None
    legacy_keras: bool = False
    checkpoint_dir: str | None = None
    watch_stdin: bool = False
    versions: dict[str, str] = field(default_factory=dict)
    serve: bool = True  # serve the rendezvous when this machine owns the endpoint (the host-file driver serves)
    etcd: LinkConf | None = None  # an etcd.conf.EtcdConf: the etcd backend instead of the built-in server
    secret: bytes = field(default=b"", repr=False)  # the job secret (elastic/secret.py); never printed
    restart_window: float = 0.0  # --restart-window and --backoff, for the rendezvous this agent may serve
    backoff: float = 0.0
    port_base: int | None = None  # --port-base: this machine's workers listen on consecutive ports from here
    launcher_metrics_port: int | None = None  # this agent's own metrics (rounds, its workers' states)
    tasks: TaskOptions = field(default_factory=TaskOptions)
    roles: RoleCounts | None = None  # a RoleCounts (--chief/--ps/--evaluator): tasks placed by round_roles; None: workers only
    node_roles: tuple[str, ...] = ()  # the roles this machine is pinned to (host file roles=, --node-roles)

    @property
    def job_name(self) -> str:
        """The label of the run record and metrics: ``--job-name``, else the job id."""
        return self.tasks.job_name or self.job
