/* user_models.c - see user_models.h. */
#include "user_models.h"

rc_params *um_params_new(int n, const char *const *names, const int64_t (*shapes)[3],
                         const rc_init_kind *init, double std, uint64_t seed)
{
    rc_params *p = rc_params_new();
    for (int i = 0; p && i < n; i++) {
        int ndim = shapes[i][2] ? 3 : shapes[i][1] ? 2 : 1;
        rc_init in = {init ? init[i] : RC_INIT_AUTO, std, NULL, NULL};
        if (rc_params_add_init(p, names[i], ndim, shapes[i], &in)) {
            rc_params_free(p);
            return NULL;
        }
    }
    if (p && rc_params_init_normal(p, std, seed)) {
        rc_params_free(p);
        return NULL;
    }
    return p;
}

const char *const um_mlp_names[UM_MLP_N] = {"a", "b", "c"};
const int64_t um_mlp_shapes[UM_MLP_N][3] = {{16, 32}, {32, 16}, {16, 4}};

rc_tensor *um_mlp_loss(rc_graph *g, rc_tensor *const *p, rc_tensor *x, rc_tensor *y)
{
    rc_tensor *h = rc_relu(g, rc_matmul(g, rc_relu(g, rc_matmul(g, x, p[0], 0, 0)), p[1], 0, 0));
    return rc_cross_entropy(g, rc_matmul(g, h, p[2], 0, 0), y, -100);
}

const char *const um_i2t_names[UM_I2T_N] = {"patch", "patch_bias", "pos", "tok", "norm1", "wq", "wk",
                                            "wv", "wo", "norm2", "up", "down", "normf", "head"};
const int64_t um_i2t_shapes[UM_I2T_N][3] = {{UM_PD, UM_C}, {UM_C}, {UM_NP + UM_TT, UM_C}, {UM_V, UM_C},
                                            {UM_C}, {UM_C, UM_C}, {UM_C, UM_C}, {UM_C, UM_C},
                                            {UM_C, UM_C}, {UM_C}, {UM_FF, UM_C}, {UM_C, UM_FF},
                                            {UM_C}, {UM_V, UM_C}};
const rc_init_kind um_i2t_init[UM_I2T_N] = {
    RC_INIT_NORMAL, RC_INIT_ZEROS,  RC_INIT_NORMAL, RC_INIT_NORMAL, RC_INIT_ONES,
    RC_INIT_NORMAL, RC_INIT_NORMAL, RC_INIT_NORMAL, RC_INIT_NORMAL, RC_INIT_ONES,
    RC_INIT_NORMAL, RC_INIT_NORMAL, RC_INIT_ONES,   RC_INIT_NORMAL};

rc_tensor *um_i2t_loss(rc_graph *g, rc_tensor *const *p, rc_tensor *image, rc_tensor *ids, rc_tensor *targets)
{
    enum { L = UM_NP + UM_TT };
    int64_t B = image ? image->shape[0] : 0;
    int32_t pos[L];
    for (int i = 0; i < L; i++)
        pos[i] = i;
    /* [B, 3, 2, 4, 2, 4] -> [B, 2, 2, 3, 4, 4] -> [B, 4 patches, 48] */
    rc_tensor *pt = rc_reshape(g, image, 6, (int64_t[]){B, 3, 2, 4, 2, 4});
    pt = rc_reshape(g, rc_permute(g, pt, (int[]){0, 2, 4, 1, 3, 5}), 3, (int64_t[]){B, UM_NP, UM_PD});
    rc_tensor *pe = rc_add(g, rc_matmul(g, pt, p[0], 0, 0), p[1]);
    rc_tensor *x = rc_concat(g, (rc_tensor *[]){pe, rc_embedding(g, p[3], ids)}, 2, 1);
    x = rc_add(g, x, rc_embedding(g, p[2], rc_const(g, "pos", RC_I32, 1, (int64_t[]){L}, pos)));
    rc_tensor *a = rc_layer_norm(g, x, p[4], NULL, 1e-5);
    rc_tensor *qkv[3];
    for (int k = 0; k < 3; k++) {
        rc_tensor *t = rc_reshape(g, rc_matmul(g, a, p[5 + k], 0, 1), 4, (int64_t[]){B, L, UM_H, UM_C / UM_H});
        qkv[k] = rc_permute(g, t, (int[]){0, 2, 1, 3});
    }
    rc_tensor *att = rc_softmax_ext(g, rc_matmul(g, qkv[0], qkv[1], 0, 1), NULL, 0.5, 1);
    rc_tensor *o = rc_reshape(g, rc_permute(g, rc_matmul(g, att, qkv[2], 0, 0), (int[]){0, 2, 1, 3}), 3,
                              (int64_t[]){B, L, UM_C});
    x = rc_add(g, x, rc_matmul(g, o, p[8], 0, 1));
    rc_tensor *f = rc_layer_norm(g, x, p[9], NULL, 1e-5);
    x = rc_add(g, x, rc_matmul(g, rc_gelu(g, rc_matmul(g, f, p[10], 0, 1)), p[11], 0, 1));
    x = rc_slice(g, rc_layer_norm(g, x, p[12], NULL, 1e-5), 1, UM_NP, L);
    return rc_cross_entropy(g, rc_matmul(g, x, p[13], 0, 1), targets, -100);
}
