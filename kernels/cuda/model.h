/* model.h: the C ABI of the CUDA forward (core/engine/forward_cuda.c): device memory and
 * streams, the linear layers, and the per-token kernels of the DeepSeek-V4 graph
 * (reference/dsv4-model-spec.md §3), each the device twin of a CPU kernel of kernels.h.
 *
 * Plain C types only, as in cuda_kernels.h: *_dev pointers are device memory, stream is a
 * cudaStream_t passed as void *. Kernel calls only queue work and return 0 or a negative
 * errno (-EINVAL bad arguments, -ENODEV no device, -ENOMEM, -EIO a refused launch).
 *
 * Determinism: every output element is computed by one thread, warp or thread block with
 * a reduction order fixed by the kernel and the model's shapes alone, never by the number
 * of tokens in the step; so are the linear layers in deterministic mode. Fast mode hands
 * long steps' dense f32 linear layers to cuBLAS, whose choice of kernel may follow the
 * batch size.
 */
#ifndef DSV4_KERNELS_CUDA_MODEL_H
#define DSV4_KERNELS_CUDA_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* inside the C linkage block: kernels.h declares C functions without one of its own */
#include "kernels/kernels.h"

/* ---- devices, memory, streams (model_mem.cu) --------------------------------------------- */
/* Make device `ordinal` (-1 = the first) current for the calling thread and write its name.
 * 0, -ENODEV when no device answers or the ordinal does not exist. */
int dsv4_cuda_device_use(int ordinal, char *name, size_t namelen);
/* Zeroed device memory on the current device; NULL when it cannot be had. */
void *dsv4_cuda_alloc(size_t bytes);
void dsv4_cuda_free(void *dev);
int dsv4_cuda_stream_new(void **stream_p);
void dsv4_cuda_stream_free(void *stream);
/* Page-locked host memory (the device copies from it asynchronously, at the bus's speed);
 * NULL when none can be had. */
void *dsv4_cuda_host_alloc(size_t bytes);
void dsv4_cuda_host_free(void *host);
/* Events order work between streams (inside a CUDA graph capture too: a stream that waits
 * for an event recorded in the capturing stream joins the capture, and must be waited for
 * again by the capturing stream before the capture ends). */
int dsv4_cuda_event_new(void **event_p);
void dsv4_cuda_event_free(void *event);
/* event marks what stream has queued so far */
int dsv4_cuda_event_record(void *event, void *stream);
/* stream's later work waits for event's work */
int dsv4_cuda_stream_wait(void *stream, void *event);
/* The host waits for event's work (at once for an event never recorded). */
int dsv4_cuda_event_sync(void *event);
/* Queue a copy of n bytes between any two of host and device memory. */
int dsv4_cuda_copy(void *dst, const void *src, size_t n, void *stream);
/* Wait for everything queued on stream. */
int dsv4_cuda_sync(void *stream);
/* Block dst_ids[i] (i when dst_ids_dev is NULL) of dst = block src_ids[i] (i when NULL) of
 * src, for i < n, blocks of block_bytes bytes; one launch. */
int dsv4_cuda_blocks_copy(uint8_t *dst_dev, const uint32_t *dst_ids_dev, const uint8_t *src_dev,
                          const uint32_t *src_ids_dev, size_t block_bytes, uint32_t n,
                          void *stream);

/* CUDA graphs: the work a stream queues between capture_begin and capture_end, recorded
 * once and replayed with one launch. Launches between them are recorded, not run. */
typedef struct dsv4_cuda_graph dsv4_cuda_graph;
int dsv4_cuda_capture_begin(void *stream);
/* End the capture; with keep, instantiate what was recorded into *graph_p. A capture that
 * a call inside it broke ends with its failure (-EIO) and nothing is kept. */
int dsv4_cuda_capture_end(void *stream, bool keep, dsv4_cuda_graph **graph_p);
int dsv4_cuda_graph_launch(dsv4_cuda_graph *graph, void *stream);
void dsv4_cuda_graph_free(dsv4_cuda_graph *graph);

/* Open (on) or close the range a profiler started with its capture off (ncu
 * --profile-from-start off) records: bench/ profiles chosen steps only. */
int dsv4_cuda_profile(bool on);

/* ---- linear layers (model_gemm.cu) ------------------------------------------------------- */
/* How a weight sits in device memory: the checkpoint's formats (spec §5), so a decode step
 * reads the checkpoint's bytes, not their f32 expansion. A weight is `mats` row-major
 * [out][in] matrices (mats > 1: the experts of a layer, the output groups of wo_a). */
typedef enum dsv4_cuda_wfmt {
    DSV4_CUDA_W_F32,
    DSV4_CUDA_W_BF16,
    DSV4_CUDA_W_FP8, /* E4M3, one power-of-two f32 scale per 128x128 block of each matrix:
                        scale [mats][ceil(out/128)][ceil(in/128)] floats */
    DSV4_CUDA_W_FP4, /* MXFP4: E2M1 two per byte (low nibble = even input), one E8M0 scale
                        byte per 32 inputs: scale [mats][out][in/32]; in % 32 == 0 */
} dsv4_cuda_wfmt;

typedef struct dsv4_cuda_weight {
    dsv4_cuda_wfmt fmt;
    const void *data;  /* device: mats x [out][in] elements of fmt */
    const void *scale; /* device: the scales of FP8 and FP4, else NULL */
} dsv4_cuda_weight;

/* Device bytes of mats [out][in] matrices in fmt: data (the result) and scale
 * (*scale_bytes_p); 0 when fmt cannot hold that shape (FP4 with in % 32 != 0). */
size_t dsv4_cuda_weight_bytes(dsv4_cuda_wfmt fmt, size_t mats, size_t out, size_t in,
                              size_t *scale_bytes_p);
/* Store the f32 matrices at src_dev in fmt at data_dev / scale_dev (sized by
 * dsv4_cuda_weight_bytes), waiting for the stream. *exact_p: every stored value decodes
 * (code times scale, one f32 multiply, as core/model/dequant.h) to the bits of its f32
 * value. The scales are the smallest powers of two that hold each block, so a weight
 * dequantised from that format (any power-of-two scales) is stored exactly. flag_dev: one
 * device word of scratch. */
int dsv4_cuda_weight_pack(const float *src_dev, size_t mats, size_t out, size_t in,
                          dsv4_cuda_wfmt fmt, void *data_dev, void *scale_dev, uint32_t *flag_dev,
                          void *stream, bool *exact_p);

typedef struct dsv4_cuda_blas dsv4_cuda_blas;
/* A cuBLAS handle on stream; deterministic selects the batch-invariant kernels for every
 * linear layer (and a 64 MiB workspace for their k splits' sums). NULL when cuBLAS or the
 * workspace cannot be had. */
dsv4_cuda_blas *dsv4_cuda_blas_new(void *stream, bool deterministic);
void dsv4_cuda_blas_free(dsv4_cuda_blas *blas);
/* Y[t][o] = sum_i W[o][i] X[t][i] for t < n, o < out (strides in elements), W dequantised
 * in registers. BF16 / FP8 / MXFP4 weights with K % 64 == 0 and 16-byte aligned rows run
 * on tensor cores, inputs split into two bf16 (within ~1e-5 of the f32 sums); the rest
 * (f32 weights) on the streaming kernel, each output summed in one order fixed by `in`
 * alone. Deterministic mode takes the tensor cores at every row count with a k split
 * fixed by the weight's shape, the splits added in split order: an output's bits depend
 * on its weight row and input row only, whatever the row count, the grouping or the run
 * (batch-invariant by construction). Fast mode takes them from two rows a group, k split
 * by the grid and added by atomics (bits may change with the rows and between runs), and for
 * one-row steps of fewer than 16384 outputs (all groups) on 8 MiB of weights or more; the
 * streaming kernel for other one-row steps and f32 steps of up to DSV4_CUDA_GEMM_STREAM_ROWS
 * rows, cuBLAS for longer f32 steps and for longer BF16 steps (a bf16 GEMM on the inputs'
 * hi and lo parts, the two products added in f32: the tensor-core kernels' precision). */
#define DSV4_CUDA_GEMM_STREAM_ROWS 256
int dsv4_cuda_linear(dsv4_cuda_blas *blas, const dsv4_cuda_weight *w, size_t out, size_t in,
                     const float *x_dev, size_t x_stride, size_t n, float *y_dev, size_t y_stride);
/* `batch` independent linear layers in one launch: problem g < batch is Y + g * y_batch =
 * matrix g of w applied to X + g * x_batch, each as dsv4_cuda_linear (the grouped output
 * projection: one call instead of one per group). */
int dsv4_cuda_linear_batched(dsv4_cuda_blas *blas, const dsv4_cuda_weight *w, size_t out, size_t in,
                             const float *x_dev, size_t x_stride, size_t x_batch, size_t n,
                             float *y_dev, size_t y_stride, size_t y_batch, uint32_t batch);
/* The same for groups: rows [off[g], off[g + 1]) of X use matrix g of w, g < groups.
 * off_dev has groups + 1 entries (off[0] = 0); max_rows >= off[groups], the rows of all
 * groups together (the tensor cores' row windows cover rows below it). Never cuBLAS (the
 * row counts live on the device). */
int dsv4_cuda_linear_grouped(dsv4_cuda_blas *blas, const dsv4_cuda_weight *w, size_t out, size_t in,
                             const float *x_dev, size_t x_stride, const uint32_t *off_dev,
                             uint32_t groups, uint32_t max_rows, float *y_dev, size_t y_stride);
/* Where dsv4_cuda_linear_grouped of these arguments splits its inputs into bf16 hi and lo
 * parts once before its GEMM (hi + lo is each input to 16 significant bits, as the tensor
 * cores take them), the device buffer it splits them into: [2][max_rows][in] bf16, the hi
 * rows, then the lo rows; NULL where it does not. The kernel that writes the inputs may
 * write them there split instead (dsv4_cuda_moe_gather, dsv4_cuda_swiglu) and the call
 * then be made with x_dev NULL: one launch, and the kernel boundary after it, fewer. A
 * call with x_dev NULL that this returns NULL for is -EINVAL. */
void *dsv4_cuda_linear_grouped_split(dsv4_cuda_blas *blas, const dsv4_cuda_weight *w, size_t out,
                                     size_t in, size_t x_stride, uint32_t groups,
                                     uint32_t max_rows);
/* The same for dsv4_cuda_linear of n rows: the buffer [2][n][in] where one launch of the
 * tensor-core kernel splits them once, else NULL (cuBLAS's steps, one row, narrow or
 * non-BF16 weights, deterministic mode's windows of rows). *zero_p is set where that
 * launch adds its k splits into Y with atomics: whoever writes the split rows then zeroes
 * the call's n rows of out outputs in Y too (dsv4_cuda_split_out). */
void *dsv4_cuda_linear_split(dsv4_cuda_blas *blas, const dsv4_cuda_weight *w, size_t out, size_t in,
                             size_t x_stride, size_t n, bool *zero_p);

/* ---- the step's layout on the device (model_attn.cu, model_ffn.cu) ----------------------- */
/* Per token and per sequence arrays of one step, uploaded once per step. */
typedef struct dsv4_cuda_step {
    uint32_t n_tok, n_seqs;
    uint32_t pos_bound;       /* no token's position reaches it (0: no bound known): sizes the
                                 attention's split grid, so it is part of a CUDA graph's shape */
    const int32_t *tok;       /* [n_tok] token ids */
    const uint32_t *pos;      /* [n_tok] positions */
    const uint32_t *tseq;     /* [n_tok] sequence of each token */
    const uint32_t *slot;     /* [n_seqs] state slots */
    const uint32_t *start;    /* [n_seqs] first position of the step */
    const uint32_t *count;    /* [n_seqs] tokens in the step */
    const uint32_t *first;    /* [n_seqs] first token index */
    const uint32_t *page_off; /* [n_seqs] where the sequence's pages start in pages */
    const uint32_t *pages;    /* every sequence's pages, concatenated */
    const uint32_t *ik_out;   /* [n_tok] compact index-K output row of a token that
                                 completes a CSA window, else UINT32_MAX */
} dsv4_cuda_step;

/* Model constants the per-token kernels share. */
typedef struct dsv4_cuda_dims {
    uint32_t hidden, hc_mult, hc_iters, heads, head_dim, window, rope_main, rope_comp;
    uint32_t index_heads, index_dim, index_topk;
    float eps, hc_eps;
} dsv4_cuda_dims;

/* Where a layer's KV lives: rows in fmt, blocks as in dsv4_kv_buffer. */
typedef struct dsv4_cuda_kvbuf {
    uint8_t *base;
    size_t block_bytes, row_bytes;
    uint32_t rows_per_block;
} dsv4_cuda_kvbuf;

/* ---- embedding, mHC, norms (model_ffn.cu) ------------------------------------------------- */
/* x[t][j] = embed[tok[t]] for every stream j < hc_mult. */
int dsv4_cuda_embed(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, const float *embed_dev,
                    float *x_dev, void *stream);
/* What an expand adds to the streams (dsv4_k_hc_expand's y): a block's output rows y, or
 * (eo set) the MoE's, y[t] = sum_i w[t][i] eo[epos[t k + i]] (i ascending) + sh[t]
 * (dsv4_k_moe_combine, sh in y), computed where the expand uses it. */
typedef struct dsv4_cuda_hc_src {
    const float *y;
    uint32_t k;
    const float *w;
    const uint32_t *epos;
    const float *eo;
} dsv4_cuda_hc_src;
/* The expand of a block (dsv4_k_hc_expand): X[t] <- post[t] y[t] + comb[t]^T X[t], y from
 * src, post and comb from dsv4_cuda_hc_mix. The collapse that follows the block applies it
 * to the rows it reads (its own launch and round trip over X before). */
typedef struct dsv4_cuda_hc_expand {
    dsv4_cuda_hc_src src;
    const float *post, *comb;
} dsv4_cuda_hc_expand;
/* Rows that a kernel writes for the dense GEMM reading them next also written split,
 * into dsv4_cuda_linear_split's buffer (split; NULL: not), and that GEMM's output rows
 * zeroed where its splits add into them (y; NULL: not): out values a row, rows stride
 * apart. */
typedef struct dsv4_cuda_split_out {
    void *split;
    float *y;
    size_t out, stride;
} dsv4_cuda_split_out;
/* For each token t < n: X[t] expanded by ex first where ex is set (the expanded rows
 * written to xo, not over x), then z[t] = rms_scale(X[t]) (fn . X[t]) with fn f32
 * [(2 + hc_mult) hc_mult][hc_mult hidden], pre[t] from z[t] (dsv4_k_hc_mix's pre), then
 * u[t] = rmsnorm(sum_j pre_j X[t][j]) * norm. z ((2 + hc_mult) hc_mult values a token) is
 * dsv4_cuda_hc_mix's input: the mix's Sinkhorn, which only the expand needs, runs apart
 * (on a stream of its own beside the block), not between the collapse and u. Each token's
 * bits depend on its own row only (batch- and chunk-invariant in both modes). With us set,
 * u's n rows also go split to us->split and the GEMM's rows in us->y are zeroed (the
 * GEMM that reads u next then takes no inputs: one launch fewer). With *z_apart set, z[t]'s
 * first hc_mult values alone (pre's: the collapse waits on no others) where the launch has
 * no room for the rest beside the collapse, and *z_apart says whether it left them to
 * dsv4_cuda_hc_mix_z (it is cleared, z whole, where it had room). -EINVAL where hc_mult + 1
 * rows of hidden / 8 floats do not fit a block's shared memory, or us asks for rows of
 * hidden not a multiple of 4 split. */
int dsv4_cuda_hc_pre(const dsv4_cuda_dims *d, uint32_t n, const float *x_dev,
                     const dsv4_cuda_hc_expand *ex, float *xo_dev, const float *fn_dev,
                     const float *base_dev, const float *scale_dev, const float *norm_dev,
                     float *pre_dev, float *z_dev, float *u_dev, const dsv4_cuda_split_out *us,
                     bool *z_apart, void *stream);
/* z[t]'s values past its first hc_mult, t < n, where dsv4_cuda_hc_pre left them (z_apart):
 * over X in x_dev (the expanded rows it wrote to xo where it expanded), the same bits as
 * its own launch computing them. */
int dsv4_cuda_hc_mix_z(const dsv4_cuda_dims *d, uint32_t n, const float *x_dev, const float *fn_dev,
                       float *z_dev, void *stream);
/* post[t] and comb[t] from z[t] (dsv4_k_hc_mix's), t < n, 4 lanes a token (16 where
 * hc_mult > 4). */
int dsv4_cuda_hc_mix(const dsv4_cuda_dims *d, uint32_t n, const float *z_dev, const float *base_dev,
                     const float *scale_dev, float *post_dev, float *comb_dev, void *stream);
/* The head's collapse of rows rows[i] of X, expanded by ex first where ex is set (X is
 * not written): u[i] = rmsnorm(sum_j pre_j X[j]) * norm with pre from fn
 * (dsv4_k_hc_head_pre), for i < n. */
int dsv4_cuda_hc_head(const dsv4_cuda_dims *d, uint32_t n, const uint32_t *rows_dev,
                      const float *x_dev, const dsv4_cuda_hc_expand *ex, const float *fn_dev,
                      const float *base_dev, float scale, const float *norm_dev, float *u_dev,
                      void *stream);
/* x[t] <- rmsnorm(x[t]) (* w when w_dev is not NULL) for n rows of len values, row t at
 * x + t stride; with us set, the rows also go split and the GEMM's rows are zeroed as
 * dsv4_cuda_hc_pre's (-EINVAL where len is not a multiple of 4). */
int dsv4_cuda_rmsnorm_rows(uint32_t n, uint32_t len, size_t stride, float *x_dev,
                           const float *w_dev, float eps, const dsv4_cuda_split_out *us,
                           void *stream);

/* ---- attention (model_attn.cu) ------------------------------------------------------------ */
/* Per token: every head of q unweighted-normed and rotated at pos; kv (row t at kv +
 * t kv_stride) normed with kv_norm, rotated, and stored in fmt at kvs[t]. rope = the
 * layer's rotary dims, freq its table. With iq_dev set (a compressed layer's indexer
 * queries), the trailing rope_comp dims of every index head of iq[t] rotated at pos too,
 * by the same table. */
int dsv4_cuda_qkv(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, float *q_dev,
                  const float *kv_dev, size_t kv_stride, const float *kv_norm_dev,
                  const float *freq_dev, uint32_t rope, dsv4_k_rowfmt fmt, uint8_t *kvs_dev,
                  float *iq_dev, void *stream);
/* A compressor over every token of the step, sequence by sequence (spec §3.4-3.5, the
 * carry of dsv4_kv_carry): token t's k and g are the c * dim values (c = 2 with overlap)
 * at k + t kg_stride and g + t kg_stride. A completed window's row goes to the paged
 * buffer rows in the KV format (rows.base set), or as floats to out_rows[ik_out[t]] (the
 * index-K compressor). */
typedef struct dsv4_cuda_compressor {
    bool overlap;
    uint32_t rate, dim;
    const float *k, *g;
    size_t kg_stride;
    const float *ape, *norm;
    dsv4_cuda_kvbuf carry, rows;
    float *out_rows;
} dsv4_cuda_compressor;
/* n_cs compressors (at most 2: a CSA layer's and its indexer's) in one launch, rotating
 * with freq (the compressed layers' table) and storing rows in fmt. */
#define DSV4_CUDA_COMPRESSORS 2
int dsv4_cuda_compress(const dsv4_cuda_dims *d, const dsv4_cuda_step *s,
                       const dsv4_cuda_compressor *cs, uint32_t n_cs, const float *freq_dev,
                       dsv4_k_rowfmt fmt, void *stream);
/* Index-K rows per token for the scorer: n_rows[t] = (pos + 1) / rate when that exceeds
 * index_topk (the token must choose), else 0; page_start[t] = its sequence's page_off. */
int dsv4_cuda_index_rows(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, uint32_t rate,
                         uint32_t *n_rows_dev, uint32_t *page_start_dev, void *stream);
/* sel[t] = the rows token t attends to, ascending, nsel[t] of them: every visible row when
 * there are at most index_topk, else the top-k of topk[t] (as topk_cuda ranks them). */
int dsv4_cuda_index_select(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, uint32_t rate,
                           const uint32_t *topk_dev, uint32_t *sel_dev, uint32_t *nsel_dev,
                           void *stream);
/* Attention of every (token, head) with the sink over the window rows (this step's fresh
 * rows from kvs, older ones from the ring in win) and the compressed rows (rows: with
 * rate_all set, every visible row, one per rate_all positions: an HCA layer's, or a CSA
 * layer's where no token sees more than index_topk; else the CSA rows sel[t][0..nsel[t]);
 * neither when rows is NULL), then the inverse rotation of the output; then the step's rows join
 * the window ring in win (the last window of each sequence only). s->pos_bound, when set, sizes the
 * grid to the splits its positions allow. work_dev: scratch of dsv4_cuda_attend_work_bytes
 * for the most tokens a step will have. */
int dsv4_cuda_attend(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, const float *q_dev,
                     const uint8_t *kvs_dev, const dsv4_cuda_kvbuf *win,
                     const dsv4_cuda_kvbuf *rows, uint32_t rate_all, const uint32_t *sel_dev,
                     const uint32_t *nsel_dev, const float *sinks_dev, const float *freq_dev,
                     uint32_t rope, dsv4_k_rowfmt fmt, float *o_dev, void *work_dev, void *stream);
/* Bytes of dsv4_cuda_attend's scratch for steps of up to max_tokens tokens (bounded:
 * longer steps run in waves over the same scratch). */
size_t dsv4_cuda_attend_work_bytes(const dsv4_cuda_dims *d, uint32_t max_tokens);

/* ---- MoE (model_ffn.cu) ------------------------------------------------------------------- */
/* dsv4_k_route for every token (its logits at logits + t logits_stride; hash ids from
 * tid2eid[tok[t]] when tid2eid_dev is not NULL), then the (token, choice) pairs grouped
 * by expert: off[e] the first row of expert e (E + 1 entries), assign[j] the pair of row
 * j, epos[i] the row of pair i. The logits are the routing's scratch: they hold the scores
 * afterwards. One launch; done is a word of device memory, 0 before the first call, that
 * every call leaves 0 (its blocks count themselves in it: a word a stream that routes,
 * calls on one stream in turn). n_experts at most DSV4_CUDA_ROUTE_MAX_EXPERTS (a lane keeps
 * its experts' scores in registers, the grouping counts them in 48 KiB of shared memory),
 * else -EINVAL. */
#define DSV4_CUDA_ROUTE_MAX_EXPERTS 1024
int dsv4_cuda_route(const dsv4_cuda_step *s, float *logits_dev, size_t logits_stride,
                    const float *bias_dev, const int32_t *tid2eid_dev, uint32_t n_experts,
                    uint32_t k, dsv4_k_scoring scoring, float routed_scale, int32_t *ids_dev,
                    float *w_dev, uint32_t *off_dev, uint32_t *assign_dev, uint32_t *epos_dev,
                    uint32_t *done_dev, void *stream);
/* xe[j] = u[assign[j] / k] for j < n * k; with split_dev set, those rows go there split
 * instead, as the grouped GEMM that reads them wants them (dsv4_cuda_linear_grouped_split,
 * max_rows n * k; hidden a multiple of 4 and u 16-byte aligned, else -EINVAL). */
int dsv4_cuda_moe_gather(uint32_t n, uint32_t k, uint32_t hidden, const float *u_dev,
                         const uint32_t *assign_dev, float *xe_dev, void *split_dev, void *stream);
/* n rows of a SwiGLU: row r's gate values at g + r stride, its up values at u + r stride,
 * its output at h + r inter, or with split set, split there for the grouped GEMM that reads
 * it (dsv4_cuda_linear_grouped_split, max_rows n; 16-byte aligned rows, else -EINVAL). */
typedef struct dsv4_cuda_swiglu_rows {
    uint32_t n;
    size_t stride;
    const float *g, *u;
    float *h;
    void *split;
} dsv4_cuda_swiglu_rows;
/* h = act(min(g, limit)) * clamp(u, -limit, limit) (dsv4_k_swiglu) over inter values a
 * row of rows. */
int dsv4_cuda_swiglu(const dsv4_cuda_swiglu_rows *rows, uint32_t inter, float limit, dsv4_k_act act,
                     void *stream);

#ifdef __cplusplus
}
#endif
#endif /* DSV4_KERNELS_CUDA_MODEL_H */
