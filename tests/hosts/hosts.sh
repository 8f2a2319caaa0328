#!/usr/bin/env bash
# hosts.sh - test hosts on one machine: network namespaces joined by a bridge, each with its
# own address, and what OpenMPI needs to start a job across them over TCP alone.
#
#   hosts.sh up DIR [N]     N hosts (2 by default); writes into DIR (made if missing):
#                             DIR/names     the namespaces' prefix (unique to this setup)
#                             DIR/hostfile  one line per host: its address, slots=2
#                             DIR/agent     OpenMPI's rsh agent: `agent ADDRESS CMD...` runs
#                                           CMD in the namespace of the host with ADDRESS
#                             DIR/env       the OMPI_MCA_ settings, for `. DIR/env`
#   hosts.sh exec DIR K CMD...   runs CMD on host K (0, 1, ...) as the user's shell would
#   hosts.sh cut DIR K           the link of host K down (its port on the bridge)
#   hosts.sh mend DIR K          the link of host K up again, once host 0 reaches it
#   hosts.sh slow DIR K [DELAY] [RATE]  host K's link delayed (netem, when the kernel has
#                             it) and rate-limited both ways (tbf without netem); prints
#                             what it did
#   hosts.sh down DIR       every process left in the namespaces killed (by pid), the
#                           namespaces deleted, DIR's files removed
#
# Layout: a namespace PREFIX-s (the switch) holds the bridge br0 and one veth port pK per
# host; host K is the namespace PREFIX-K with the other end as eth0, address 10.99.0.(K+1)/24,
# and its own host name (PREFIX-K, through a UTS namespace the agent enters). Nothing is added
# to the machine's own network: each setup is a network of its own, so parallel setups may
# use the same addresses; only the namespace names must differ, and PREFIX holds this
# shell's pid. The processes started on a host run in its network namespace and share the
# machine's files (the launcher's status directory, the workdir).
#
# Exits non-zero with one line naming the command that failed (e.g. not root, no `ip`).
set -euo pipefail

die() { echo "hosts.sh: $*" >&2; exit 1; }

subnet=10.99.0
addr() { echo "$subnet.$(($1 + 1))"; }

prefix_of() { [ -f "$1/names" ] || die "$1/names: no hosts set up there (hosts.sh up $1)"; cat "$1/names"; }

up() {
    local dir=$1 n=${2:-2} p
    command -v ip >/dev/null || die "no 'ip' command (install iproute2)"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    p=rc$$$(printf '%x' $((RANDOM % 256)))
    echo "$p" > "$dir/names"
    ip netns add "$p-s" || die "cannot create network namespace $p-s: 'ip netns add' needs root (CAP_SYS_ADMIN)"
    ip -n "$p-s" link add br0 type bridge || die "cannot create a bridge in $p-s"
    ip -n "$p-s" link set br0 up
    ip -n "$p-s" link set lo up
    : > "$dir/hostfile"
    for ((k = 0; k < n; k++)); do
        ip netns add "$p-$k" || die "cannot create network namespace $p-$k"
        ip link add eth0 netns "$p-$k" type veth peer name "p$k" netns "$p-s" ||
            die "cannot create the veth pair of host $k"
        ip -n "$p-s" link set "p$k" master br0 up
        ip -n "$p-$k" link set lo up
        ip -n "$p-$k" addr add "$(addr $k)/24" dev eth0
        ip -n "$p-$k" link set eth0 up
        echo "$(addr $k) slots=2" >> "$dir/hostfile"
    done
    # the agent: OpenMPI runs `agent HOST orted ...` (a command line for a shell)
    cat > "$dir/agent" <<EOF
#!/bin/sh
# OpenMPI's rsh agent for the test hosts of $dir: runs the command in the host's namespace
host=\$1
shift
k=\${host##*.}
k=\$((k - 1))
exec ip netns exec $p-\$k unshare --uts sh -c "hostname $p-\$k && \$*"
EOF
    chmod +x "$dir/agent"
    # TCP alone between the hosts, on the test network; every daemon talks to the others
    # directly (routed direct: no tree through daemons that a cut link would split)
    cat > "$dir/env" <<EOF
export OMPI_MCA_plm_rsh_agent=$dir/agent
export OMPI_MCA_orte_default_hostfile=$dir/hostfile
export OMPI_MCA_btl=tcp,self
export OMPI_MCA_btl_tcp_if_include=$subnet.0/24
export OMPI_MCA_oob_tcp_if_include=$subnet.0/24
export OMPI_MCA_routed=direct
export OMPI_MCA_orte_keep_fqdn_hostnames=1
# the hosts share this machine's cores: each would bind its first rank to core 0
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export REDCO_HOSTS_DIR=$dir
EOF
    for ((k = 1; k < n; k++)); do
        reach "$p" "$k"
    done
}

# waits until host 0 reaches host k (5 s at most)
reach() {
    local p=$1 k=$2 said
    for _ in $(seq 50); do
        # a TCP connection to a closed port: refused means the host answered
        said=$(ip netns exec "$p-0" timeout 1 bash -c "exec 3<>/dev/tcp/$(addr "$k")/9" 2>&1 || true)
        case $said in *refused*) return 0 ;; esac
        sleep 0.1
    done
    die "host 0 cannot reach host $k ($(addr "$k"))"
}

on_host() {
    local dir=$1 k=$2 p
    shift 2
    p=$(prefix_of "$dir")
    exec ip netns exec "$p-$k" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$p-$k" "$@"
}

port() { local p; p=$(prefix_of "$1"); echo "ip -n $p-s link set p$2"; }

slow() {
    local dir=$1 k=$2 delay=${3:-20ms} rate=${4:-10mbit} p
    p=$(prefix_of "$dir")
    if ip netns exec "$p-$k" tc qdisc add dev eth0 root netem delay "$delay" rate "$rate" 2>/dev/null; then
        ip netns exec "$p-s" tc qdisc add dev "p$k" root netem delay "$delay" rate "$rate"
        echo "host $k: netem delay $delay rate $rate both ways"
    else  # a kernel without sch_netem: the rate limit alone
        ip netns exec "$p-$k" tc qdisc add dev eth0 root tbf rate "$rate" burst 32kbit latency 2s
        ip netns exec "$p-s" tc qdisc add dev "p$k" root tbf rate "$rate" burst 32kbit latency 2s
        echo "host $k: tbf rate $rate both ways (no netem in this kernel: no delay)"
    fi
}

down() {
    local dir=$1 p ns
    [ -f "$dir/names" ] || return 0
    p=$(cat "$dir/names")
    for ns in $(ip netns list | awk '{print $1}' | grep "^$p-" || true); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            kill -9 "$pid" 2>/dev/null || true
        done
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -f "$dir/names" "$dir/hostfile" "$dir/agent" "$dir/env"
}

cmd=${1:-}
[ $# -ge 2 ] || die "usage: hosts.sh up|down|exec|cut|mend|slow DIR ..."
shift
case $cmd in
    up) up "$@" ;;
    down) down "$@" ;;
    exec) on_host "$@" ;;
    cut) $(port "$1" "$2") down ;;
    mend) $(port "$1" "$2") up && reach "$(prefix_of "$1")" "$2" ;;
    slow) slow "$@" ;;
    *) die "unknown command '$cmd' (up, down, exec, cut, mend, slow)" ;;
esac
