"""Mechanism: load a rendered ruleset with ``nft -f -`` in bounded time, and say why it cannot work here."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tfdist.errors import TfdistError

NFT_TIMEOUT_S = 10.0  # nft answers in milliseconds; a hung netlink socket must not hang the launcher's exit


class FirewallFailed(TfdistError):
    """nft refused or did not answer (the message is its stderr's last line): a job whose ports could not be
    closed as asked stops, in one line, rather than run open."""


def find_nft() -> str | None:
    return shutil.which("nft") or next((p for p in ("/usr/sbin/nft", "/sbin/nft") if os.access(p, os.X_OK)), None)


def why_not(nft: str | None) -> str | None:
    """None when ``--firewall`` can work on this machine, else the reason, as the one line the CLI prints."""
    if not sys.platform.startswith("linux"):
        return f"--firewall uses Linux nftables; this is {sys.platform}"
    if os.geteuid() != 0:
        return "--firewall needs root (it loads an nftables table): run the launcher as root, or drop --firewall"
    if nft is None:
        return "--firewall needs the nft program: install Debian's nftables (apt-get install nftables)"
    return None


def load(nft: str, text: str, timeout: float = NFT_TIMEOUT_S) -> None:
    """Raises FirewallFailed when nft refuses ``text`` (nothing of it is applied then: one transaction)."""
    try:
        done = subprocess.run([nft, "-f", "-"], input=text, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as failed:
        raise FirewallFailed(f"nft did not run: {failed}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise FirewallFailed(f"nft refused the table: {last}")
