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

/* dsv4_k_hc_mix of one token by one warp: lane i < n writes pre_i and post_i and keeps row
 * i of comb in registers; a row sum is the lane's own, a column sum takes the rows from
 * their lanes by shuffles. Every sum is the CPU's, over the same values in the same order,
 * so every value has the bits of one thread doing it all. All 32 lanes of the warp call it.
 * (A thread per comb value with barriers between passes took 3 block barriers a pass, 40
 * passes a token; thread 0 alone, ~60 us a token on an H200.) */
__device__ static void dsv4_hc_mix_warp(const float *z, const float *base, const float *scale,
                                        uint32_t n, uint32_t iters, float eps, float *pre,
                                        float *post, float *comb)
{
    uint32_t lane = threadIdx.x % 32, i = lane < n ? lane : 0;
    if (lane < n) {
        pre[lane] = dsv4_sigmoid(scale[0] * z[lane] + base[lane]) + eps;
        post[lane] = 2.0f * dsv4_sigmoid(scale[1] * z[n + lane] + base[n + lane]);
    }
    const float *zc = z + 2 * n + i * n, *bc = base + 2 * n + i * n;
    float row[HC_MAX], m = -INFINITY, sum = 0;
#pragma unroll
    for (uint32_t j = 0; j < HC_MAX; j++)
        if (j < n) {
            row[j] = scale[2] * zc[j] + bc[j];
            m = row[j] > m ? row[j] : m;
        }
#pragma unroll
    for (uint32_t j = 0; j < HC_MAX; j++)
        if (j < n) {
            row[j] = expf(row[j] - m);
            sum += row[j];
        }
#pragma unroll
    for (uint32_t j = 0; j < HC_MAX; j++)
        if (j < n)
            row[j] = row[j] / sum + eps;
    /* Sinkhorn: a column pass first, then (iters - 1) x (row pass, column pass) */
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) {
            float rs = 0;
#pragma unroll
            for (uint32_t j = 0; j < HC_MAX; j++)
                if (j < n)
                    rs += row[j];
#pragma unroll
            for (uint32_t j = 0; j < HC_MAX; j++)
                if (j < n)
                    row[j] = row[j] / (rs + eps);
        }
#pragma unroll
        for (uint32_t j = 0; j < HC_MAX; j++)
            if (j < n) {
                float cs = 0;
                for (uint32_t k = 0; k < n; k++)
                    cs += __shfl_sync(0xffffffffu, row[j], k);
                row[j] = row[j] / (cs + eps);
            }
    }
    if (lane < n)
#pragma unroll
        for (uint32_t j = 0; j < HC_MAX; j++)
            if (j < n)
                comb[i * n + j] = row[j];
}

/* u = sum_j pre_j X[j] into shared u, then u <- rmsnorm(u) * norm, written to out. */
__device__ static void dsv4_collapse_norm(const float *x, const float *pre, uint32_t n, uint32_t H,
                                          const float *norm, float eps, float *u, float *red,
                                          float *out)
{
    for (uint32_t h = threadIdx.x; h < H; h += blockDim.x) {
        float s = 0;
        for (uint32_t j = 0; j < n; j++)
            s += pre[j] * x[(size_t)j * H + h];
        u[h] = s;
    }
    __syncthreads();
    float r = dsv4_block_rms_scale(u, H, eps, red);
    for (uint32_t h = threadIdx.x; h < H; h += blockDim.x)
        out[h] = norm[h] * (u[h] * r);
}

/* dsv4_hc_pre_kernel: the blocks of one token's cluster, each owning a slice of the hidden
 * columns (all hc_mult streams of them). One block per token, after a GEMM for the mix
 * projection, left a batch-1 step's 86 calls on one SM each (~45 us a call on an H200
 * under ncu) and the GEMM (24 outputs over 16k inputs: 8 blocks) at ~190 us a call at
 * batch 64. */
#define HC_SLICES 8
#define HC_MIXG 8 /* mix outputs a pass over the block's columns accumulates */

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

/* A cluster of HC_SLICES blocks per token; block b takes hidden columns [b w, b w + w) of
 * every stream, w = ceil(H / HC_SLICES); dynamic shared memory: w floats. Each block sums
 * its columns' squares and their products with the mix projection fn (f32 [mix][N H]),
 * each in a fixed order (per thread, then warp butterflies, then warps in order); the
 * cluster adds the blocks' sums in block order, so a token's bits never depend on the
 * batch. Every block then runs the same mix (the same inputs, so the same bits), collapses
 * and normalises its own columns, the norm's sum again over the cluster. */
__global__ static void __cluster_dims__(HC_SLICES, 1, 1)
    dsv4_hc_pre_kernel(dsv4_cuda_dims d, const float *x, const float *fn, const float *base,
                       const float *scale, const float *norm, float *pre, float *post, float *comb,
                       float *u)
{
    extern __shared__ float su[];
    __shared__ float red[32], part[2], wsum[DSV4_CUDA_BLOCK / 32][HC_MIXG];
    __shared__ float spre[HC_MAX], spost[HC_MAX], zpart[(2 + HC_MAX) * HC_MAX];
    __shared__ float sz[(2 + HC_MAX) * HC_MAX], scomb[HC_MAX * HC_MAX];
    cg::cluster_group cl = cg::this_cluster();
    uint32_t b = cl.block_rank(), t = blockIdx.y, N = d.hc_mult, H = d.hidden, NH = N * H;
    uint32_t mix = (2 + N) * N, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    uint32_t w = (H + HC_SLICES - 1) / HC_SLICES, h0 = b * w, h1 = min(H, h0 + w);
    const float *xt = x + (size_t)t * NH;

    float ss = 0.0f;
    for (uint32_t i0 = 0; i0 < mix; i0 += HC_MIXG) {
        float acc[HC_MIXG] = {};
        for (uint32_t j = 0; j < N; j++)
            for (uint32_t h = h0 + tid; h < h1; h += blockDim.x) {
                float xv = xt[(size_t)j * H + h];
                if (i0 == 0)
                    ss = fmaf(xv, xv, ss);
#pragma unroll
                for (uint32_t g = 0; g < HC_MIXG; g++)
                    if (i0 + g < mix)
                        acc[g] = fmaf(fn[(size_t)(i0 + g) * NH + (size_t)j * H + h], xv, acc[g]);
            }
#pragma unroll
        for (uint32_t g = 0; g < HC_MIXG; g++) {
            float v = acc[g];
            for (int o = 16; o > 0; o >>= 1)
                v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0)
                wsum[warp][g] = v;
        }
        __syncthreads();
        if (tid < HC_MIXG && i0 + tid < mix) {
            float v = 0.0f;
            for (uint32_t k = 0; k < DSV4_CUDA_BLOCK / 32; k++)
                v += wsum[k][tid];
            zpart[i0 + tid] = v;
        }
        __syncthreads();
    }
    ss = dsv4_block_sum(ss, red);
    if (tid == 0)
        part[0] = ss;
    cl.sync();
    float r = 1.0f / sqrtf(dsv4_cluster_sum(cl, &part[0]) / (float)NH + d.eps);
    for (uint32_t i = tid; i < mix; i += blockDim.x)
        sz[i] = dsv4_cluster_sum(cl, &zpart[i]) * r;
    __syncthreads();
    if (tid < 32)
        dsv4_hc_mix_warp(sz, base, scale, N, d.hc_iters, d.hc_eps, spre, spost, scomb);
    __syncthreads();
    if (b == 0) {
        for (uint32_t i = tid; i < N * N; i += blockDim.x)
            comb[(size_t)t * N * N + i] = scomb[i];
        for (uint32_t j = tid; j < N; j += blockDim.x) {
            pre[(size_t)t * N + j] = spre[j];
            post[(size_t)t * N + j] = spost[j];
        }
    }

    float us = 0.0f;
    for (uint32_t h = h0 + tid; h < h1; h += blockDim.x) {
        float s = 0;
        for (uint32_t j = 0; j < N; j++)
            s += spre[j] * xt[(size_t)j * H + h];
        su[h - h0] = s;
        us = fmaf(s, s, us);
    }
    us = dsv4_block_sum(us, red);
    if (tid == 0)
        part[1] = us;
    cl.sync();
    float ru = 1.0f / sqrtf(dsv4_cluster_sum(cl, &part[1]) / (float)H + d.eps);
    for (uint32_t h = h0 + tid; h < h1; h += blockDim.x)
        u[(size_t)t * H + h] = norm[h] * (su[h - h0] * ru);
    cl.sync(); /* no block leaves while another may still read its shared memory */
}

int dsv4_cuda_hc_pre(const dsv4_cuda_dims *d, uint32_t n, const float *x_dev, const float *fn_dev,
                     const float *base_dev, const float *scale_dev, const float *norm_dev,
                     float *pre_dev, float *post_dev, float *comb_dev, float *u_dev, void *stream)
{
    if (n == 0)
        return 0;
    if (d->hc_mult > HC_MAX)
        return -EINVAL;
    size_t w = (d->hidden + HC_SLICES - 1) / HC_SLICES;
    dsv4_hc_pre_kernel<<<dim3(HC_SLICES, n), DSV4_CUDA_BLOCK, w * sizeof(float),
                         (cudaStream_t)stream>>>(*d, x_dev, fn_dev, base_dev, scale_dev, norm_dev,
                                                 pre_dev, post_dev, comb_dev, u_dev);
    return dsv4_cuda_launch_status();
}

/* What hc_post adds to the streams: a row y, or (eo set) the MoE's output, computed where
 * it is used: y = sum_i w[t][i] eo[epos[t k + i]] (i ascending) + sh (dsv4_k_moe_combine),
 * which saved a launch and a write and read of y a layer. */
struct dsv4_post_src {
    const float *y; /* the row, or the shared expert's output */
    uint32_t k;
    const float *w;
    const uint32_t *epos;
    const float *eo;
};

__global__ static void dsv4_hc_post_kernel(dsv4_cuda_dims d, uint32_t n, float *x,
                                           dsv4_post_src src, const float *post, const float *comb)
{
    uint32_t N = d.hc_mult, H = d.hidden;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * H)
        return;
    size_t t = i / H, h = i % H;
    float *xt = x + t * N * H;
    const float *pt = post + t * N, *ct = comb + t * N * N;
    float y = src.y[i];
    if (src.eo) {
        float acc = 0;
        for (uint32_t c = 0; c < src.k; c++)
            acc += src.w[t * src.k + c] * src.eo[(size_t)src.epos[t * src.k + c] * H + h];
        y = acc + y;
    }
    float col[HC_MAX];
    for (uint32_t j = 0; j < N; j++)
        col[j] = xt[j * H + h];
    for (uint32_t k = 0; k < N; k++) {
        float s = pt[k] * y;
        for (uint32_t j = 0; j < N; j++)
            s += ct[j * N + k] * col[j];
        xt[k * H + h] = s;
    }
}

static int dsv4_hc_post_launch(const dsv4_cuda_dims *d, uint32_t n, float *x_dev, dsv4_post_src src,
                               const float *post_dev, const float *comb_dev, void *stream)
{
    size_t total = (size_t)n * d->hidden;
    if (total == 0)
        return 0;
    dsv4_hc_post_kernel<<<(unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        *d, n, x_dev, src, post_dev, comb_dev);
    return dsv4_cuda_launch_status();
}

int dsv4_cuda_hc_post(const dsv4_cuda_dims *d, uint32_t n, float *x_dev, const float *y_dev,
                      const float *post_dev, const float *comb_dev, void *stream)
{
    return dsv4_hc_post_launch(d, n, x_dev, dsv4_post_src{y_dev, 0, NULL, NULL, NULL}, post_dev,
                               comb_dev, stream);
}

int dsv4_cuda_moe_combine_post(const dsv4_cuda_dims *d, uint32_t n, uint32_t k, const float *w_dev,
                               const uint32_t *epos_dev, const float *eo_dev, const float *sh_dev,
                               float *x_dev, const float *post_dev, const float *comb_dev,
                               void *stream)
{
    return dsv4_hc_post_launch(d, n, x_dev, dsv4_post_src{sh_dev, k, w_dev, epos_dev, eo_dev},
                               post_dev, comb_dev, stream);
}

__global__ static void dsv4_hc_head_kernel(dsv4_cuda_dims d, const uint32_t *rows, const float *x,
                                           const float *fn, const float *base, float scale,
                                           const float *norm, float *u)
{
    extern __shared__ float su[];
    __shared__ float red[32], spre[HC_MAX];
    uint32_t N = d.hc_mult, H = d.hidden, NH = N * H;
    const float *xt = x + (size_t)rows[blockIdx.x] * NH;
    float r = dsv4_block_rms_scale(xt, NH, d.eps, red);
    for (uint32_t j = 0; j < N; j++) {
        float s = 0;
        for (uint32_t i = threadIdx.x; i < NH; i += blockDim.x)
            s = fmaf(fn[(size_t)j * NH + i], xt[i], s);
        s = dsv4_block_sum(s, red);
        if (threadIdx.x == 0)
            spre[j] = dsv4_sigmoid(scale * (s * r) + base[j]) + d.hc_eps;
    }
    __syncthreads();
    dsv4_collapse_norm(xt, spre, N, H, norm, d.eps, su, red, u + (size_t)blockIdx.x * H);
}

int dsv4_cuda_hc_head(const dsv4_cuda_dims *d, uint32_t n, const uint32_t *rows_dev,
                      const float *x_dev, const float *fn_dev, const float *base_dev, float scale,
                      const float *norm_dev, float *u_dev, void *stream)
{
    if (n == 0)
        return 0;
    if (d->hc_mult > HC_MAX)
        return -EINVAL;
    dsv4_hc_head_kernel<<<n, DSV4_CUDA_BLOCK, d->hidden * sizeof(float), (cudaStream_t)stream>>>(
        *d, rows_dev, x_dev, fn_dev, base_dev, scale, norm_dev, u_dev);
    return dsv4_cuda_launch_status();
}

__global__ static void dsv4_rmsnorm_kernel(uint32_t len, float *x, const float *w, float eps)
{
    __shared__ float red[32];
    float *row = x + (size_t)blockIdx.x * len;
    float r = dsv4_block_rms_scale(row, len, eps, red);
    for (uint32_t i = threadIdx.x; i < len; i += blockDim.x)
        row[i] = w ? w[i] * (row[i] * r) : row[i] * r;
}

int dsv4_cuda_rmsnorm_rows(uint32_t n, uint32_t len, float *x_dev, const float *w_dev, float eps,
                           void *stream)
{
    if (n == 0)
        return 0;
    dsv4_rmsnorm_kernel<<<n, DSV4_CUDA_BLOCK, 0, (cudaStream_t)stream>>>(len, x_dev, w_dev, eps);
    return dsv4_cuda_launch_status();
}

/* ---- MoE ---------------------------------------------------------------------------------- */

/* kernels/cpu/moe.c's ranking: higher score first, then the lower index, NaN last. */
__device__ static inline bool dsv4_better(const float *s, uint32_t a, uint32_t b)
{
    if (isnan(s[a]) || isnan(s[b]))
        return !isnan(s[a]) || (isnan(s[b]) && a < b);
    return s[a] > s[b] || (s[a] == s[b] && a < b);
}

__device__ static inline float dsv4_softplus(float x)
{
    return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

/* One token per block, thread 0 routes (dsv4_k_route); shared memory: 2 E floats. */
__global__ static void dsv4_route_kernel(const int32_t *tok, const float *logits, const float *bias,
                                         const int32_t *tid2eid, uint32_t E, uint32_t k,
                                         dsv4_k_scoring scoring, float routed_scale, int32_t *ids,
                                         float *w)
{
    extern __shared__ float sm[];
    float *score = sm, *choice = sm + E;
    uint32_t t = blockIdx.x;
    const float *lg = logits + (size_t)t * E;
    if (threadIdx.x != 0)
        return;
    if (scoring == DSV4_K_SOFTMAX) {
        float m = -INFINITY, sum = 0;
        for (uint32_t e = 0; e < E; e++)
            m = lg[e] > m ? lg[e] : m;
        for (uint32_t e = 0; e < E; e++) {
            score[e] = expf(lg[e] - m);
            sum += score[e];
        }
        for (uint32_t e = 0; e < E; e++)
            score[e] /= sum;
    } else {
        for (uint32_t e = 0; e < E; e++)
            score[e] = scoring == DSV4_K_SIGMOID ? 1.0f / (1.0f + expf(-lg[e]))
                                                 : sqrtf(dsv4_softplus(lg[e]));
    }
    int32_t *id = ids + (size_t)t * k;
    if (tid2eid) {
        for (uint32_t i = 0; i < k; i++)
            id[i] = tid2eid[(size_t)tok[t] * k + i];
    } else {
        /* the bias steers the choice only; the weights use the unbiased scores. k rounds of
         * "best of the rest" give dsv4_k_topk's order (k is small) */
        for (uint32_t e = 0; e < E; e++)
            choice[e] = bias ? score[e] + bias[e] : score[e];
        for (uint32_t i = 0; i < k; i++) {
            int32_t best = -1;
            for (uint32_t e = 0; e < E; e++) {
                bool taken = false;
                for (uint32_t j = 0; j < i; j++)
                    taken = taken || id[j] == (int32_t)e;
                if (!taken && (best < 0 || dsv4_better(choice, e, (uint32_t)best)))
                    best = (int32_t)e;
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

/* The pairs grouped by expert in pair order. One block of DSV4_GROUP_THREADS; shared memory:
 * 2 E + DSV4_GROUP_THREADS words. The experts' sizes are counted by shared atomics (integer
 * counts: the order of the adds does not matter), thread 0 turns them into offsets; then,
 * a chunk of pairs at a time staged in shared memory, each pair's row is its expert's
 * offset plus the pairs of that expert in earlier chunks plus those before it in its chunk,
 * so rows follow pair order. (Thread e walking all the pairs for expert e read every id
 * from global memory twice, one load after another: ~30 us at 384 pairs.) */
#define DSV4_GROUP_THREADS 1024
__global__ static void dsv4_group_kernel(uint32_t pairs, const int32_t *ids, uint32_t E,
                                         uint32_t *off, uint32_t *assign, uint32_t *epos)
{
    extern __shared__ uint32_t gsh[];
    uint32_t *cnt = gsh, *next = gsh + E, *chunk = gsh + 2 * E, tid = threadIdx.x;
    for (uint32_t e = tid; e < E; e += blockDim.x)
        cnt[e] = 0;
    __syncthreads();
    for (uint32_t i = tid; i < pairs; i += blockDim.x)
        if ((uint32_t)ids[i] < E) /* forward.c refuses bad hash ids; never count outside cnt */
            atomicAdd(&cnt[ids[i]], 1u);
    __syncthreads();
    if (tid == 0) {
        uint32_t acc = 0;
        for (uint32_t e = 0; e < E; e++) {
            off[e] = next[e] = acc;
            acc += cnt[e];
        }
        off[E] = acc;
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
            assign[row] = i;
            epos[i] = row;
        }
        __syncthreads();
        if (placed)
            atomicAdd(&next[e], 1u);
    }
}

int dsv4_cuda_route(const dsv4_cuda_step *s, const float *logits_dev, const float *bias_dev,
                    const int32_t *tid2eid_dev, uint32_t n_experts, uint32_t k,
                    dsv4_k_scoring scoring, float routed_scale, int32_t *ids_dev, float *w_dev,
                    uint32_t *off_dev, uint32_t *assign_dev, uint32_t *epos_dev, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    if (s->n_tok == 0)
        return 0;
    if (k == 0 || k > n_experts)
        return -EINVAL;
    dsv4_route_kernel<<<s->n_tok, 32, 2 * n_experts * sizeof(float), st>>>(
        s->tok, logits_dev, bias_dev, tid2eid_dev, n_experts, k, scoring, routed_scale, ids_dev,
        w_dev);
    int rc = dsv4_cuda_launch_status();
    if (rc != 0)
        return rc;
    dsv4_group_kernel<<<1, DSV4_GROUP_THREADS,
                        (2 * n_experts + DSV4_GROUP_THREADS) * sizeof(uint32_t), st>>>(
        s->n_tok * k, ids_dev, n_experts, off_dev, assign_dev, epos_dev);
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

__global__ static void dsv4_swiglu_kernel(size_t n, const float *gate, const float *up, float limit,
                                          dsv4_k_act act, float *h)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float g = gate[i], u = up[i];
    if (limit > 0) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
    }
    float a =
        act == DSV4_K_GELU ? 0.5f * g * (1.0f + erff(g * (float)M_SQRT1_2)) : g / (1.0f + expf(-g));
    h[i] = a * u;
}

int dsv4_cuda_swiglu(size_t n, const float *g_dev, const float *u_dev, float limit, dsv4_k_act act,
                     float *h_dev, void *stream)
{
    if (n == 0)
        return 0;
    dsv4_swiglu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        n, g_dev, u_dev, limit, act, h_dev);
    return dsv4_cuda_launch_status();
}
