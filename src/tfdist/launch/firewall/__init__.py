"""``--firewall``: an nftables table per launcher that admits to the job's TensorFlow and metrics ports only the
machines of the current round and loopback (TensorFlow's own server listens on every interface and has no
authentication). rules: the pure renderer; nft: the thin mechanism; guard: the launcher's open/admit/close."""
from tfdist.launch.firewall.guard import Firewall, NoFirewall, addresses_of, firewall_for

__all__ = ["Firewall", "NoFirewall", "addresses_of", "firewall_for"]
