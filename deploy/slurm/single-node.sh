#!/usr/bin/env bash
# A Slurm cluster of one node, this host, for trying deploy/slurm/impala.sbatch without a real
# cluster: munged, slurmctld and slurmd from Debian's packages (`apt-get install slurm-wlm
# munge`), every file (config, munge key and socket, state, logs) under one folder.
#
#   deploy/slurm/single-node.sh start [DIR]   # prints the SLURM_CONF to export
#   export SLURM_CONF=DIR/slurm.conf
#   sbatch --nodes=1 --ntasks-per-node=2 deploy/slurm/impala.sbatch CONFIG.toml
#   deploy/slurm/single-node.sh stop [DIR]
#
# DIR defaults to /tmp/impala-slurm. Needs root (slurmd starts job steps as the submitting user).
# CPUS (default: nproc) is the node's CPU count; the host's own memory is its RealMemory. It
# uses the ports 6817-6818 and leaves the system's /etc/slurm and /etc/munge alone.
set -euo pipefail

action=${1:?usage: single-node.sh start|stop [DIR]}
dir=$(realpath -m "${2:-/tmp/impala-slurm}")
conf=$dir/slurm.conf

stop() {
    # slurmd before slurmctld (a controller gone first leaves the node's steps unreported).
    for daemon in slurmd slurmctld munged; do
        local pid_file=$dir/$daemon.pid
        [[ -f $pid_file ]] || continue
        local pid
        pid=$(<"$pid_file")
        if kill "$pid" 2>/dev/null; then
            for (( waited = 0; waited < 50; waited++ )); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$pid_file"
    done
}

case $action in
    stop)
        stop
        echo "stopped the cluster in $dir"
        exit 0
        ;;
    start) ;;
    *)
        echo "error: unknown action '$action'; use start or stop" >&2
        exit 2
        ;;
esac

if (( EUID != 0 )); then
    echo "error: single-node.sh start needs root (slurmd runs job steps as their user)" >&2
    exit 2
fi
for tool in munged slurmctld slurmd sinfo; do
    if ! command -v "$tool" > /dev/null; then
        echo "error: $tool not found; install Slurm with: apt-get install slurm-wlm munge" >&2
        exit 2
    fi
done

host=$(hostname -s)
cpus=${CPUS:-$(nproc)}
memory_mb=$(( $(awk '/^MemTotal/ { print $2 }' /proc/meminfo) / 1024 ))
stop  # a cluster left running in this folder by an earlier start
mkdir -p "$dir"/{state,spool,munge}
# The socket must be reachable by every user (execute), the key readable only by munged.
chmod 711 "$dir/munge"

# munge: a key of its own. munged runs as root like the other two daemons (the folder may be
# one only root can enter, e.g. from mktemp -d); --force lets it.
if [[ ! -f $dir/munge/munge.key ]]; then
    head -c 1024 /dev/urandom > "$dir/munge/munge.key"
fi
chmod 600 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" \
    --socket="$dir/munge/munge.socket" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"

cat > "$conf" <<EOF
# Written by deploy/slurm/single-node.sh: one node, this host.
ClusterName=impala
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
# No cgroups: a container or VM may not delegate them.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
NodeName=$host CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF

slurmctld -f "$conf"
slurmd -f "$conf"
export SLURM_CONF=$conf
for (( waited = 0; ; waited++ )); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
    [[ $state == idle ]] && break
    if (( waited >= 60 )); then
        echo "error: node $host is '${state:-not reported}' after 30 s;" \
            "see $dir/slurmctld.log and $dir/slurmd.log" >&2
        stop
        exit 1
    fi
    sleep 0.5
done
echo "a one-node Slurm cluster ($host, $cpus CPUs) runs; for sbatch, squeue and scontrol:"
echo "export SLURM_CONF=$conf"
