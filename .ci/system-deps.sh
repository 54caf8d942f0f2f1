#!/usr/bin/env bash
# System packages the tests use: a real Slurm (slurm-wlm + munge), a real Prometheus server (and promtool), and the
# shells whose completion scripts are checked, tmux for the live view, OpenSSH + iproute2 for the emulated
# machines, and etcd (etcd-server; etcd-client's etcdctl is used by fixtures only; openssl makes their test
# certificates) for the etcd rendezvous backend, and nftables (nft) for --firewall's tests.
# `make test` runs this first, as CI does, so the README's test command runs what CI runs. Where it cannot install
# (not root, or no apt-get) it says so in one line, with the command that would, and `--check` repeats that line
# after the tests.
set -uo pipefail
wanted=(slurm-wlm munge prometheus zsh fish tmux openssh-server openssh-client iproute2 etcd-server etcd-client openssl nftables)
missing=()
for p in "${wanted[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
((${#missing[@]})) || exit 0
command="sudo apt-get install -y --no-install-recommends ${missing[*]}"
if [ "${1:-}" = "--check" ]; then
    echo "system-deps: ${missing[*]} still missing, so the tests that need them were skipped; install with: $command" >&2
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: cannot install ${missing[*]} (not root or no apt-get); the tests that need them will skip. Install with: $command" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
# --no-install-recommends keeps the install small; a failure only makes those tests skip, and is said here.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || echo "system-deps: could not install ${missing[*]}; install with: $command" >&2
exit 0
