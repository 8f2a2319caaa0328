/* plan_hosts.c - `redco plan --ranks-per-host N`: how a mesh lies on hosts, and the bytes of
 * one training step that cross the network.
 *
 * mpiexec with a hostfile of N slots a host (or Slurm with N tasks a node) places world
 * ranks in order: host h holds ranks h*N .. h*N+N-1. The mesh makes rank r model shard
 * r % mp of replica r / mp (comm.c), so a model-parallel group is mp consecutive ranks
 * (inside one host when mp divides N) and a data-parallel group takes every mp-th rank
 * (across hosts once dp*mp > N). Each group's collective is counted as a ring in rank
 * order: every rank sends its share to the next, and the bytes a rank sends cross the
 * network when the next rank of its group is on another host. A rank sends 2(p-1)/p of
 * the vector in an all-reduce over p ranks, (p-1)/p in a reduce-scatter or all-gather
 * (the ring's figures; Rabenseifner's all-reduce, which redco asks Open MPI for, sends as
 * much). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

/* one group's ring: members first, first+stride, ... (p of them), each sending `sent`; adds
 * what its members send to a member on another host (and what those on host 0 send), and
 * keeps the most hosts one group spans */
static void ring_add(int64_t first, int64_t stride, int64_t p, int64_t per_host, double sent, double *across,
                     double *host_out, int64_t *spans)
{
    int64_t hosts = 1;
    for (int64_t k = 0; k < p; k++) {
        int64_t r = first + k * stride, next = first + ((k + 1) % p) * stride;
        if (k > 0 && r / per_host != (r - stride) / per_host)
            hosts++;
        if (p > 1 && r / per_host != next / per_host) {
            *across += sent;
            host_out[0] += r / per_host == 0 ? sent : 0; /* what host 0 sends: every host alike */
        }
    }
    if (hosts > *spans)
        *spans = hosts;
}

int cli_hosts_traffic_of(int64_t dp, int64_t mp, int64_t per_host, double model_vector, double data_vector,
                         cli_hosts_traffic *t)
{
    memset(t, 0, sizeof *t);
    int64_t ranks = dp * mp;
    if (per_host < 1 || ranks > ((int64_t)1 << 24))
        return -1;
    t->per_host = per_host;
    t->hosts = (ranks + per_host - 1) / per_host;
    t->model_rank = mp > 1 ? 2.0 * (double)(mp - 1) / (double)mp * model_vector : 0;
    t->data_rank = dp > 1 ? (double)(dp - 1) / (double)dp * data_vector : 0;
    t->model_hosts = t->data_hosts = 1;
    for (int64_t d = 0; d < dp; d++) /* model-parallel groups: mp consecutive ranks */
        ring_add(d * mp, 1, mp, per_host, t->model_rank, &t->model_across, &t->model_host_out, &t->model_hosts);
    for (int64_t j = 0; j < mp; j++) /* data-parallel groups: every mp-th rank */
        ring_add(j, mp, dp, per_host, t->data_rank, &t->data_across, &t->data_host_out, &t->data_hosts);
    return 0;
}

/* "1.5 MiB" */
static const char *mib(double b, char *buf, size_t size)
{
    snprintf(buf, size, "%.1f MiB", b / (1 << 20));
    return buf;
}

/* one axis' line */
static void print_axis(const char *axis, int64_t p, int64_t spans, double rank, double host_out)
{
    char a[32], b[32];
    if (p == 1)
        printf("  %s  none (%s 1)\n", axis, axis[0] == 'm' ? "mp" : "dp");
    else if (spans == 1)
        printf("  %s  each group of %lld ranks inside one host: the %s a rank sends per step stay there\n", axis,
               (long long)p, mib(rank, a, sizeof a));
    else
        printf("  %s  each group of %lld ranks spans %lld hosts: a rank sends %s per step; %s leave each host\n",
               axis, (long long)p, (long long)spans, mib(rank, a, sizeof a), mib(host_out, b, sizeof b));
}

/* "ranks 2-3", "rank 2" */
static const char *span_text(int64_t a, int64_t b, char *buf, size_t size)
{
    if (a == b)
        snprintf(buf, size, "rank %lld", (long long)a);
    else
        snprintf(buf, size, "ranks %lld-%lld", (long long)a, (long long)b);
    return buf;
}

void cli_hosts_traffic_print(const cli_hosts_traffic *t, int64_t dp, int64_t mp)
{
    char a[32], b[32];
    int64_t last = dp * mp - 1, h = t->hosts - 1, n = t->per_host;
    printf("\nacross hosts (%lld ranks, %lld a host, placed in rank order: ", (long long)(dp * mp), (long long)n);
    if (t->hosts == 1)
        printf("all on one host):\n");
    else
        printf("host 0 holds %s, %shost %lld %s):\n", span_text(0, n - 1, a, sizeof a), h > 1 ? "..., " : "",
               (long long)h, span_text(h * n, last, b, sizeof b));
    print_axis("model axis", mp, t->model_hosts, t->model_rank, t->model_host_out);
    print_axis("data axis ", dp, t->data_hosts, t->data_rank, t->data_host_out);
    if (t->model_hosts > 1)
        printf("  (a model-parallel group across hosts sends its activations' all-reduces over the network each "
               "layer: make --mp divide the ranks a host)\n");
    printf("  per step    %s cross the network in all, %s leave each host\n",
           mib(t->model_across + t->data_across, a, sizeof a), mib(t->model_host_out + t->data_host_out, b, sizeof b));
}
