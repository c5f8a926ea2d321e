/* model_attn.cu: the attention kernels of the CUDA forward (model.h): q/kv norm and RoPE
 * with the KV row store, the compressors' carry and pooling (spec §3.4-3.5), the indexer's
 * query rotation and row selection around the indexk plugin's scores (spec §3.6), window
 * plus compressed attention with the sink (spec §3.7) and the window ring update.
 *
 * The KV discipline is forward.c's: compressed rows are appended before the layer's
 * attention, this step's own window rows are read from the fresh rows (kvs, already in the
 * KV dtype) and reach the ring only after attention, so chunking never changes a result. */
#include "kernels/cuda/model_common.cuh"

#define ATT_MAX_DIMS 1024 /* head_dim the attention kernel keeps in registers */
#define ATT_SPLIT 4       /* warps per (token, head), each a fixed share of the keys */

/* Address of compressed row w of sequence s in a paged buffer. */
__device__ static inline uint8_t *dsv4_paged_row(const dsv4_cuda_kvbuf &b, const dsv4_cuda_step &s,
                                                 uint32_t seq, uint32_t w)
{
    uint32_t page = s.pages[s.page_off[seq] + w / b.rows_per_block];
    return b.base + (size_t)page * b.block_bytes + (size_t)(w % b.rows_per_block) * b.row_bytes;
}

/* Block (t, h < heads): q head h; block (t, heads): the latent kv row. Shared: head_dim. */
__global__ static void dsv4_qkv_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, float *q, float *kv,
                                       const float *kv_norm, const float *freq, uint32_t rope,
                                       dsv4_k_rowfmt fmt, size_t row_bytes, uint8_t *kvs)
{
    extern __shared__ float sv[];
    __shared__ float red[32];
    uint32_t t = blockIdx.x, D = d.head_dim;
    float pos = (float)s.pos[t];
    bool is_kv = blockIdx.y == d.heads;
    float *x = is_kv ? kv + (size_t)t * D : q + ((size_t)t * d.heads + blockIdx.y) * D;
    float r = dsv4_block_rms_scale(x, D, d.eps, red);
    for (uint32_t i = threadIdx.x; i < D; i += blockDim.x)
        sv[i] = is_kv ? kv_norm[i] * (x[i] * r) : x[i] * r;
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < rope / 2; i += blockDim.x)
        dsv4_rope_pair(sv + D - rope, freq, i, pos, false);
    __syncthreads();
    if (is_kv)
        dsv4_row_store_block(kvs + (size_t)t * row_bytes, sv, fmt, row_bytes);
    else
        for (uint32_t i = threadIdx.x; i < D; i += blockDim.x)
            x[i] = sv[i];
}

int dsv4_cuda_qkv(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, float *q_dev, float *kv_dev,
                  const float *kv_norm_dev, const float *freq_dev, uint32_t rope, dsv4_k_rowfmt fmt,
                  uint8_t *kvs_dev, void *stream)
{
    if (s->n_tok == 0)
        return 0;
    dim3 grid(s->n_tok, d->heads + 1);
    dsv4_qkv_kernel<<<grid, DSV4_CUDA_BLOCK, d->head_dim * sizeof(float), (cudaStream_t)stream>>>(
        *d, *s, q_dev, kv_dev, kv_norm_dev, freq_dev, rope, fmt, dsv4_k_row_bytes(&fmt), kvs_dev);
    return dsv4_cuda_launch_status();
}

/* One sequence per block, its tokens in order (the carry is sequential); threads split
 * the channels. Shared: dim floats (the pooled row). */
__global__ static void dsv4_compress_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, bool overlap,
                                            uint32_t rate, uint32_t dim, const float *k,
                                            const float *g, const float *ape, const float *norm,
                                            const float *freq, dsv4_cuda_kvbuf carry,
                                            dsv4_cuda_kvbuf rows, dsv4_k_rowfmt fmt,
                                            float *out_rows)
{
    extern __shared__ float out[];
    __shared__ float red[32];
    uint32_t sq = blockIdx.x, width = (overlap ? 2 : 1) * dim, R = d.rope_comp;
    float *pend_kv = (float *)(carry.base + (size_t)s.slot[sq] * carry.block_bytes);
    float *pend_lg = pend_kv + (size_t)rate * width;
    float *prev_kv = pend_lg + (size_t)rate * width, *prev_lg = prev_kv + (size_t)rate * dim;

    for (uint32_t i = 0; i < s.count[sq]; i++) {
        uint32_t t = s.first[sq] + i, p = s.start[sq] + i, r = p % rate, w = p / rate;
        for (uint32_t c = threadIdx.x; c < width; c += blockDim.x) {
            pend_kv[r * width + c] = k[(size_t)t * width + c];
            pend_lg[r * width + c] = g[(size_t)t * width + c] + ape[r * width + c];
        }
        __syncthreads();
        if (r != rate - 1)
            continue;
        /* slots: the previous window's "a" half (none for the first row), then this
         * window's "b" half (or the whole row without overlap); per channel, in order */
        uint32_t b_at = overlap ? dim : 0;
        bool with_prev = overlap && w > 0;
        for (uint32_t c = threadIdx.x; c < dim; c += blockDim.x) {
            float m = -INFINITY, sum = 0, acc = 0;
            for (uint32_t j = 0; with_prev && j < rate; j++)
                m = prev_lg[j * dim + c] > m ? prev_lg[j * dim + c] : m;
            for (uint32_t j = 0; j < rate; j++)
                m = pend_lg[j * width + b_at + c] > m ? pend_lg[j * width + b_at + c] : m;
            for (uint32_t j = 0; with_prev && j < rate; j++) {
                float e = expf(prev_lg[j * dim + c] - m);
                sum += e;
                acc += e * prev_kv[j * dim + c];
            }
            for (uint32_t j = 0; j < rate; j++) {
                float e = expf(pend_lg[j * width + b_at + c] - m);
                sum += e;
                acc += e * pend_kv[j * width + b_at + c];
            }
            out[c] = acc / sum;
            for (uint32_t j = 0; overlap && j < rate; j++) {
                prev_kv[j * dim + c] = pend_kv[j * width + c];
                prev_lg[j * dim + c] = pend_lg[j * width + c];
            }
        }
        __syncthreads();
        float rs = dsv4_block_rms_scale(out, dim, d.eps, red);
        for (uint32_t c = threadIdx.x; c < dim; c += blockDim.x)
            out[c] = norm[c] * (out[c] * rs);
        __syncthreads();
        for (uint32_t j = threadIdx.x; j < R / 2; j += blockDim.x)
            dsv4_rope_pair(out + dim - R, freq, j, (float)w * (float)rate, false);
        __syncthreads();
        if (rows.base)
            dsv4_row_store_block(dsv4_paged_row(rows, s, sq, w), out, fmt, rows.row_bytes);
        else
            for (uint32_t c = threadIdx.x; c < dim; c += blockDim.x)
                out_rows[(size_t)s.ik_out[t] * dim + c] = out[c];
        __syncthreads();
    }
}

int dsv4_cuda_compress(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, bool overlap,
                       uint32_t rate, uint32_t dim, const float *k_dev, const float *g_dev,
                       const float *ape_dev, const float *norm_dev, const float *freq_dev,
                       const dsv4_cuda_kvbuf *carry, const dsv4_cuda_kvbuf *rows, dsv4_k_rowfmt fmt,
                       float *out_rows_dev, void *stream)
{
    if (s->n_seqs == 0)
        return 0;
    if (rate == 0 || (!rows && !out_rows_dev))
        return -EINVAL;
    dsv4_cuda_kvbuf none = {};
    dsv4_compress_kernel<<<s->n_seqs, DSV4_CUDA_BLOCK, dim * sizeof(float), (cudaStream_t)stream>>>(
        *d, *s, overlap, rate, dim, k_dev, g_dev, ape_dev, norm_dev, freq_dev, *carry,
        rows ? *rows : none, fmt, out_rows_dev);
    return dsv4_cuda_launch_status();
}

__global__ static void dsv4_index_rope_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, float *iq,
                                              const float *freq)
{
    uint32_t t = blockIdx.x, h = blockIdx.y, DI = d.index_dim, R = d.rope_comp;
    float *x = iq + ((size_t)t * d.index_heads + h) * DI + DI - R;
    for (uint32_t i = threadIdx.x; i < R / 2; i += blockDim.x)
        dsv4_rope_pair(x, freq, i, (float)s.pos[t], false);
}

int dsv4_cuda_index_rope(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, float *iq_dev,
                         const float *freq_dev, void *stream)
{
    if (s->n_tok == 0)
        return 0;
    dim3 grid(s->n_tok, d->index_heads);
    dsv4_index_rope_kernel<<<grid, 64, 0, (cudaStream_t)stream>>>(*d, *s, iq_dev, freq_dev);
    return dsv4_cuda_launch_status();
}

__global__ static void dsv4_index_rows_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, uint32_t rate,
                                              uint32_t *n_rows, uint32_t *page_start)
{
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
    dsv4_index_rows_kernel<<<(s->n_tok + 255) / 256, 256, 0, (cudaStream_t)stream>>>(
        *d, *s, rate, n_rows_dev, page_start_dev);
    return dsv4_cuda_launch_status();
}

/* One token per block: its selection in ascending row order (the rank of each chosen row
 * among the others; the rows are distinct). Shared: index_topk ids. */
__global__ static void dsv4_index_select_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, uint32_t rate,
                                                const uint32_t *topk, uint32_t *sel, uint32_t *nsel)
{
    extern __shared__ uint32_t ids[];
    uint32_t t = blockIdx.x, K = d.index_topk, valid = (s.pos[t] + 1) / rate;
    uint32_t *out = sel + (size_t)t * K;
    if (valid <= K) {
        for (uint32_t i = threadIdx.x; i < valid; i += blockDim.x)
            out[i] = i;
        if (threadIdx.x == 0)
            nsel[t] = valid;
        return;
    }
    for (uint32_t i = threadIdx.x; i < K; i += blockDim.x)
        ids[i] = topk[(size_t)t * K + i];
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < K; i += blockDim.x) {
        uint32_t v = ids[i], rank = 0;
        for (uint32_t j = 0; j < K; j++)
            rank += ids[j] < v;
        out[rank] = v;
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
    dsv4_index_select_kernel<<<s->n_tok, DSV4_CUDA_BLOCK, d->index_topk * sizeof(uint32_t),
                               (cudaStream_t)stream>>>(*d, *s, rate, topk_dev, sel_dev, nsel_dev);
    return dsv4_cuda_launch_status();
}

/* One (token, head) per block of ATT_SPLIT warps; warp w visits key rows w, w + ATT_SPLIT,
 * ... of forward.c's order (window oldest first, then the compressed rows) with an online
 * softmax, warp 0's running maximum starting at the sink; the warps' (max, sum,
 * accumulator) are then merged in warp order. A decode step's few (token, head) pairs
 * thus keep four times the warps busy (one warp walking ~80 keys in turn took ~50 us on
 * an H200), and the split depends on nothing but the key index: the order of every sum is
 * fixed by the lane and warp layout alone. Lane j holds dims j, j + 32, ... of q, of the
 * key row and of the accumulator in registers (PER of them), so a dot is one warp
 * butterfly. Shared: (ATT_SPLIT + 1) x head_dim + 2 ATT_SPLIT floats. */
template <uint32_t PER>
__global__ static void
dsv4_attend_kernel(dsv4_cuda_dims d, dsv4_cuda_step s, const float *q, const uint8_t *kvs,
                   dsv4_cuda_kvbuf win, dsv4_cuda_kvbuf rows, uint32_t rate_hca,
                   const uint32_t *sel, const uint32_t *nsel, const float *sinks, const float *freq,
                   uint32_t rope, dsv4_k_rowfmt fmt, float *o)
{
    extern __shared__ float so[];
    uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    uint32_t t = blockIdx.x, h = blockIdx.y, D = d.head_dim, W = d.window;
    uint32_t seq = s.tseq[t], p = s.pos[t], start = s.start[seq];
    size_t rb = win.row_bytes;
    const float *qh = q + ((size_t)t * d.heads + h) * D;
    float sq[PER], acc[PER];
    for (uint32_t i = 0; i < PER; i++) {
        uint32_t dd = lane + 32 * i;
        sq[i] = dd < D ? qh[dd] : 0.0f;
        acc[i] = 0.0f;
    }

    float scale = 1.0f / sqrtf((float)D);
    float m = warp == 0 ? sinks[h] : -INFINITY, l = warp == 0 ? 1.0f : 0.0f;
    const uint8_t *ring = win.base + (size_t)s.slot[seq] * win.block_bytes;
    uint32_t first = p + 1 > W ? p + 1 - W : 0, n_win = p + 1 - first, n_comp = 0;
    if (rows.base)
        n_comp = rate_hca ? (p + 1) / rate_hca : nsel[t];
    for (uint32_t v = warp; v < n_win + n_comp; v += ATT_SPLIT) {
        const uint8_t *row;
        if (v < n_win) {
            uint32_t pp = first + v;
            row = pp >= start ? kvs + (size_t)(t - (p - pp)) * rb : ring + (size_t)(pp % W) * rb;
        } else {
            uint32_t w = v - n_win;
            row = dsv4_paged_row(rows, s, seq, rate_hca ? w : sel[(size_t)t * d.index_topk + w]);
        }
        float part = 0.0f, val[PER];
        for (uint32_t i = 0; i < PER; i++) {
            uint32_t dd = lane + 32 * i;
            val[i] = dd < D ? dsv4_row_value(row, fmt, dd) : 0.0f;
            part = fmaf(sq[i], val[i], part);
        }
        for (int off = 16; off > 0; off >>= 1)
            part += __shfl_xor_sync(0xffffffffu, part, off);
        float sc = part * scale;
        if (sc > m) {
            float f = expf(m - sc); /* 0 from a warp's -inf start */
            l *= f;
            for (uint32_t i = 0; i < PER; i++)
                acc[i] *= f;
            m = sc;
        }
        float e = expf(sc - m);
        l += e;
        for (uint32_t i = 0; i < PER; i++)
            acc[i] = fmaf(e, val[i], acc[i]);
    }
    float *out = so + (size_t)ATT_SPLIT * D, *sm = out + D, *sl = sm + ATT_SPLIT;
    for (uint32_t i = 0; i < PER; i++) {
        uint32_t dd = lane + 32 * i;
        if (dd < D)
            so[(size_t)warp * D + dd] = acc[i];
    }
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
    __syncthreads();
    /* the merge: warp 0's maximum is finite (the sink), a warp without keys weighs 0 */
    float M = sm[0], f[ATT_SPLIT], L = 0.0f;
    for (uint32_t w = 1; w < ATT_SPLIT; w++)
        M = sm[w] > M ? sm[w] : M;
    for (uint32_t w = 0; w < ATT_SPLIT; w++) {
        f[w] = expf(sm[w] - M);
        L = fmaf(sl[w], f[w], L);
    }
    for (uint32_t dd = threadIdx.x; dd < D; dd += blockDim.x) {
        float a = 0.0f;
        for (uint32_t w = 0; w < ATT_SPLIT; w++)
            a = fmaf(so[(size_t)w * D + dd], f[w], a);
        out[dd] = a / L;
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < rope / 2; i += blockDim.x)
        dsv4_rope_pair(out + D - rope, freq, i, (float)p, true);
    __syncthreads();
    float *oh = o + ((size_t)t * d.heads + h) * D;
    for (uint32_t i = threadIdx.x; i < D; i += blockDim.x)
        oh[i] = out[i];
}

int dsv4_cuda_attend(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, const float *q_dev,
                     const uint8_t *kvs_dev, const dsv4_cuda_kvbuf *win,
                     const dsv4_cuda_kvbuf *rows, uint32_t rate_hca, const uint32_t *sel_dev,
                     const uint32_t *nsel_dev, const float *sinks_dev, const float *freq_dev,
                     uint32_t rope, dsv4_k_rowfmt fmt, float *o_dev, void *stream)
{
    if (s->n_tok == 0)
        return 0;
    if (d->head_dim > ATT_MAX_DIMS)
        return -EINVAL;
    dsv4_cuda_kvbuf none = {};
    dim3 grid(s->n_tok, d->heads);
    size_t smem = ((size_t)(ATT_SPLIT + 1) * d->head_dim + 2 * ATT_SPLIT) * sizeof(float);
    cudaStream_t st = (cudaStream_t)stream;
    /* registers per lane: the head's dims in the smallest power of two of 32-wide slices */
#define ATT_LAUNCH(per)                                                                            \
    dsv4_attend_kernel<per><<<grid, 32 * ATT_SPLIT, smem, st>>>(                                   \
        *d, *s, q_dev, kvs_dev, *win, rows ? *rows : none, rate_hca, sel_dev, nsel_dev, sinks_dev, \
        freq_dev, rope, fmt, o_dev)
    if (d->head_dim <= 128)
        ATT_LAUNCH(4);
    else if (d->head_dim <= 256)
        ATT_LAUNCH(8);
    else if (d->head_dim <= 512)
        ATT_LAUNCH(16);
    else
        ATT_LAUNCH(32);
#undef ATT_LAUNCH
    return dsv4_cuda_launch_status();
}

/* Only the last window rows of each sequence reach its ring: an earlier token of a long
 * chunk would land on the same ring row, and the later token must win. */
__global__ static void dsv4_ring_write_kernel(dsv4_cuda_dims d, dsv4_cuda_step s,
                                              const uint8_t *kvs, dsv4_cuda_kvbuf win)
{
    uint32_t t = blockIdx.x, seq = s.tseq[t], p = s.pos[t], W = d.window;
    if (p + W < s.start[seq] + s.count[seq])
        return;
    size_t rb = win.row_bytes;
    uint8_t *dst = win.base + (size_t)s.slot[seq] * win.block_bytes + (size_t)(p % W) * rb;
    for (size_t i = threadIdx.x; i < rb; i += blockDim.x)
        dst[i] = kvs[(size_t)t * rb + i];
}

int dsv4_cuda_ring_write(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, const uint8_t *kvs_dev,
                         const dsv4_cuda_kvbuf *win, void *stream)
{
    if (s->n_tok == 0)
        return 0;
    dsv4_ring_write_kernel<<<s->n_tok, 128, 0, (cudaStream_t)stream>>>(*d, *s, kvs_dev, *win);
    return dsv4_cuda_launch_status();
}
