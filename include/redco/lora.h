/* redco/lora.h - LoRA adapters on a built-in causal LM (GPT-2 and LLaMA families).
 *
 * A target projection W (a torch Linear [out, in], or GPT-2's Conv1D [in, out]) gains two
 * trainable matrices A [r, in] and B [out, r]; its output becomes
 *     y = x W (+ bias) + (alpha / r) (x A^T) B^T
 * as PEFT's LoraLayer computes it. The adapters are their own rc_params (PEFT's names:
 * base_model.model.<module>.lora_A.weight, ... .lora_B.weight), so a trainer given
 * rc_lora_params() differentiates, updates and keeps optimizer state for them alone: the
 * model's own weights are read as bound constants and never change.
 *
 *   rc_lora *l = rc_lora_new(model, &(rc_lora_options){.r = 8, .targets = "q_proj,v_proj"}, seed, &err);
 *   rc_task *task = rc_task_new(model, data, seq_len, &err);
 *   rc_trainer *t = rc_trainer_new(d, rc_task_collate, rc_task_loss, task, rc_lora_params(l), NULL, &err);
 *   ... rc_trainer_fit ...
 *   rc_lora_save(l, "adapter", &err);       // a PEFT directory: PeftModel.from_pretrained loads it
 *   rc_lora_merge(l, &err);                  // or fold it into the model's weights
 */
#ifndef REDCO_LORA_H
#define REDCO_LORA_H

#include "redco/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int r;                        /* the rank (>= 1) */
    double alpha;                 /* lora_alpha: the update is scaled by alpha / r (0: alpha = r) */
    const char *targets;          /* comma-separated module names, matched as PEFT matches a
                                     list: a module whose Hugging Face name is the target or ends
                                     in "." + target (GPT-2: c_attn, c_proj, c_fc; LLaMA: q_proj,
                                     k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj);
                                     NULL: "c_attn" for GPT-2, "q_proj,v_proj" for LLaMA */
} rc_lora_options;

typedef struct rc_lora rc_lora;

/* Adapters on model m, attached (rc_model_free detaches them; free them after): rc_model_logits (and the built-in
 * task's loss) adds them from now on. A starts as PEFT's default (uniform in
 * +-1/sqrt(in), drawn from seed), B as zeros, so the model is unchanged until trained.
 * Errors: a family other than GPT-2 and LLaMA, a rank < 1, a target no module matches. */
rc_lora *rc_lora_new(rc_model *m, const rc_lora_options *o, uint64_t seed, rc_error *err);
/* A PEFT adapter directory (adapter_config.json, adapter_model.safetensors) attached to m:
 * its r, lora_alpha and target_modules; every adapter tensor must be present with its shape
 * and no other tensor (an error names the file and tensor). */
rc_lora *rc_lora_load(rc_model *m, const char *dir, rc_error *err);
/* Writes DIR/adapter_config.json and DIR/adapter_model.safetensors (F32, PEFT's names and
 * layouts; fan_in_fan_out true for GPT-2's Conv1D), creating DIR. */
int rc_lora_save(const rc_lora *l, const char *dir, rc_error *err);
/* The adapters' parameters (what a trainer trains). */
rc_params *rc_lora_params(rc_lora *l);
/* Folds the adapters into the model's weights (W += alpha / r B A, transposed for Conv1D)
 * and detaches them: the model alone then computes what model + adapters did. */
int rc_lora_merge(rc_lora *l, rc_error *err);
/* Detaches the adapters from their model (if still attached) and frees them. */
void rc_lora_free(rc_lora *l);
/* Trainable adapter elements (all of A and B). */
int64_t rc_lora_numel(const rc_lora *l);
/* The adapters' rank and scaling alpha / r. */
int rc_lora_rank(const rc_lora *l);
double rc_lora_scaling(const rc_lora *l);

#ifdef __cplusplus
}
#endif

#endif
