/* model_ffn.cu: the token-wise kernels around the blocks of the CUDA forward (model.h):
 * embedding, mHC collapse/expand and the head's collapse (spec §3.2), row RMSNorm, MoE
 * routing with the expert grouping, the clamped SwiGLU and the combine (spec §3.8). Each
 * follows its CPU twin in kernels/cpu (hc.c, moe.c, linalg.c) step for step. */
#include <cooperative_groups.h>

#include "kernels/cuda/model_common.cuh"

namespace cg = cooperative_groups;

#define HC_MAX 16 /* streams (kernels/cpu/hc.c) */
/* dsv4_hc_mix_warp gives each comb row a lane */
static_assert(HC_MAX <= 32, "a warp holds HC_MAX rows");

__device__ static inline float dsv4_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

__global__ static void dsv4_embed_kernel(dsv4_cuda_dims d, const int32_t *tok, const float *embed,
                                         float *x)
{
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
    dsv4_embed_kernel<<<s->n_tok, DSV4_CUDA_BLOCK, 0, (cudaStream_t)stream>>>(*d, s->tok, embed_dev,
                                                                              x_dev);
    return dsv4_cuda_launch_status();
}

/* dsv4_k_hc_mix's pre_i = sigmoid(scale z_i + base_i) + eps of z, i < n (also the head's,
 * dsv4_k_hc_head_pre, with its scale). */
__device__ static inline float dsv4_hc_pre_of(const float *z, const float *base, float scale,
                                              uint32_t i, float eps)
{
    return dsv4_sigmoid(scale * z[i] + base[i]) + eps;
}

/* dsv4_k_hc_mix's post and comb of one token by one warp: lane i < n writes post_i and keeps
 * row i of comb in registers; a row sum is the lane's own, a column sum takes the rows from
 * their lanes by shuffles. Every sum is the CPU's, over the same values in the same order,
 * so every value has the bits of one thread doing it all. All 32 lanes of the warp call it.
 * (A thread per comb value with barriers between passes took 3 block barriers a pass, 40
 * passes a token; thread 0 alone, ~60 us a token on an H200.) The loops run over NM >= n
 * rows, those past n skipped: NM = 4 where it is enough, since every skipped step of a
 * loop unrolled to 16 still cost its instructions, 20 passes over. */
template <uint32_t NM>
__device__ static void dsv4_hc_mix_warp(const float *z, const float *base, const float *scale,
                                        uint32_t n, uint32_t iters, float eps, float *post,
                                        float *comb)
{
    uint32_t lane = threadIdx.x % 32, i = lane < n ? lane : 0;
    if (lane < n)
        post[lane] = 2.0f * dsv4_sigmoid(scale[1] * z[n + lane] + base[n + lane]);
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
                        cs += __shfl_sync(0xffffffffu, row[j], k);
                row[j] = row[j] / (cs + eps);
            }
    }
    if (lane < n)
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
template <uint32_t V> __device__ static inline void dsv4_vst(float *p, const dsv4_vec<V> &r)
{
    if constexpr (V == 4)
        *(float4 *)p = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    else
        *p = r.v[0];
}

/* Thread i: columns [V i, V i + V) of the step's token rows (V = 4 when the hidden size
 * allows 16-byte accesses). Every load comes before the first store (the streams are
 * overwritten in place, so loads after a store would wait for it), and the loops run over
 * NM >= hc_mult streams with those past hc_mult skipped, so col stays in registers (a
 * loop over hc_mult kept it in local memory; NM = 4 where it is enough keeps the
 * registers few). Each column's arithmetic is the scalar one. */
template <uint32_t V, uint32_t NM>
__global__ static void dsv4_hc_post_kernel(dsv4_cuda_dims d, uint32_t n, float *x,
                                           dsv4_cuda_hc_src src, const float *post,
                                           const float *comb)
{
    uint32_t N = d.hc_mult, H = d.hidden;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= (size_t)n * H)
        return;
    size_t t = i / H, h = i % H;
    float *xt = x + t * N * H;
    const float *pt = post + t * N, *ct = comb + t * N * N;
    dsv4_vec<V> y = dsv4_vld<V>(src.y + t * H + h), col[NM];
    if (src.eo) {
        float acc[V] = {};
        for (uint32_t c = 0; c < src.k; c++) {
            float wc = src.w[t * src.k + c];
            dsv4_vec<V> e = dsv4_vld<V>(src.eo + (size_t)src.epos[t * src.k + c] * H + h);
#pragma unroll
            for (uint32_t v = 0; v < V; v++)
                acc[v] += wc * e.v[v];
        }
#pragma unroll
        for (uint32_t v = 0; v < V; v++)
            y.v[v] = acc[v] + y.v[v];
    }
#pragma unroll
    for (uint32_t j = 0; j < NM; j++)
        if (j < N)
            col[j] = dsv4_vld<V>(xt + j * H + h);
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
            dsv4_vst<V>(xt + k * H + h, o);
        }
}

int dsv4_cuda_hc_post(const dsv4_cuda_dims *d, uint32_t n, float *x_dev,
                      const dsv4_cuda_hc_src *src, const float *post_dev, const float *comb_dev,
                      void *stream)
{
    size_t total = (size_t)n * d->hidden;
    if (total == 0)
        return 0;
    if (d->hc_mult > HC_MAX)
        return -EINVAL;
    cudaStream_t st = (cudaStream_t)stream;
    unsigned blocks4 = (unsigned)((total / 4 + 255) / 256),
             blocks1 = (unsigned)((total + 255) / 256);
    if (d->hidden % 4 == 0 && d->hc_mult <= 4)
        dsv4_hc_post_kernel<4, 4><<<blocks4, 256, 0, st>>>(*d, n, x_dev, *src, post_dev, comb_dev);
    else if (d->hidden % 4 == 0)
        dsv4_hc_post_kernel<4, HC_MAX>
            <<<blocks4, 256, 0, st>>>(*d, n, x_dev, *src, post_dev, comb_dev);
    else
        dsv4_hc_post_kernel<1, HC_MAX>
            <<<blocks1, 256, 0, st>>>(*d, n, x_dev, *src, post_dev, comb_dev);
    return dsv4_cuda_launch_status();
}

/* dsv4_hc_collapse_kernel: the blocks of a cluster each own a slice of the hidden columns
 * (all hc_mult streams of them) of up to HC_TOK tokens. One block per token, after a GEMM
 * for the mix projection, left a batch-1 step's 86 calls on one SM each (~45 us a call on
 * an H200 under ncu) and the GEMM (24 outputs over 16k inputs: 8 blocks) at ~190 us a call
 * at batch 64; a cluster per token whose threads walked their columns in a loop of unknown
 * trip count, one dependent load round after another, 55 us a call at batch 64. */
#define HC_SLICES 8
#define HC_TOK 4 /* tokens a cluster takes: each fn value loaded serves all of them */
/* mix outputs a pass over the block's columns accumulates, for tok tokens a cluster: a
 * single token's 24 (hc_mult 4) in two passes, four tokens' in three (within the 128
 * registers that let two blocks share an SM: with one, 16 clusters of 8 did not all fit
 * on an H200 at once) */
#define HC_MIXG(tok) ((tok) == 1 ? 12 : 8)
#define HC_SG 4 /* streams a thread loads together */
#define HC_WARPS (DSV4_CUDA_BLOCK / 32)

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

/* The block's sum of each thread's v[k], k < K, in a fixed order (warp butterflies, then
 * the warps in order), returned to thread k; wbuf holds HC_WARPS x K floats. */
template <uint32_t K> __device__ static float dsv4_hc_block_sums(const float (&v)[K], float *wbuf)
{
    uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (uint32_t k = 0; k < K; k++) {
        float s = v[k];
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0)
            wbuf[warp * K + k] = s;
    }
    __syncthreads();
    float s = 0.0f;
    if (threadIdx.x < K)
        for (uint32_t w = 0; w < HC_WARPS; w++)
            s += wbuf[w * K + threadIdx.x];
    __syncthreads(); /* wbuf is free for the next call */
    return s;
}

/* What a collapse reads and writes: the streams of token t are X[rows ? rows[t] : t]; the
 * head's (head set) pre comes from fn alone (dsv4_k_hc_head_pre, scale hscale) and stays
 * in the kernel, the layers' pre (dsv4_k_hc_mix's, scale[0]) and z, the mix's input, are
 * written. */
struct dsv4_hc_args {
    const float *x;
    const uint32_t *rows;
    const float *fn, *base, *scale, *norm;
    float hscale;
    float *pre, *z, *u;
};

/* Cluster y takes tokens [tpc y, tpc y + tpc) (tpc <= TOK), block b the hidden columns
 * [b w, b w + w) of their streams, w = ceil(H / HC_SLICES); dynamic shared memory: TOK
 * x w floats. Each thread takes columns h0 + tid + 256 i and for each issues the loads of
 * HC_SG streams of every token and of HC_MIXG(TOK) rows of fn together, then sums the squares
 * and the products with fn; the block adds the threads' sums in a fixed order, the cluster
 * the blocks' in block order. Every block then runs the same mix (warp k for token k; the
 * same inputs, so the same bits), collapses and normalises its own columns, the norm's sum
 * again over the cluster. A token's sums never depend on the others in its cluster (absent
 * ones repeat the last token and are not written), so its bits are its row's alone. */
template <bool HEAD, uint32_t TOK, uint32_t NM>
__global__ static void __cluster_dims__(HC_SLICES, 1, 1) __launch_bounds__(DSV4_CUDA_BLOCK, 2)
    dsv4_hc_collapse_kernel(dsv4_cuda_dims d, uint32_t n, uint32_t tpc, dsv4_hc_args a)
{
    extern __shared__ float su[];
    const uint32_t MG = HC_MIXG(TOK);
    __shared__ float wbuf[HC_WARPS * TOK * MG], part[2][TOK];
    __shared__ float zpart[TOK][(2 + NM) * NM], sz[TOK][(2 + NM) * NM];
    __shared__ float spre[TOK][NM];
    cg::cluster_group cl = cg::this_cluster();
    uint32_t b = cl.block_rank(), t0 = blockIdx.y * tpc, tt = min(tpc, n - t0);
    uint32_t N = d.hc_mult, H = d.hidden, NH = N * H, mix = HEAD ? N : (2 + N) * N;
    uint32_t tid = threadIdx.x, nt = blockDim.x;
    uint32_t w = (H + HC_SLICES - 1) / HC_SLICES, h0 = b * w, h1 = min(H, h0 + w);
    const float *xt[TOK];
#pragma unroll
    for (uint32_t k = 0; k < TOK; k++) {
        uint32_t t = t0 + min(k, tt - 1);
        xt[k] = a.x + (size_t)(a.rows ? a.rows[t] : t) * NH;
    }

    float ss[TOK] = {};
    for (uint32_t i0 = 0; i0 < mix; i0 += MG) {
        float acc[TOK * MG] = {};
        for (uint32_t h = h0 + tid; h < h1; h += nt)
            for (uint32_t j0 = 0; j0 < N; j0 += HC_SG) {
                float xv[TOK][HC_SG], fv[MG][HC_SG];
#pragma unroll
                for (uint32_t j = 0; j < HC_SG; j++) {
                    bool ok = j0 + j < N;
                    size_t off = (size_t)(j0 + j) * H + h;
#pragma unroll
                    for (uint32_t k = 0; k < TOK; k++)
                        xv[k][j] = ok ? xt[k][off] : 0.0f;
#pragma unroll
                    for (uint32_t g = 0; g < MG; g++)
                        fv[g][j] = ok && i0 + g < mix ? a.fn[(size_t)(i0 + g) * NH + off] : 0.0f;
                }
#pragma unroll
                for (uint32_t j = 0; j < HC_SG; j++)
#pragma unroll
                    for (uint32_t k = 0; k < TOK; k++) {
                        if (i0 == 0)
                            ss[k] = fmaf(xv[k][j], xv[k][j], ss[k]);
#pragma unroll
                        for (uint32_t g = 0; g < MG; g++)
                            acc[k * MG + g] = fmaf(fv[g][j], xv[k][j], acc[k * MG + g]);
                    }
            }
        float z = dsv4_hc_block_sums<TOK * MG>(acc, wbuf);
        if (tid < TOK * MG && i0 + tid % MG < mix)
            zpart[tid / MG][i0 + tid % MG] = z;
    }
    float sq = dsv4_hc_block_sums<TOK>(ss, wbuf);
    if (tid < TOK)
        part[0][tid] = sq;
    cl.sync();
    for (uint32_t i = tid; i < tt * mix; i += nt) {
        uint32_t k = i / mix, m = i % mix;
        float r = 1.0f / sqrtf(dsv4_cluster_sum(cl, &part[0][k]) / (float)NH + d.eps);
        sz[k][m] = dsv4_cluster_sum(cl, &zpart[k][m]) * r;
    }
    __syncthreads();
    float pscale = HEAD ? a.hscale : a.scale[0];
    for (uint32_t i = tid; i < tt * N; i += nt)
        spre[i / N][i % N] = dsv4_hc_pre_of(sz[i / N], a.base, pscale, i % N, d.hc_eps);
    if (!HEAD && b == 0)
        for (uint32_t i = tid; i < tt * mix; i += nt)
            a.z[(size_t)(t0 + i / mix) * mix + i % mix] = sz[i / mix][i % mix];
    __syncthreads();
    if (!HEAD && b == 0)
        for (uint32_t i = tid; i < tt * N; i += nt)
            a.pre[(size_t)(t0 + i / N) * N + i % N] = spre[i / N][i % N];

    float us[TOK] = {};
    for (uint32_t h = h0 + tid; h < h1; h += nt)
#pragma unroll
        for (uint32_t k = 0; k < TOK; k++) {
            float s = 0;
#pragma unroll
            for (uint32_t j = 0; j < NM; j++) /* the loads together, not one by one */
                if (j < N)
                    s += spre[k][j] * xt[k][(size_t)j * H + h];
            su[k * w + h - h0] = s;
            us[k] = fmaf(s, s, us[k]);
        }
    float uq = dsv4_hc_block_sums<TOK>(us, wbuf);
    if (tid < TOK)
        part[1][tid] = uq;
    cl.sync();
    for (uint32_t k = 0; k < tt; k++) {
        float ru = 1.0f / sqrtf(dsv4_cluster_sum(cl, &part[1][k]) / (float)H + d.eps);
        for (uint32_t h = h0 + tid; h < h1; h += nt)
            a.u[(size_t)(t0 + k) * H + h] = a.norm[h] * (su[k * w + h - h0] * ru);
    }
    cl.sync(); /* no block leaves while another may still read its shared memory */
}

/* Tokens a cluster takes: one while there are at most 16 (16 clusters, 128 blocks, fill
 * the GPU better than fewer, fuller ones), up to HC_TOK beyond. Either kernel sums a
 * token's values in the same order: the same bits. NM: the streams the loops run over. */
template <bool HEAD, uint32_t NM>
static void dsv4_hc_collapse_go(const dsv4_cuda_dims *d, uint32_t n, const dsv4_hc_args &a,
                                cudaStream_t st)
{
    uint32_t tpc = (n + 15) / 16 < HC_TOK ? (n + 15) / 16 : HC_TOK;
    size_t w = (d->hidden + HC_SLICES - 1) / HC_SLICES;
    dim3 grid(HC_SLICES, (n + tpc - 1) / tpc);
    if (tpc == 1)
        dsv4_hc_collapse_kernel<HEAD, 1, NM>
            <<<grid, DSV4_CUDA_BLOCK, w * sizeof(float), st>>>(*d, n, 1, a);
    else
        dsv4_hc_collapse_kernel<HEAD, HC_TOK, NM>
            <<<grid, DSV4_CUDA_BLOCK, HC_TOK * w * sizeof(float), st>>>(*d, n, tpc, a);
}

static int dsv4_hc_collapse_launch(const dsv4_cuda_dims *d, uint32_t n, bool head,
                                   const dsv4_hc_args &a, void *stream)
{
    if (n == 0)
        return 0;
    if (d->hc_mult > HC_MAX)
        return -EINVAL;
    cudaStream_t st = (cudaStream_t)stream;
    bool four = d->hc_mult <= 4;
    if (head)
        four ? dsv4_hc_collapse_go<true, 4>(d, n, a, st)
             : dsv4_hc_collapse_go<true, HC_MAX>(d, n, a, st);
    else
        four ? dsv4_hc_collapse_go<false, 4>(d, n, a, st)
             : dsv4_hc_collapse_go<false, HC_MAX>(d, n, a, st);
    return dsv4_cuda_launch_status();
}

int dsv4_cuda_hc_pre(const dsv4_cuda_dims *d, uint32_t n, const float *x_dev, const float *fn_dev,
                     const float *base_dev, const float *scale_dev, const float *norm_dev,
                     float *pre_dev, float *z_dev, float *u_dev, void *stream)
{
    dsv4_hc_args a = {x_dev,    NULL, fn_dev,  base_dev, scale_dev,
                      norm_dev, 0.0f, pre_dev, z_dev,    u_dev};
    return dsv4_hc_collapse_launch(d, n, false, a, stream);
}

int dsv4_cuda_hc_head(const dsv4_cuda_dims *d, uint32_t n, const uint32_t *rows_dev,
                      const float *x_dev, const float *fn_dev, const float *base_dev, float scale,
                      const float *norm_dev, float *u_dev, void *stream)
{
    dsv4_hc_args a = {x_dev, rows_dev, fn_dev, base_dev, NULL, norm_dev, scale, NULL, NULL, u_dev};
    return dsv4_hc_collapse_launch(d, n, true, a, stream);
}

/* Token t by warp t % 8 of block t / 8 (dsv4_hc_mix_warp). */
template <uint32_t NM>
__global__ static void dsv4_hc_mix_kernel(dsv4_cuda_dims d, uint32_t n, const float *z,
                                          const float *base, const float *scale, float *post,
                                          float *comb)
{
    uint32_t t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, N = d.hc_mult;
    if (t >= n)
        return;
    dsv4_hc_mix_warp<NM>(z + (size_t)t * (2 + N) * N, base, scale, N, d.hc_iters, d.hc_eps,
                         post + (size_t)t * N, comb + (size_t)t * N * N);
}

int dsv4_cuda_hc_mix(const dsv4_cuda_dims *d, uint32_t n, const float *z_dev, const float *base_dev,
                     const float *scale_dev, float *post_dev, float *comb_dev, void *stream)
{
    if (n == 0)
        return 0;
    if (d->hc_mult > HC_MAX)
        return -EINVAL;
    unsigned blocks = (n + HC_WARPS - 1) / HC_WARPS;
    cudaStream_t st = (cudaStream_t)stream;
    if (d->hc_mult <= 4)
        dsv4_hc_mix_kernel<4><<<blocks, DSV4_CUDA_BLOCK, 0, st>>>(*d, n, z_dev, base_dev, scale_dev,
                                                                  post_dev, comb_dev);
    else
        dsv4_hc_mix_kernel<HC_MAX><<<blocks, DSV4_CUDA_BLOCK, 0, st>>>(
            *d, n, z_dev, base_dev, scale_dev, post_dev, comb_dev);
    return dsv4_cuda_launch_status();
}

__global__ static void dsv4_rmsnorm_kernel(uint32_t len, size_t stride, float *x, const float *w,
                                           float eps)
{
    __shared__ float red[32];
    float *row = x + (size_t)blockIdx.x * stride;
    float r = dsv4_block_rms_scale(row, len, eps, red);
    for (uint32_t i = threadIdx.x; i < len; i += blockDim.x)
        row[i] = w ? w[i] * (row[i] * r) : row[i] * r;
}

int dsv4_cuda_rmsnorm_rows(uint32_t n, uint32_t len, size_t stride, float *x_dev,
                           const float *w_dev, float eps, void *stream)
{
    if (n == 0)
        return 0;
    dsv4_rmsnorm_kernel<<<n, DSV4_CUDA_BLOCK, 0, (cudaStream_t)stream>>>(len, stride, x_dev, w_dev,
                                                                         eps);
    return dsv4_cuda_launch_status();
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

/* dsv4_k_route of token t, by one thread: score is the token's row of router logits, which
 * become its scores in place (the thread's own scratch). */
__device__ static void dsv4_route_token(uint32_t t, const int32_t *tok, float *score,
                                        const float *bias, const int32_t *tid2eid, uint32_t E,
                                        uint32_t k, dsv4_k_scoring scoring, float routed_scale,
                                        int32_t *ids, float *w)
{
    if (scoring == DSV4_K_SOFTMAX) {
        float m = -INFINITY, sum = 0;
        for (uint32_t e = 0; e < E; e++)
            m = score[e] > m ? score[e] : m;
        for (uint32_t e = 0; e < E; e++) {
            score[e] = expf(score[e] - m);
            sum += score[e];
        }
        for (uint32_t e = 0; e < E; e++)
            score[e] /= sum;
    } else {
        for (uint32_t e = 0; e < E; e++)
            score[e] = scoring == DSV4_K_SIGMOID ? 1.0f / (1.0f + expf(-score[e]))
                                                 : sqrtf(dsv4_softplus(score[e]));
    }
    int32_t *id = ids + (size_t)t * k;
    if (tid2eid) {
        for (uint32_t i = 0; i < k; i++)
            id[i] = tid2eid[(size_t)tok[t] * k + i];
    } else {
        /* the bias steers the choice only; the weights use the unbiased scores. k rounds of
         * "best of the rest" give dsv4_k_topk's order (k is small) */
        for (uint32_t i = 0; i < k; i++) {
            int32_t best = -1;
            float cb = 0.0f;
            for (uint32_t e = 0; e < E; e++) {
                bool taken = false;
                for (uint32_t j = 0; j < i; j++)
                    taken = taken || id[j] == (int32_t)e;
                float ce = bias ? score[e] + bias[e] : score[e];
                if (!taken && (best < 0 || dsv4_better(ce, cb, e, (uint32_t)best))) {
                    best = (int32_t)e;
                    cb = ce;
                }
            }
            id[i] = best;
        }
    }
    float sum = 0;
    for (uint32_t i = 0; i < k; i++)
        sum += score[id[i]];
    for (uint32_t i = 0; i < k; i++)
        w[(size_t)t * k + i] = score[id[i]] / (sum + 1e-20f) * routed_scale;
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
};

__global__ static void dsv4_route_kernel(dsv4_route_args a)
{
    uint32_t t = blockIdx.x;
    dsv4_route_token(t, a.tok, a.logits + (size_t)t * a.stride, a.bias, a.tid2eid, a.E, a.k,
                     a.scoring, a.routed_scale, a.ids, a.w);
}

/* The pairs grouped by expert in pair order, by one block of DSV4_GROUP_THREADS; shared
 * memory: 2 E + DSV4_GROUP_THREADS words. The experts' sizes are counted by shared atomics
 * (integer counts: the order of the adds does not matter), thread 0 turns them into
 * offsets; then, a chunk of pairs at a time staged in shared memory, each pair's row is its
 * expert's offset plus the pairs of that expert in earlier chunks plus those before it in
 * its chunk, so rows follow pair order. (Thread e walking all the pairs for expert e read
 * every id from global memory twice, one load after another: ~30 us at 384 pairs.) With
 * route, the block routes the tokens first, a thread a token (a launch fewer where a
 * step's tokens fit one block). */
#define DSV4_GROUP_THREADS 1024
__global__ static void dsv4_group_kernel(dsv4_route_args a, uint32_t n, bool route)
{
    extern __shared__ uint32_t gsh[];
    uint32_t E = a.E, pairs = n * a.k;
    uint32_t *cnt = gsh, *next = gsh + E, *chunk = gsh + 2 * E, tid = threadIdx.x;
    if (route)
        for (uint32_t t = tid; t < n; t += blockDim.x)
            dsv4_route_token(t, a.tok, a.logits + (size_t)t * a.stride, a.bias, a.tid2eid, E, a.k,
                             a.scoring, a.routed_scale, a.ids, a.w);
    for (uint32_t e = tid; e < E; e += blockDim.x)
        cnt[e] = 0;
    __syncthreads(); /* the ids are written */
    const int32_t *ids = a.ids;
    for (uint32_t i = tid; i < pairs; i += blockDim.x)
        if ((uint32_t)ids[i] < E) /* forward.c refuses bad hash ids; never count outside cnt */
            atomicAdd(&cnt[ids[i]], 1u);
    __syncthreads();
    if (tid == 0) {
        uint32_t acc = 0;
        for (uint32_t e = 0; e < E; e++) {
            a.off[e] = next[e] = acc;
            acc += cnt[e];
        }
        a.off[E] = acc;
    }
    for (uint32_t c = 0; c < pairs; c += blockDim.x) {
        uint32_t i = c + tid;
        __syncthreads(); /* next[] settled, the last chunk read */
        uint32_t e = i < pairs ? (uint32_t)ids[i] : UINT32_MAX;
        bool placed = e < E;
        chunk[tid] = e;
        __syncthreads();
        if (placed) {
            uint32_t row = next[e];
            for (uint32_t j = 0; j < tid; j++)
                row += chunk[j] == e;
            a.assign[row] = i;
            a.epos[i] = row;
        }
        __syncthreads();
        if (placed)
            atomicAdd(&next[e], 1u);
    }
}

int dsv4_cuda_route(const dsv4_cuda_step *s, float *logits_dev, size_t logits_stride,
                    const float *bias_dev, const int32_t *tid2eid_dev, uint32_t n_experts,
                    uint32_t k, dsv4_k_scoring scoring, float routed_scale, int32_t *ids_dev,
                    float *w_dev, uint32_t *off_dev, uint32_t *assign_dev, uint32_t *epos_dev,
                    void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    uint32_t n = s->n_tok;
    if (n == 0)
        return 0;
    if (k == 0 || k > n_experts)
        return -EINVAL;
    dsv4_route_args a = {s->tok,    logits_dev, logits_stride, bias_dev,     tid2eid_dev,
                         n_experts, k,          scoring,       routed_scale, ids_dev,
                         w_dev,     off_dev,    assign_dev,    epos_dev};
    bool fused = n <= DSV4_GROUP_THREADS;
    if (!fused) {
        dsv4_route_kernel<<<n, 1, 0, st>>>(a);
        int rc = dsv4_cuda_launch_status();
        if (rc != 0)
            return rc;
    }
    dsv4_group_kernel<<<1, DSV4_GROUP_THREADS,
                        (2 * n_experts + DSV4_GROUP_THREADS) * sizeof(uint32_t), st>>>(a, n, fused);
    return dsv4_cuda_launch_status();
}

__global__ static void dsv4_moe_gather_kernel(uint32_t k, uint32_t H, const float *u,
                                              const uint32_t *assign, float *xe)
{
    uint32_t j = blockIdx.x;
    const float *src = u + (size_t)(assign[j] / k) * H;
    for (uint32_t h = threadIdx.x; h < H; h += blockDim.x)
        xe[(size_t)j * H + h] = src[h];
}

int dsv4_cuda_moe_gather(uint32_t n, uint32_t k, uint32_t hidden, const float *u_dev,
                         const uint32_t *assign_dev, float *xe_dev, void *stream)
{
    if (n * k == 0)
        return 0;
    dsv4_moe_gather_kernel<<<n * k, DSV4_CUDA_BLOCK, 0, (cudaStream_t)stream>>>(k, hidden, u_dev,
                                                                                assign_dev, xe_dev);
    return dsv4_cuda_launch_status();
}

/* What one SwiGLU launch covers: its sets of rows, set 1's rows after set 0's. */
struct dsv4_swiglu_args {
    dsv4_cuda_swiglu_rows set[DSV4_CUDA_SWIGLU_SETS];
    uint32_t n_sets, rows, inter;
    float limit;
    dsv4_k_act act;
};

/* Thread x of block (x, y): column 256 x + threadIdx.x of rows y, y + gridDim.y, ... of the
 * sets together. The arguments are __grid_constant__: a set picked by a runtime index from
 * an ordinary parameter made every thread copy the arguments to local memory first (24-28
 * us a call at batch 64 on an H200 against 2 x 3.7 for two launches of one set each). */
__global__ static void dsv4_swiglu_kernel(const __grid_constant__ dsv4_swiglu_args a)
{
    uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= a.inter)
        return;
    for (uint32_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
        uint32_t j = a.n_sets > 1 && r >= a.set[0].n, rr = j ? r - a.set[0].n : r;
        const dsv4_cuda_swiglu_rows &q = a.set[j];
        float g = q.g[rr * q.stride + c], u = q.u[rr * q.stride + c], limit = a.limit;
        if (limit > 0) {
            g = fminf(g, limit);
            u = fminf(fmaxf(u, -limit), limit);
        }
        float act = a.act == DSV4_K_GELU ? 0.5f * g * (1.0f + erff(g * (float)M_SQRT1_2))
                                         : g / (1.0f + expf(-g));
        q.h[(size_t)rr * a.inter + c] = act * u;
    }
}

int dsv4_cuda_swiglu(const dsv4_cuda_swiglu_rows *sets, uint32_t n_sets, uint32_t inter,
                     float limit, dsv4_k_act act, void *stream)
{
    if (n_sets > DSV4_CUDA_SWIGLU_SETS || (n_sets > 0 && inter == 0))
        return -EINVAL;
    dsv4_swiglu_args a = {};
    for (uint32_t j = 0; j < n_sets; j++) {
        a.set[j] = sets[j];
        a.rows += sets[j].n;
    }
    a.n_sets = n_sets, a.inter = inter, a.limit = limit, a.act = act;
    if (a.rows == 0)
        return 0;
    dim3 grid((inter + 255) / 256, a.rows < 65535 ? a.rows : 65535);
    dsv4_swiglu_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(a);
    return dsv4_cuda_launch_status();
}
