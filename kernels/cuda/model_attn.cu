/* model_attn.cu: the attention kernels of the CUDA forward (model.h): q/kv norm and RoPE
 * with the KV row store, the compressors' carry and pooling (spec §3.4-3.5), the indexer's
 * query rotation and row selection around the indexk plugin's scores (spec §3.6), window
 * plus compressed attention with the sink (spec §3.7) and the window ring update.
 *
 * The KV discipline is forward.c's: compressed rows are appended before the layer's
 * attention, this step's own window rows are read from the fresh rows (kvs, already in the
 * KV dtype) and reach the ring only after attention, so chunking never changes a result. */
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/model_common.cuh"
#include "kernels/cuda/pdl.cuh"

#include <cub/block/block_radix_sort.cuh>

/* Address of compressed row w of sequence s in a paged buffer. */
__device__ static inline uint8_t *dsv4_paged_row(const dsv4_cuda_kvbuf &b, const dsv4_cuda_step &s,
                                                 uint32_t seq, uint32_t w)
{
    uint32_t page = s.pages[s.page_off[seq] + w / b.rows_per_block];
    return b.base + (size_t)page * b.block_bytes + (size_t)(w % b.rows_per_block) * b.row_bytes;
}

/* The heads a block of the q rotation or the attention's combine takes, a warp each: no
 * block barriers. */
#define WARP_HEADS (DSV4_CUDA_BLOCK / 32)
/* Values of a head a lane holds (dims lane + 32 i): head_dim up to 1024 (ATT_MAX_DIMS). */
#define LANE_DIMS (1024 / 32)

/* dsv4_rope_pair's rotation by cosine c and sine sn of dim dd, its value a, its pair's other
 * value b. */
__device__ static inline float dsv4_rope_dim(float a, float b, uint32_t dd, float c, float sn)
{
    return dd % 2 ? b * sn + a * c : a * c - b * sn;
}

/* dsv4_rope_pair's rotation (inverse: backwards) of dim dd, this lane's value a, its pair's
 * other value b (held by the neighbouring lane), dims from rot0 on rotating; both lanes of
 * a pair take the same angle. */
__device__ static inline float dsv4_rope_lane(float a, float b, uint32_t dd, uint32_t rot0,
                                              const float *freq, float pos, bool inverse)
{
    float c, sn;
    dsv4_rope_cs(freq, (dd - rot0) / 2, pos, inverse, &c, &sn);
    return dsv4_rope_dim(a, b, dd, c, sn);
}

/* Block (t, y < nq = ceil(heads / WARP_HEADS)): q heads WARP_HEADS y + warp, each normed
 * and rotated by one warp in registers (lane l holds dims l + 32 i; a rotated pair's
 * partner is the neighbouring lane); block (t, nq): the latent kv row, normed with
 * kv_norm, rotated and stored in fmt; block (t, nq + 1), where iq is set: the rotation of
 * every index head (a launch of its own before). Shared: head_dim. (A block a q head, with
 * its block barriers, took 65 blocks a token.) */
__global__ static void dsv4_qkv_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, float *q,
                                       const float *kv, size_t kv_stride, const float *kv_norm,
                                       const float *freq, uint32_t rope, dsv4_k_rowfmt fmt,
                                       size_t row_bytes, uint8_t *kvs, float *iq)
{
    dsv4_pdl_begin();
    extern __shared__ float sv[];
    __shared__ float red[32];
    uint32_t t = blockIdx.x, D = d.head_dim, nq = (d.heads + WARP_HEADS - 1) / WARP_HEADS;
    float pos = (float)s.pos[t];
    if (blockIdx.y > nq) {
        uint32_t DI = d.index_dim, R = d.rope_comp, half = R / 2;
        for (uint32_t i = threadIdx.x; i < d.index_heads * half; i += blockDim.x)
            dsv4_rope_pair(iq + ((size_t)t * d.index_heads + i / half) * DI + DI - R, freq,
                           i % half, pos, false);
        return;
    }
    if (blockIdx.y < nq) {
        uint32_t lane = threadIdx.x % 32, h = blockIdx.y * WARP_HEADS + threadIdx.x / 32;
        if (h >= d.heads)
            return;
        float *x = q + ((size_t)t * d.heads + h) * D, v[LANE_DIMS], ss = 0.0f;
#pragma unroll
        for (uint32_t i = 0; i < LANE_DIMS; i++)
            if (lane + 32 * i < D)
                v[i] = x[lane + 32 * i];
#pragma unroll
        for (uint32_t i = 0; i < LANE_DIMS; i++)
            if (lane + 32 * i < D)
                ss = fmaf(v[i], v[i], ss);
        for (int o = 16; o > 0; o >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float r = 1.0f / sqrtf(ss / (float)D + d.eps);
#pragma unroll
        for (uint32_t i = 0; i < LANE_DIMS; i++) {
            uint32_t dd = lane + 32 * i;
            if (32 * i >= D) /* the same in every lane: the shuffle below takes all 32 */
                break;
            float a = v[i] * r, b = __shfl_xor_sync(0xffffffffu, a, 1);
            if (dd < D)
                x[dd] = dd >= D - rope ? dsv4_rope_lane(a, b, dd, D - rope, freq, pos, false) : a;
        }
        return;
    }
    const float *x = kv + (size_t)t * kv_stride;
    float r = dsv4_block_rms_scale(x, D, d.eps, red);
    for (uint32_t i = threadIdx.x; i < D; i += blockDim.x)
        sv[i] = kv_norm[i] * (x[i] * r);
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < rope / 2; i += blockDim.x)
        dsv4_rope_pair(sv + D - rope, freq, i, pos, false);
    __syncthreads();
    dsv4_row_store_block(kvs + (size_t)t * row_bytes, sv, fmt, row_bytes);
}

int dsv4_cuda_qkv(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, float *q_dev,
                  const float *kv_dev, size_t kv_stride, const float *kv_norm_dev,
                  const float *freq_dev, uint32_t rope, dsv4_k_rowfmt fmt, uint8_t *kvs_dev,
                  float *iq_dev, void *stream)
{
    if (s->n_tok == 0)
        return 0;
    if (d->head_dim > 32 * LANE_DIMS || (d->head_dim - rope) % 2)
        return -EINVAL;
    dim3 grid(s->n_tok, (d->heads + WARP_HEADS - 1) / WARP_HEADS + (iq_dev ? 2 : 1));
    return dsv4_pdl_launch(dsv4_qkv_kernel, grid, DSV4_CUDA_BLOCK, d->head_dim * sizeof(float),
                           (cudaStream_t)stream, *d, *s, q_dev, kv_dev, kv_stride, kv_norm_dev,
                           freq_dev, rope, fmt, dsv4_k_row_bytes(&fmt), kvs_dev, iq_dev);
}

/* A compressor's rows of one sequence in a step, as the carry (the state slot's pending
 * window and the window before it) and the step's tokens hold them: a position at or past
 * `start` is a token of the step (its k, and its g plus the slot's ape), an earlier one a
 * pending row of the carry (written by an earlier step); the "a" half of window w0 - 1 (w0:
 * the window pending when the step began) is the carry's prev. */
struct dsv4_cmp_src {
    const dsv4_cuda_compressor *cp;
    float *pend_kv, *pend_lg, *prev_kv, *prev_lg;
    uint32_t start, first, width, w0;
};

__device__ static inline dsv4_cmp_src dsv4_cmp_src_of(const dsv4_cuda_compressor &cp,
                                                      const dsv4_cuda_step &s, uint32_t sq,
                                                      uint32_t start)
{
    uint32_t width = (cp.overlap ? 2 : 1) * cp.dim;
    float *pend_kv = (float *)(cp.carry.base + (size_t)s.slot[sq] * cp.carry.block_bytes);
    float *pend_lg = pend_kv + (size_t)cp.rate * width;
    float *prev_kv = pend_lg + (size_t)cp.rate * width;
    return {&cp,
            pend_kv,
            pend_lg,
            prev_kv,
            prev_kv + (size_t)cp.rate * cp.dim,
            start,
            s.first[sq] + (start - s.start[sq]),
            width,
            start / cp.rate};
}

/* Channel ch (of the row's width) of position p: its kv and its logit. */
__device__ static inline void dsv4_cmp_row(const dsv4_cmp_src &r, uint32_t p, uint32_t ch,
                                           float *kv, float *lg)
{
    const dsv4_cuda_compressor &cp = *r.cp;
    uint32_t j = p % cp.rate;
    if (p >= r.start) {
        size_t t = r.first + (p - r.start);
        *kv = cp.k[t * cp.kg_stride + ch];
        *lg = cp.g[t * cp.kg_stride + ch] + cp.ape[j * r.width + ch];
    } else {
        *kv = r.pend_kv[j * r.width + ch];
        *lg = r.pend_lg[j * r.width + ch];
    }
}

/* Channel c of window w's "a" half at slot j: the carry's prev for window w0 - 1, else the
 * rows. */
__device__ static inline void dsv4_cmp_prev(const dsv4_cmp_src &r, uint32_t w, uint32_t j,
                                            uint32_t c, float *kv, float *lg)
{
    if (w < r.w0) {
        *kv = r.prev_kv[j * r.cp->dim + c];
        *lg = r.prev_lg[j * r.cp->dim + c];
    } else {
        dsv4_cmp_row(r, w * r.cp->rate + j, c, kv, lg);
    }
}

/* Channel c of window w's pooled row: softmax over the slots' logits of their kv, the slots
 * the previous window's "a" half (none for the first window) then this window's "b" half
 * (or the whole row without overlap), each in slot order. */
__device__ static float dsv4_cmp_pool(const dsv4_cmp_src &r, uint32_t w, uint32_t c)
{
    const dsv4_cuda_compressor &cp = *r.cp;
    uint32_t rate = cp.rate, b_at = cp.overlap ? cp.dim : 0;
    bool with_prev = cp.overlap && w > 0;
    float m = -INFINITY, sum = 0, acc = 0, kv, lg;
    for (uint32_t j = 0; with_prev && j < rate; j++) {
        dsv4_cmp_prev(r, w - 1, j, c, &kv, &lg);
        m = lg > m ? lg : m;
    }
    for (uint32_t j = 0; j < rate; j++) {
        dsv4_cmp_row(r, w * rate + j, b_at + c, &kv, &lg);
        m = lg > m ? lg : m;
    }
    for (uint32_t j = 0; with_prev && j < rate; j++) {
        dsv4_cmp_prev(r, w - 1, j, c, &kv, &lg);
        float e = expf(lg - m);
        sum += e;
        acc += e * kv;
    }
    for (uint32_t j = 0; j < rate; j++) {
        dsv4_cmp_row(r, w * rate + j, b_at + c, &kv, &lg);
        float e = expf(lg - m);
        sum += e;
        acc += e * kv;
    }
    return acc / sum;
}

/* Window w of sequence sq pooled (dsv4_cmp_pool) into out (the block's shared row), then
 * normalised, rotated and stored: as a row of the paged rows, or as row ik_out of out_rows
 * for the token t that completed it. Every thread of the block calls it. */
__device__ static void dsv4_cmp_window(const dsv4_cmp_src &r, const dsv4_cuda_dims &d,
                                       const dsv4_cuda_step &s, uint32_t sq, uint32_t w,
                                       const float *freq, dsv4_k_rowfmt fmt, float *out, float *red)
{
    const dsv4_cuda_compressor &cp = *r.cp;
    uint32_t dim = cp.dim, R = d.rope_comp;
    for (uint32_t c = threadIdx.x; c < dim; c += blockDim.x)
        out[c] = dsv4_cmp_pool(r, w, c);
    __syncthreads();
    float rs = dsv4_block_rms_scale(out, dim, d.eps, red);
    for (uint32_t c = threadIdx.x; c < dim; c += blockDim.x)
        out[c] = cp.norm[c] * (out[c] * rs);
    __syncthreads();
    for (uint32_t j = threadIdx.x; j < R / 2; j += blockDim.x)
        dsv4_rope_pair(out + dim - R, freq, j, (float)w * (float)cp.rate, false);
    __syncthreads();
    if (cp.rows.base) {
        dsv4_row_store_block(dsv4_paged_row(cp.rows, s, sq, w), out, fmt, cp.rows.row_bytes);
    } else {
        size_t t = r.first + ((w + 1) * cp.rate - 1 - r.start);
        for (uint32_t c = threadIdx.x; c < dim; c += blockDim.x)
            cp.out_rows[(size_t)s.ik_out[t] * dim + c] = out[c];
    }
    __syncthreads();
}

/* prev after a step that ends before position `end`: the "a" half of the last window the
 * step completed, where it completed one (every thread of the block calls it, once the
 * step's windows have read the old prev). */
__device__ static void dsv4_cmp_carry_prev(const dsv4_cmp_src &r, uint32_t end)
{
    const dsv4_cuda_compressor &cp = *r.cp;
    uint32_t rate = cp.rate, dim = cp.dim, wend = end / rate;
    if (!cp.overlap || wend <= r.w0)
        return;
    for (uint32_t i = threadIdx.x; i < rate * dim; i += blockDim.x) {
        float kv, lg;
        dsv4_cmp_row(r, (wend - 1) * rate + i / dim, i % dim, &kv, &lg);
        r.prev_kv[i] = kv;
        r.prev_lg[i] = lg;
    }
}

/* The pending slots after a step that ends before position `end`: each the row of the
 * step's last position that falls on it (others keep theirs), as a token-by-token walk
 * leaves them: the step's last `rate` positions at most. After dsv4_cmp_carry_prev, which
 * may read the rows it replaces. */
__device__ static void dsv4_cmp_carry_pend(const dsv4_cmp_src &r, uint32_t end)
{
    uint32_t rate = r.cp->rate, from = end - r.start > rate ? end - rate : r.start;
    for (uint32_t i = threadIdx.x; i < (end - from) * r.width; i += blockDim.x) {
        uint32_t p = from + i / r.width, ch = i % r.width;
        float kv, lg;
        dsv4_cmp_row(r, p, ch, &kv, &lg);
        r.pend_kv[p % rate * r.width + ch] = kv;
        r.pend_lg[p % rate * r.width + ch] = lg;
    }
}

/* The compressors of one launch. */
struct dsv4_compress_args {
    dsv4_cuda_compressor c[DSV4_CUDA_COMPRESSORS];
};

/* A step of one token a sequence (decode): block (sequence, compressor y) stores the token's
 * row in the carry and, where it completes a window, pools and stores the window (all of
 * whose rows the carry then holds) and moves its "a" half to prev. Shared: the largest dim
 * floats (the pooled row). a is __grid_constant__, so that picking compressor y reads it in
 * place rather than from a copy in local memory. */
__global__ static void dsv4_compress_token_kernel(dsv4_cuda_dims d, dsv4_cuda_step s,
                                                  const __grid_constant__ dsv4_compress_args a,
                                                  const float *freq, dsv4_k_rowfmt fmt)
{
    dsv4_pdl_begin();
    extern __shared__ float out[];
    __shared__ float red[32];
    const dsv4_cuda_compressor &cp = a.c[blockIdx.y];
    uint32_t sq = blockIdx.x, p = s.start[sq];
    if (s.count[sq] == 0)
        return;
    dsv4_cmp_src step = dsv4_cmp_src_of(cp, s, sq, p);
    dsv4_cmp_carry_pend(step, p + 1);
    __syncthreads();
    if ((p + 1) % cp.rate != 0)
        return;
    /* every row of the window is pending now, the window before it prev's (read before the
     * window's own "a" half replaces it) */
    dsv4_cmp_window(dsv4_cmp_src_of(cp, s, sq, p + 1), d, s, sq, p / cp.rate, freq, fmt, out, red);
    dsv4_cmp_carry_prev(step, p + 1);
}

/* A longer step, the windows it completes in parallel: block (i, compressor y) pools the
 * step's windows i, i + gridDim.x, ... of all sequences (in sequence order, each
 * sequence's in window order), reading the carry as the step found it; the carry kernel
 * runs after it. The same sums as the token kernel's, so the same bits. A block a sequence
 * walking its tokens in turn took 6.3 ms a launch for one 2048-token prefill chunk on an
 * H200 (28% of a 4-layer flash-shape step); prefill of 8k-32k tokens 1.33-1.49x
 * (bench/results/2026-12-01-prefill-h200.md). */
__global__ static void dsv4_compress_windows_kernel(dsv4_cuda_dims d, dsv4_cuda_step s,
                                                    const __grid_constant__ dsv4_compress_args a,
                                                    const float *freq, dsv4_k_rowfmt fmt)
{
    dsv4_pdl_begin();
    extern __shared__ float out[];
    __shared__ float red[32];
    const dsv4_cuda_compressor &cp = a.c[blockIdx.y];
    uint32_t rate = cp.rate, sq = 0, before = 0; /* windows of the sequences before sq */
    for (uint32_t i = blockIdx.x;; i += gridDim.x) {
        uint32_t n = 0;
        for (; sq < s.n_seqs; before += n, sq++) {
            uint32_t start = s.start[sq];
            n = (start + s.count[sq]) / rate - start / rate;
            if (i < before + n)
                break;
        }
        if (sq == s.n_seqs)
            return;
        dsv4_cmp_src r = dsv4_cmp_src_of(cp, s, sq, s.start[sq]);
        dsv4_cmp_window(r, d, s, sq, r.w0 + (i - before), freq, fmt, out, red);
    }
}

/* After dsv4_compress_windows_kernel: block (sequence, compressor y) leaves the carry as a
 * token-by-token walk of the step would (dsv4_cmp_carry_prev, then _pend). */
__global__ static void dsv4_compress_carry_kernel(dsv4_cuda_step s,
                                                  const __grid_constant__ dsv4_compress_args a)
{
    dsv4_pdl_begin();
    uint32_t sq = blockIdx.x, end = s.start[sq] + s.count[sq];
    dsv4_cmp_src r = dsv4_cmp_src_of(a.c[blockIdx.y], s, sq, s.start[sq]);
    dsv4_cmp_carry_prev(r, end);
    __syncthreads();
    dsv4_cmp_carry_pend(r, end);
}

int dsv4_cuda_compress(const dsv4_cuda_dims *d, const dsv4_cuda_step *s,
                       const dsv4_cuda_compressor *cs, uint32_t n_cs, const float *freq_dev,
                       dsv4_k_rowfmt fmt, void *stream)
{
    if (n_cs == 0 || n_cs > DSV4_CUDA_COMPRESSORS)
        return -EINVAL;
    dsv4_compress_args a = {};
    uint32_t dim = 0, rate = UINT32_MAX;
    for (uint32_t i = 0; i < n_cs; i++) {
        if (cs[i].rate == 0 || (!cs[i].rows.base && !cs[i].out_rows))
            return -EINVAL;
        a.c[i] = cs[i];
        dim = cs[i].dim > dim ? cs[i].dim : dim;
        rate = cs[i].rate < rate ? cs[i].rate : rate;
    }
    if (s->n_seqs == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
    size_t smem = dim * sizeof(float);
    /* one token a sequence (every sequence has one): one launch */
    if (s->n_tok == s->n_seqs)
        return dsv4_pdl_launch(dsv4_compress_token_kernel, dim3(s->n_seqs, n_cs), DSV4_CUDA_BLOCK,
                               smem, st, *d, *s, a, freq_dev, fmt);
    /* a sequence of c tokens completes at most c / rate + 1 windows */
    uint32_t windows = s->n_tok / rate + s->n_seqs;
    int rc = dsv4_pdl_launch(dsv4_compress_windows_kernel, dim3(windows, n_cs), DSV4_CUDA_BLOCK,
                             smem, st, *d, *s, a, freq_dev, fmt);
    return rc != 0 ? rc
                   : dsv4_pdl_launch(dsv4_compress_carry_kernel, dim3(s->n_seqs, n_cs),
                                     DSV4_CUDA_BLOCK, 0, st, *s, a);
}

__global__ static void dsv4_index_rows_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, uint32_t rate,
                                              uint32_t *n_rows, uint32_t *page_start)
{
    dsv4_pdl_begin();
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= s.n_tok)
        return;
    uint32_t valid = (s.pos[t] + 1) / rate;
    n_rows[t] = valid > d.index_topk ? valid : 0;
    page_start[t] = s.page_off[s.tseq[t]];
}

int dsv4_cuda_index_rows(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, uint32_t rate,
                         uint32_t *n_rows_dev, uint32_t *page_start_dev, void *stream)
{
    if (s->n_tok == 0)
        return 0;
    return dsv4_pdl_launch(dsv4_index_rows_kernel, (s->n_tok + 255) / 256, 256, 0,
                           (cudaStream_t)stream, *d, *s, rate, n_rows_dev, page_start_dev);
}

/* One token per block, ITEMS chosen rows a thread (index_topk <= DSV4_CUDA_BLOCK x
 * ITEMS): its selection in ascending row order, sorted by cub's block radix sort over the
 * bits a visible row has (rows < valid: 10 bits at 4096 positions, 18 at 1M); the slots
 * past index_topk hold UINT32_MAX, whose low bits sort last (after an equal row: the sort
 * is stable) and are not written. (Each row ranked against every other, index_topk^2
 * compares a token, took 11.5 us a call at batch 16 under ncu on an H200.) */
template <uint32_t ITEMS>
__global__ static void dsv4_index_select_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, uint32_t rate,
                                                const uint32_t *topk, uint32_t *sel, uint32_t *nsel)
{
    dsv4_pdl_begin();
    using sort_t = cub::BlockRadixSort<uint32_t, DSV4_CUDA_BLOCK, ITEMS>;
    __shared__ typename sort_t::TempStorage tmp;
    uint32_t t = blockIdx.x, K = d.index_topk, valid = (s.pos[t] + 1) / rate;
    uint32_t *out = sel + (size_t)t * K;
    if (valid <= K) {
        for (uint32_t i = threadIdx.x; i < valid; i += blockDim.x)
            out[i] = i;
        if (threadIdx.x == 0)
            nsel[t] = valid;
        return;
    }
    uint32_t keys[ITEMS];
#pragma unroll
    for (uint32_t i = 0; i < ITEMS; i++) {
        uint32_t e = threadIdx.x * ITEMS + i;
        keys[i] = e < K ? topk[(size_t)t * K + e] : UINT32_MAX;
    }
    sort_t(tmp).SortBlockedToStriped(keys, 0, 32 - __clz(valid - 1));
#pragma unroll
    for (uint32_t i = 0; i < ITEMS; i++) {
        uint32_t e = i * DSV4_CUDA_BLOCK + threadIdx.x;
        if (e < K)
            out[e] = keys[i];
    }
    if (threadIdx.x == 0)
        nsel[t] = K;
}

int dsv4_cuda_index_select(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, uint32_t rate,
                           const uint32_t *topk_dev, uint32_t *sel_dev, uint32_t *nsel_dev,
                           void *stream)
{
    if (s->n_tok == 0)
        return 0;
    uint32_t K = d->index_topk;
    void (*kern)(dsv4_cuda_dims, dsv4_cuda_step, uint32_t, const uint32_t *, uint32_t *,
                 uint32_t *) = K <= DSV4_CUDA_BLOCK        ? dsv4_index_select_kernel<1>
                               : K <= 2 * DSV4_CUDA_BLOCK  ? dsv4_index_select_kernel<2>
                               : K <= 4 * DSV4_CUDA_BLOCK  ? dsv4_index_select_kernel<4>
                               : K <= 8 * DSV4_CUDA_BLOCK  ? dsv4_index_select_kernel<8>
                               : K <= 16 * DSV4_CUDA_BLOCK ? dsv4_index_select_kernel<16>
                                                           : NULL;
    if (!kern)
        return -EINVAL; /* index_topk past 4096 */
    return dsv4_pdl_launch(kern, s->n_tok, DSV4_CUDA_BLOCK, 0, (cudaStream_t)stream, *d, *s, rate,
                           topk_dev, sel_dev, nsel_dev);
}

/* Attention with the sink over each token's keys (forward.c's order: window rows oldest
 * first, then the compressed rows), FlashMLA's latent-MQA layout: every head reads the same
 * latent row (K = V), so a block of ATT_THREADS threads owns one (token, split of its keys,
 * group of ATT_HG heads), decodes each of its rows once into shared memory, ATT_TR rows at
 * a time, and scores every head of its group against them; an online softmax per head
 * carries (max, sum, accumulator) across the tiles, and dsv4_attend_combine_kernel merges
 * the splits of a token in split order; a token of one split has its output written by the
 * split kernel (the combine's arithmetic, the same bits). The splits depend only on the
 * token's own key count (dsv4_att_chunk) and every sum's order only on the thread layout,
 * so a token's output is the same bits whatever else the step holds: batch and chunk
 * invariant. A step that needs the combine runs in waves of at most ATT_WAVE tokens over
 * the caller's scratch (per token, split and head: max, sum and head_dim accumulator
 * floats). */
#define ATT_MAX_DIMS 1024  /* head_dim the attention kernels take */
#define ATT_HG 16          /* heads per block, each decoded row serving all of them */
#define ATT_TR 32          /* key rows per shared-memory tile */
#define ATT_THREADS 256    /* the layouts below assume 8 warps */
#define ATT_SPLIT_ROWS 128 /* keys per split, short of ATT_MAX_SPLITS splits */
#define ATT_MAX_SPLITS 16
/* Keys one split takes whole: a window of 128 and its 32 CSA rows (rate 4), the most a
 * token below position 128 sees, so that a decode step's position bound (rounded up to 128
 * by the forward) keeps its grid at one split and the combine is not launched. */
#define ATT_ONE_SPLIT 160
#define ATT_WAVE 64 /* tokens per launch: the scratch holds this many */

/* A token's keys: window rows [first, p] and n_comp compressed ones. */
struct dsv4_att_keys {
    uint32_t first, n_win, n;
};

__device__ static inline dsv4_att_keys dsv4_att_keys_of(const dsv4_cuda_dims &d,
                                                        const dsv4_cuda_step &s, uint32_t t,
                                                        bool comp, uint32_t rate_all,
                                                        const uint32_t *nsel)
{
    uint32_t p = s.pos[t], W = d.window;
    dsv4_att_keys k;
    k.first = p + 1 > W ? p + 1 - W : 0;
    k.n_win = p + 1 - k.first;
    k.n = k.n_win + (comp ? (rate_all ? (p + 1) / rate_all : nsel[t]) : 0);
    return k;
}

/* Splits for a token of n keys. */
__host__ __device__ static inline uint32_t dsv4_att_splits(uint64_t n)
{
    if (n <= ATT_ONE_SPLIT)
        return 1;
    uint64_t splits = (n + ATT_SPLIT_ROWS - 1) / ATT_SPLIT_ROWS;
    return splits > ATT_MAX_SPLITS ? ATT_MAX_SPLITS : (uint32_t)splits;
}

/* Keys per split for a token of n keys (a whole number of tiles); splits past the last
 * key are empty. A function of n alone. */
__device__ static inline uint32_t dsv4_att_chunk(uint32_t n)
{
    uint32_t splits = dsv4_att_splits(n);
    uint32_t chunk = (n + splits - 1) / splits;
    return (chunk + ATT_TR - 1) / ATT_TR * ATT_TR;
}

/* The stored row of key v of token t. */
__device__ static inline const uint8_t *
dsv4_att_row(const dsv4_cuda_dims &d, const dsv4_cuda_step &s, uint32_t t, const dsv4_att_keys &k,
             uint32_t v, const uint8_t *kvs, const dsv4_cuda_kvbuf &win,
             const dsv4_cuda_kvbuf &rows, uint32_t rate_all, const uint32_t *sel)
{
    uint32_t seq = s.tseq[t], p = s.pos[t], W = d.window;
    size_t rb = win.row_bytes;
    if (v < k.n_win) {
        uint32_t pp = k.first + v;
        if (pp >= s.start[seq])
            return kvs + (size_t)(t - (p - pp)) * rb;
        return win.base + (size_t)s.slot[seq] * win.block_bytes + (size_t)(pp % W) * rb;
    }
    uint32_t w = v - k.n_win;
    return dsv4_paged_row(rows, s, seq, rate_all ? w : sel[(size_t)t * d.index_topk + w]);
}

/* 2^k for |k| <= 64 (a normal float). */
__device__ static inline float dsv4_att_pow2(int k)
{
    return __uint_as_float((uint32_t)(127 + k) << 23);
}

/* Rows [0, nr) of a tile, decoded: put(r, d, v, n) takes values d .. d + n - 1 of row r
 * (n = 4: d is a multiple of 4), each as dsv4_row_value gives it, read 16 bytes of an f32
 * or bf16 row per load, 8 e4m3 values (one scale block) or 2 bf16 rope values of an fp8
 * row. Each thread issues ATT_BATCH loads before it decodes any, so that many are in
 * flight (one at a time, each tile waited out every load's latency). vec: the rows' pointers and
 * widths allow those loads (16-byte aligned, 8 for fp8); without it, value by value.
 * Consecutive threads take consecutive units of a row. */
#define ATT_BATCH 8
template <typename Put>
__device__ static inline void dsv4_att_tile_decode(const uint8_t *const *rowp, uint32_t nr,
                                                   dsv4_k_rowfmt f, bool vec, Put put)
{
    uint32_t D = f.dims, nope = D - f.rope, U8 = nope / 8, U;
    int kind; /* 0 f32 by 4, 1 bf16 by 8, 2 fp8 by 8 (rope by 2) */
    if (vec && f.dtype == DSV4_K_F32 && D % 4 == 0)
        kind = 0, U = D / 4;
    else if (vec && f.dtype == DSV4_K_BF16 && D % 8 == 0)
        kind = 1, U = D / 8;
    else if (vec && f.dtype == DSV4_K_FP8)
        kind = 2, U = U8 + f.rope / 2;
    else {
        for (uint32_t e = threadIdx.x; e < ATT_TR * D; e += ATT_THREADS) {
            uint32_t r = e / D, u = e % D;
            if (r < nr)
                put(r, u, make_float4(dsv4_row_value(rowp[r], f, u), 0.0f, 0.0f, 0.0f), 1);
        }
        return;
    }
    for (uint32_t e0 = threadIdx.x; e0 < ATT_TR * U; e0 += ATT_BATCH * ATT_THREADS) {
        uint4 raw[ATT_BATCH];
#pragma unroll
        for (uint32_t i = 0; i < ATT_BATCH; i++) {
            uint32_t e = e0 + i * ATT_THREADS;
            uint32_t r = e / U, u = e % U;
            if (e >= ATT_TR * U || r >= nr)
                continue;
            const uint8_t *row = rowp[r];
            if (kind != 2) {
                raw[i] = __ldg((const uint4 *)row + u);
            } else if (u >= U8) {
                raw[i].x = __ldg((const uint32_t *)(row + nope) + (u - U8));
            } else {
                uint2 w = __ldg((const uint2 *)row + u);
                raw[i].x = w.x;
                raw[i].y = w.y;
                raw[i].z = __ldg(row + nope + 2 * f.rope + u / (DSV4_K_FP8_BLOCK / 8));
            }
        }
#pragma unroll
        for (uint32_t i = 0; i < ATT_BATCH; i++) {
            uint32_t e = e0 + i * ATT_THREADS;
            uint32_t r = e / U, u = e % U;
            if (e >= ATT_TR * U || r >= nr)
                continue;
            uint4 w = raw[i];
            if (kind == 0) {
                put(r, 4 * u,
                    make_float4(__uint_as_float(w.x), __uint_as_float(w.y), __uint_as_float(w.z),
                                __uint_as_float(w.w)),
                    4);
            } else if (kind == 1) {
                put(r, 8 * u,
                    make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u),
                                __uint_as_float(w.y << 16), __uint_as_float(w.y & 0xffff0000u)),
                    4);
                put(r, 8 * u + 4,
                    make_float4(__uint_as_float(w.z << 16), __uint_as_float(w.z & 0xffff0000u),
                                __uint_as_float(w.w << 16), __uint_as_float(w.w & 0xffff0000u)),
                    4);
            } else if (u >= U8) {
                put(r, nope + 2 * (u - U8),
                    make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u),
                                0.0f, 0.0f),
                    2);
            } else {
                /* 2^(e - 127) in two normal factors: h * s1 is exact, so the one rounding is
                 * ldexpf's */
                int k = (int)w.z - 127;
                float s1 = dsv4_att_pow2(k >> 1), s2 = dsv4_att_pow2(k - (k >> 1));
                uint32_t pairs[4] = {w.x & 0xffffu, w.x >> 16, w.y & 0xffffu, w.y >> 16};
                float v[8];
#pragma unroll
                for (uint32_t j = 0; j < 4; j++) {
                    __half2 h(
                        __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)pairs[j], __NV_E4M3));
                    v[2 * j] = __low2float(h) * s1 * s2;
                    v[2 * j + 1] = __high2float(h) * s1 * s2;
                }
                put(r, 8 * u, make_float4(v[0], v[1], v[2], v[3]), 4);
                put(r, 8 * u + 4, make_float4(v[4], v[5], v[6], v[7]), 4);
            }
        }
    }
}

/* Scratch floats per (token, split, head): max, sum, two unused, then the head_dim
 * accumulator rounded up to 4 floats: every record and its accumulator start on 16 bytes,
 * so the combine reads them 16 bytes a load. */
#define ATT_REC_HEAD 4
__host__ __device__ static inline size_t dsv4_att_rec(uint32_t head_dim)
{
    return ((size_t)head_dim + 3) / 4 * 4 + ATT_REC_HEAD;
}

/* What both split kernels share: block (head group x, split y, token t0 + z), its keys
 * [v0, v1) (empty past the token's last split), and the running softmax state per head in
 * shared memory (max m, sum l, this tile's rescale f), the sink's in split 0. */
struct dsv4_att_block {
    uint32_t t, tl, split, h0, nh;
    dsv4_att_keys k;
    uint32_t v0, v1;
};

__device__ static inline dsv4_att_block dsv4_att_block_of(const dsv4_cuda_dims &d,
                                                          const dsv4_cuda_step &s, uint32_t t0,
                                                          bool comp, uint32_t rate_all,
                                                          const uint32_t *nsel)
{
    dsv4_att_block b;
    b.tl = blockIdx.z;
    b.t = t0 + b.tl;
    b.split = blockIdx.y;
    b.h0 = blockIdx.x * ATT_HG;
    b.nh = d.heads - b.h0 < ATT_HG ? d.heads - b.h0 : ATT_HG;
    b.k = dsv4_att_keys_of(d, s, b.t, comp, rate_all, nsel);
    uint32_t chunk = dsv4_att_chunk(b.k.n);
    b.v0 = b.split * chunk;
    b.v1 = b.v0 + chunk < b.k.n ? b.v0 + chunk : b.k.n;
    return b;
}

__device__ static inline void dsv4_att_state_init(const dsv4_att_block &b, const float *sinks,
                                                  float *hm, float *hl)
{
    if (threadIdx.x < ATT_HG) {
        hm[threadIdx.x] =
            b.split == 0 && threadIdx.x < b.nh ? sinks[b.h0 + threadIdx.x] : -INFINITY;
        hl[threadIdx.x] = b.split == 0 ? 1.0f : 0.0f;
    }
}

/* The row pointers of keys [vt, vt + n), n <= ATT_ROWP, into rowp: one per thread, so
 * the dependent loads behind a pointer (sequence, page, selection) are waited for once per
 * ATT_ROWP keys rather than once per tile. */
#define ATT_ROWP ATT_THREADS
__device__ static inline void dsv4_att_rows(const dsv4_cuda_dims &d, const dsv4_cuda_step &s,
                                            const dsv4_att_block &b, uint32_t vt, uint32_t n,
                                            const uint8_t *kvs, const dsv4_cuda_kvbuf &win,
                                            const dsv4_cuda_kvbuf &rows, uint32_t rate_all,
                                            const uint32_t *sel, const uint8_t **rowp)
{
    if (threadIdx.x < n)
        rowp[threadIdx.x] =
            dsv4_att_row(d, s, b.t, b.k, vt + threadIdx.x, kvs, win, rows, rate_all, sel);
}

/* The online softmax over one tile: sc holds the group's scores (ATT_HG rows of ATT_TR,
 * ss floats apart, -inf past the split) and gets their weights; one warp per head, one lane
 * per row. */
__device__ static inline void dsv4_att_softmax(float *sc, uint32_t ss, float *hm, float *hl,
                                               float *hf, uint32_t nh)
{
    uint32_t lane = threadIdx.x % 32;
    for (uint32_t h = threadIdx.x / 32; h < nh; h += ATT_THREADS / 32) {
        float sv = sc[h * ss + lane], mx = sv;
        for (int off = 16; off > 0; off >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        float m_old = hm[h], m_new = fmaxf(m_old, mx);
        float w = expf(sv - m_new), sum = w; /* 0 for a row past the split */
        for (int off = 16; off > 0; off >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, off);
        sc[h * ss + lane] = w;
        __syncwarp();
        if (lane == 0) {
            float f = expf(m_old - m_new); /* 0 from a split's -inf start */
            hf[h] = f;
            hl[h] = fmaf(hl[h], f, sum);
            hm[h] = m_new;
        }
    }
}

/* The block's record of head h0 + h: its max and sum (after the last tile). */
__device__ static inline float *dsv4_att_record(const dsv4_cuda_dims &d, const dsv4_att_block &b,
                                                float *work, uint32_t h)
{
    size_t rec = dsv4_att_rec(d.head_dim);
    return work + (((size_t)b.tl * ATT_MAX_SPLITS + b.split) * d.heads + b.h0 + h) * rec;
}

/* Where the normalised output goes: o, after the inverse rotation by freq of the trailing
 * rope dims. */
struct dsv4_att_out {
    const float *freq;
    uint32_t rope;
    float *o;
};

/* Token t's row joins its sequence's window ring, if it is among the sequence's last
 * window rows in the step: an earlier token of a long chunk would land on the same ring
 * row, and the later token must win. Done after the attention of the token's wave has read
 * the ring (a later wave's tokens never read a ring row this one replaces: it holds a
 * position a window before this token's). */
__device__ static void dsv4_att_ring_write(const dsv4_cuda_dims &d, const dsv4_cuda_step &s,
                                           uint32_t t, const uint8_t *kvs,
                                           const dsv4_cuda_kvbuf &win)
{
    uint32_t seq = s.tseq[t], p = s.pos[t], W = d.window;
    if (p + W < s.start[seq] + s.count[seq])
        return;
    size_t rb = win.row_bytes;
    uint8_t *dst = win.base + (size_t)s.slot[seq] * win.block_bytes + (size_t)(p % W) * rb;
    for (size_t i = threadIdx.x; i < rb; i += blockDim.x)
        dst[i] = kvs[(size_t)t * rb + i];
}

/* The block's end, every thread of it: its heads' accumulators staged in ob (ATT_HG rows
 * os floats apart, shared, complete; NULL: a block of more than one split whose caller
 * wrote the records' values); cs: shared room for out.rope floats. Where
 * the block holds all of its token's keys (one split), the output: each head normalised
 * with the combine's arithmetic for one split (weight expf(m - m) = 1, the same bits), the
 * rope dims rotated back with the combine's rotation (their cosines and sines computed once
 * for the block), pairs of dims a thread, consecutive threads on consecutive pairs; else
 * the heads' records for the combine. Where ring is set (every sequence has one token in
 * the step: no other token reads the ring row this one replaces, so no combine needs to
 * wait for the step's reads), block (0, 0) of the token writes its ring row. (A call a
 * pair of dims from the mma fragments, each loading freq and rotating, added 9.5 us to
 * the kernel's 21 at batch 1 on an H200.) */
__device__ static void dsv4_att_end(const dsv4_cuda_dims &d, const dsv4_cuda_step &s,
                                    const dsv4_att_block &b, const dsv4_att_out &out, float *work,
                                    const float *hm, const float *hl, const float *ob, uint32_t os,
                                    float *cs, bool ring, const uint8_t *kvs,
                                    const dsv4_cuda_kvbuf &win)
{
    uint32_t D = d.head_dim, tid = threadIdx.x;
    if (b.v0 != 0 || b.v1 != b.k.n) {
        for (uint32_t h = 0; ob && h < b.nh; h++) {
            float *rec = dsv4_att_record(d, b, work, h) + ATT_REC_HEAD;
            for (uint32_t dd = tid; dd < D; dd += ATT_THREADS)
                rec[dd] = ob[h * os + dd];
        }
        if (tid < b.nh) {
            float *rec = dsv4_att_record(d, b, work, tid);
            rec[0] = hm[tid];
            rec[1] = hl[tid];
        }
    } else {
        uint32_t P = (D + 1) / 2, rot0 = D - out.rope;
        float pos = (float)s.pos[b.t];
        for (uint32_t i = tid; i < out.rope / 2; i += ATT_THREADS)
            dsv4_rope_cs(out.freq, i, pos, true, &cs[2 * i], &cs[2 * i + 1]);
        __syncthreads();
        for (uint32_t h = 0; h < b.nh; h++) {
            float w = expf(hm[h] - hm[h]), inv_l = 1.0f / fmaf(hl[h], w, 0.0f);
            float *oh = out.o + ((size_t)b.t * d.heads + b.h0 + h) * D;
            for (uint32_t dd = 2 * tid; dd < 2 * P; dd += 2 * ATT_THREADS) {
                float a0 = fmaf(ob[h * os + dd], w, 0.0f) * inv_l;
                float a1 = fmaf(ob[h * os + dd + 1], w, 0.0f) * inv_l;
                if (dd >= rot0) {
                    float c = cs[dd - rot0], sn = cs[dd - rot0 + 1];
                    float r0 = dsv4_rope_dim(a0, a1, dd, c, sn);
                    a1 = dsv4_rope_dim(a1, a0, dd + 1, c, sn);
                    a0 = r0;
                }
                oh[dd] = a0;
                if (dd + 1 < D)
                    oh[dd + 1] = a1;
            }
        }
    }
    if (ring && blockIdx.x == 0 && b.split == 0)
        dsv4_att_ring_write(d, s, b.t, kvs, win);
}

/* The rows past a tile's last (nr of ATT_TR, row_bytes apart, a multiple of 16) zeroed,
 * 16 bytes a store: their weights are 0, and 0 x 0 adds nothing. */
__device__ static inline void dsv4_att_zero_tail(void *tile, uint32_t nr, uint32_t row_bytes)
{
    uint4 *p = (uint4 *)((uint8_t *)tile + (size_t)nr * row_bytes);
    for (uint32_t e = threadIdx.x; e < (ATT_TR - nr) * row_bytes / 16; e += ATT_THREADS)
        p[e] = make_uint4(0, 0, 0, 0);
}

/* f32 rows: FMA on rows decoded to f32. Shared, Dp = head_dim rounded up to 32: the
 * group's q (ATT_HG x Dp), the tile's rows (ATT_TR x Dp), scores then weights (ATT_HG x
 * ATT_TR), and per head m, l, f. Scores: thread (warp, lane) takes heads 4 (warp / 2) + i
 * and rows 4 (lane / 8 + 4 (warp % 2)) + r, i, r < 4, over the dims 4 (lane % 8) + 32 j +
 * 0..3, then a butterfly over the eight lanes sharing them. Weighted sum: thread x takes
 * heads 4 (x / 64) + i and the dims 4 (x % 64 + 64 c) + 0..3, c < P4. */
template <uint32_t P4>
__global__ static void __launch_bounds__(ATT_THREADS, 2)
    dsv4_attend_f32_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, uint32_t t0, const float *q,
                           const uint8_t *kvs, dsv4_cuda_kvbuf win, dsv4_cuda_kvbuf rows,
                           uint32_t rate_all, const uint32_t *sel, const uint32_t *nsel,
                           const float *sinks, dsv4_k_rowfmt fmt, bool vec, dsv4_att_out out,
                           bool ring, float *work)
{
    dsv4_pdl_begin();
    extern __shared__ float4 smem4[];
    __shared__ const uint8_t *rowp[ATT_ROWP];
    dsv4_att_block b = dsv4_att_block_of(d, s, t0, rows.base != NULL, rate_all, nsel);
    if (b.v0 >= b.k.n)
        return;
    uint32_t D = d.head_dim, Dp = (D + 31) & ~31u, nh = b.nh;
    uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    float *qs = (float *)smem4, *ks = qs + ATT_HG * Dp, *sc = ks + ATT_TR * Dp;
    float *hm = sc + ATT_HG * ATT_TR, *hl = hm + ATT_HG, *hf = hl + ATT_HG;
    for (uint32_t e = tid; e < ATT_HG * Dp; e += ATT_THREADS) {
        uint32_t h = e / Dp, dd = e - h * Dp;
        qs[e] = h < nh && dd < D ? q[((size_t)b.t * d.heads + b.h0 + h) * D + dd] : 0.0f;
    }
    for (uint32_t e = tid; e < ATT_TR * Dp; e += ATT_THREADS)
        ks[e] = 0.0f; /* padding dims and rows past the split stay 0 */
    dsv4_att_state_init(b, sinks, hm, hl);
    float scale = 1.0f / sqrtf((float)D);
    uint32_t ds = lane % 8, rq = lane / 8 + 4 * (warp % 2), hq = warp / 2;
    uint32_t ph = tid / 64, dl = tid % 64;
    float4 acc[4][P4];
    for (uint32_t i = 0; i < 4; i++)
        for (uint32_t c = 0; c < P4; c++)
            acc[i][c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    for (uint32_t vt = b.v0; vt < b.v1; vt += ATT_TR) {
        uint32_t nr = b.v1 - vt < ATT_TR ? b.v1 - vt : ATT_TR;
        __syncthreads(); /* the previous tile's rows and weights are consumed */
        if ((vt - b.v0) % ATT_ROWP == 0) {
            uint32_t n = b.v1 - vt < ATT_ROWP ? b.v1 - vt : ATT_ROWP;
            dsv4_att_rows(d, s, b, vt, n, kvs, win, rows, rate_all, sel, rowp);
        }
        const uint8_t *const *tp = rowp + (vt - b.v0) % ATT_ROWP;
        if (nr < ATT_TR)
            dsv4_att_zero_tail(ks, nr, Dp * sizeof(float));
        __syncthreads();
        dsv4_att_tile_decode(tp, nr, fmt, vec, [&](uint32_t r, uint32_t dd, float4 v, uint32_t n) {
            float *o = ks + r * Dp + dd;
            if (n == 4) {
                *(float4 *)o = v;
                return;
            }
            o[0] = v.x;
            if (n > 1)
                o[1] = v.y;
        });
        __syncthreads();

        float a[4][4] = {};
        for (uint32_t j = 4 * ds; j < Dp; j += 32) {
            float4 qv[4], kv[4];
#pragma unroll
            for (uint32_t i = 0; i < 4; i++) {
                qv[i] = *(const float4 *)(qs + (4 * hq + i) * Dp + j);
                kv[i] = *(const float4 *)(ks + (4 * rq + i) * Dp + j);
            }
#pragma unroll
            for (uint32_t i = 0; i < 4; i++)
#pragma unroll
                for (uint32_t r = 0; r < 4; r++) {
                    a[i][r] = fmaf(qv[i].x, kv[r].x, a[i][r]);
                    a[i][r] = fmaf(qv[i].y, kv[r].y, a[i][r]);
                    a[i][r] = fmaf(qv[i].z, kv[r].z, a[i][r]);
                    a[i][r] = fmaf(qv[i].w, kv[r].w, a[i][r]);
                }
        }
        for (uint32_t i = 0; i < 4; i++)
            for (uint32_t r = 0; r < 4; r++)
                for (int off = 4; off > 0; off >>= 1)
                    a[i][r] += __shfl_xor_sync(0xffffffffu, a[i][r], off);
        if (ds == 0)
            for (uint32_t i = 0; i < 4; i++)
                for (uint32_t r = 0; r < 4; r++)
                    sc[(4 * hq + i) * ATT_TR + 4 * rq + r] =
                        4 * rq + r < nr ? a[i][r] * scale : -INFINITY;
        __syncthreads();
        dsv4_att_softmax(sc, ATT_TR, hm, hl, hf, nh);
        __syncthreads();

        float w[4];
        for (uint32_t i = 0; i < 4; i++) {
            float f = 4 * ph + i < nh ? hf[4 * ph + i] : 0.0f;
            for (uint32_t c = 0; c < P4; c++) {
                acc[i][c].x *= f;
                acc[i][c].y *= f;
                acc[i][c].z *= f;
                acc[i][c].w *= f;
            }
        }
        for (uint32_t r = 0; r < nr; r++) {
            for (uint32_t i = 0; i < 4; i++)
                w[i] = 4 * ph + i < nh ? sc[(4 * ph + i) * ATT_TR + r] : 0.0f;
#pragma unroll
            for (uint32_t c = 0; c < P4; c++) {
                uint32_t dd = 4 * (dl + 64 * c);
                if (dd >= Dp)
                    break;
                float4 v = *(const float4 *)(ks + r * Dp + dd);
                for (uint32_t i = 0; i < 4; i++) {
                    acc[i][c].x = fmaf(w[i], v.x, acc[i][c].x);
                    acc[i][c].y = fmaf(w[i], v.y, acc[i][c].y);
                    acc[i][c].z = fmaf(w[i], v.z, acc[i][c].z);
                    acc[i][c].w = fmaf(w[i], v.w, acc[i][c].w);
                }
            }
        }
    }

    /* a split's records straight from the registers (consecutive threads hold consecutive
     * dims: staged, they cost up to 5% at long contexts); a token's output from the
     * accumulators staged over the tile (the last one consumed), q's room for the rope's
     * cosines and sines */
    bool whole = b.v0 == 0 && b.v1 == b.k.n;
    uint32_t os = Dp + 8; /* 16 rows of it fit in the tile's 32 of Dp */
    if (!whole) {
#pragma unroll
        for (uint32_t i = 0; i < 4; i++)
#pragma unroll
            for (uint32_t c = 0; c < P4; c++) {
                uint32_t dd = 4 * (dl + 64 * c);
                float *rec = dsv4_att_record(d, b, work, 4 * ph + i) + ATT_REC_HEAD;
                float vals[4] = {acc[i][c].x, acc[i][c].y, acc[i][c].z, acc[i][c].w};
#pragma unroll
                for (uint32_t e = 0; e < 4; e++)
                    if (4 * ph + i < nh && dd + e < D)
                        rec[dd + e] = vals[e];
            }
    } else {
        __syncthreads();
#pragma unroll
        for (uint32_t i = 0; i < 4; i++)
#pragma unroll
            for (uint32_t c = 0; c < P4; c++) {
                uint32_t dd = 4 * (dl + 64 * c);
                if (dd < Dp)
                    *(float4 *)(ks + (4 * ph + i) * os + dd) = acc[i][c];
            }
        __syncthreads();
    }
    dsv4_att_end(d, s, b, out, work, hm, hl, whole ? ks : NULL, os, qs, ring, kvs, win);
}

/* x as a bf16 pair: hi = x rounded, lo = the rest rounded, so hi + lo holds 16 of x's
 * significant bits; the halves of two values packed as one mma operand word each (the
 * first value in the low half). */
__device__ static inline void dsv4_att_split2(float x0, float x1, uint32_t *hi, uint32_t *lo)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    __nv_bfloat162 l = __floats2bfloat162_rn(x0 - __low2float(h), x1 - __high2float(h));
    *hi = *(const uint32_t *)&h;
    *lo = *(const uint32_t *)&l;
}

/* c += a b, one m16n8k16 tensor-core product, bf16 inputs, f32 accumulate. */
__device__ static inline void dsv4_att_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#define ATT_KPAD 8 /* bf16 padding of a shared row: conflict-free fragment loads */
/* Whether the mma kernel copies rows by cp.async: bf16 rows, as stored, 16 bytes a copy. */
__host__ __device__ static inline bool dsv4_att_mma_async(dsv4_k_rowfmt f, uint32_t D, bool vec)
{
    return vec && f.dtype == DSV4_K_BF16 && D % 8 == 0;
}

/* Tile buffers of the mma kernel, Dp = head_dim rounded up to 128: two (the next tile's
 * rows arrive while this one's are used) where rows are copied by cp.async and two blocks
 * an SM still fit (Dp up to 512); else one. (Rows decoded in registers gain nothing from a
 * second buffer, and its shared memory cost them L1: fp8 HCA rows at 1M, batch 64, 1.18x
 * the time on an H200.) */
__host__ __device__ static inline uint32_t dsv4_att_mma_bufs(dsv4_k_rowfmt f, uint32_t D,
                                                             uint32_t Dp, bool vec)
{
    return dsv4_att_mma_async(f, D, vec) && Dp <= 512 ? 2 : 1;
}

/* Row stride (floats) of the mma kernel's partial scores and weights: the fragments' pairs
 * of a half-warp, eight rows apart, land on distinct banks (32 floats a row put them on one,
 * 8-way conflicts) */
#define ATT_SS (ATT_TR + 8)

/* bf16 and fp8 rows: their values are exact in bf16, so tensor cores multiply them
 * against q and the weights each split in two bf16 halves (hi + lo, 16 significant bits;
 * two products, f32 accumulation), as close to f32 FMA as the tolerances need. Dp =
 * head_dim rounded up to 128. Shared: dsv4_att_mma_bufs tiles' rows (ATT_TR x Dp +
 * ATT_KPAD bf16 each: the score product's B operand, and the weighted sum's through a
 * transposing load; with two, tile i + 1 is fetched before tile i is used: bf16 rows by
 * cp.async, so that their loads run beside tile i's products, where each tile waited out
 * its loads' latency with nothing else to do), each
 * warp's partial scores (8 x ATT_HG rows of ATT_SS), scores then weights (ATT_HG rows of
 * ATT_SS), per head m, l, f.
 * mma fragments (g = lane / 4, c = lane % 4): A rows g, g + 8, columns 2c, 2c + 1 (+8); B
 * column g, rows 2c, 2c + 1 (+8); C rows g, g + 8, columns 2c, 2c + 1. Scores: warp w
 * takes the dims [16 KS w, 16 KS (w + 1)) of every head and row (q's fragments stay in
 * registers), the eight partial sums added in warp order. Weighted sum: warp w takes the
 * dims [16 KS w, ...) of every head, 2 KS n-tiles of 8. */
template <uint32_t KS>
__global__ static void __launch_bounds__(ATT_THREADS, 2)
    dsv4_attend_mma_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, uint32_t t0, const float *q,
                           const uint8_t *kvs, dsv4_cuda_kvbuf win, dsv4_cuda_kvbuf rows,
                           uint32_t rate_all, const uint32_t *sel, const uint32_t *nsel,
                           const float *sinks, dsv4_k_rowfmt fmt, bool vec, dsv4_att_out out,
                           bool ring, float *work)
{
    dsv4_pdl_begin();
    extern __shared__ float4 smem4[];
    __shared__ const uint8_t *rowp[ATT_ROWP];
    const uint32_t NT = 2 * KS;
    uint32_t D = d.head_dim, Dp = 128 * KS, DPP = Dp + ATT_KPAD;
    uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, c = lane % 4;
    /* q's values for this warp's fragments, loaded first: the block's key range waits on
     * the token's position, q on nothing */
    float qx[KS][4][2];
    {
        uint32_t h0 = blockIdx.x * ATT_HG, nq = min(d.heads - h0, (uint32_t)ATT_HG);
        const float *qb = q + ((size_t)(t0 + blockIdx.z) * d.heads + h0) * D;
#pragma unroll
        for (uint32_t j = 0; j < KS; j++) {
            uint32_t kb = 16 * (KS * warp + j);
#pragma unroll
            for (uint32_t i = 0; i < 4; i++) {
                uint32_t h = g + 8 * (i % 2), dd = kb + 2 * c + 8 * (i / 2);
                const float *qp = qb + (size_t)h * D + dd;
                if (h < nq && dd + 1 < D && D % 2 == 0) { /* one 8-byte load */
                    float2 v = *(const float2 *)qp;
                    qx[j][i][0] = v.x;
                    qx[j][i][1] = v.y;
                } else {
                    qx[j][i][0] = h < nq && dd < D ? qp[0] : 0.0f;
                    qx[j][i][1] = h < nq && dd + 1 < D ? qp[1] : 0.0f;
                }
            }
        }
    }
    dsv4_att_block b = dsv4_att_block_of(d, s, t0, rows.base != NULL, rate_all, nsel);
    if (b.v0 >= b.k.n)
        return;
    uint32_t nh = b.nh;
    /* the first keys' row pointers: their dependent loads run beside q's */
    dsv4_att_rows(d, s, b, b.v0, b.v1 - b.v0 < ATT_ROWP ? b.v1 - b.v0 : ATT_ROWP, kvs, win, rows,
                  rate_all, sel, rowp);
    const uint32_t NB = dsv4_att_mma_bufs(fmt, D, Dp, vec);
    __nv_bfloat16 *kbuf = (__nv_bfloat16 *)smem4;
    float *part = (float *)(kbuf + NB * ATT_TR * DPP), *sc = part + 8 * ATT_HG * ATT_SS;
    float *hm = sc + ATT_HG * ATT_SS, *hl = hm + ATT_HG, *hf = hl + ATT_HG;
    /* the dims past D stay 0 (rows past the split are zeroed tile by tile; the ATT_KPAD
     * dims past Dp are never read) */
    for (uint32_t e = tid; e < NB * ATT_TR * (Dp - D); e += ATT_THREADS)
        kbuf[e / (Dp - D) * DPP + D + e % (Dp - D)] = __float2bfloat16_rn(0.0f);
    dsv4_att_state_init(b, sinks, hm, hl);
    /* keys [vf, vf + ATT_TR) of the split into tile buffer kb, one cp.async group a thread:
     * bf16 rows copied as they are stored (in flight until waited for), other formats
     * decoded here; the row pointers of the next ATT_ROWP keys where vf starts them (every
     * thread is past the previous fetch, which read them: the caller's barrier) */
    bool async = dsv4_att_mma_async(fmt, D, vec);
    auto fetch = [&](uint32_t vf, __nv_bfloat16 *kb) {
        uint32_t nr = b.v1 - vf < ATT_TR ? b.v1 - vf : ATT_TR;
        if (vf != b.v0 && (vf - b.v0) % ATT_ROWP == 0) {
            uint32_t n = b.v1 - vf < ATT_ROWP ? b.v1 - vf : ATT_ROWP;
            dsv4_att_rows(d, s, b, vf, n, kvs, win, rows, rate_all, sel, rowp);
            __syncthreads();
        }
        const uint8_t *const *tp = rowp + (vf - b.v0) % ATT_ROWP;
        if (nr < ATT_TR)
            dsv4_att_zero_tail(kb, nr, DPP * 2);
        if (async) {
            /* ATT_THREADS / ATT_TR threads a row, consecutive ones on consecutive 16 bytes
             * (no division of an index by the row's width a copy) */
            const uint32_t TPR = ATT_THREADS / ATT_TR;
            uint32_t r = tid / TPR;
            if (r < nr)
                for (uint32_t u = tid % TPR; u < D / 8; u += TPR)
                    dsv4_cp_async16(kb + r * DPP + 8 * u, tp[r] + 16 * u);
        } else {
            /* bf16 holds every value of these rows exactly */
            dsv4_att_tile_decode(
                tp, nr, fmt, vec, [&](uint32_t r, uint32_t dd, float4 v, uint32_t n) {
                    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
                    __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
                    __nv_bfloat16 *o = kb + r * DPP + dd;
                    if (n == 4) {
                        *(uint2 *)o = make_uint2(*(const uint32_t *)&lo, *(const uint32_t *)&hi);
                    } else {
                        o[0] = lo.x;
                        if (n > 1)
                            o[1] = lo.y;
                    }
                });
        }
        dsv4_cp_async_commit();
    };

    /* q's A fragments (hi, lo) for this warp's KS k-steps */
    uint32_t qh[KS][4], ql[KS][4];
#pragma unroll
    for (uint32_t j = 0; j < KS; j++)
#pragma unroll
        for (uint32_t i = 0; i < 4; i++)
            dsv4_att_split2(qx[j][i][0], qx[j][i][1], &qh[j][i], &ql[j][i]);
    float scale = 1.0f / sqrtf((float)D);
    float o[NT][4];
    for (uint32_t n = 0; n < NT; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    /* three barriers a tile: this tile's rows are in (and the previous tile is consumed,
     * so the next one may land in its buffer), the partial scores, the weights */
    for (uint32_t vt = b.v0, it = 0; vt < b.v1; vt += ATT_TR, it++) {
        uint32_t nr = b.v1 - vt < ATT_TR ? b.v1 - vt : ATT_TR;
        const __nv_bfloat16 *kr = kbuf + it % NB * ATT_TR * DPP;
        bool first = vt == b.v0, ahead = NB == 2 && vt + ATT_TR < b.v1;
        if (NB == 1 || first) {
            /* the row pointers are in; one buffer: the previous tile is consumed */
            __syncthreads();
            fetch(vt, kbuf);
            if (ahead) /* the first two tiles' loads in flight together */
                fetch(vt + ATT_TR, kbuf + ATT_TR * DPP);
        }
        /* this thread's copies of this tile are done (the next one's may still fly) */
        if (first && ahead)
            dsv4_cp_async_wait<1>();
        else
            dsv4_cp_async_wait<0>();
        __syncthreads();
        if (ahead && !first)
            fetch(vt + ATT_TR, kbuf + (it + 1) % NB * ATT_TR * DPP);

        float sp[4][4] = {};
#pragma unroll
        for (uint32_t j = 0; j < KS; j++) {
            uint32_t kb = 16 * (KS * warp + j);
#pragma unroll
            for (uint32_t n = 0; n < 4; n++) {
                const __nv_bfloat16 *kp = kr + (8 * n + g) * DPP + kb + 2 * c;
                uint32_t b0 = *(const uint32_t *)kp, b1 = *(const uint32_t *)(kp + 8);
                dsv4_att_mma(sp[n], qh[j], b0, b1);
                dsv4_att_mma(sp[n], ql[j], b0, b1);
            }
        }
        float *pw = part + warp * ATT_HG * ATT_SS;
        for (uint32_t n = 0; n < 4; n++) {
            *(float2 *)(pw + g * ATT_SS + 8 * n + 2 * c) = make_float2(sp[n][0], sp[n][1]);
            *(float2 *)(pw + (g + 8) * ATT_SS + 8 * n + 2 * c) = make_float2(sp[n][2], sp[n][3]);
        }
        __syncthreads();
        /* thread (warp w, lane l) sums the scores of heads w and w + 8 at row l, the ones
         * its softmax reads: no barrier between the two */
        for (uint32_t e = tid; e < ATT_HG * ATT_TR; e += ATT_THREADS) {
            uint32_t i = e / ATT_TR * ATT_SS + e % ATT_TR;
            float v = 0.0f;
            for (uint32_t w = 0; w < 8; w++)
                v += part[w * ATT_HG * ATT_SS + i];
            sc[i] = e % ATT_TR < nr ? v * scale : -INFINITY;
        }
        dsv4_att_softmax(sc, ATT_SS, hm, hl, hf, nh);
        __syncthreads();

        float f0 = g < nh ? hf[g] : 0.0f, f1 = g + 8 < nh ? hf[g + 8] : 0.0f;
        for (uint32_t n = 0; n < NT; n++) {
            o[n][0] *= f0;
            o[n][1] *= f0;
            o[n][2] *= f1;
            o[n][3] *= f1;
        }
        /* the weights' A fragments (heads past nh weigh 0) */
        uint32_t ph[2][4], pl[2][4];
#pragma unroll
        for (uint32_t kk = 0; kk < 2; kk++)
#pragma unroll
            for (uint32_t i = 0; i < 4; i++) {
                uint32_t h = g + 8 * (i % 2), r = 16 * kk + 2 * c + 8 * (i / 2);
                float2 x =
                    h < nh ? *(const float2 *)(sc + h * ATT_SS + r) : make_float2(0.0f, 0.0f);
                dsv4_att_split2(x.x, x.y, &ph[kk][i], &pl[kk][i]);
            }
#pragma unroll
        for (uint32_t n = 0; n < NT; n++) {
            uint32_t nb = 8 * (NT * warp + n);
            /* B fragments of both k-steps: lane l names row l of the tile at dims nb..+7,
             * the transposing load hands thread (g, c) rows 2c, 2c + 1 of column g of
             * each 8-row block */
            uint32_t vb[4];
            uint32_t at = (uint32_t)__cvta_generic_to_shared(kr + lane * DPP + nb);
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(vb[0]), "=r"(vb[1]), "=r"(vb[2]), "=r"(vb[3])
                         : "r"(at)
                         : "memory");
#pragma unroll
            for (uint32_t kk = 0; kk < 2; kk++) {
                dsv4_att_mma(o[n], ph[kk], vb[2 * kk], vb[2 * kk + 1]);
                dsv4_att_mma(o[n], pl[kk], vb[2 * kk], vb[2 * kk + 1]);
            }
        }
    }

    /* the accumulators staged over the tile (the last one consumed), the partial scores'
     * room for the rope's cosines and sines */
    __syncthreads();
    float *ob = (float *)smem4;
    /* 16 rows of DPP floats: the tile's 32 rows of DPP bf16; the padding spreads the
     * fragments' stores over the banks */
#pragma unroll
    for (uint32_t n = 0; n < NT; n++) {
        uint32_t dd = 8 * (NT * warp + n) + 2 * c;
        *(float2 *)(ob + g * DPP + dd) = make_float2(o[n][0], o[n][1]);
        *(float2 *)(ob + (g + 8) * DPP + dd) = make_float2(o[n][2], o[n][3]);
    }
    __syncthreads();
    dsv4_att_end(d, s, b, out, work, hm, hl, ob, DPP, part, ring, kvs, win);
}

/* Head h of token t (t0 + tl) from its split records, by one warp, lane l holding dims
 * 4 l + 128 i .. + 3 (16-byte loads; a rotated pair's two dims in one lane): the token's
 * splits merged in split order (split 0, with the sink, has a finite max; empty splits
 * were never written and are not read; every lane computes the same weights, split i's
 * expf(m_i - M) wherever it is needed), then the inverse rotation. The loops run over the
 * token's splits only: unrolled over every possible split and dim (16 x 32 guarded steps),
 * the code ran once through and waited on instruction fetches (25-29 us a call under ncu
 * on an H200, at batch 1 as at 64). The dims past D that a lane reads (D not a multiple
 * of 4) are the record's padding: read, never written out. */
__device__ static void dsv4_att_combine_head(const dsv4_cuda_dims &d, const dsv4_cuda_step &s,
                                             uint32_t t, uint32_t tl, uint32_t h,
                                             const dsv4_att_keys &k, const dsv4_att_out &out,
                                             const float *work)
{
    uint32_t D = d.head_dim, H = d.heads, lane = threadIdx.x % 32, rope = out.rope;
    uint32_t chunk = dsv4_att_chunk(k.n), ns = (k.n + chunk - 1) / chunk;
    size_t rec = dsv4_att_rec(D);
    const float *base = work + (size_t)tl * ATT_MAX_SPLITS * H * rec + (size_t)h * rec;
    size_t stride = (size_t)H * rec;
    float M = base[0], L = 0.0f;
    for (uint32_t i = 1; i < ns; i++)
        M = fmaxf(M, base[i * stride]);
    for (uint32_t i = 0; i < ns; i++)
        L = fmaf(base[i * stride + 1], expf(base[i * stride] - M), L);
    float inv_l = 1.0f / L, pos = (float)s.pos[t];
    float *oh = out.o + ((size_t)t * H + h) * D;
    uint32_t rot0 = D - rope;
    /* a split's 16-byte loads of every dim issued together (up to ATT_MAX_DIMS / 128 in
     * flight), not one dim's splits at a time */
    float4 acc[ATT_MAX_DIMS / 128];
#pragma unroll
    for (uint32_t j = 0; j < ATT_MAX_DIMS / 128; j++)
        acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (uint32_t i = 0; i < ns; i++) {
        float w = expf(base[i * stride] - M);
        const float *ri = base + i * stride + ATT_REC_HEAD;
#pragma unroll
        for (uint32_t j = 0; j < ATT_MAX_DIMS / 128; j++) {
            uint32_t dd = 4 * lane + 128 * j;
            if (dd < D) {
                float4 x = *(const float4 *)(ri + dd);
                acc[j].x = fmaf(x.x, w, acc[j].x);
                acc[j].y = fmaf(x.y, w, acc[j].y);
                acc[j].z = fmaf(x.z, w, acc[j].z);
                acc[j].w = fmaf(x.w, w, acc[j].w);
            }
        }
    }
#pragma unroll
    for (uint32_t j = 0; j < ATT_MAX_DIMS / 128; j++) {
        uint32_t dd = 4 * lane + 128 * j;
        if (dd >= D)
            break;
        float a[4] = {acc[j].x, acc[j].y, acc[j].z, acc[j].w};
#pragma unroll
        for (uint32_t e = 0; e < 4; e += 2) {
            float a0 = a[e] * inv_l, a1 = dd + e + 1 < D ? a[e + 1] * inv_l : 0.0f;
            if (dd + e >= rot0) { /* rot0 is even: dims dd + e, dd + e + 1 are a pair */
                float c, sn;
                dsv4_rope_cs(out.freq, (dd + e - rot0) / 2, pos, true, &c, &sn);
                float r0 = dsv4_rope_dim(a0, a1, dd + e, c, sn);
                a1 = dsv4_rope_dim(a1, a0, dd + e + 1, c, sn);
                a0 = r0;
            }
            a[e] = a0;
            a[e + 1] = a1;
        }
        if (D % 4 == 0) {
            *(float4 *)(oh + dd) = make_float4(a[0], a[1], a[2], a[3]);
        } else {
            for (uint32_t e = 0; e < 4 && dd + e < D; e++)
                oh[dd + e] = a[e];
        }
    }
}

/* Block (token t0 + x, y): heads WARP_HEADS y + warp, a warp each (dsv4_att_combine_head),
 * of a token of more than one split (the split kernel wrote the others' output); block y =
 * 0 also writes the token's ring row (one launch a layer fewer than a kernel of its own).
 * (A block a head, thread 0 weighing the splits between barriers, took 64 blocks a
 * token.) */
__global__ static void dsv4_attend_combine_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, uint32_t t0,
                                                  bool comp, uint32_t rate_all,
                                                  const uint32_t *nsel, dsv4_att_out out,
                                                  const float *work, const uint8_t *kvs,
                                                  dsv4_cuda_kvbuf win)
{
    dsv4_pdl_begin();
    uint32_t tl = blockIdx.x, t = t0 + tl, h = blockIdx.y * WARP_HEADS + threadIdx.x / 32;
    if (blockIdx.y == 0)
        dsv4_att_ring_write(d, s, t, kvs, win);
    dsv4_att_keys k = dsv4_att_keys_of(d, s, t, comp, rate_all, nsel);
    if (h >= d.heads || dsv4_att_chunk(k.n) >= k.n)
        return;
    dsv4_att_combine_head(d, s, t, tl, h, k, out, work);
}

/* The splits any token of a step may use (dsv4_att_chunk of its largest possible key
 * count): the grid's split dimension. Splits past a token's last are empty blocks that
 * still load its position before they leave; with every possible split launched (16) they
 * were 15 of 16 blocks of a short-context decode step. pos_bound bounds the window rows
 * and the compressed ones (rate_all: one per rate_all positions; else at most index_topk, at
 * most one per position). */
static uint32_t dsv4_att_grid_splits(const dsv4_cuda_dims *d, uint32_t pos_bound, bool comp,
                                     uint32_t rate_all)
{
    if (pos_bound == 0)
        return ATT_MAX_SPLITS;
    uint64_t n = pos_bound < d->window ? pos_bound : d->window;
    if (comp)
        n += rate_all ? pos_bound / rate_all
                      : (pos_bound < d->index_topk ? pos_bound : d->index_topk);
    return dsv4_att_splits(n);
}

size_t dsv4_cuda_attend_work_bytes(const dsv4_cuda_dims *d, uint32_t max_tokens)
{
    size_t wave = max_tokens < ATT_WAVE ? max_tokens : ATT_WAVE;
    return wave * ATT_MAX_SPLITS * d->heads * dsv4_att_rec(d->head_dim) * sizeof(float);
}

typedef void (*dsv4_att_split_fn)(dsv4_cuda_dims, dsv4_cuda_step, uint32_t, const float *,
                                  const uint8_t *, dsv4_cuda_kvbuf, dsv4_cuda_kvbuf, uint32_t,
                                  const uint32_t *, const uint32_t *, const float *, dsv4_k_rowfmt,
                                  bool, dsv4_att_out, bool, float *);

int dsv4_cuda_attend(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, const float *q_dev,
                     const uint8_t *kvs_dev, const dsv4_cuda_kvbuf *win,
                     const dsv4_cuda_kvbuf *rows, uint32_t rate_all, const uint32_t *sel_dev,
                     const uint32_t *nsel_dev, const float *sinks_dev, const float *freq_dev,
                     uint32_t rope, dsv4_k_rowfmt fmt, float *o_dev, void *work_dev, void *stream)
{
    if (s->n_tok == 0)
        return 0;
    uint32_t D = d->head_dim;
    if (D == 0 || D > ATT_MAX_DIMS || rope > D || (D - rope) % 2 || d->heads == 0 || !work_dev)
        return -EINVAL;
    dsv4_cuda_kvbuf none = {};
    cudaStream_t st = (cudaStream_t)stream;
    /* the widest loads every row allows: 16 bytes (8 for fp8 rows, whose width is a
     * multiple of 8) when every base and stride is a multiple of it */
    uintptr_t at = (uintptr_t)kvs_dev | (uintptr_t)win->base | win->block_bytes | win->row_bytes;
    if (rows)
        at |= (uintptr_t)rows->base | rows->block_bytes | rows->row_bytes;
    bool vec = at % (fmt.dtype == DSV4_K_FP8 ? 8 : 16) == 0;
    dsv4_att_split_fn kern;
    size_t smem;
    if (fmt.dtype == DSV4_K_F32) {
        uint32_t Dp = (D + 31) & ~31u;
        smem = ((size_t)(ATT_HG + ATT_TR) * Dp + ATT_HG * ATT_TR + 3 * ATT_HG) * sizeof(float);
        /* accumulator registers per thread: the head's dims in 256-wide slices */
        kern = Dp <= 256   ? dsv4_attend_f32_kernel<1>
               : Dp <= 512 ? dsv4_attend_f32_kernel<2>
                           : dsv4_attend_f32_kernel<4>;
    } else {
        uint32_t Dp = (D + 127) & ~127u;
        smem = (size_t)dsv4_att_mma_bufs(fmt, D, Dp, vec) * ATT_TR * (Dp + ATT_KPAD) * 2 +
               ((size_t)9 * ATT_HG * ATT_SS + 3 * ATT_HG) * sizeof(float);
        /* q fragments and accumulators per warp: the head's dims in 128-wide slices */
        kern = Dp <= 128   ? dsv4_attend_mma_kernel<1>
               : Dp <= 256 ? dsv4_attend_mma_kernel<2>
               : Dp <= 512 ? dsv4_attend_mma_kernel<4>
                           : dsv4_attend_mma_kernel<8>;
    }
    cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return dsv4_cuda_status(e);
    uint32_t splits = dsv4_att_grid_splits(d, s->pos_bound, rows && rows->base, rate_all);
    dsv4_att_out out = {freq_dev, rope, o_dev};
    /* one split a token, one token a sequence: the split kernel writes every output and
     * ring row, no combine is launched, and no scratch bounds the launch's tokens (up to the
     * grid's 65535) */
    bool combine = splits > 1 || s->n_tok != s->n_seqs;
    uint32_t wave = combine ? ATT_WAVE : 65535;
    for (uint32_t t0 = 0; t0 < s->n_tok; t0 += wave) {
        uint32_t n = s->n_tok - t0 < wave ? s->n_tok - t0 : wave;
        /* the head groups of one (token, split) side by side: they run together, and
         * all but the first read of each row hit L2 */
        dim3 grid((d->heads + ATT_HG - 1) / ATT_HG, splits, n);
        int rc = dsv4_pdl_launch(kern, grid, ATT_THREADS, smem, st, *d, *s, t0, q_dev, kvs_dev,
                                 *win, rows ? *rows : none, rate_all, sel_dev, nsel_dev, sinks_dev,
                                 fmt, vec, out, !combine, (float *)work_dev);
        if (rc == 0 && combine)
            rc = dsv4_pdl_launch(dsv4_attend_combine_kernel,
                                 dim3(n, (d->heads + WARP_HEADS - 1) / WARP_HEADS), DSV4_CUDA_BLOCK,
                                 0, st, *d, *s, t0, rows && rows->base, rate_all, nsel_dev, out,
                                 (const float *)work_dev, kvs_dev, *win);
        if (rc != 0)
            return rc;
    }
    return 0;
}
