#!/usr/bin/env bash
# bench_hosts.sh [BUILD] - bench_comm's all-reduce on 2 ranks placed three ways, one JSON
# line per size and placement ("placement" added to bench_comm's line):
#   one_host_shm  both ranks on one host, shared memory (Open MPI's vader)
#   one_host_tcp  both ranks on one host, TCP alone
#   two_hosts_tcp one rank on each of two test hosts, TCP over their veth link
# The test hosts are network namespaces made by tests/hosts/hosts.sh (root needed), torn
# down at exit. `make bench-hosts` runs it.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
hosts="$here/tests/hosts/hosts.sh"
dir=$(mktemp -d "${TMPDIR:-/tmp}/redco-bench-hosts-XXXXXX")
trap 'bash "$hosts" down "$dir"; rm -rf "$dir"' EXIT
bash "$hosts" up "$dir" 2 >&2
. "$dir/env"
export OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() { # placement, then mpiexec's own options
    local name=$1
    shift
    bash "$hosts" exec "$dir" 0 mpiexec -n 2 "$@" "$build/bench_comm" |
        sed "s/^{/{\"placement\": \"$name\", /"
}
run one_host_shm --mca btl vader,self --mca btl_vader_single_copy_mechanism none
run one_host_tcp
run two_hosts_tcp --map-by node
