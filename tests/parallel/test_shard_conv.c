/* test_shard_conv.c - the tensor-parallel plan of convolutional networks, derived from the
 * graph as for the language models: a conv fed a whole activation splits its output
 * channels (column parallel), the next one its input channels (row parallel, one
 * all-reduce), a flatten carries a channel split to the features of a row-parallel
 * linear, grouped convs carry a split of whole groups (depthwise) and stay whole, with a
 * note, when the shards would split a group; a reduction over the channels keeps the
 * conv before it whole; the caller's splits are followed. Each rank's local graph is built with the local channel counts
 * and differentiates. */
#include "check.h"
#include "redco/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, MAXP = 8 };

typedef struct {
    rc_graph *g;
    rc_tensor *p[MAXP];
    int n;
    rc_tensor *loss;
} net;

static rc_tensor *param(net *m, const char *name, int ndim, const int64_t *shape)
{
    return m->p[m->n++] = rc_param(m->g, name, RC_F32, ndim, shape);
}

static rc_tensor *conv(net *m, rc_tensor *x, const char *w, int64_t o, int64_t c, int groups)
{
    char bn[32];
    snprintf(bn, sizeof bn, "%s_bias", w);
    rc_tensor *wt = param(m, w, 4, (int64_t[]){o, c / groups, 3, 3});
    rc_tensor *b = param(m, bn, 1, (int64_t[]){o});
    return rc_relu(m->g, rc_conv2d(m->g, x, wt, b, &(rc_conv2d_params){.groups = groups}));
}

/* flatten [B, C, H, W] -> [B, C*H*W], a linear to 10 classes, the cross-entropy */
static void head(net *m, rc_tensor *x)
{
    int64_t f = x->shape[1] * x->shape[2] * x->shape[3];
    rc_tensor *h = rc_reshape(m->g, x, 2, (int64_t[]){B, f});
    rc_tensor *w = param(m, "fc", 2, (int64_t[]){f, 10});
    rc_tensor *b = param(m, "fc_bias", 1, (int64_t[]){10});
    rc_tensor *y = rc_input(m->g, "y", RC_I32, 1, (int64_t[]){B});
    m->loss = rc_cross_entropy(m->g, rc_add(m->g, rc_matmul(m->g, h, w, 0, 0), b), y, -100);
}

static const rc_pool2d_params pool2 = {{2, 2}, {0, 0}, {0, 0}};

/* kind 0: conv 1->8, relu, maxpool, conv 8->16, relu, avgpool, flatten, linear -> 10
 * kind 1: conv 1->8, relu, maxpool, flatten, linear -> 10
 * kind 2: conv 1->8, relu, depthwise conv 8->8 (8 groups), conv 8->16, relu, flatten, linear
 * kind 3: conv 1->8, relu, conv 8->8 in 2 groups, flatten, linear
 * kind 4: conv 1->8, relu, the sum over the channels (as a norm does), flatten, linear
 * kind 5: conv 1->8, relu, conv 8->16, relu, conv 16->16 in 4 groups, flatten, linear */
static int build(net *m, int kind)
{
    memset(m, 0, sizeof *m);
    m->g = rc_graph_new();
    rc_tensor *x = rc_input(m->g, "image", RC_F32, 4, (int64_t[]){B, 1, 28, 28});
    x = conv(m, x, "w1", 8, 1, 1);
    if (kind == 0) {
        x = conv(m, rc_max_pool2d(m->g, x, &pool2), "w2", 16, 8, 1);
        x = rc_avg_pool2d(m->g, x, &pool2);
    } else if (kind == 1) {
        x = rc_max_pool2d(m->g, x, &pool2);
    } else if (kind == 2) {
        x = conv(m, conv(m, x, "dw", 8, 8, 8), "w2", 16, 8, 1);
    } else if (kind == 3) {
        x = conv(m, x, "g2", 8, 8, 2);
    } else if (kind == 4) {
        x = rc_sum(m->g, x, 1, 1);
    } else {
        x = conv(m, conv(m, x, "w2", 16, 8, 1), "g3", 16, 16, 4);
    }
    head(m, x);
    return rc_graph_error(m->g) ? -1 : 0;
}

static const rc_shard_spec *spec_of(const net *m, const rc_shard_spec *s, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->p[i]->name, name))
            return &s[i];
    return NULL;
}

/* parameter `name` split as given (axis -1: replicated) */
static void expect(const net *m, const rc_shard_spec *s, const char *name, rc_shard_role role, int axis,
                   int64_t outer, int64_t groups, int64_t inner)
{
    const rc_shard_spec *x = spec_of(m, s, name);
    CHECKF(x && x->role == role && x->axis == axis && (axis < 0 || (x->outer == outer &&
           x->groups == groups && x->inner == inner)),
           "%s: %s axis %d [%lld, %lld, %lld], want %s axis %d [%lld, %lld, %lld]", name,
           x ? rc_shard_role_name(x->role) : "missing", x ? x->axis : -9, x ? (long long)x->outer : 0,
           x ? (long long)x->groups : 0, x ? (long long)x->inner : 0, rc_shard_role_name(role), axis,
           (long long)outer, (long long)groups, (long long)inner);
}

static int plan(net *m, int mp, rc_shard_spec *s, rc_shard_comm *comm)
{
    rc_error err = {0};
    memset(s, 0, MAXP * sizeof *s);
    int rc = rc_shard_plan(m->g, m->loss, m->p, m->n, mp, 0, s, comm, &err);
    CHECKF(rc == 0, "plan at mp %d: %s", mp, err.msg);
    for (int i = 0; rc == 0 && i < m->n; i++)
        printf("  mp %d  %-8s %-10s axis %2d  %s\n", mp, m->p[i]->name, rc_shard_role_name(s[i].role), s[i].axis,
               s[i].note);
    return rc;
}

/* each rank's local graph: built, its parameters of the local shapes, differentiable */
static void check_partition(net *m, int mp, const char *name, const int64_t *local0)
{
    for (int rank = 0; rank < mp; rank++) {
        rc_shard_spec s[MAXP] = {0};
        rc_shard_graph sg;
        rc_error err = {0};
        int rc = rc_shard_partition(m->g, m->loss, m->p, m->n, mp, rank, 0, s, &sg, &err);
        CHECKF(rc == 0, "partition rank %d of %d: %s", rank, mp, err.msg);
        if (rc)
            continue;
        for (int i = 0; i < m->n; i++)
            if (!strcmp(m->p[i]->name, name))
                CHECKF(sg.params[i] && sg.params[i]->shape[0] == local0[0] && sg.params[i]->shape[1] == local0[1],
                       "%s on rank %d: [%lld, %lld, ...], want [%lld, %lld, ...]", name, rank,
                       sg.params[i] ? (long long)sg.params[i]->shape[0] : -1,
                       sg.params[i] ? (long long)sg.params[i]->shape[1] : -1, (long long)local0[0],
                       (long long)local0[1]);
        rc_tensor *grads[MAXP] = {0};
        CHECKF(rc_backward(sg.g, sg.out, sg.params, m->n, grads) == 0 && grads[0] &&
               grads[0]->shape[0] == sg.params[0]->shape[0], "backward of rank %d of %d: %s", rank, mp,
               rc_graph_error(sg.g) ? rc_graph_error(sg.g) : "no gradient");
        rc_shard_graph_free(&sg);
    }
}

/* conv 1->8 column, conv 8->16 row, the linear after the whole output column parallel
 * (its logits split over the classes: the vocabulary-parallel loss) */
static void test_two_convs(void)
{
    net m;
    rc_shard_spec s[MAXP];
    rc_shard_comm comm;
    CHECK(build(&m, 0) == 0);
    if (plan(&m, 2, s, &comm) == 0) {
        expect(&m, s, "w1", RC_SHARD_COLUMN, 0, 1, 8, 1);
        expect(&m, s, "w1_bias", RC_SHARD_BIAS, 0, 1, 8, 1);
        expect(&m, s, "w2", RC_SHARD_ROW, 1, 1, 8, 1);
        expect(&m, s, "w2_bias", RC_SHARD_REPLICATED, -1, 0, 0, 0); /* added once, after the all-reduce */
        expect(&m, s, "fc", RC_SHARD_VOCAB, 1, 1, 10, 1);
        expect(&m, s, "fc_bias", RC_SHARD_BIAS, 0, 1, 10, 1);
        /* forward: conv 2's partial sum, the loss's 3; backward: the linear's input (the
         * image has no gradient) */
        CHECKF(comm.allreduce_fwd == 4 && comm.allreduce_bwd == 1 && comm.allgather_fwd == 0,
               "fwd %lld bwd %lld gathers %lld", (long long)comm.allreduce_fwd, (long long)comm.allreduce_bwd,
               (long long)comm.allgather_fwd);
    }
    check_partition(&m, 2, "w1", (int64_t[]){4, 1});
    check_partition(&m, 2, "w2", (int64_t[]){16, 4});
    check_partition(&m, 4, "w2", (int64_t[]){16, 2});
    rc_graph_free(m.g);
}

/* a flatten carries the channel split to the features: the linear is row parallel */
static void test_flatten_row(void)
{
    net m;
    rc_shard_spec s[MAXP];
    rc_shard_comm comm;
    CHECK(build(&m, 1) == 0);
    if (plan(&m, 2, s, &comm) == 0) {
        expect(&m, s, "w1", RC_SHARD_COLUMN, 0, 1, 8, 1);
        expect(&m, s, "fc", RC_SHARD_ROW, 0, 1, 8, 13 * 13); /* channel-major blocks of the features */
        expect(&m, s, "fc_bias", RC_SHARD_REPLICATED, -1, 0, 0, 0);
        CHECKF(comm.allreduce_fwd == 1 && comm.allreduce_bwd == 0 && comm.allgather_fwd == 0,
               "fwd %lld bwd %lld gathers %lld", (long long)comm.allreduce_fwd, (long long)comm.allreduce_bwd,
               (long long)comm.allgather_fwd);
    }
    check_partition(&m, 2, "fc", (int64_t[]){4 * 169, 10});
    rc_graph_free(m.g);
}

/* groups: a depthwise conv carries the split; 2 groups over 4 shards stay whole, noted */
static void test_groups(void)
{
    net m;
    rc_shard_spec s[MAXP];
    rc_shard_comm comm;
    CHECK(build(&m, 2) == 0);
    if (plan(&m, 2, s, &comm) == 0) {
        expect(&m, s, "w1", RC_SHARD_COLUMN, 0, 1, 8, 1);
        expect(&m, s, "dw", RC_SHARD_COLUMN, 0, 1, 8, 1);
        expect(&m, s, "dw_bias", RC_SHARD_BIAS, 0, 1, 8, 1);
        expect(&m, s, "w2", RC_SHARD_ROW, 1, 1, 8, 1);
        CHECKF(comm.allgather_fwd == 0 && comm.allreduce_fwd == 4, "fwd %lld gathers %lld",
               (long long)comm.allreduce_fwd, (long long)comm.allgather_fwd);
    }
    check_partition(&m, 2, "dw", (int64_t[]){4, 1});
    rc_graph_free(m.g);

    CHECK(build(&m, 3) == 0);
    if (plan(&m, 2, s, &comm) == 0) { /* 2 groups, 2 shards: one group each */
        expect(&m, s, "w1", RC_SHARD_COLUMN, 0, 1, 8, 1);
        expect(&m, s, "g2", RC_SHARD_COLUMN, 0, 1, 2, 4);
    }
    check_partition(&m, 2, "g2", (int64_t[]){4, 4});
    if (plan(&m, 4, s, &comm) == 0) {
        const rc_shard_spec *g2 = spec_of(&m, s, "g2");
        CHECKF(g2 && g2->role == RC_SHARD_REPLICATED && check_has(g2->note, "2 groups"), "g2: %s %s",
               g2 ? rc_shard_role_name(g2->role) : "?", g2 ? g2->note : "");
        expect(&m, s, "w1", RC_SHARD_REPLICATED, -1, 0, 0, 0); /* its split would be gathered: whole */
        CHECKF(comm.allgather_fwd == 0, "%lld gathers", (long long)comm.allgather_fwd);
    }
    check_partition(&m, 4, "g2", (int64_t[]){8, 4});
    rc_graph_free(m.g);

    /* a grouped conv fed a whole input: column parallel on whole groups (its input cut to
     * their channels), the linear after it row parallel */
    CHECK(build(&m, 5) == 0);
    if (plan(&m, 2, s, &comm) == 0) {
        expect(&m, s, "w2", RC_SHARD_ROW, 1, 1, 8, 1);
        expect(&m, s, "g3", RC_SHARD_COLUMN, 0, 1, 4, 4);
        expect(&m, s, "g3_bias", RC_SHARD_BIAS, 0, 1, 4, 4);
        expect(&m, s, "fc", RC_SHARD_ROW, 0, 1, 4, 4 * 22 * 22);
        CHECKF(comm.allreduce_fwd == 2 && comm.allreduce_bwd == 1 && comm.allgather_fwd == 0,
               "fwd %lld bwd %lld gathers %lld", (long long)comm.allreduce_fwd, (long long)comm.allreduce_bwd,
               (long long)comm.allgather_fwd);
    }
    check_partition(&m, 2, "g3", (int64_t[]){8, 4});
    rc_graph_free(m.g);
}

/* a sum over the channels (what a norm over them does) cannot take their split */
static void test_channel_reduction(void)
{
    net m;
    rc_shard_spec s[MAXP];
    rc_shard_comm comm;
    CHECK(build(&m, 4) == 0);
    if (plan(&m, 2, s, &comm) == 0) {
        expect(&m, s, "w1", RC_SHARD_REPLICATED, -1, 0, 0, 0);
        CHECKF(comm.allgather_fwd == 0, "%lld gathers", (long long)comm.allgather_fwd);
    }
    check_partition(&m, 2, "w1", (int64_t[]){8, 1});
    rc_graph_free(m.g);
}

/* the caller's splits: conv 1 whole, conv 2 on its input channels (its whole input cut to
 * them by the partitioner), the linear by its input features */
static void test_overrides(void)
{
    net m;
    rc_shard_spec s[MAXP] = {0};
    rc_shard_comm comm;
    rc_error err = {0};
    CHECK(build(&m, 0) == 0);
    const rc_shard_override ov[] = {{"w1", -1, 0}, {"w2", 1, 0}, {"fc", 0, 0}};
    CHECKF(rc_shard_apply(s, m.p, m.n, ov, 3, 2, &err) == 0, "%s", err.msg);
    CHECKF(rc_shard_plan(m.g, m.loss, m.p, m.n, 2, 0, s, &comm, &err) == 0, "%s", err.msg);
    expect(&m, s, "w1", RC_SHARD_REPLICATED, -1, 0, 0, 0);
    expect(&m, s, "w1_bias", RC_SHARD_REPLICATED, -1, 0, 0, 0);
    expect(&m, s, "w2", RC_SHARD_ROW, 1, 1, 8, 1);
    expect(&m, s, "fc", RC_SHARD_ROW, 0, 1, 400, 1);
    /* conv 2's and the linear's partial sums; the cut inputs' gradients (conv 2's input
     * depends on w1) */
    CHECKF(comm.allreduce_fwd == 2 && comm.allgather_fwd == 0, "fwd %lld gathers %lld",
           (long long)comm.allreduce_fwd, (long long)comm.allgather_fwd);
    for (int rank = 0; rank < 2; rank++) {
        rc_shard_graph sg;
        CHECKF(rc_shard_partition(m.g, m.loss, m.p, m.n, 2, rank, 0, s, &sg, &err) == 0, "%s", err.msg);
        rc_tensor *grads[MAXP] = {0};
        CHECKF(sg.g && rc_backward(sg.g, sg.out, sg.params, m.n, grads) == 0 && grads[2] &&
               grads[2]->shape[1] == 4, "rank %d: %s", rank, sg.g && rc_graph_error(sg.g) ? rc_graph_error(sg.g) : "");
        rc_shard_graph_free(&sg);
    }
    rc_graph_free(m.g);
}

int main(void)
{
    test_two_convs();
    test_flatten_row();
    test_groups();
    test_channel_reduction();
    test_overrides();
    return check_summary("test_shard_conv");
}
