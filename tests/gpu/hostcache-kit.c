/* hostcache-kit.c: device KV layouts and checksum checks for the host tier's GPU tests
 * (hostcache-kit.h). */
#include "config.h"

#include "tests/gpu/hostcache-kit.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/hostcache/hostpool.h"
#include "kernels/cuda/cuda_kernels.h"
#include "tests/gpu/gpu.h"
#include "tests/plugin/plugin-harness.h"
#include "tests/tap.h"

#define HCG_ROW 584u    /* fp8 KV row at head_dim 512, 64 rope dims */
#define HCG_IK_ROW 132u /* fp8 index-K row at DI 128 */

static void hcg_cuda(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        bail_out("%s failed (%s)", what, cudaGetErrorString(e));
}

static void hcg_add(hcg_kv *kv, uint32_t kind, uint32_t layer, size_t block_bytes, uint32_t rows)
{
    if (kv->lay.n_buffers == HCG_MAX_BUFFERS)
        bail_out("hostcache kit: more than %d buffers", HCG_MAX_BUFFERS);
    uint32_t i = kv->lay.n_buffers++;
    uint32_t n = dsv4_buf_is_paged(kind) ? kv->lay.n_pages : kv->lay.n_state_slots;
    size_t bytes = block_bytes * n;
    kv->buf[i] = (dsv4_kv_buffer){.kind = kind,
                                  .layer = layer,
                                  .mem = DSV4_MEM_CUDA,
                                  .cuda_device = 0,
                                  .base = gpu_alloc(bytes),
                                  .block_bytes = block_bytes,
                                  .n_blocks = n,
                                  .rows_per_block = rows,
                                  .row_bytes = rows ? block_bytes / rows : 0};
    if (!(kv->ref[i] = malloc(bytes ? bytes : 1)))
        bail_out("hostcache kit: out of memory");
    for (size_t b = 0; b + 8 <= bytes; b += 8) {
        uint64_t r = plugtest_rand();
        memcpy(kv->ref[i] + b, &r, 8);
    }
    for (size_t b = bytes / 8 * 8; b < bytes; b++)
        kv->ref[i][b] = (uint8_t)plugtest_rand();
    gpu_put(kv->buf[i].base, kv->ref[i], bytes);
}

void hcg_kv_new(hcg_kv *kv, uint32_t layers, uint32_t pages, uint32_t slots)
{
    memset(kv, 0, sizeof(*kv));
    if (!(kv->kinds = malloc(layers ? layers : 1)))
        bail_out("hostcache kit: out of memory");
    kv->lay = (dsv4_kv_layout){.struct_size = sizeof(kv->lay),
                               .page_tokens = 256,
                               .n_pages = pages,
                               .n_state_slots = slots,
                               .n_layers = layers,
                               .layer_kind = kv->kinds,
                               .kv_dtype = DSV4_KV_FP8,
                               .indexk = "fp8",
                               .index_dim = 128,
                               .buffers = kv->buf,
                               .shm_fd = -1};
    for (uint32_t l = 0; l < layers; l++) {
        kv->kinds[l] = (uint8_t)(l % 3);
        /* the carries' sizes differ per layer and are not multiples of 8, so a copy
         * that mixes buffers up or rounds a size shows */
        if (kv->kinds[l] == DSV4_LAYER_CSA) {
            hcg_add(kv, DSV4_BUF_CSA_KV, l, 64 * HCG_ROW, 64);
            hcg_add(kv, DSV4_BUF_INDEXK, l, 64 * HCG_IK_ROW, 64);
            hcg_add(kv, DSV4_BUF_CSA_CARRY, l, 49152 + 4 * l + 3, 0);
            hcg_add(kv, DSV4_BUF_INDEX_CARRY, l, 12288 + 4 * l + 1, 0);
        } else if (kv->kinds[l] == DSV4_LAYER_HCA) {
            hcg_add(kv, DSV4_BUF_HCA_KV, l, 2 * HCG_ROW, 2);
            hcg_add(kv, DSV4_BUF_HCA_CARRY, l, 65536 + 4 * l + 5, 0);
        }
        hcg_add(kv, DSV4_BUF_WINDOW, l, 128 * HCG_ROW, 128);
    }
    gpu_sync();
    /* Launch the checksum kernel once now. With lazy module loading (CUDA's default) its
     * first launch loads the module, and that waits for the whole device, the plugin's
     * copy stream included: a first read right after an unfenced load would then see the
     * load landed and hide the race (seen on the H200). */
    uint32_t zero = 0;
    hcg_check *warm = hcg_check_new(kv, false, HCG_ALL_LAYERS, &zero, &zero, slots ? 1 : 0);
    hcg_check_queue(warm, NULL);
    if (hcg_check_mismatches(warm, NULL) != 0)
        bail_out("the checksum kernel disagrees with libxxhash on a state block");
    hcg_check_free(warm);
}

void hcg_kv_free(hcg_kv *kv)
{
    for (uint32_t i = 0; i < kv->lay.n_buffers; i++) {
        gpu_free(kv->buf[i].base);
        free(kv->ref[i]);
    }
    free(kv->kinds);
}

void hcg_kv_restore(hcg_kv *kv)
{
    for (uint32_t i = 0; i < kv->lay.n_buffers; i++)
        gpu_put(kv->buf[i].base, kv->ref[i], kv->buf[i].block_bytes * kv->buf[i].n_blocks);
}

size_t hcg_unit_bytes(const hcg_kv *kv, bool paged)
{
    size_t bytes = 0;
    for (uint32_t i = 0; i < kv->lay.n_buffers; i++)
        if (dsv4_buf_is_paged(kv->buf[i].kind) == paged)
            bytes += kv->buf[i].block_bytes;
    return bytes;
}

void hcg_scribble(hcg_kv *kv, bool paged, const uint32_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < kv->lay.n_buffers; i++) {
        const dsv4_kv_buffer *b = &kv->buf[i];
        if (dsv4_buf_is_paged(b->kind) != paged)
            continue;
        for (uint32_t k = 0; k < n; k++)
            hcg_cuda(cudaMemset(b->base + (size_t)ids[k] * b->block_bytes, 0xff, b->block_bytes),
                     "cudaMemset");
    }
    gpu_sync();
}

const dsv4_host *hcg_host(void *stream)
{
    static dsv4_host host;
    host = *plugtest_host();
    host.cuda_stream = stream;
    return &host;
}

struct hcg_check {
    uint32_t n;
    const void **ptrs_dev;
    uint64_t *lens_dev, *hash_dev;
    uint64_t *want, *got;
};

hcg_check *hcg_check_new(const hcg_kv *kv, bool paged, uint32_t layer, const uint32_t *dev_ids,
                         const uint32_t *ref_ids, uint32_t n)
{
    hcg_check *c = calloc(1, sizeof(*c));
    uint32_t most = kv->lay.n_buffers * (n ? n : 1);
    const void **ptrs = malloc(most * sizeof(*ptrs));
    uint64_t *lens = malloc(most * sizeof(*lens));
    if (!c || !ptrs || !lens || !(c->want = malloc(most * sizeof(uint64_t))) ||
        !(c->got = malloc(most * sizeof(uint64_t))))
        bail_out("hostcache kit: out of memory");
    for (uint32_t i = 0; i < kv->lay.n_buffers; i++) {
        const dsv4_kv_buffer *b = &kv->buf[i];
        if (dsv4_buf_is_paged(b->kind) != paged || (layer != HCG_ALL_LAYERS && b->layer != layer))
            continue;
        for (uint32_t k = 0; k < n; k++) {
            ptrs[c->n] = b->base + (size_t)dev_ids[k] * b->block_bytes;
            lens[c->n] = b->block_bytes;
            c->want[c->n++] =
                XXH64(kv->ref[i] + (size_t)ref_ids[k] * b->block_bytes, b->block_bytes, 0);
        }
    }
    c->ptrs_dev = gpu_alloc(c->n * sizeof(*ptrs));
    c->lens_dev = gpu_alloc(c->n * sizeof(*lens));
    c->hash_dev = gpu_alloc(c->n * sizeof(uint64_t));
    gpu_put(c->ptrs_dev, ptrs, c->n * sizeof(*ptrs));
    gpu_put(c->lens_dev, lens, c->n * sizeof(*lens));
    free(ptrs);
    free(lens);
    return c;
}

void hcg_check_queue(hcg_check *c, void *stream)
{
    if (c->n > 0 && dsv4_cuda_xxh64(c->ptrs_dev, c->lens_dev, c->n, 0, c->hash_dev, stream) != 0)
        bail_out("dsv4_cuda_xxh64 refused the check");
}

unsigned hcg_check_mismatches(hcg_check *c, void *stream)
{
    hcg_cuda(cudaStreamSynchronize((cudaStream_t)stream), "the checksums");
    gpu_get(c->got, c->hash_dev, c->n * sizeof(uint64_t));
    unsigned bad = 0;
    for (uint32_t i = 0; i < c->n; i++)
        bad += c->got[i] != c->want[i];
    return bad;
}

uint32_t hcg_check_blocks(const hcg_check *c)
{
    return c->n;
}

void hcg_check_free(hcg_check *c)
{
    gpu_free(c->ptrs_dev);
    gpu_free(c->lens_dev);
    gpu_free(c->hash_dev);
    free(c->want);
    free(c->got);
    free(c);
}

unsigned hcg_host_mismatches(const hcg_kv *kv, const dsv4_kv_layout *host, bool paged,
                             const uint32_t *host_ids, const uint32_t *ref_ids, uint32_t n)
{
    unsigned bad = 0;
    for (uint32_t i = 0; i < kv->lay.n_buffers; i++) {
        const dsv4_kv_buffer *b = &kv->buf[i], *h = &host->buffers[i];
        if (dsv4_buf_is_paged(b->kind) != paged)
            continue;
        for (uint32_t k = 0; k < n; k++)
            bad += XXH64(h->base + (size_t)host_ids[k] * h->block_bytes, h->block_bytes, 0) !=
                   XXH64(kv->ref[i] + (size_t)ref_ids[k] * b->block_bytes, b->block_bytes, 0);
    }
    return bad;
}

bool hcg_is_pinned(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

/* ids[i] = i and rev[i] = n-1-i */
static void hcg_ids(uint32_t n, uint32_t **ids_p, uint32_t **rev_p)
{
    uint32_t *ids = malloc((n ? n : 1) * sizeof(*ids)), *rev = malloc((n ? n : 1) * sizeof(*rev));
    if (!ids || !rev)
        bail_out("hostcache kit: out of memory");
    for (uint32_t i = 0; i < n; i++) {
        ids[i] = i;
        rev[i] = n - 1 - i;
    }
    *ids_p = ids;
    *rev_p = rev;
}

static dsv4_page_copy *hcg_copies(const uint32_t *dev, const uint32_t *host, uint32_t n)
{
    dsv4_page_copy *c = malloc((n ? n : 1) * sizeof(*c));
    if (!c)
        bail_out("hostcache kit: out of memory");
    for (uint32_t i = 0; i < n; i++)
        c[i] = (dsv4_page_copy){.device_page = dev[i], .host_page = host[i]};
    return c;
}

void hcg_save_all(const dsv4_hostcache_ops *ops, void *st, const hcg_kv *kv)
{
    for (int paged = 1; paged >= 0; paged--) {
        uint32_t n = paged ? kv->lay.n_pages : kv->lay.n_state_slots, *ids, *rev;
        hcg_ids(n, &ids, &rev);
        dsv4_page_copy *c = hcg_copies(ids, ids, n);
        void *op = NULL;
        int rc = paged ? ops->save(st, c, n, &op) : ops->save_state(st, c, n, &op);
        if (rc != 0)
            bail_out("save failed (%d)", rc);
        for (uint32_t l = 0; l < kv->lay.n_layers; l++)
            if ((rc = ops->wait_layer(st, op, l)) != 0)
                bail_out("waiting for a save failed (%d)", rc);
        ops->release(st, op);
        free(c);
        free(ids);
        free(rev);
    }
}

unsigned hcg_fenced_reads(const dsv4_hostcache_ops *ops, void *st, hcg_kv *kv, void *stream,
                          bool stream_fence, uint32_t *blocks_p, bool *running_p)
{
    uint32_t layers = kv->lay.n_layers, n[2] = {kv->lay.n_state_slots, kv->lay.n_pages};
    uint32_t *ids[2], *rev[2];
    hcg_check **chk = malloc(2 * (layers ? layers : 1) * sizeof(*chk));
    if (!chk)
        bail_out("hostcache kit: out of memory");
    /* everything the reads need is set up before the load starts, so nothing but the
     * fence stands between the load and the reads */
    for (int paged = 0; paged < 2; paged++) {
        hcg_ids(n[paged], &ids[paged], &rev[paged]);
        hcg_scribble(kv, paged, rev[paged], n[paged]);
        for (uint32_t l = 0; l < layers; l++)
            chk[2 * l + paged] = hcg_check_new(kv, paged, l, rev[paged], ids[paged], n[paged]);
    }
    dsv4_page_copy *pc = hcg_copies(rev[1], ids[1], n[1]), *sc = hcg_copies(rev[0], ids[0], n[0]);
    void *pop = NULL, *sop = NULL;
    int rc = ops->load_state(st, sc, n[0], &sop);
    if (rc == 0)
        rc = ops->load(st, pc, n[1], &pop);
    if (rc != 0)
        bail_out("load failed (%d)", rc);
    *running_p = ops->poll(st, pop) == -EAGAIN;
    unsigned bad = 0;
    uint32_t blocks = 0;
    for (uint32_t l = 0; l < layers; l++) {
        for (int u = 0; u < 2 && rc == 0; u++)
            rc = stream_fence ? ops->stream_wait_layer(st, u ? pop : sop, l, stream)
                              : ops->wait_layer(st, u ? pop : sop, l);
        if (rc != 0)
            bail_out("the fence failed at layer %u (%d)", l, rc);
        for (int paged = 0; paged < 2; paged++) {
            hcg_check_queue(chk[2 * l + paged], stream);
            if (!stream_fence)
                bad += hcg_check_mismatches(chk[2 * l + paged], stream);
        }
    }
    for (uint32_t i = 0; i < 2 * layers; i++) {
        if (stream_fence)
            bad += hcg_check_mismatches(chk[i], stream);
        blocks += hcg_check_blocks(chk[i]);
        hcg_check_free(chk[i]);
    }
    ops->release(st, pop);
    ops->release(st, sop);
    for (int paged = 0; paged < 2; paged++) {
        free(ids[paged]);
        free(rev[paged]);
    }
    free(pc);
    free(sc);
    free(chk);
    *blocks_p = blocks;
    return bad;
}

unsigned hcg_loaded_mismatches(hcg_kv *kv, void *stream)
{
    unsigned bad = 0;
    for (int paged = 0; paged < 2; paged++) {
        uint32_t n = paged ? kv->lay.n_pages : kv->lay.n_state_slots, *ids, *rev;
        hcg_ids(n, &ids, &rev);
        hcg_check *c = hcg_check_new(kv, paged, HCG_ALL_LAYERS, rev, ids, n);
        hcg_check_queue(c, stream);
        bad += hcg_check_mismatches(c, stream);
        hcg_check_free(c);
        free(ids);
        free(rev);
    }
    return bad;
}

void hcg_rig_open(hcg_rig *rig, const char *plugin, const char *delay, uint32_t layers,
                  uint32_t pages, uint32_t slots)
{
    char err[256];
    hcg_kv_new(&rig->kv, layers, pages, slots);
    if (!(rig->pool = dsv4_host_pool_new(&rig->kv.lay, pages, slots, err, sizeof(err))))
        bail_out("%s", err);
    cudaStream_t compute;
    hcg_cuda(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking),
             "creating the compute stream");
    rig->compute = compute;
    rig->desc = plugtest_open("hostcache", plugin);
    rig->ops = rig->desc->ops;
    rig->conf = plugtest_config(rig->desc, "inject_delay", delay, NULL);
    rig->state = NULL;
    if (rig->desc->init(hcg_host(compute), rig->conf, &rig->state, err, sizeof(err)) != 0)
        bail_out("%s: init failed (%s)", plugin, err);
    if (rig->ops->attach(rig->state, &rig->kv.lay, dsv4_host_pool_layout(rig->pool)) != 0)
        bail_out("%s: attach failed", plugin);
    hcg_save_all(rig->ops, rig->state, &rig->kv);
}

void hcg_rig_close(hcg_rig *rig)
{
    rig->desc->fini(rig->state);
    plugtest_config_free(rig->desc, rig->conf);
    cudaStreamDestroy((cudaStream_t)rig->compute);
    dsv4_host_pool_free(rig->pool);
    hcg_kv_free(&rig->kv);
}
