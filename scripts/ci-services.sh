#!/usr/bin/env bash
# Start the real services the test suite drives, on a fresh Debian machine (as root):
#   - a single-node Slurm cluster (scripts/local-slurm.sh), for the tests marked `slurm`
#   - headless Chromium, for the report rendering tests marked `chromium`
#   - what the emulated cluster needs (scripts/local-cluster.sh): iproute2, nftables, faketime
# Safe to run again. A service that cannot be installed is reported; its tests then skip with a reason.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "ci-services: not root; Slurm and Chromium are not installed (their tests will skip)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
missing=()
for pair in chromium:chromium ip:iproute2 nft:nftables faketime:faketime nsenter:util-linux; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq >/dev/null 2>&1 || true
  for pkg in "${missing[@]}"; do
    apt-get install -y -qq "$pkg" >/dev/null 2>&1 || echo "ci-services: $pkg could not be installed (its tests will skip)"
  done
fi
# Clusters a killed earlier run left behind (their owner is gone).
python3 scripts/local_cluster.py down --stale >/dev/null 2>&1 || true
command -v chromium >/dev/null 2>&1 && echo "ci-services: $(chromium --version 2>/dev/null | head -1)"
if [ -x scripts/local-slurm.sh ] || [ -f scripts/local-slurm.sh ]; then
  bash scripts/local-slurm.sh || echo "ci-services: local Slurm did not start"
fi
exit 0
