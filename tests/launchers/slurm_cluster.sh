#!/bin/bash
# A one-node Slurm cluster on localhost for the launcher tests: munged, slurmctld and slurmd with
# their own key, sockets, state, logs and ports under DIR, so nothing touches /etc or /run.
#   slurm_cluster.sh start DIR   -> prints nothing; `source DIR/env.sh` then points srun at it
#   slurm_cluster.sh stop DIR    -> stops the daemons started by `start` (by their pid files)
# Start waits (bounded) until the node is idle; on failure it prints the daemons' logs and stops.
# Every daemon also dies after SLURM_CLUSTER_LIFETIME_S (default 300) seconds in any case.
set -u
cmd=$1
dir=$2
lifetime=${SLURM_CLUSTER_LIFETIME_S:-300}  # seconds, then the daemons are killed whatever happens

free_port() {  # a port nobody listens on now (good enough: the daemons bind right away)
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 30000))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo $p; return; fi
  done
  return 1
}

stop() {
  [ -f "$dir/slurm.conf" ] && SLURM_CONF=$dir/slurm.conf timeout 10 scancel --quiet --full \
    $(SLURM_CONF=$dir/slurm.conf timeout 10 squeue -h -o %i 2>/dev/null) 2>/dev/null
  for name in slurmd slurmctld munged; do
    local f=$dir/$name.pid
    [ -f "$f" ] || continue
    local pid; pid=$(cat "$f")
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
    rm -f "$f"
  done
}

fail() {
  echo "slurm_cluster: $*" >&2
  for log in munged.log slurmctld.log slurmd.log; do
    [ -f "$dir/$log" ] && { echo "--- $log (tail)" >&2; tail -n 20 "$dir/$log" >&2; }
  done
  stop
  exit 1
}

write_conf() {
  local host=$1 ctld_port=$2 d_port=$3
  cat > "$dir/slurm.conf" <<CONF
ClusterName=spmdtest
FirstJobId=$((1000 + RANDOM))
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/ctld-state
SlurmdSpoolDir=$dir/d-spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
}

start() {
  mkdir -p "$dir/ctld-state" "$dir/d-spool" "$dir/munge"
  chmod 700 "$dir/munge"
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  # Each daemon in the foreground, detached by setsid, under a hard lifetime: even a test killed
  # before its cleanup leaves nothing running for long.
  setsid timeout -s KILL "$lifetime" munged --foreground --force --key-file="$dir/munge/munge.key" \
    --socket="$dir/munge.socket" --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
    --seed-file="$dir/munge/seed" </dev/null >/dev/null 2>&1 &
  for _ in $(seq 50); do [ -S "$dir/munge.socket" ] && break; sleep 0.1; done
  [ -S "$dir/munge.socket" ] || fail "munged did not start"
  local host; host=$(hostname -s)
  local ctld_port d_port
  ctld_port=$(free_port) && d_port=$(free_port) || fail "no free port"
  write_conf "$host" "$ctld_port" "$d_port"
  echo "export SLURM_CONF=$dir/slurm.conf" > "$dir/env.sh"
  export SLURM_CONF=$dir/slurm.conf
  setsid timeout -s KILL "$lifetime" slurmctld -D -i </dev/null >>"$dir/slurmctld.log" 2>&1 &
  setsid timeout -s KILL "$lifetime" slurmd -D </dev/null >>"$dir/slurmd.log" 2>&1 &
  for _ in $(seq 150); do  # 30 s
    if sinfo -h -o %t 2>/dev/null | grep -qx idle; then return 0; fi
    sleep 0.2
  done
  fail "the node did not become idle within 30 s (sinfo: $(sinfo -h 2>&1))"
}

case $cmd in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
