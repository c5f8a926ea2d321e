/* model_ffn.cu: the token-wise kernels around the blocks of the CUDA forward (model.h):
 * embedding, mHC collapse/expand and the head's collapse (spec §3.2), row RMSNorm, MoE
 * routing with the expert grouping, the clamped SwiGLU and the combine (spec §3.8). Each
 * follows its CPU twin in kernels/cpu (hc.c, moe.c, linalg.c) step for step. */
#include "kernels/cuda/model_common.cuh"

#define HC_MAX 16 /* streams (kernels/cpu/hc.c) */
/* dsv4_hc_mix_block gives each comb value its own thread */
static_assert(HC_MAX * HC_MAX <= DSV4_CUDA_BLOCK, "a block holds HC_MAX x HC_MAX threads");

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

/* dsv4_k_hc_mix of one token, shared by the block: thread j < n writes pre_j, thread
 * n + j post_j, thread i n + j < n n owns comb[i][j] (comb in shared memory). Each sum is
 * the CPU's, over the same values in the same order, recomputed by every thread of its row
 * or column, so every value has the bits one thread doing it all would give; barriers keep
 * a pass's reads before its writes. (Thread 0 alone took ~60 us a token on an H200,
 * every access of the 20 Sinkhorn passes waiting on the last.) */
__device__ static void dsv4_hc_mix_block(const float *z, const float *base, const float *scale,
                                         uint32_t n, uint32_t iters, float eps, float *pre,
                                         float *post, float *comb)
{
    uint32_t tid = threadIdx.x, i = tid / n, j = tid % n;
    bool own = tid < n * n;
    if (tid < n)
        pre[tid] = dsv4_sigmoid(scale[0] * z[tid] + base[tid]) + eps;
    else if (tid < 2 * n)
        post[tid - n] = 2.0f * dsv4_sigmoid(scale[1] * z[tid] + base[tid]);
    const float *zc = z + 2 * n, *bc = base + 2 * n;
    float v = 0;
    if (own)
        comb[tid] = scale[2] * zc[tid] + bc[tid];
    __syncthreads();
    if (own) {
        float m = -INFINITY;
        for (uint32_t k = 0; k < n; k++)
            m = comb[i * n + k] > m ? comb[i * n + k] : m;
        v = expf(comb[tid] - m);
    }
    __syncthreads();
    if (own)
        comb[tid] = v;
    __syncthreads();
    if (own) {
        float sum = 0;
        for (uint32_t k = 0; k < n; k++)
            sum += comb[i * n + k];
        v = comb[tid] / sum + eps;
    }
    __syncthreads();
    if (own)
        comb[tid] = v;
    /* Sinkhorn: a column pass first, then (iters - 1) x (row pass, column pass) */
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) {
            __syncthreads();
            if (own) {
                float rs = 0;
                for (uint32_t k = 0; k < n; k++)
                    rs += comb[i * n + k];
                v = comb[tid] / (rs + eps);
            }
            __syncthreads();
            if (own)
                comb[tid] = v;
        }
        __syncthreads();
        if (own) {
            float cs = 0;
            for (uint32_t k = 0; k < n; k++)
                cs += comb[k * n + j];
            v = comb[tid] / (cs + eps);
        }
        __syncthreads();
        if (own)
            comb[tid] = v;
    }
    __syncthreads();
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

/* One token per block; dynamic shared memory: hidden floats. */
__global__ static void dsv4_hc_pre_kernel(dsv4_cuda_dims d, const float *x, float *mixz,
                                          const float *base, const float *scale, const float *norm,
                                          float *pre, float *post, float *comb, float *u)
{
    extern __shared__ float su[];
    __shared__ float red[32], spre[HC_MAX], sz[(2 + HC_MAX) * HC_MAX], scomb[HC_MAX * HC_MAX];
    uint32_t t = blockIdx.x, N = d.hc_mult, H = d.hidden, mix = (2 + N) * N;
    const float *xt = x + (size_t)t * N * H;
    float r = dsv4_block_rms_scale(xt, N * H, d.eps, red);
    float *z = mixz + (size_t)t * mix;
    for (uint32_t i = threadIdx.x; i < mix; i += blockDim.x) {
        sz[i] = z[i] * r;
        z[i] = sz[i];
    }
    __syncthreads();
    dsv4_hc_mix_block(sz, base, scale, N, d.hc_iters, d.hc_eps, spre, post + (size_t)t * N, scomb);
    for (uint32_t i = threadIdx.x; i < N * N; i += blockDim.x)
        comb[(size_t)t * N * N + i] = scomb[i];
    for (uint32_t j = threadIdx.x; j < N; j += blockDim.x)
        pre[(size_t)t * N + j] = spre[j];
    dsv4_collapse_norm(xt, spre, N, H, norm, d.eps, su, red, u + (size_t)t * H);
}

int dsv4_cuda_hc_pre(const dsv4_cuda_dims *d, uint32_t n, const float *x_dev, float *mixz_dev,
                     const float *base_dev, const float *scale_dev, const float *norm_dev,
                     float *pre_dev, float *post_dev, float *comb_dev, float *u_dev, void *stream)
{
    if (n == 0)
        return 0;
    if (d->hc_mult > HC_MAX)
        return -EINVAL;
    dsv4_hc_pre_kernel<<<n, DSV4_CUDA_BLOCK, d->hidden * sizeof(float), (cudaStream_t)stream>>>(
        *d, x_dev, mixz_dev, base_dev, scale_dev, norm_dev, pre_dev, post_dev, comb_dev, u_dev);
    return dsv4_cuda_launch_status();
}

__global__ static void dsv4_hc_post_kernel(dsv4_cuda_dims d, uint32_t n, float *x, const float *y,
                                           const float *post, const float *comb)
{
    uint32_t N = d.hc_mult, H = d.hidden;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * H)
        return;
    size_t t = i / H, h = i % H;
    float *xt = x + t * N * H;
    const float *pt = post + t * N, *ct = comb + t * N * N;
    float col[HC_MAX];
    for (uint32_t j = 0; j < N; j++)
        col[j] = xt[j * H + h];
    for (uint32_t k = 0; k < N; k++) {
        float s = pt[k] * y[t * H + h];
        for (uint32_t j = 0; j < N; j++)
            s += ct[j * N + k] * col[j];
        xt[k * H + h] = s;
    }
}

int dsv4_cuda_hc_post(const dsv4_cuda_dims *d, uint32_t n, float *x_dev, const float *y_dev,
                      const float *post_dev, const float *comb_dev, void *stream)
{
    size_t total = (size_t)n * d->hidden;
    if (total == 0)
        return 0;
    dsv4_hc_post_kernel<<<(unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        *d, n, x_dev, y_dev, post_dev, comb_dev);
    return dsv4_cuda_launch_status();
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

/* The pairs grouped by expert in pair order: thread e counts and places expert e's pairs
 * (every thread reads the same ids, so the reads are broadcasts). One block. */
__global__ static void dsv4_group_kernel(uint32_t pairs, const int32_t *ids, uint32_t E,
                                         uint32_t *off, uint32_t *assign, uint32_t *epos)
{
    extern __shared__ uint32_t cnt[];
    for (uint32_t e = threadIdx.x; e < E; e += blockDim.x) {
        uint32_t c = 0;
        for (uint32_t i = 0; i < pairs; i++)
            c += ids[i] == (int32_t)e;
        cnt[e] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t acc = 0;
        for (uint32_t e = 0; e < E; e++) {
            uint32_t c = cnt[e];
            off[e] = cnt[e] = acc;
            acc += c;
        }
        off[E] = acc;
    }
    __syncthreads();
    for (uint32_t e = threadIdx.x; e < E; e += blockDim.x) {
        uint32_t j = cnt[e];
        for (uint32_t i = 0; i < pairs; i++) {
            if (ids[i] == (int32_t)e) {
                assign[j] = i;
                epos[i] = j++;
            }
        }
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
    dsv4_group_kernel<<<1, 1024, n_experts * sizeof(uint32_t), st>>>(
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

__global__ static void dsv4_combine_kernel(uint32_t n, uint32_t k, uint32_t H, const float *w,
                                           const uint32_t *epos, const float *eo, const float *sh,
                                           float *y)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * H)
        return;
    size_t t = i / H, h = i % H;
    float acc = 0;
    for (uint32_t c = 0; c < k; c++)
        acc += w[t * k + c] * eo[(size_t)epos[t * k + c] * H + h];
    y[i] = acc + sh[i];
}

int dsv4_cuda_moe_combine(uint32_t n, uint32_t k, uint32_t hidden, const float *w_dev,
                          const uint32_t *epos_dev, const float *eo_dev, const float *sh_dev,
                          float *y_dev, void *stream)
{
    size_t total = (size_t)n * hidden;
    if (total == 0)
        return 0;
    dsv4_combine_kernel<<<(unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        n, k, hidden, w_dev, epos_dev, eo_dev, sh_dev, y_dev);
    return dsv4_cuda_launch_status();
}
