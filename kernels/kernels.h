/* kernels.h: the one C ABI of the DeepSeek-V4 math (reference/dsv4-model-spec.md §3).
 *
 * The engine (core/engine/forward.c) calls only these functions; kernels/cpu implements
 * them in fp32 and a CUDA backend will implement the same entry points. No CUDA type
 * appears here.
 *
 * Determinism: every output element is computed by one thread with a reduction order
 * that is fixed by the kernel alone (never by the thread count, the batch size or which
 * other rows are in the batch). Threads only split independent output rows. That is what
 * makes logits bitwise identical between full prefill, chunked prefill, decode and any
 * batch composition (DESIGN.md §6).
 *
 * Conventions: matrices are row-major; a weight W is [out][in] and y = W x. Strides are
 * in elements. Nothing here allocates except dsv4_threads_new.
 */
#ifndef DSV4_KERNELS_H
#define DSV4_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- thread pool ------------------------------------------------------------------------ */
typedef struct dsv4_threads dsv4_threads;

/* fn processes items [begin, end) on worker `tid` (< dsv4_threads_count); tid indexes
 * per-thread scratch owned by the caller. */
typedef void (*dsv4_range_fn)(void *ctx, size_t begin, size_t end, unsigned tid);

/* A pool of n threads (the caller's thread counts as one; n = 0 means one per core).
 * NULL with the reason in err when a thread cannot be started. */
dsv4_threads *dsv4_threads_new(unsigned n, char *err, size_t errlen);
void dsv4_threads_free(dsv4_threads *pool);
unsigned dsv4_threads_count(const dsv4_threads *pool);
/* Split [0, n) into contiguous ranges, one per thread, and wait for all of them. work is
 * the job's rough cost in multiply-adds: below DSV4_THREADS_MIN_WORK the caller runs it
 * alone, since waking the pool would cost more (the results are the same either way).
 * Not reentrant: fn must not call dsv4_threads_for on the same pool. */
#define DSV4_THREADS_MIN_WORK 262144
void dsv4_threads_for(dsv4_threads *pool, size_t n, size_t work, dsv4_range_fn fn, void *ctx);

/* ---- dense algebra ---------------------------------------------------------------------- */
/* Dot product in the kernels' fixed order (8 interleaved partial sums, combined as a
 * fixed tree). */
float dsv4_k_dot(const float *a, const float *b, size_t n);
/* Y[t][o] = sum_i W[o][i] * X[t][i] for t < n, o < out. Threads split the out rows. */
void dsv4_k_linear(dsv4_threads *pool, const float *w, size_t out, size_t in, const float *x,
                   size_t x_stride, size_t n, float *y, size_t y_stride);
/* x <- x / sqrt(mean(x^2) + eps) (* w when w is not NULL), in place. */
void dsv4_k_rmsnorm(float *x, size_t n, const float *w, float eps);
/* 1 / sqrt(mean(x^2) + eps) */
float dsv4_k_rms_scale(const float *x, size_t n, float eps);

/* ---- rotary embedding (spec §3.3) -------------------------------------------------------- */
typedef struct dsv4_rope_params {
    double theta;
    uint32_t dims; /* R: rotated trailing dims (even) */
    bool yarn;
    double factor, original_max_pos, beta_fast, beta_slow;
} dsv4_rope_params;

/* freq[0..R/2) in fp32 as Hugging Face computes them (YaRN ramp when p->yarn;
 * attention_factor is 1 for DeepSeek-V4, so cos/sin are never scaled). */
void dsv4_k_rope_freqs(const dsv4_rope_params *p, float *freq);
/* Rotate the interleaved pairs of x[0..R) (the caller passes the trailing slice of a
 * head) by pos * freq, or by its negation when inverse. */
void dsv4_k_rope(float *x, const float *freq, uint32_t dims, int64_t pos, bool inverse);

/* ---- mHC hyper-connections (spec §3.2) ---------------------------------------------------- */
/* From the mixing logits z[(2+N)N] (fn . flatten(X), already multiplied by the rms scale)
 * compute pre[N], post[N] and the Sinkhorn-normalised comb[N][N] (row-major). */
void dsv4_k_hc_mix(const float *z, const float *base, const float *scale, uint32_t n,
                   uint32_t iters, float eps_hc, float *pre, float *post, float *comb);
/* pre for the final head: pre_j = sigmoid(scale * z_j + base_j) + eps_hc. */
void dsv4_k_hc_head_pre(const float *z, const float *base, float scale, uint32_t n, float eps_hc,
                        float *pre);
/* u[h] = sum_j pre[j] * X[j][h]   (X: [n][hidden]) */
void dsv4_k_hc_collapse(const float *x, const float *pre, uint32_t n, size_t hidden, float *u);
/* X'[k] = post[k] * y + sum_j comb[j][k] * X[j]  (C transposed applied to the streams);
 * x is updated in place. */
void dsv4_k_hc_expand(float *x, const float *y, const float *post, const float *comb, uint32_t n,
                      size_t hidden);

/* ---- attention (spec §3.3, §3.7) ---------------------------------------------------------- */
typedef enum dsv4_k_dtype { DSV4_K_F32 = 0, DSV4_K_BF16 = 1, DSV4_K_FP8 = 2 } dsv4_k_dtype;

/* How one KV row (window or compressed, K = V) of `dims` values is stored.
 *   f32, bf16: dims values of that type.
 *   fp8 (spec §4.2, §5): the first nope = dims - rope values as e4m3 bytes, each block of
 *     DSV4_K_FP8_BLOCK with its own UE8M0 scale 2^e, e the least with 448 * 2^e >=
 *     max(amax, 1e-4) (= 2^ceil(log2(max(amax, 1e-4) / 448))), values rounded to nearest,
 *     ties to even; then the rope trailing values as bf16; then the nope / 64 scale bytes;
 *     zero padding to a multiple of 8 bytes. D 512, R 64: 448 + 128 + 7 + 1 = 584 bytes.
 *     nope must be a multiple of DSV4_K_FP8_BLOCK. */
#define DSV4_K_FP8_BLOCK 64
typedef struct dsv4_k_rowfmt {
    dsv4_k_dtype dtype;
    uint32_t dims; /* D */
    uint32_t rope; /* R: the trailing rotary dims (kept in bf16 by fp8 rows) */
} dsv4_k_rowfmt;

/* Bytes of one row; 0 when fmt cannot be stored (fp8 with a nope part that is not a
 * multiple of DSV4_K_FP8_BLOCK, or rope > dims). */
size_t dsv4_k_row_bytes(const dsv4_k_rowfmt *fmt);

/* One head: o[d] = sum_v e^{l_v - M} row_v / (e^{sink - M} + sum_v e^{l_v - M}) with
 * l_v = scale * q . row_v over n key rows (K = V) in format fmt. Each dot product has
 * dsv4_k_dot's order over the decoded row, and each o[d] sums over v in order, whatever
 * the format. scores is scratch of n floats. With n = 0, o is zero. */
void dsv4_k_attend(const float *q, const void *const *rows, size_t n, const dsv4_k_rowfmt *fmt,
                   float scale, float sink, float *scores, float *o);
/* Store an f32 row of fmt->dims values in fmt, and load it back. */
void dsv4_k_row_store(void *dst, const float *src, const dsv4_k_rowfmt *fmt);
void dsv4_k_row_load(float *dst, const void *src, const dsv4_k_rowfmt *fmt);
/* Round x to fmt and back in place (so a fresh row equals its stored copy). */
void dsv4_k_row_round(float *x, const dsv4_k_rowfmt *fmt);

/* ---- compressor pooling (spec §3.4-3.5) --------------------------------------------------- */
/* out[c] = sum_s softmax_s(logit[s][c]) * kv[s][c] over ns slots (per channel). */
void dsv4_k_pool(const float *const *kv, const float *const *logit, size_t ns, size_t d,
                 float *out);

/* ---- selection ------------------------------------------------------------------------ */
/* The k largest of s[0..n) (k <= n) into idx[0..k), best first; ties go to the lower
 * index, so the selection is deterministic. */
void dsv4_k_topk(const float *s, uint32_t n, uint32_t k, uint32_t *idx);
/* All of s[0..n) in dsv4_k_topk's order (its k = n) into idx[0..n), by radix sort: O(n)
 * where the heap is O(n log n). scratch holds 3 n words. */
void dsv4_k_rank(const float *s, uint32_t n, uint32_t *idx, uint32_t *scratch);

/* ---- MoE (spec §3.8) ---------------------------------------------------------------------- */
typedef enum dsv4_k_scoring { DSV4_K_SQRTSOFTPLUS, DSV4_K_SIGMOID, DSV4_K_SOFTMAX } dsv4_k_scoring;
typedef enum dsv4_k_act { DSV4_K_SILU, DSV4_K_GELU } dsv4_k_act;

/* Route one token: scores from logits[E]; selection by hash (hash_ids[k] when not NULL)
 * or the k largest of score + bias (bias may be NULL); weights w = score / (sum + 1e-20)
 * * routed_scale. ids and w get k entries in selection order. scratch holds 2E floats
 * and k uint32 after them. */
void dsv4_k_route(const float *logits, const float *bias, uint32_t n_experts, uint32_t k,
                  dsv4_k_scoring scoring, const int32_t *hash_ids, float routed_scale,
                  float *scratch, int32_t *ids, float *w);
/* h[i] = act(min(gate, limit)) * clamp(up, -limit, limit); limit <= 0 disables the
 * clamps. */
void dsv4_k_swiglu(const float *gate, const float *up, size_t n, float limit, dsv4_k_act act,
                   float *h);
/* y += a * x */
void dsv4_k_axpy(float *y, float a, const float *x, size_t n);

#endif
