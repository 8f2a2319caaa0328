/* user_models.h - models a user writes with graph ops alone (no built-in family), shared
 * by the tensor-parallel tests: an MLP classifier and a tiny image-to-text model. */
#ifndef REDCO_USER_MODELS_H
#define REDCO_USER_MODELS_H

#include "redco.h"
#include "redco/pipeline.h"

/* A user model's parameters, each declared with how it starts (init[i], NULL: all
 * RC_INIT_AUTO), then initialised: normal ones N(0, std) from seed. NULL on failure. */
rc_params *um_params_new(int n, const char *const *names, const int64_t (*shapes)[3],
                         const rc_init_kind *init, double std, uint64_t seed);

/* MLP: x f32 [B, 16] -> relu 32 -> relu 16 -> 4 classes, cross-entropy with y i32 [B];
 * parameters a [16, 32], b [32, 16], c [16, 4] */
enum { UM_MLP_IN = 16, UM_MLP_CLASSES = 4, UM_MLP_N = 3 };
extern const char *const um_mlp_names[UM_MLP_N];
extern const int64_t um_mlp_shapes[UM_MLP_N][3];
rc_tensor *um_mlp_loss(rc_graph *g, rc_tensor *const *p, rc_tensor *x, rc_tensor *y);

/* Image to text: 4x4 patches of an 8x8 RGB image embedded by a linear layer and put before
 * the text tokens; one pre-LN decoder block with separate q/k/v stored (out, in); an
 * untied head; the loss on the text positions. image f32 [B, 3, 8, 8], ids and targets
 * i32 [B, UM_TT]. */
enum { UM_C = 32, UM_H = 4, UM_V = 40, UM_TT = 6, UM_NP = 4, UM_PD = 48, UM_FF = 64, UM_I2T_N = 14 };
extern const char *const um_i2t_names[UM_I2T_N];
extern const int64_t um_i2t_shapes[UM_I2T_N][3];
/* how each starts: the LayerNorm gains (norm1, norm2, normf) at 1, the patch bias at 0, the
 * matrices normal */
extern const rc_init_kind um_i2t_init[UM_I2T_N];
rc_tensor *um_i2t_loss(rc_graph *g, rc_tensor *const *p, rc_tensor *image, rc_tensor *ids, rc_tensor *targets);

#endif
