"""Where etcd is and how to talk to it: ``--rdzv-endpoint`` and ``--rdzv-conf KEY=VALUE``, checked into an
:class:`EtcdConf` (one line naming the flag and the fix for anything wrong, before anything starts)."""
from __future__ import annotations

from dataclasses import dataclass, field

from tfdist.cluster.address import parse_address
from tfdist.errors import UsageError
from tfdist.protocol import variables

DEFAULT_PORT = 2379


@dataclass(frozen=True)
class EtcdConf:
    """Where etcd is and how to talk to it (``--rdzv-endpoint`` and ``--rdzv-conf key=value``)."""

    endpoints: tuple[tuple[str, int], ...]
    prefix: str = "/tfdist"
    cacert: str | None = None
    cert: str | None = None
    key: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout: float = 5.0
    compact: str = "auto"  # yes | no | auto: at the job's end, when backup chunks crossed etcd (Coordinator._compact)

    @property
    def where(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self.endpoints)


CONF_KEYS = {
    "cacert": "CA certificate (PEM) that signed the etcd members' certificates: turns TLS on",
    "cert": "client certificate (PEM), with key=, for etcd's client-certificate authentication",
    "key": "client private key (PEM) for cert=",
    "user": "etcd user name (the password from password_file= or TFDIST_RDZV_ETCD_PASSWORD)",
    "password_file": "file holding the etcd user's password (one line)",
    "prefix": "key prefix of every tfdist job in this etcd (default /tfdist)",
    "timeout": "seconds one etcd request may take (default: the smaller of 5 and a third of --node-timeout)",
    "compact": "at the job's end compact etcd's history up to the end (cluster-wide: see docs): yes, no, or auto "
               "(the default: when backup chunks crossed etcd)",
}
YES, NO = ("yes", "true", "1", "on"), ("no", "false", "0", "off")


def parse_endpoints(text: str) -> tuple[tuple[str, int], ...]:
    """``host[:port][,host[:port]...]`` -> endpoints (port 2379 by default). Raises UsageError naming the fix."""
    found = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise UsageError(f"--rdzv-endpoint {text!r} has an empty member: give HOST:PORT[,HOST:PORT...]")
        has_port = part.rsplit(":", 1)[-1].isdigit() and (part.count(":") == 1 or part.startswith("["))
        found.append(parse_address(part if has_port else f"{part}:{DEFAULT_PORT}", "--rdzv-endpoint"))
    return tuple(found)


def parse_conf(endpoints: str, pairs: tuple[str, ...], node_timeout: float, env: dict[str, str]) -> EtcdConf:
    """RendezvousSettings from the flags. Raises UsageError with one line naming the flag and the fix."""
    values: dict[str, str] = {}
    for pair in (p for raw in pairs for p in raw.split(",") if p.strip()):
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or name not in CONF_KEYS:
            raise UsageError(f"--rdzv-conf {pair!r}: expected KEY=VALUE with KEY one of {', '.join(CONF_KEYS)}")
        values[name] = value.strip()
    password = env.get(variables.ETCD_PASSWORD)
    if "password_file" in values:
        try:
            with open(values["password_file"], encoding="utf-8") as handle:
                password = handle.readline().rstrip("\r\n")
        except OSError as bad:
            raise UsageError(f"--rdzv-conf password_file={values['password_file']}: {bad.strerror}") from None
    if password is not None and "user" not in values:
        raise UsageError("an etcd password was given without --rdzv-conf user=NAME")
    if "user" in values and password is None:
        raise UsageError(f"--rdzv-conf user= needs a password: password_file=PATH or {variables.ETCD_PASSWORD}")
    if "user" in values and "cacert" not in values:
        raise UsageError("--rdzv-conf user= needs cacert= (TLS): etcd's password and token would cross the network "
                         "in the clear (and gRPC sends call credentials only over TLS)")
    if ("cert" in values) != ("key" in values):
        raise UsageError("--rdzv-conf cert= and key= go together (the client certificate and its private key)")
    if "cert" in values and "cacert" not in values:
        raise UsageError("--rdzv-conf cert= needs cacert= (client certificates are only sent over TLS)")
    for name in ("cacert", "cert", "key"):
        if name in values:
            try:
                open(values[name], "rb").close()  # noqa: SIM115 - only checks that it can be read
            except OSError as bad:
                raise UsageError(f"--rdzv-conf {name}={values[name]}: {bad.strerror}") from None
    prefix = "/" + values.get("prefix", "/tfdist").strip("/")
    try:
        # Three tries fit in one node timeout: a member that went away costs one timeout, then the next is asked.
        timeout = float(values.get("timeout", min(5.0, node_timeout / 3)))
    except ValueError:
        raise UsageError(f"--rdzv-conf timeout={values['timeout']!r} is not a number of seconds") from None
    compact = values.get("compact", "auto").lower()
    if compact not in YES + NO + ("auto",):
        raise UsageError(f"--rdzv-conf compact={values['compact']!r}: give compact=yes, compact=no or compact=auto")
    return EtcdConf(endpoints=parse_endpoints(endpoints), prefix=prefix, cacert=values.get("cacert"),
                    cert=values.get("cert"), key=values.get("key"), user=values.get("user"), password=password,
                    timeout=max(0.3, timeout),
                    compact="yes" if compact in YES else "no" if compact in NO else "auto")
