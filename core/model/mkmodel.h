/* mkmodel.h: deterministic synthetic DeepSeek-V4 checkpoints (`dsv4ctl mkmodel`).
 *
 * A preset fixes the shapes; a seed fixes every value. Each element is a pure function of
 * (seed, upstream tensor name, index) through splitmix64, so the bytes are identical on
 * every run and machine, whatever the thread count, and the checkpoint is written tensor
 * by tensor in row chunks (never whole in memory). Formats follow the real checkpoint: dtype "f32"
 * writes F32 everywhere; "bf16" writes BF16 except the tensors that are F32 in the real model (HC,
 * sinks, ape, gate bias); "fp8" writes exactly the real formats: F8_E4M3 with 128x128
 * block scales (F8_E8M0 under upstream names, F32 `.weight_scale_inv` under HF names),
 * packed MXFP4 routed experts (I8 + F8_E8M0 per 32 inputs), BF16 and F32 for the rest.
 * tid2eid is I32 under upstream names and I64 under HF names.
 *
 * Presets (bos 256, eos 257 for the byte-level ones: ids 0..255 are bytes, 256..319
 * specials):
 *   tiny        the embedded default: H 64, 5 layers (sliding, sliding, CSA, HCA, CSA),
 *               hash MoE on layers 0..2, 4 heads of 80 with 16 rope dims (64 nope dims:
 *               fp8 KV rows fit), 8 output groups,
 *               window 16, CSA rate 4, HCA rate 16, index 2x32 top 4, 8 experts top 2,
 *               hc 2, vocab 320, YaRN on the compress rope;
 *   small       a few times larger, for CPU benchmarks (H 256, 8 layers, 8 heads of 160
 *               with 32 rope dims, hc 4);
 *   flash-shape V4-Flash widths and layer pattern (43 layers, H 4096, 64x512 heads ...)
 *               with 8 routed experts (top 6): for GPUs; default dtype fp8. */
#ifndef DSV4_CORE_MODEL_MKMODEL_H
#define DSV4_CORE_MODEL_MKMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model/model.h"
#include "core/model/tensors.h"

typedef struct dsv4_mkmodel_opts {
    const char *preset; /* tiny | small | flash-shape */
    uint64_t seed;
    const char *dtype;   /* f32 | bf16 | fp8; NULL: the preset's default */
    const char *names;   /* upstream | hf; NULL: upstream */
    const char *experts; /* fp4 | fp8: the routed experts' format under dtype fp8; NULL: fp4
                            (packed MXFP4, the real V4's). fp8 stores them block-scaled
                            F8_E4M3 like the other matrices; under hf names (merged
                            gate_up_proj) it needs moe_inter a multiple of 128, so that no
                            scale block holds rows of both w1 and w3 (the small preset) */
    unsigned shards;     /* 1: model.safetensors; more: an index over that many files */
    unsigned threads;    /* generator threads; 0: one per online CPU (at most 16). The bytes
                            written do not depend on it. */
    unsigned layers;     /* 0: the preset's; else its first `layers` layers, at least the
                            fewest that hold a sliding, a CSA, an HCA and a top-k MoE layer
                            (dsv4_mkmodel_run refuses fewer or more than the preset has).
                            Their tensors have the full model's bytes: a value depends only on
                            (seed, name, index). */
} dsv4_mkmodel_opts;

/* A preset's configuration. 0, or DSV4_EFORMAT for an unknown name. */
int dsv4_mkmodel_preset(const char *preset, dsv4_model_config *cfg);

/* Write config.json and the weights into dir (created if missing). 0, or a negative code
 * with the reason in err. */
int dsv4_mkmodel_run(const dsv4_mkmodel_opts *o, const char *dir, char *err, size_t errlen);
/* The same with one file, the preset's dtype where dtype is NULL, upstream names where names is. */
int dsv4_mkmodel_write(const char *preset, uint64_t seed, const char *dtype, const char *names,
                       const char *dir, char *err, size_t errlen);

/* Whether dir holds the checkpoint dsv4_mkmodel_run writes with o: a config.json (written
 * last, so only by a run that finished) equal, as JSON, to the one o gives: the preset's
 * shapes in this version, the seed, dtype and names. A checkpoint of the preset written by
 * a version whose shapes differ is not. */
bool dsv4_mkmodel_is_written(const dsv4_mkmodel_opts *o, const char *dir);

/* The values the loader must return for tensor d of a checkpoint written with o: d->rows *
 * d->cols floats (int32 for tid2eid) into out, exactly (they are the dequantised written
 * values). 0, or DSV4_EFORMAT for bad options. For tests. */
int dsv4_mkmodel_values(const dsv4_mkmodel_opts *o, const dsv4_model_config *cfg,
                        const dsv4_tensor_desc *d, void *out);

#endif
