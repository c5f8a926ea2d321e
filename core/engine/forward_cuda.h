/* forward_cuda.h: the forward step of forward.h on a CUDA device (built with CUDA only).
 *
 * The same graph, the same dsv4_fwd_seq step and the same KV discipline as the CPU
 * forward, over a pool whose buffers are device memory (dsv4_kv_pool with a CUDA device),
 * reached only through dsv4_kv_pool_layer. The weights are uploaded once: the linear
 * layers' in the checkpoint's formats (BF16, block-scaled FP8, MXFP4: the narrowest that
 * holds the model's dequantised values exactly), the rest as f32. Logits
 * come back to the host only for the rows that want them, and a sequence that asks for a
 * sampled token (dsv4_fwd_seq.sample) gets its id alone, chosen on the device
 * (kernels/cuda/sample.h); the step returns once they have landed and everything it
 * queued has run.
 *
 * Index-K rows go through the indexk plugin only: they are stored with its store op on a
 * host copy of the pages the step touches (its format is its own), and scored with its
 * score_cuda/topk_cuda, or, for a shape its CUDA kernels do not take, with its CPU score
 * on a host copy of the step's pages (logged once).
 *
 * With deterministic, every kernel is batch-invariant (model.h), so a token's logits are
 * bitwise the same whatever else is in the step and however its prompt was chunked.
 */
#ifndef DSV4_CORE_FORWARD_CUDA_H
#define DSV4_CORE_FORWARD_CUDA_H

#include "core/engine/engine.h"
#include "core/engine/forward.h"

typedef struct dsv4_fwd_cuda dsv4_fwd_cuda;

/* conf->threads is not used. The current CUDA device (dsv4_cuda_device_use) is the
 * pool's. eager: every step launched kernel by kernel, never recorded into a CUDA graph.
 * NULL with the reason in err (geometry, out of device memory, cuBLAS). */
dsv4_fwd_cuda *dsv4_fwd_cuda_new(const dsv4_fwd_conf *conf, bool deterministic, bool eager,
                                 char *err, size_t errlen);
void dsv4_fwd_cuda_free(dsv4_fwd_cuda *fwd);
/* As dsv4_fwd_step; also -EIO when CUDA failed. */
int dsv4_fwd_cuda_step(dsv4_fwd_cuda *fwd, const dsv4_fwd_seq *seqs, size_t n_seqs);
/* The forward passes so far by how their layers ran (dsv4_engine_graph_stats_get). */
void dsv4_fwd_cuda_graph_stats(const dsv4_fwd_cuda *fwd, dsv4_engine_graph_stats *st);

#endif
