#!/usr/bin/env bash
# netns.sh HOSTS COMMAND [ARGS...]: run COMMAND on the first of HOSTS
# "hosts" of this machine, network namespaces joined by a bridge, so that
# mpirun started by COMMAND puts its ranks on separate network stacks and
# they talk TCP over veth, as on separate machines.
#
#   host i (0 <= i < HOSTS): namespace ${RT_NETNS_PREFIX}h<i>, with its own
#   hostname (the same name) and loopback, and eth0 = 10.213.0.<i+1>/24,
#   a veth whose other end v<i> is a port of bridge br0 in a namespace of
#   its own, ${RT_NETNS_PREFIX}sw (the switch). Nothing is added to the
#   machine's own namespace (so its firewall and br_netfilter settings do
#   not apply) and the hosts have no other route: their traffic can only
#   reach these addresses and their own loopback.
#
# COMMAND runs in host 0 with, in its environment:
#   RT_NETNS_HOSTS      HOSTS
#   RT_NETNS_PREFIX     rtmpi<pid>: the names of this run (unique per run)
#   RT_NETNS_ADDRS      the hosts' addresses, host 0 first
#   RT_NETNS_DIR        a directory of this run (removed at the end), with
#     hostfile          every host, slots=1 (rank i on host i)
#     agent             mpirun's launch agent (rsh-like: agent HOST CMD...):
#                       runs CMD in HOST's namespace
#   RT_MPIRUN_ARGS      what mpirun needs to start ranks on the hosts, over
#                       TCP only: --hostfile, the agent, btl tcp,self and
#                       btl/oob limited to the bridge's subnet; and
#                       mpi_yield_when_idle: the "hosts" share this
#                       machine's cores, which OpenMPI cannot see (one slot
#                       a host), so without it a waiting rank spins and
#                       starves the rank it waits for (the MPI tests took
#                       8x as long, a 60 s call ran out)
#
# Everything is removed when the script ends (also on failure or a signal):
# every process left in the namespaces is killed, the namespaces deleted
# (the veths and the bridge with them). A run killed with SIGKILL (ctest's timeout) cannot clean
# up; the next run removes what a run whose pid is gone left behind.
#
# Needs root and iproute2's `ip netns` and unshare (util-linux). Without
# them it fails (exit 1) saying so: the multi-host tests never skip quietly.
set -uo pipefail

die() { echo "netns.sh: $*" >&2; exit 1; }
[ $# -ge 2 ] || die "usage: netns.sh HOSTS COMMAND [ARGS...]"
hosts=$1; shift
[[ $hosts =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 16 ] ||
  die "HOSTS must be 1..16, not '$hosts'"
[ "$(id -u)" -eq 0 ] ||
  die "needs root (network namespaces); the multi-host MPI tests cannot run as $(id -un)"
command -v ip >/dev/null || die "needs iproute2's ip (apt-get install iproute2)"
command -v unshare >/dev/null || die "needs unshare (util-linux)"
ip netns list >/dev/null 2>&1 || die "'ip netns list' fails: no network namespaces here"

pre=rtmpi$$
sw=${pre}sw
net=10.213.0
dir=$(mktemp -d "/tmp/$pre-XXXXXX") || die "mktemp failed"
made_ns=()

# Kill what runs in namespace $1 (processes this script's runs started) and
# delete it; a namespace's veth end goes with it, and its peer with that.
drop_ns() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null)
  # shellcheck disable=SC2086
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  ip netns del "$1" 2>/dev/null
}

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local ns
  for ns in "${made_ns[@]}"; do drop_ns "$ns"; done
  rm -rf "$dir"
  # Nothing of this run may stay behind.
  if ip netns list | grep -q "^${pre}[hs]"; then
    echo "netns.sh: could not remove everything of $pre" >&2
    return 1
  fi
}
trap 'cleanup' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# What runs that ended without cleaning up (SIGKILL) left: rtmpi<pid>...
# names whose pid is no longer alive.
for ns in $(ip netns list | sed -n 's/^\(rtmpi[0-9]\+\(h[0-9]\+\|sw\)\).*/\1/p'); do
  p=${ns#rtmpi}; p=${p%%[hs]*}
  kill -0 "$p" 2>/dev/null || { echo "netns.sh: removing $ns (run $p is gone)"; drop_ns "$ns"; }
done
for d in /tmp/rtmpi[0-9]*-*; do
  [ -d "$d" ] || continue
  p=${d#/tmp/rtmpi}; p=${p%%-*}
  kill -0 "$p" 2>/dev/null || rm -rf "$d"
done

run() { "$@" || die "failed: $*"; }
run ip netns add "$sw"
made_ns+=("$sw")
run ip -n "$sw" link add br0 type bridge
run ip -n "$sw" link set br0 up
addrs=()
for ((i = 0; i < hosts; i++)); do
  ns=${pre}h$i
  addr=$net.$((i + 1))
  run ip netns add "$ns"
  made_ns+=("$ns")
  run ip -n "$sw" link add "v$i" type veth peer name eth0 netns "$ns"
  run ip -n "$sw" link set "v$i" master br0 up
  run ip -n "$ns" addr add "$addr/24" dev eth0
  run ip -n "$ns" link set eth0 up
  run ip -n "$ns" link set lo up
  addrs+=("$addr")
  echo "$addr slots=1" >>"$dir/hostfile"
done

# mpirun's rsh agent: "agent HOST COMMAND..." like ssh, COMMAND one shell
# line. Each host gets its own hostname (a UTS namespace), which is what
# MPI_Get_processor_name and rtrain info report for its ranks.
# shellcheck disable=SC2016 # the agent's own $1, $host, $ns and $*, written as they are
{
  echo '#!/bin/sh'
  echo "# mpirun's launch agent for the hosts of $pre (tests/mpi/netns.sh)"
  echo 'host=$1; shift'
  echo 'case $host in'
  for ((i = 0; i < hosts; i++)); do echo "  ${addrs[$i]}) ns=${pre}h$i ;;"; done
  echo '  *) echo "agent: $host is not a host of this test bed" >&2; exit 1 ;;'
  echo 'esac'
  echo 'exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $ns && $*"'
} >"$dir/agent"
chmod +x "$dir/agent"

export RT_NETNS_HOSTS=$hosts RT_NETNS_PREFIX=$pre RT_NETNS_DIR=$dir
export RT_NETNS_ADDRS="${addrs[*]}"
export RT_MPIRUN_ARGS="--hostfile $dir/hostfile --mca plm_rsh_agent $dir/agent \
--mca btl tcp,self --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24 \
--mca mpi_yield_when_idle 1"
# A shared-memory setting from the environment must not undo the above.
unset OMPI_MCA_btl OMPI_MCA_plm_rsh_agent OMPI_MCA_btl_vader_single_copy_mechanism

echo "netns.sh: $hosts hosts ${addrs[*]} on the bridge of $sw; running $1 on ${pre}h0"
# shellcheck disable=SC2016 # $0 and $@ are the inner sh's
ip netns exec "${pre}h0" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "${pre}h0" "$@" &
child=$!
wait "$child"
rc=$?
# Bytes each host sent and received through the switch (what crossed hosts).
for ((i = 0; i < hosts; i++)); do
  printf 'netns.sh: %sh%d (%s): rx %s B, tx %s B\n' "$pre" "$i" "${addrs[$i]}" \
    "$(ip netns exec "$sw" cat "/sys/class/net/v$i/statistics/tx_bytes" 2>/dev/null)" \
    "$(ip netns exec "$sw" cat "/sys/class/net/v$i/statistics/rx_bytes" 2>/dev/null)"
done
exit "$rc"
