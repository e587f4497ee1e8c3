#!/usr/bin/env bash
# A one-host Slurm cluster (slurmctld + slurmd + munge) for the `slurm`-marked tests.
#
# Idempotent: installs Debian's slurm-wlm and munge when missing, writes slurm.conf for this host,
# starts whatever is not running, and waits until `sinfo` answers. Running it again is safe: a
# cluster that already answers is left alone. Needs root (apt-get, daemons).
set -euo pipefail

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
PARTITION=${RUBIN_SLURM_PARTITION:-debug}
WAIT_S=${RUBIN_SLURM_WAIT_S:-60}

say() { echo "local-slurm: $*"; }

if [ "$(id -u)" != 0 ]; then
  say "needs root (installs packages and starts daemons); run it with sudo" >&2
  exit 2
fi

answers() { timeout 10 sinfo -h -o %T >/dev/null 2>&1; }

node_up() {
  # idle/mixed/allocated; a drained or down node cannot run jobs.
  local state
  state=$(timeout 10 sinfo -h -N -o %T 2>/dev/null | head -n1 || true)
  case "$state" in idle*|mix*|alloc*|completing*) return 0 ;; *) return 1 ;; esac
}

if command -v sinfo >/dev/null && answers && node_up; then
  say "already running: $(sinfo -h -o '%P %D %T' | head -n1)"
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  say "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

# munge: a fresh key each time munged is (re)started; a running munged keeps its key.
if ! pgrep -x munged >/dev/null; then
  mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
  chmod 0700 /etc/munge
  chmod 0400 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged
  say "munged started with a fresh key"
fi

host=$(hostname -s)
# slurmd -C reports this host as slurmd sees it; take its CPUs and RealMemory so the node never
# registers with less than slurm.conf promises (which would drain it).
probe=$(slurmd -C | head -n1)
cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$probe")
mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$probe")
cpus=${cpus:-$(nproc)}
mem=${mem:-1000}

mkdir -p $CONF_DIR /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm
cat >"$CONF.new" <<CONF
# Written by scripts/local-slurm.sh: a one-host cluster for tests.
ClusterName=rubin-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobRequeue=1
# Preemption tests requeue jobs; let a requeued job start again at once.
SchedulerParameters=nohold_on_prolog_fail
MinJobAge=300
KillWait=30
SlurmdTimeout=60
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
if ! cmp -s "$CONF.new" "$CONF" 2>/dev/null; then
  mv "$CONF.new" "$CONF"
  say "wrote $CONF (NodeName=$host CPUs=$cpus RealMemory=$mem)"
  changed=1
else
  rm -f "$CONF.new"
  changed=0
fi

if [ "$changed" = 1 ] && pgrep -x slurmctld >/dev/null; then
  scontrol reconfigure || true
fi
pgrep -x slurmctld >/dev/null || { slurmctld; say "slurmctld started"; }
pgrep -x slurmd >/dev/null || { slurmd; say "slurmd started"; }

deadline=$((SECONDS + WAIT_S))
until answers; do
  if [ $SECONDS -ge $deadline ]; then
    say "sinfo did not answer within ${WAIT_S}s; see /var/log/slurm/*.log" >&2
    exit 1
  fi
  sleep 1
done
# A node left down/drained by an earlier run comes back once slurmd answers.
if ! node_up; then
  scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true
fi
until node_up; do
  if [ $SECONDS -ge $deadline ]; then
    say "node $host is not up: $(sinfo -h -N -o '%T %E' | head -n1); see /var/log/slurm/*.log" >&2
    exit 1
  fi
  sleep 1
done
say "ready: $(sinfo -h -o '%P %D %T' | head -n1)"
