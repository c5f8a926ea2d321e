/* model_ffn.cu: the token-wise kernels around the blocks of the CUDA forward (model.h):
 * embedding, mHC collapse/expand and the head's collapse (spec §3.2), row RMSNorm, MoE
 * routing with the expert grouping, the clamped SwiGLU and the combine (spec §3.8). Each
 * follows its CPU twin in kernels/cpu (hc.c, moe.c, linalg.c) step for step. */
#include <atomic>
#include <mutex>

#include <cooperative_groups.h>

#include "kernels/cuda/bf16_split.cuh"
#include "kernels/cuda/device_once.cuh"
#include "kernels/cuda/model_common.cuh"
#include "kernels/cuda/pdl.cuh"

namespace cg = cooperative_groups;

#define HC_MAX 16 /* streams (kernels/cpu/hc.c) */
/* dsv4_hc_mix_lanes gives each comb row a lane of a warp */
static_assert(HC_MAX <= 32, "a warp holds HC_MAX rows");

__device__ static inline float dsv4_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

__global__ static void dsv4_embed_kernel(dsv4_cuda_dims d, const int32_t *tok, const float *embed,
                                         float *x)
{
    dsv4_pdl_begin();
    uint32_t t = blockIdx.x, H = d.hidden;
    const float *e = embed + (size_t)tok[t] * H;
    for (uint32_t j = 0; j < d.hc_mult; j++)
        for (uint32_t h = threadIdx.x; h < H; h += blockDim.x)
            x[((size_t)t * d.hc_mult + j) * H + h] = e[h];
}

int dsv4_cuda_embed(const dsv4_cuda_dims *d, const dsv4_cuda_step *s, const float *embed_dev,
                    float *x_dev, void *stream)
{
    if (s->n_tok == 0)
        return 0;
    return dsv4_pdl_launch(dsv4_embed_kernel, s->n_tok, DSV4_CUDA_BLOCK, 0, (cudaStream_t)stream,
                           *d, s->tok, embed_dev, x_dev);
}

/* dsv4_k_hc_mix's pre_i = sigmoid(scale z_i + base_i) + eps of z, i < n (also the head's,
 * dsv4_k_hc_head_pre, with its scale). */
__device__ static inline float dsv4_hc_pre_of(const float *z, const float *base, float scale,
                                              uint32_t i, float eps)
{
    return dsv4_sigmoid(scale * z[i] + base[i]) + eps;
}

/* dsv4_k_hc_mix's post and comb of one token by the NM lanes of a warp that hold it (lanes
 * NM t' .. NM t' + NM - 1 for the warp's t'-th token; NM divides 32): lane i < n of the group
 * writes post_i and keeps row i of comb in registers; a row sum is the lane's own, a column
 * sum takes the rows from their lanes by shuffles within the group. Every sum is the CPU's,
 * over the same values in the same order, so every value has the bits of one thread doing
 * it all. All 32 lanes of the warp call it (live false: the group's token is a repeat,
 * nothing written). The loops run over NM >= n rows, those past n skipped: NM = 4 where it
 * is enough, since every skipped step of a loop unrolled to 16 still cost its instructions,
 * 20 passes over. (A warp a token left 28 of its lanes idle and took a multiprocessor for
 * every 8 tokens, ~14 us each, beside the GEMMs that the mix runs along with; a thread per
 * comb value with barriers between passes took 3 block barriers a pass, 40 passes a token;
 * thread 0 alone, ~60 us a token on an H200.) */
template <uint32_t NM>
__device__ static void dsv4_hc_mix_lanes(const float *z, const float *base, const float *scale,
                                         uint32_t n, uint32_t iters, float eps, bool live,
                                         float *post, float *comb)
{
    static_assert(32 % NM == 0, "a token's lanes in one warp");
    uint32_t g = threadIdx.x % NM, i = g < n ? g : 0;
    if (live && g < n)
        post[g] = 2.0f * dsv4_sigmoid(scale[1] * z[n + g] + base[n + g]);
    const float *zc = z + 2 * n + i * n, *bc = base + 2 * n + i * n;
    float row[NM], m = -INFINITY, sum = 0;
#pragma unroll
    for (uint32_t j = 0; j < NM; j++)
        if (j < n) {
            row[j] = scale[2] * zc[j] + bc[j];
            m = row[j] > m ? row[j] : m;
        }
#pragma unroll
    for (uint32_t j = 0; j < NM; j++)
        if (j < n) {
            row[j] = expf(row[j] - m);
            sum += row[j];
        }
#pragma unroll
    for (uint32_t j = 0; j < NM; j++)
        if (j < n)
            row[j] = row[j] / sum + eps;
    /* Sinkhorn: a column pass first, then (iters - 1) x (row pass, column pass) */
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) {
            float rs = 0;
#pragma unroll
            for (uint32_t j = 0; j < NM; j++)
                if (j < n)
                    rs += row[j];
#pragma unroll
            for (uint32_t j = 0; j < NM; j++)
                if (j < n)
                    row[j] = row[j] / (rs + eps);
        }
#pragma unroll
        for (uint32_t j = 0; j < NM; j++)
            if (j < n) {
                /* unrolled: the shuffles issue together (n is the same in every lane) */
                float cs = 0;
#pragma unroll
                for (uint32_t k = 0; k < NM; k++)
                    if (k < n)
                        cs += __shfl_sync(0xffffffffu, row[j], k, NM);
                row[j] = row[j] / (cs + eps);
            }
    }
    if (live && g < n)
#pragma unroll
        for (uint32_t j = 0; j < NM; j++)
            if (j < n)
                comb[i * n + j] = row[j];
}

/* V consecutive floats at p (V = 4: one 16-byte load or store). */
template <uint32_t V> struct dsv4_vec {
    float v[V];
};
template <uint32_t V> __device__ static inline dsv4_vec<V> dsv4_vld(const float *p)
{
    dsv4_vec<V> r;
    if constexpr (V == 4) {
        float4 q = *(const float4 *)p;
        r.v[0] = q.x, r.v[1] = q.y, r.v[2] = q.z, r.v[3] = q.w;
    } else {
        r.v[0] = *p;
    }
    return r;
}
/* dsv4_vld through the read-only path (ld.global.nc): for data the kernel never writes, so
 * that loads may be issued ahead of the kernel's stores. */
template <uint32_t V> __device__ static inline dsv4_vec<V> dsv4_vldg(const float *p)
{
    dsv4_vec<V> r;
    if constexpr (V == 4) {
        float4 q = __ldg((const float4 *)p);
        r.v[0] = q.x, r.v[1] = q.y, r.v[2] = q.z, r.v[3] = q.w;
    } else {
        r.v[0] = __ldg(p);
    }
    return r;
}
template <uint32_t V> __device__ static inline void dsv4_vst(float *p, const dsv4_vec<V> &r)
{
    if constexpr (V == 4)
        *(float4 *)p = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    else
        *p = r.v[0];
}
/* Row r's values c .. c + V - 1 of a grouped GEMM's inputs (rows rows of len) where it
 * wants them: split (dsv4_cuda_linear_grouped_split) where split is set (V = 4: the hosts
 * refuse a split of rows they cannot take 4 at a time), else as floats at p. */
template <uint32_t V>
__device__ static inline void dsv4_vst_input(float *p, void *split, size_t rows, size_t len,
                                             size_t r, size_t c, const dsv4_vec<V> &v)
{
    if constexpr (V == 4)
        if (split) {
            dsv4_split_store(split, rows, len, r, c / 4,
                             make_float4(v.v[0], v.v[1], v.v[2], v.v[3]));
            return;
        }
    dsv4_vst<V>(p, v);
}

/* dsv4_hc_collapse_kernel: the blocks of a cluster each own a slice of the hidden columns
 * (all hc_mult streams of them) of up to HC_TOK tokens. One block per token, after a GEMM
 * for the mix projection, left a batch-1 step's 86 calls on one SM each (~45 us a call on
 * an H200 under ncu) and the GEMM (24 outputs over 16k inputs: 8 blocks) at ~190 us a call
 * at batch 64; a cluster per token whose threads walked their columns in a loop of unknown
 * trip count, one dependent load round after another, 55 us a call at batch 64. */
#define HC_SLICES 8
#define HC_TOK 4 /* tokens a cluster takes: each fn value loaded serves all of them */
/* mix rows a pass over the block's columns accumulates, for tok tokens a cluster (within
 * the 128 registers that let two blocks share an SM: with one, 16 clusters of 8 did not
 * all fit on an H200 at once) */
#define HC_MIXG(tok) ((tok) == 1 ? 12 : 8)
#define HC_THREADS DSV4_CUDA_BLOCK /* threads a collapse block */
#define HC_WARPS (HC_THREADS / 32)

/* The sum over the cluster of slot (in every block's shared memory), added in block order:
 * every block gets the same bits, whatever the batch. The caller synchronised the cluster
 * after the slots were written. */
__device__ static float dsv4_cluster_sum(cg::cluster_group &cl, float *slot)
{
    float s = 0;
    for (uint32_t b = 0; b < HC_SLICES; b++)
        s += *cl.map_shared_rank(slot, b);
    return s;
}

/* c ? a : b of two values (of two array elements, `c ? r[i] : r[j]` selects their address
 * and puts the array in local memory) */
__device__ static inline float dsv4_pick(bool c, float a, float b)
{
    return c ? a : b;
}

/* The block's sum of each thread's v[k], k < K <= 32, in a fixed order, returned to thread
 * k; wbuf holds HC_WARPS x K floats. In a warp, the values (padded with zeros to P, a power
 * of two) are halved between partner lanes at each butterfly step (lanes 16 apart, then
 * 8, ...): a lane sends the half its partner keeps and adds the half it keeps, until each
 * lane holds one value's sum (value lane >> (5 - log2 P)), the steps left over a plain
 * butterfly. Every sum is the butterfly's (x + y = y + x), in P - 1 shuffles instead of 5
 * K (32 sums: 31 against 160, the largest share of the mix loop's instructions). Then
 * the warps in order. */
template <uint32_t K> __device__ static float dsv4_hc_block_sums(const float (&v)[K], float *wbuf)
{
    static_assert(K >= 1 && K <= 32, "a warp's lanes hold the K sums");
    constexpr uint32_t LP = K <= 1 ? 0 : K <= 2 ? 1 : K <= 4 ? 2 : K <= 8 ? 3 : K <= 16 ? 4 : 5;
    uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float r[1u << LP];
#pragma unroll
    for (uint32_t k = 0; k < (1u << LP); k++)
        r[k] = k < K ? v[k] : 0.0f;
#pragma unroll
    for (uint32_t l = 0; l < 5; l++) {
        uint32_t o = 16u >> l, c = (1u << LP) >> (l + 1); /* values kept after this step */
        if (c > 0) {
            bool up = lane & o;
#pragma unroll
            for (uint32_t i = 0; i < 16; i++) /* a constant trip count unrolls */
                if (i < c) {
                    float send = dsv4_pick(up, r[i], r[i + c]),
                          keep = dsv4_pick(up, r[i + c], r[i]);
                    r[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
                }
        } else {
            r[0] += __shfl_xor_sync(0xffffffffu, r[0], o);
        }
    }
    uint32_t k = lane >> (5 - LP);
    if ((lane & ((32u >> LP) - 1)) == 0 && k < K)
        wbuf[warp * K + k] = r[0];
    __syncthreads();
    float s = 0.0f;
    if (threadIdx.x < K)
        for (uint32_t w = 0; w < HC_WARPS; w++)
            s += wbuf[w * K + threadIdx.x];
    __syncthreads(); /* wbuf is free for the next call */
    return s;
}

/* The rows of z a collapse's launch computes: all of them, pre's alone where the rest
 * would not get groups of their own beside the collapse's (the rest then left to a launch
 * of its own), or the rest alone (that launch: no collapse). */
enum dsv4_hc_part { DSV4_HC_ALL, DSV4_HC_COLLAPSE, DSV4_HC_REST };

/* What a collapse reads and writes: the streams of token t are X[r], r = rows ? rows[t] :
 * t; with ex.post set, the expand of the block before (dsv4_k_hc_expand with ex's y, post
 * and comb of row r) is applied to them first, and xo (where set) gets the expanded rows.
 * The head's (head set) pre comes from fn alone (dsv4_k_hc_head_pre, scale hscale) and
 * stays in the kernel, the layers' pre (dsv4_k_hc_mix's, scale[0]) and z, the mix's
 * input, are written (the rows of z that part names; the kernel does not read it). */
struct dsv4_hc_args {
    const float *x;
    const uint32_t *rows;
    dsv4_cuda_hc_expand ex;
    float *xo;
    const float *fn, *base, *scale, *norm;
    float hscale;
    float *pre, *z, *u;
    dsv4_cuda_split_out us; /* u's rows split too (us.split set), and Y's rows zeroed */
    dsv4_hc_part part;
    bool *rest_apart; /* DSV4_HC_COLLAPSE: set to whether the rest was left (host memory) */
};

/* Values h .. h + V - 1 of row r (of rows rows of in), o, into split rows [2][rows][in]:
 * dsv4_split_store's layout and bits. */
template <uint32_t V>
__device__ static inline void dsv4_split_vals(void *split, size_t rows, size_t in, size_t r,
                                              size_t h, const dsv4_vec<V> &o)
{
    if constexpr (V == 4) {
        dsv4_split_store(split, rows, in, r, h / 4, make_float4(o.v[0], o.v[1], o.v[2], o.v[3]));
    } else {
        __nv_bfloat16 *hl = (__nv_bfloat16 *)split;
#pragma unroll
        for (uint32_t v = 0; v < V; v++) {
            __nv_bfloat16 hi = __float2bfloat16_rn(o.v[v]);
            hl[r * in + h + v] = hi;
            hl[(rows + r) * in + h + v] = __float2bfloat16_rn(o.v[v] - __bfloat162float(hi));
        }
    }
}

/* The MoE choices a collapse block keeps in shared memory for each token (more are read
 * from global memory) */
#define HC_KMAX 16

/* The expand of V columns at h of row r (dsv4_k_hc_expand; the arithmetic of the expand
 * kernel this replaced, so the same bits), with the row's post pt, comb ct, MoE weights tw
 * and expert rows te: stream j's values col[j] in, stream k's out at out + k ostride (and
 * at xo's row when xo is set). */
template <uint32_t V, uint32_t NM>
__device__ static void
dsv4_hc_expand_cols(const dsv4_cuda_hc_src &src, uint32_t N, uint32_t H, size_t r, size_t h,
                    const float *pt, const float *ct, const float *tw, const uint32_t *te,
                    const dsv4_vec<V> (&col)[NM], float *out, uint32_t ostride, float *xo)
{
    dsv4_vec<V> y = dsv4_vldg<V>(src.y + r * H + h);
    if (src.eo) {
        float acc[V] = {};
#pragma unroll 4
        for (uint32_t c = 0; c < src.k; c++) {
            float wc = tw[c];
            dsv4_vec<V> e = dsv4_vldg<V>(src.eo + (size_t)te[c] * H + h);
#pragma unroll
            for (uint32_t v = 0; v < V; v++)
                acc[v] += wc * e.v[v];
        }
#pragma unroll
        for (uint32_t v = 0; v < V; v++)
            y.v[v] = acc[v] + y.v[v];
    }
#pragma unroll
    for (uint32_t k = 0; k < NM; k++)
        if (k < N) {
            dsv4_vec<V> o;
#pragma unroll
            for (uint32_t v = 0; v < V; v++) {
                float s = pt[k] * y.v[v];
#pragma unroll
                for (uint32_t j = 0; j < NM; j++)
                    if (j < N)
                        s += ct[j * N + k] * col[j].v[v];
                o.v[v] = s;
            }
            dsv4_vst<V>(out + k * ostride, o);
            if (xo)
                dsv4_vst<V>(xo + r * N * H + k * H + h, o);
        }
}

/* Cluster (y, z) takes tokens [tpc y, tpc y + tpc) (tpc <= TOK) and group gz + z of the
 * mix rows: group 0 rows [0, g0) (g0 >= N, pre's among them), group g > 0 rows [g0 + (g -
 * 1) gr, g0 + g gr), the mix kernel's input (a launch with gz = 1 computes rows alone);
 * block b the hidden columns [b w, b w + w) of the tokens' streams, w = ceil(H /
 * HC_SLICES); dynamic shared memory: TOK (N + 1) w floats, the slice's streams (expanded
 * where ex is set: every group expands them, group 0 writes them to xo) and the collapsed
 * row. A chunk is V consecutive columns of one stream (V = 4: 16-byte loads, where H is a
 * multiple of 4 HC_SLICES and the rows 16-byte aligned).
 * The slice comes to shared memory first, once (the passes below read it there: a pass
 * over global memory each, four at batch 64, and the expand's own launch and round trip
 * before). For its rows, thread i takes chunks i, i + 256, ... of the slice's streams,
 * stream after stream, and for each reads the chunk of every token and loads that of MG =
 * HC_MIXG(TOK) rows of fn together (a pass; passes until the group's rows are done), then
 * sums the squares and the products with fn; the block adds the threads' sums in a fixed
 * order, the cluster the blocks' in block order. Group 0's blocks then take the same pre
 * (the same inputs, so the same bits), collapse and normalise their own columns (thread
 * i: column chunks i, i + 256, ... of every token), the norm's sum again over the
 * cluster. Which thread sums which columns never depends on TOK, the groups or the other
 * tokens of the cluster (absent ones repeat the last token and are not written), so a
 * token's bits are its row's alone. (All rows in one group: 8 blocks at batch 1, the
 * collapse waiting on the mix rows it does not need.) */
template <bool HEAD, uint32_t TOK, uint32_t NM, uint32_t V>
__global__ static void __cluster_dims__(HC_SLICES, 1, 1) __launch_bounds__(HC_THREADS, 2)
    dsv4_hc_collapse_kernel(dsv4_cuda_dims d, uint32_t n, uint32_t tpc, uint32_t g0, uint32_t gr,
                            uint32_t gz, const __grid_constant__ dsv4_hc_args a)
{
    dsv4_pdl_begin();
    extern __shared__ __align__(16) float su[]; /* 16-byte stores; then sx */
    const uint32_t MG = HC_MIXG(TOK);
    __shared__ float wbuf[HC_WARPS * TOK * MG], part[2][TOK], sru[TOK];
    __shared__ float zpart[TOK][(2 + NM) * NM], sz[TOK][(2 + NM) * NM];
    __shared__ float spre[TOK][NM], tpost[TOK][NM], tcomb[TOK][NM * NM], tw[TOK][HC_KMAX];
    __shared__ uint32_t te[TOK][HC_KMAX], trow[TOK];
    cg::cluster_group cl = cg::this_cluster();
    uint32_t b = cl.block_rank(), t0 = blockIdx.y * tpc, tt = min(tpc, n - t0);
    uint32_t N = d.hc_mult, H = d.hidden, NH = N * H, mix = HEAD ? N : (2 + N) * N;
    uint32_t tid = threadIdx.x, nt = blockDim.x;
    uint32_t w = (H + HC_SLICES - 1) / HC_SLICES, h0 = b * w, h1 = min(H, h0 + w);
    uint32_t wv = (h1 > h0 ? h1 - h0 : 0) / V; /* chunks a stream in the slice */
    uint32_t grp = gz + blockIdx.z;
    float *sx = su + TOK * w; /* [TOK][N][w]: stream j of token k at sx + (k N + j) w */

    /* each token's row, and its expand's values (in shared memory: a column chunk's loads
     * then wait on nothing but the chunk's addresses) */
    const dsv4_cuda_hc_src &src = a.ex.src;
    uint32_t K = a.ex.post && src.eo ? src.k : 0, KS = K <= HC_KMAX ? K : 0;
    if (tid < TOK) {
        uint32_t t = t0 + min(tid, tt - 1);
        trow[tid] = a.rows ? a.rows[t] : t;
    }
    /* the GEMM after the collapse adds its k splits into these rows: its zeroing launch's
     * work, in column slices of the cluster's tokens */
    if (!HEAD && grp == 0 && a.us.y) {
        size_t zw = (a.us.out + HC_SLICES - 1) / HC_SLICES, z0 = b * zw,
               z1 = min(a.us.out, z0 + zw), zn = z1 > z0 ? z1 - z0 : 0;
        for (size_t i = tid; i < tt * zn; i += nt)
            a.us.y[(t0 + i / zn) * a.us.stride + z0 + i % zn] = 0.0f;
    }
    __syncthreads();
    if (a.ex.post) {
        uint32_t per = N + N * N + 2 * KS;
        for (uint32_t i = tid; i < TOK * per; i += nt) {
            uint32_t k = i / per, m = i - k * per;
            size_t r = trow[k];
            if (m < N)
                tpost[k][m] = a.ex.post[r * N + m];
            else if ((m -= N) < N * N)
                tcomb[k][m] = a.ex.comb[r * N * N + m];
            else if ((m -= N * N) < KS)
                tw[k][m] = src.w[r * K + m];
            else
                te[k][m - KS] = src.epos[r * K + m - KS];
        }
        __syncthreads();
    }

    /* the slice of each token's streams, expanded where ex is set */
    for (uint32_t q = tid; q < TOK * wv; q += nt) {
        uint32_t k = q / wv, c = q - k * wv;
        size_t r = trow[k], hv = h0 + c * V;
        dsv4_vec<V> col[NM];
#pragma unroll
        for (uint32_t j = 0; j < NM; j++) /* the loads together, not one by one */
            if (j < N)
                col[j] = dsv4_vldg<V>(a.x + r * NH + j * H + hv);
        float *out = sx + k * N * w + c * V;
        if (a.ex.post)
            dsv4_hc_expand_cols<V, NM>(src, N, H, r, hv, tpost[k], tcomb[k],
                                       KS ? tw[k] : src.w + r * K, KS ? te[k] : src.epos + r * K,
                                       col, out, w, grp == 0 && k < tt ? a.xo : NULL);
        else
#pragma unroll
            for (uint32_t j = 0; j < NM; j++)
                if (j < N)
                    dsv4_vst<V>(out + j * w, col[j]);
    }
    __syncthreads();

    /* the mix rows [r0, r1) of the block's group */
    uint32_t r0 = grp == 0 ? 0 : g0 + (grp - 1) * gr;
    uint32_t r1 = grp == 0 ? g0 : min(mix, r0 + gr), rows = r1 - r0;
    float ss[TOK] = {};
    for (uint32_t i0 = r0; i0 < r1; i0 += MG) {
        float acc[TOK * MG] = {};
        for (uint32_t q = tid; q < N * wv; q += nt) {
            uint32_t j = q / wv;
            uint32_t so = j * w + (q - j * wv) * V;
            size_t off = (size_t)j * H + h0 + (q - j * wv) * V;
            dsv4_vec<V> xv[TOK], fv[MG];
#pragma unroll
            for (uint32_t k = 0; k < TOK; k++)
                xv[k] = dsv4_vld<V>(sx + k * N * w + so);
#pragma unroll
            for (uint32_t g = 0; g < MG; g++)
                fv[g] =
                    i0 + g < r1 ? dsv4_vldg<V>(a.fn + (size_t)(i0 + g) * NH + off) : dsv4_vec<V>{};
#pragma unroll
            for (uint32_t v = 0; v < V; v++)
#pragma unroll
                for (uint32_t k = 0; k < TOK; k++) {
                    if (i0 == r0)
                        ss[k] = fmaf(xv[k].v[v], xv[k].v[v], ss[k]);
#pragma unroll
                    for (uint32_t g = 0; g < MG; g++)
                        acc[k * MG + g] = fmaf(fv[g].v[v], xv[k].v[v], acc[k * MG + g]);
                }
        }
        float z = dsv4_hc_block_sums<TOK * MG>(acc, wbuf);
        if (tid < TOK * MG && i0 + tid % MG < r1)
            zpart[tid / MG][i0 - r0 + tid % MG] = z;
    }
    float sq = dsv4_hc_block_sums<TOK>(ss, wbuf);
    if (tid < TOK)
        part[0][tid] = sq;
    cl.sync();
    for (uint32_t i = tid; i < tt * rows; i += nt) {
        uint32_t k = i / rows, m = i % rows;
        float r = 1.0f / sqrtf(dsv4_cluster_sum(cl, &part[0][k]) / (float)NH + d.eps);
        sz[k][m] = dsv4_cluster_sum(cl, &zpart[k][m]) * r;
    }
    __syncthreads();
    if (!HEAD && b == 0)
        for (uint32_t i = tid; i < tt * rows; i += nt)
            a.z[(size_t)(t0 + i / rows) * mix + r0 + i % rows] = sz[i / rows][i % rows];
    if (grp > 0) {
        cl.sync(); /* no block leaves while another may still read its shared memory */
        return;
    }
    float pscale = HEAD ? a.hscale : a.scale[0];
    for (uint32_t i = tid; i < tt * N; i += nt)
        spre[i / N][i % N] = dsv4_hc_pre_of(sz[i / N], a.base, pscale, i % N, d.hc_eps);
    __syncthreads();
    if (!HEAD && b == 0)
        for (uint32_t i = tid; i < tt * N; i += nt)
            a.pre[(size_t)(t0 + i / N) * N + i % N] = spre[i / N][i % N];

    float us[TOK] = {};
    for (uint32_t c = tid; c < wv; c += nt) {
#pragma unroll
        for (uint32_t k = 0; k < TOK; k++) {
            dsv4_vec<V> col[NM], s;
#pragma unroll
            for (uint32_t j = 0; j < NM; j++)
                if (j < N)
                    col[j] = dsv4_vld<V>(sx + (k * N + j) * w + c * V);
#pragma unroll
            for (uint32_t v = 0; v < V; v++) {
                float sv = 0;
#pragma unroll
                for (uint32_t j = 0; j < NM; j++)
                    if (j < N)
                        sv += spre[k][j] * col[j].v[v];
                s.v[v] = sv;
                us[k] = fmaf(sv, sv, us[k]);
            }
            dsv4_vst<V>(su + k * w + c * V, s);
        }
    }
    float uq = dsv4_hc_block_sums<TOK>(us, wbuf);
    if (tid < TOK)
        part[1][tid] = uq;
    cl.sync();
    if (tid < tt)
        sru[tid] = 1.0f / sqrtf(dsv4_cluster_sum(cl, &part[1][tid]) / (float)H + d.eps);
    /* the last reads of another block's shared memory are done: a block may leave once
     * every block has arrived here */
    cl.barrier_arrive();
    __syncthreads();
    for (uint32_t q = tid; q < tt * wv; q += nt) {
        uint32_t k = q / wv, c = q - k * wv;
        size_t hv = h0 + c * V;
        dsv4_vec<V> s = dsv4_vld<V>(su + k * w + c * V), nv = dsv4_vld<V>(a.norm + hv), o;
#pragma unroll
        for (uint32_t v = 0; v < V; v++)
            o.v[v] = nv.v[v] * (s.v[v] * sru[k]);
        dsv4_vst<V>(a.u + (size_t)(t0 + k) * H + hv, o);
        if (!HEAD && a.us.split)
            dsv4_split_vals<V>(a.us.split, n, H, t0 + k, hv, o);
    }
    cl.barrier_wait();
}

/* The dynamic shared memory of a collapse block: TOK (N + 1) w floats (above). */
static size_t dsv4_hc_smem(const dsv4_cuda_dims *d, uint32_t tok)
{
    return (size_t)tok * (d->hc_mult + 1) * ((d->hidden + HC_SLICES - 1) / HC_SLICES) *
           sizeof(float);
}

/* What a collapse launch needs from its device, read once per device: the most dynamic
 * shared memory a block may have. */
typedef struct dsv4_hc_device {
    int rc, smem_max;
} dsv4_hc_device;

static void dsv4_hc_device_setup(dsv4_hc_device *dv, int dev)
{
    dv->rc = dsv4_cuda_status(
        cudaDeviceGetAttribute(&dv->smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
}

/* The current device's ordinal and facts. */
static int dsv4_hc_device_get(int *dev_p, const dsv4_hc_device **dv_p)
{
    static std::once_flag once[DSV4_CUDA_MAX_DEVICES];
    static dsv4_hc_device devices[DSV4_CUDA_MAX_DEVICES];
    int dev, rc = dsv4_cuda_once_per_device(
                 once, [](int d) { dsv4_hc_device_setup(&devices[d], d); }, &dev);
    if (rc != 0)
        return rc;
    *dev_p = dev;
    *dv_p = &devices[dev];
    return devices[dev].rc;
}

/* A collapse kernel's clusters that fit the GPU at once, for one device: its shared-memory
 * limit raised once, the occupancy API asked once per dynamic shared-memory size (the last
 * size and its count kept, packed as size << 32 | count + 1; engines on one device share
 * them, engines on others have their own). Asked at every launch, it cost prefill a host
 * query twice a layer a step. */
typedef struct dsv4_hc_fit {
    std::once_flag once;
    int rc;
    std::atomic<uint64_t> last;
} dsv4_hc_fit;

template <typename K>
static void dsv4_hc_fit_setup(dsv4_hc_fit *f, K kern, const dsv4_hc_device *dv)
{
    cudaFuncAttributes fa;
    f->rc = dsv4_cuda_status(cudaFuncGetAttributes(&fa, kern));
    if (f->rc == 0)
        f->rc =
            dsv4_cuda_status(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  dv->smem_max - (int)fa.sharedSizeBytes));
}

template <typename K>
static int dsv4_hc_fit_get(dsv4_hc_fit *f, K kern, const dsv4_hc_device *dv,
                           const cudaLaunchConfig_t *cfg, uint32_t *fit_p)
{
    std::call_once(f->once, dsv4_hc_fit_setup<K>, f, kern, dv);
    if (f->rc != 0)
        return f->rc;
    uint64_t last = f->last.load(std::memory_order_relaxed);
    if (last >> 32 != cfg->dynamicSmemBytes || last == 0) {
        int fitc = 0;
        int rc = dsv4_cuda_status(cudaOccupancyMaxActiveClusters(&fitc, kern, cfg));
        if (rc != 0)
            return rc;
        last = (uint64_t)cfg->dynamicSmemBytes << 32 | (uint32_t)(fitc + 1);
        f->last.store(last, std::memory_order_relaxed);
    }
    *fit_p = (uint32_t)last - 1;
    return 0;
}

/* Tokens a cluster takes: one while there are at most 16 (16 clusters, 128 blocks, fill
 * the GPU better than fewer, fuller ones), up to HC_TOK beyond where their slices fit a
 * block's shared memory. The groups of mix rows (a.part DSV4_HC_ALL): the pre's alone in
 * group 0 and MG rows a group after it where that many clusters fit the GPU at once (30 of
 * 8 blocks on an H200, not the 33 its SMs would hold), else two (group 0 the first max(N,
 * MG) rows), else one; the collapse (group 0) then waits on the fewest rows. Where the
 * first layout does not fit, DSV4_HC_COLLAPSE launches group 0 with pre's rows alone, and
 * DSV4_HC_REST the groups past it alone, their passes of MG rows shared evenly by as many
 * groups as fit (at least one; none empty). Every layout sums a token's values in the same
 * order: the same bits. NM: the streams the loops run over; V: the columns a load takes. */
template <bool HEAD, uint32_t TOK, uint32_t NM, uint32_t V>
static int dsv4_hc_collapse_go(const dsv4_cuda_dims *d, uint32_t n, uint32_t tpc,
                               const dsv4_hc_args &a, const dsv4_hc_device *dv, int dev,
                               cudaStream_t st)
{
    static dsv4_hc_fit fits[DSV4_CUDA_MAX_DEVICES];
    auto kern = dsv4_hc_collapse_kernel<HEAD, TOK, NM, V>;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(HC_SLICES, 1, 1);
    cfg.blockDim = dim3(HC_THREADS, 1, 1);
    cfg.dynamicSmemBytes = dsv4_hc_smem(d, TOK);
    uint32_t fitc;
    int rc = dsv4_hc_fit_get(&fits[dev], kern, dv, &cfg, &fitc);
    if (rc != 0)
        return rc;
    uint32_t clusters = (n + tpc - 1) / tpc, fit = fitc / clusters; /* groups */
    uint32_t N = d->hc_mult, mix = HEAD ? N : (2 + N) * N, mg = HC_MIXG(TOK);
    uint32_t g0 = mix, gr = mix, groups = 1, gz = 0, passes = (mix - N + mg - 1) / mg;
    bool apart = false;
    if (a.part == DSV4_HC_REST) {
        uint32_t slots = fit > 0 ? fit : 1, per = (passes + slots - 1) / slots;
        g0 = N, gr = per * mg, groups = (passes + per - 1) / per, gz = 1;
    } else if (mix > N && 1 + passes <= fit)
        g0 = N, gr = mg, groups = 1 + passes;
    else if (a.part == DSV4_HC_COLLAPSE)
        g0 = N, apart = true;
    else if (mix > (N > mg ? N : mg) && fit >= 2)
        g0 = N > mg ? N : mg, gr = mix - g0, groups = 2;
    if (a.rest_apart)
        *a.rest_apart = apart;
    return dsv4_pdl_launch(kern, dim3(HC_SLICES, clusters, groups), HC_THREADS,
                           cfg.dynamicSmemBytes, st, *d, n, tpc, g0, gr, gz, a);
}

template <bool HEAD, uint32_t NM, uint32_t V>
static int dsv4_hc_collapse_tok(const dsv4_cuda_dims *d, uint32_t n, const dsv4_hc_args &a,
                                cudaStream_t st)
{
    int dev;
    const dsv4_hc_device *dv;
    int rc = dsv4_hc_device_get(&dev, &dv);
    if (rc != 0)
        return rc;
    if (dsv4_hc_smem(d, 1) > (size_t)dv->smem_max)
        return -EINVAL; /* hc_mult + 1 rows of a slice do not fit a block */
    uint32_t tpc = (n + 15) / 16 < HC_TOK ? (n + 15) / 16 : HC_TOK;
    if (tpc == 1 || dsv4_hc_smem(d, HC_TOK) > (size_t)dv->smem_max)
        return dsv4_hc_collapse_go<HEAD, 1, NM, V>(d, n, 1, a, dv, dev, st);
    return dsv4_hc_collapse_go<HEAD, HC_TOK, NM, V>(d, n, tpc, a, dv, dev, st);
}

template <bool HEAD>
static int dsv4_hc_collapse_pick(const dsv4_cuda_dims *d, uint32_t n, const dsv4_hc_args &a,
                                 cudaStream_t st)
{
    /* 16-byte loads and stores: every slice a whole number of 4-column chunks, every row
     * 16-byte aligned */
    uintptr_t rows = (uintptr_t)a.x | (uintptr_t)a.fn | (uintptr_t)a.norm | (uintptr_t)a.u |
                     (uintptr_t)a.xo | (uintptr_t)a.ex.src.y | (uintptr_t)a.ex.src.eo;
    bool vec = d->hidden % (4 * HC_SLICES) == 0 && (rows & 15) == 0;
    if (vec && d->hc_mult <= 4)
        return dsv4_hc_collapse_tok<HEAD, 4, 4>(d, n, a, st);
    if (vec)
        return dsv4_hc_collapse_tok<HEAD, HC_MAX, 4>(d, n, a, st);
    return dsv4_hc_collapse_tok<HEAD, HC_MAX, 1>(d, n, a, st);
}

static int dsv4_hc_collapse_launch(const dsv4_cuda_dims *d, uint32_t n, bool head,
                                   const dsv4_hc_args &a, void *stream)
{
    if (n == 0)
        return 0;
    if (d->hc_mult > HC_MAX)
        return -EINVAL;
    cudaStream_t st = (cudaStream_t)stream;
    return head ? dsv4_hc_collapse_pick<true>(d, n, a, st)
                : dsv4_hc_collapse_pick<false>(d, n, a, st);
}

/* What both collapses take: the streams, the expand, the projections, the norm and u. */
static dsv4_hc_args dsv4_hc_args_of(const float *x, const dsv4_cuda_hc_expand *ex, const float *fn,
                                    const float *base, const float *norm, float *u)
{
    dsv4_hc_args a = {};
    a.x = x;
    a.ex = ex ? *ex : dsv4_cuda_hc_expand{};
    a.fn = fn;
    a.base = base;
    a.norm = norm;
    a.u = u;
    return a;
}

int dsv4_cuda_hc_pre(const dsv4_cuda_dims *d, uint32_t n, const float *x_dev,
                     const dsv4_cuda_hc_expand *ex, float *xo_dev, const float *fn_dev,
                     const float *base_dev, const float *scale_dev, const float *norm_dev,
                     float *pre_dev, float *z_dev, float *u_dev, const dsv4_cuda_split_out *us,
                     bool *z_apart, void *stream)
{
    dsv4_hc_args a = dsv4_hc_args_of(x_dev, ex, fn_dev, base_dev, norm_dev, u_dev);
    a.xo = xo_dev;
    a.scale = scale_dev;
    a.pre = pre_dev;
    a.z = z_dev;
    if (us)
        a.us = *us;
    a.part = z_apart && *z_apart ? DSV4_HC_COLLAPSE : DSV4_HC_ALL;
    a.rest_apart = z_apart;
    if (z_apart)
        *z_apart = false; /* until a launch leaves them */
    if (a.us.split && d->hidden % 4 != 0)
        return -EINVAL;
    return dsv4_hc_collapse_launch(d, n, false, a, stream);
}

int dsv4_cuda_hc_mix_z(const dsv4_cuda_dims *d, uint32_t n, const float *x_dev, const float *fn_dev,
                       float *z_dev, void *stream)
{
    dsv4_hc_args a = {};
    a.x = x_dev;
    a.fn = fn_dev;
    a.z = z_dev;
    a.part = DSV4_HC_REST;
    return dsv4_hc_collapse_launch(d, n, false, a, stream);
}

int dsv4_cuda_hc_head(const dsv4_cuda_dims *d, uint32_t n, const uint32_t *rows_dev,
                      const float *x_dev, const dsv4_cuda_hc_expand *ex, const float *fn_dev,
                      const float *base_dev, float scale, const float *norm_dev, float *u_dev,
                      void *stream)
{
    dsv4_hc_args a = dsv4_hc_args_of(x_dev, ex, fn_dev, base_dev, norm_dev, u_dev);
    a.rows = rows_dev;
    a.hscale = scale;
    return dsv4_hc_collapse_launch(d, n, true, a, stream);
}

/* Token t by lanes NM t .. NM t + NM - 1 of the launch (dsv4_hc_mix_lanes); the lanes past
 * the last token repeat it, unwritten. */
template <uint32_t NM>
__global__ static void dsv4_hc_mix_kernel(dsv4_cuda_dims d, uint32_t n, const float *z,
                                          const float *base, const float *scale, float *post,
                                          float *comb)
{
    dsv4_pdl_begin();
    uint32_t t = (blockIdx.x * blockDim.x + threadIdx.x) / NM, N = d.hc_mult;
    bool live = t < n;
    t = live ? t : n - 1;
    dsv4_hc_mix_lanes<NM>(z + (size_t)t * (2 + N) * N, base, scale, N, d.hc_iters, d.hc_eps, live,
                          post + (size_t)t * N, comb + (size_t)t * N * N);
}

int dsv4_cuda_hc_mix(const dsv4_cuda_dims *d, uint32_t n, const float *z_dev, const float *base_dev,
                     const float *scale_dev, float *post_dev, float *comb_dev, void *stream)
{
    if (n == 0)
        return 0;
    if (d->hc_mult > HC_MAX)
        return -EINVAL;
    uint32_t lanes = d->hc_mult <= 4 ? 4 : HC_MAX;
    size_t threads = ((size_t)n * lanes + 31) / 32 * 32;
    unsigned block = threads < DSV4_CUDA_BLOCK ? (unsigned)threads : DSV4_CUDA_BLOCK;
    unsigned blocks = (unsigned)((threads + block - 1) / block);
    cudaStream_t st = (cudaStream_t)stream;
    return dsv4_pdl_launch(lanes == 4 ? dsv4_hc_mix_kernel<4> : dsv4_hc_mix_kernel<HC_MAX>, blocks,
                           block, 0, st, *d, n, z_dev, base_dev, scale_dev, post_dev, comb_dev);
}

__global__ static void dsv4_rmsnorm_kernel(uint32_t len, size_t stride, float *x, const float *w,
                                           float eps, const dsv4_cuda_split_out us)
{
    dsv4_pdl_begin();
    __shared__ float red[32];
    size_t t = blockIdx.x;
    float *row = x + t * stride;
    if (us.y) /* the GEMM after adds its k splits into its row t */
        for (size_t o = threadIdx.x; o < us.out; o += blockDim.x)
            us.y[t * us.stride + o] = 0.0f;
    float r = dsv4_block_rms_scale(row, len, eps, red);
    for (uint32_t i = threadIdx.x; i < len; i += blockDim.x) {
        float v = w ? w[i] * (row[i] * r) : row[i] * r;
        row[i] = v;
        if (us.split)
            dsv4_split_vals<1>(us.split, gridDim.x, len, t, i, dsv4_vec<1>{{v}});
    }
}

int dsv4_cuda_rmsnorm_rows(uint32_t n, uint32_t len, size_t stride, float *x_dev,
                           const float *w_dev, float eps, const dsv4_cuda_split_out *us,
                           void *stream)
{
    if (n == 0)
        return 0;
    if (us && us->split && len % 4 != 0)
        return -EINVAL;
    return dsv4_pdl_launch(dsv4_rmsnorm_kernel, n, DSV4_CUDA_BLOCK, 0, (cudaStream_t)stream, len,
                           stride, x_dev, w_dev, eps, us ? *us : dsv4_cuda_split_out{});
}

/* ---- MoE ---------------------------------------------------------------------------------- */

/* kernels/cpu/moe.c's ranking: higher score first, then the lower index, NaN last. */
/* a ranks before b (dsv4_k_topk's order): by value, NaN last, ties by index */
__device__ static inline bool dsv4_better(float sa, float sb, uint32_t a, uint32_t b)
{
    if (isnan(sa) || isnan(sb))
        return !isnan(sa) || (isnan(sb) && a < b);
    return sa > sb || (sa == sb && a < b);
}

__device__ static inline float dsv4_softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

/* What routing reads and writes (dsv4_cuda_route's arguments). */
struct dsv4_route_args {
    const int32_t *tok;
    float *logits;
    size_t stride; /* of the logits' rows */
    const float *bias;
    const int32_t *tid2eid;
    uint32_t E, k;
    dsv4_k_scoring scoring;
    float routed_scale;
    int32_t *ids;
    float *w;
    uint32_t *off, *assign, *epos;
    uint32_t *done; /* dsv4_route_kernel's count of finished blocks, left 0 */
};

/* sum + the values of lanes 0, 1, ..., min(n, 32) - 1, added one by one in lane order (a
 * thread's sum over them, the same bits), in every lane. */
__device__ static inline float dsv4_warp_sum_in_order(float v, uint32_t n, float sum)
{
    for (uint32_t j = 0; j < 32 && j < n; j++)
        sum += __shfl_sync(0xffffffffu, v, j);
    return sum;
}

/* dsv4_k_route of token t by one warp, lane l taking experts l + 32 j, j < R (E <= 32 R),
 * their scores in registers; the token's row of router logits holds its scores afterwards.
 * Every value has the CPU's bits: the scores one by one, the softmax's sum and the weights'
 * in the CPU's order (dsv4_warp_sum_in_order, or choice by choice), and each choice the
 * best of the rest under dsv4_better, a total order, so that the warp's butterfly finds the
 * CPU's; the butterfly carries the choice's unbiased score. (A thread a token, each step a
 * global load behind the last store, took ~10 us for one token on an H200; a warp reading
 * the scores back from memory, ~5 us a round of 32 tokens.) */
template <uint32_t R> __device__ static void dsv4_route_warp(const dsv4_route_args &a, uint32_t t)
{
    uint32_t lane = threadIdx.x % 32, E = a.E, k = a.k;
    float *score = a.logits + (size_t)t * a.stride, s[R];
#pragma unroll
    for (uint32_t j = 0; j < R; j++)
        s[j] = lane + 32 * j < E ? score[lane + 32 * j] : 0.0f;
    if (a.scoring == DSV4_K_SOFTMAX) {
        /* the max skips NaN as the CPU's does; the sign of a zero max changes no exp */
        float m = -INFINITY, sum = 0;
#pragma unroll
        for (uint32_t j = 0; j < R; j++)
            if (lane + 32 * j < E)
                m = s[j] > m ? s[j] : m;
        for (int o = 16; o > 0; o >>= 1) {
            float y = __shfl_xor_sync(0xffffffffu, m, o);
            m = y > m ? y : m;
        }
#pragma unroll
        for (uint32_t j = 0; j < R; j++)
            if (32 * j < E) {
                s[j] = lane + 32 * j < E ? expf(s[j] - m) : 0.0f;
                sum = dsv4_warp_sum_in_order(s[j], E - 32 * j, sum);
            }
#pragma unroll
        for (uint32_t j = 0; j < R; j++)
            s[j] /= sum;
    } else {
#pragma unroll
        for (uint32_t j = 0; j < R; j++)
            s[j] = a.scoring == DSV4_K_SIGMOID ? 1.0f / (1.0f + expf(-s[j]))
                                               : sqrtf(dsv4_softplus(s[j]));
    }
#pragma unroll
    for (uint32_t j = 0; j < R; j++)
        if (lane + 32 * j < E)
            score[lane + 32 * j] = s[j];
    int32_t *id = a.ids + (size_t)t * k;
    float *w = a.w + (size_t)t * k, sum = 0;
    if (a.tid2eid) {
        /* lane i: choice i0 + i, its score from the lane that holds it */
        for (uint32_t i0 = 0; i0 < k; i0 += 32) {
            uint32_t i = i0 + lane, e = 0;
            if (i < k) {
                e = (uint32_t)a.tid2eid[(size_t)a.tok[t] * k + i];
                id[i] = (int32_t)e;
            }
            float si = 0.0f;
#pragma unroll
            for (uint32_t j = 0; j < R; j++) {
                float v = __shfl_sync(0xffffffffu, s[j], e % 32);
                si = e / 32 == j ? v : si;
            }
            sum = dsv4_warp_sum_in_order(si, k - i0, sum);
            if (i < k)
                w[i] = si;
        }
    } else {
        /* the bias steers the choice only; the weights use the unbiased scores */
        float c[R];
#pragma unroll
        for (uint32_t j = 0; j < R; j++)
            c[j] = a.bias && lane + 32 * j < E ? s[j] + a.bias[lane + 32 * j] : s[j];
        uint32_t taken = 0; /* bit j: expert lane + 32 j chosen */
        for (uint32_t i = 0; i < k; i++) {
            uint32_t best = UINT32_MAX;
            float cb = 0.0f, sb = 0.0f;
#pragma unroll
            for (uint32_t j = 0; j < R; j++) {
                uint32_t e = lane + 32 * j;
                if (e < E && !(taken >> j & 1) &&
                    (best == UINT32_MAX || dsv4_better(c[j], cb, e, best))) {
                    best = e;
                    cb = c[j];
                    sb = s[j];
                }
            }
            for (int o = 16; o > 0; o >>= 1) {
                float co = __shfl_xor_sync(0xffffffffu, cb, o),
                      so = __shfl_xor_sync(0xffffffffu, sb, o);
                uint32_t bo = __shfl_xor_sync(0xffffffffu, best, o);
                if (bo != UINT32_MAX && (best == UINT32_MAX || dsv4_better(co, cb, bo, best))) {
                    best = bo;
                    cb = co;
                    sb = so;
                }
            }
            if (best % 32 == lane) /* k <= E: some lane had one left */
                taken |= 1u << (best / 32);
            sum += sb; /* the CPU's sum of the chosen scores, in choice order */
            if (lane == 0) {
                id[i] = (int32_t)best;
                w[i] = sb;
            }
        }
    }
    __syncwarp(); /* w holds the chosen scores */
    for (uint32_t i = lane; i < k; i += 32)
        w[i] = w[i] / (sum + 1e-20f) * a.routed_scale;
}

/* The pairs grouped by expert in pair order, by one block of at least DSV4_GROUP_CHUNK
 * threads, once the block sees every token's ids; shared memory: (2 + DSV4_GROUP_CHUNK /
 * 32) E words. The experts' sizes are counted by shared atomics (integer counts: the order
 * of the adds does not matter), thread 0 turns them into offsets; then, DSV4_GROUP_CHUNK
 * pairs at a time, a pair's row is its expert's offset, plus the pairs of that expert in
 * earlier chunks, in earlier warps of its chunk (each warp's count of each expert,
 * __match_any_sync's, scanned over the warps, an expert a thread) and before it in its
 * warp. (A thread counting the chunk's earlier pairs one by one: ~380 shared loads for the
 * last of 384 pairs.) The ids are read from L2 (__ldcg): other blocks may have written
 * them. */
#define DSV4_GROUP_THREADS 1024
#define DSV4_GROUP_CHUNK 256
static_assert(DSV4_CUDA_BLOCK >= DSV4_GROUP_CHUNK, "a route block groups the pairs");
__device__ static void dsv4_group_pairs(const dsv4_route_args &a, uint32_t n, uint32_t *gsh)
{
    const uint32_t CW = DSV4_GROUP_CHUNK / 32; /* warps a chunk */
    uint32_t E = a.E, pairs = n * a.k, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    uint32_t *cnt = gsh, *next = gsh + E, *wc = gsh + 2 * E; /* wc: CW x E */
    for (uint32_t e = tid; e < E; e += blockDim.x)
        cnt[e] = 0;
    __syncthreads(); /* the block's own ids are written */
    const int32_t *ids = a.ids;
    for (uint32_t i = tid; i < pairs; i += blockDim.x) {
        uint32_t e = (uint32_t)__ldcg(ids + i);
        if (e < E) /* forward.c refuses bad hash ids; never count outside cnt */
            atomicAdd(&cnt[e], 1u);
    }
    __syncthreads();
    if (tid == 0) {
        uint32_t acc = 0;
        for (uint32_t e = 0; e < E; e++) {
            a.off[e] = next[e] = acc;
            acc += cnt[e];
        }
        a.off[E] = acc;
    }
    for (uint32_t c = 0; c < pairs; c += DSV4_GROUP_CHUNK) {
        __syncthreads(); /* next[] settled, the last chunk's counts read */
        for (uint32_t x = tid; x < CW * E; x += blockDim.x)
            wc[x] = 0;
        __syncthreads();
        uint32_t i = c + tid, e = UINT32_MAX, rank = 0;
        if (warp < CW) {
            e = i < pairs ? (uint32_t)__ldcg(ids + i) : UINT32_MAX;
            uint32_t same = __match_any_sync(0xffffffffu, e);
            rank = __popc(same & ((1u << lane) - 1));
            if (e < E && rank == 0)
                wc[warp * E + e] = __popc(same);
        }
        __syncthreads();
        for (uint32_t x = tid; x < E; x += blockDim.x) {
            uint32_t acc = next[x];
            for (uint32_t w = 0; w < CW; w++) {
                uint32_t v = wc[w * E + x];
                wc[w * E + x] = acc;
                acc += v;
            }
            next[x] = acc;
        }
        __syncthreads();
        if (e < E) {
            uint32_t row = wc[warp * E + e] + rank;
            a.assign[row] = i;
            a.epos[i] = row;
        }
    }
}

/* Up to 32 tokens: one block routes them, a warp a token, and groups the pairs. */
template <uint32_t R>
__global__ static void __launch_bounds__(DSV4_GROUP_THREADS)
    dsv4_group_kernel(const __grid_constant__ dsv4_route_args a, uint32_t n)
{
    dsv4_pdl_begin();
    extern __shared__ uint32_t gsh[];
    for (uint32_t t = threadIdx.x / 32; t < n; t += blockDim.x / 32)
        dsv4_route_warp<R>(a, t);
    dsv4_group_pairs(a, n, gsh);
}

/* More: token t by warp t % 8 of block t / 8, and the last block to finish (counted in
 * a.done, which it sets back to 0) groups the pairs (a launch of its own, one block
 * routing 64 tokens two a warp then grouping them took 4.5 us after the route kernel's
 * 6.7 on an H200, 17.6 in one block). */
template <uint32_t R>
__global__ static void dsv4_route_kernel(const __grid_constant__ dsv4_route_args a, uint32_t n)
{
    dsv4_pdl_begin();
    extern __shared__ uint32_t gsh[];
    __shared__ bool last;
    uint32_t t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (t < n)
        dsv4_route_warp<R>(a, t);
    __threadfence(); /* the block's ids and weights before its count */
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(a.done, 1u) == gridDim.x - 1;
        if (last)
            *a.done = 0; /* every block has counted */
    }
    __syncthreads();
    if (last)
        dsv4_group_pairs(a, n, gsh);
}

template <uint32_t R>
static int dsv4_route_go(const dsv4_route_args &a, uint32_t n, cudaStream_t st)
{
    size_t smem = (2 + DSV4_GROUP_CHUNK / 32) * (size_t)a.E * sizeof(uint32_t);
    if (n <= DSV4_GROUP_THREADS / 32)
        return dsv4_pdl_launch(dsv4_group_kernel<R>, 1, DSV4_GROUP_THREADS, smem, st, a, n);
    return dsv4_pdl_launch(dsv4_route_kernel<R>,
                           (n + DSV4_CUDA_BLOCK / 32 - 1) / (DSV4_CUDA_BLOCK / 32), DSV4_CUDA_BLOCK,
                           smem, st, a, n);
}

int dsv4_cuda_route(const dsv4_cuda_step *s, float *logits_dev, size_t logits_stride,
                    const float *bias_dev, const int32_t *tid2eid_dev, uint32_t n_experts,
                    uint32_t k, dsv4_k_scoring scoring, float routed_scale, int32_t *ids_dev,
                    float *w_dev, uint32_t *off_dev, uint32_t *assign_dev, uint32_t *epos_dev,
                    uint32_t *done_dev, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    uint32_t n = s->n_tok;
    if (n == 0)
        return 0;
    if (k == 0 || k > n_experts || n_experts > DSV4_CUDA_ROUTE_MAX_EXPERTS)
        return -EINVAL;
    dsv4_route_args a = {s->tok,    logits_dev, logits_stride, bias_dev,     tid2eid_dev,
                         n_experts, k,          scoring,       routed_scale, ids_dev,
                         w_dev,     off_dev,    assign_dev,    epos_dev,     done_dev};
    /* R: the scores a lane keeps (the fewest that hold n_experts) */
    if (n_experts <= 32)
        return dsv4_route_go<1>(a, n, st);
    if (n_experts <= 8 * 32)
        return dsv4_route_go<8>(a, n, st);
    return dsv4_route_go<DSV4_CUDA_ROUTE_MAX_EXPERTS / 32>(a, n, st);
}

/* Row j of xe (or of split) by block j, V columns a thread a step (V = 4: 16-byte copies). */
template <uint32_t V>
__global__ static void dsv4_moe_gather_kernel(uint32_t k, uint32_t H, const float *u,
                                              const uint32_t *assign, float *xe, void *split)
{
    dsv4_pdl_begin();
    uint32_t j = blockIdx.x;
    const float *src = u + (size_t)(assign[j] / k) * H;
    for (uint32_t h = threadIdx.x * V; h < H; h += blockDim.x * V)
        dsv4_vst_input<V>(xe + (size_t)j * H + h, split, gridDim.x, H, j, h, dsv4_vld<V>(src + h));
}

int dsv4_cuda_moe_gather(uint32_t n, uint32_t k, uint32_t hidden, const float *u_dev,
                         const uint32_t *assign_dev, float *xe_dev, void *split_dev, void *stream)
{
    if (n * k == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
    bool vec = hidden % 4 == 0 && (((uintptr_t)u_dev | (uintptr_t)xe_dev) & 15) == 0;
    if (split_dev && !vec)
        return -EINVAL;
    return dsv4_pdl_launch(vec ? dsv4_moe_gather_kernel<4> : dsv4_moe_gather_kernel<1>, n * k,
                           DSV4_CUDA_BLOCK, 0, st, k, hidden, u_dev, assign_dev, xe_dev, split_dev);
}

/* What one SwiGLU launch covers. */
struct dsv4_swiglu_args {
    dsv4_cuda_swiglu_rows rows;
    uint32_t inter;
    float limit;
    dsv4_k_act act;
};

/* Thread x of block (x, y): columns [V i, V i + V), i = blockDim.x x + threadIdx.x, of
 * rows y, y + gridDim.y, ... (V = 4: 16-byte loads and stores). The arguments are
 * __grid_constant__ (read where they are, not copied to each thread's local memory). */
template <uint32_t V>
__global__ static void dsv4_swiglu_kernel(const __grid_constant__ dsv4_swiglu_args a)
{
    dsv4_pdl_begin();
    uint32_t c = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (c >= a.inter)
        return;
    const dsv4_cuda_swiglu_rows &q = a.rows;
    for (uint32_t r = blockIdx.y; r < q.n; r += gridDim.y) {
        dsv4_vec<V> gv = dsv4_vld<V>(q.g + r * q.stride + c),
                    uv = dsv4_vld<V>(q.u + r * q.stride + c), o;
#pragma unroll
        for (uint32_t v = 0; v < V; v++) {
            float g = gv.v[v], u = uv.v[v], limit = a.limit;
            if (limit > 0) {
                g = fminf(g, limit);
                u = fminf(fmaxf(u, -limit), limit);
            }
            float act = a.act == DSV4_K_GELU ? 0.5f * g * (1.0f + erff(g * (float)M_SQRT1_2))
                                             : g / (1.0f + expf(-g));
            o.v[v] = act * u;
        }
        dsv4_vst_input<V>(q.h + (size_t)r * a.inter + c, q.split, q.n, a.inter, r, c, o);
    }
}

int dsv4_cuda_swiglu(const dsv4_cuda_swiglu_rows *rows, uint32_t inter, float limit, dsv4_k_act act,
                     void *stream)
{
    if (rows->n == 0)
        return 0;
    if (inter == 0)
        return -EINVAL;
    dsv4_swiglu_args a = {*rows, inter, limit, act};
    /* 16-byte accesses where every row starts 16-byte aligned */
    bool vec = inter % 4 == 0 && rows->stride % 4 == 0 &&
               (((uintptr_t)rows->g | (uintptr_t)rows->u | (uintptr_t)rows->h) & 15) == 0;
    if (rows->split && !vec)
        return -EINVAL;
    dim3 grid((inter / (vec ? 4 : 1) + 255) / 256, rows->n < 65535 ? rows->n : 65535);
    return dsv4_pdl_launch(vec ? dsv4_swiglu_kernel<4> : dsv4_swiglu_kernel<1>, grid, 256, 0,
                           (cudaStream_t)stream, a);
}
