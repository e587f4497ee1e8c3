#!/usr/bin/env bash
# An emulated cluster on this machine: hosts as namespaces on one bridge, and faults to put on them.
#   bash scripts/local-cluster.sh up 3                 # nodeA nodeB nodeC, a shared folder
#   bash scripts/local-cluster.sh exec nodeB hostname  # a command on a host
#   bash scripts/local-cluster.sh partition nodeB      # a fault (see --help for all of them)
#   bash scripts/local-cluster.sh down
# Needs root, iproute2 and nftables (and faketime for clock offsets); see scripts/local_cluster.py.
exec python3 "$(dirname "$0")/local_cluster.py" "$@"
