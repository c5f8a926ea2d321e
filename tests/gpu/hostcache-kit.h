/* hostcache-kit.h: what the GPU tests of the host tier share: a KV layout whose every
 * buffer is cudaMalloc'd (the shape of the device KV pool: window ring on every layer, CSA
 * rows, index-K and both carries on CSA layers, HCA rows and carry on HCA layers, block
 * sizes that are not powers of two), filled with known pseudo-random bytes kept on the
 * host as the reference, and checks that hash device blocks with the CUDA XXH64 kernel on
 * a chosen stream and compare them with libxxhash over the reference, so a block that
 * has not landed (or landed wrong) is counted. Built with CUDA only. */
#ifndef DSV4_TESTS_GPU_HOSTCACHE_KIT_H
#define DSV4_TESTS_GPU_HOSTCACHE_KIT_H

#include <stdbool.h>
#include <stdint.h>

#include <dsv4d/hostcache.h>

#define HCG_MAX_BUFFERS 256
#define HCG_ALL_LAYERS UINT32_MAX

typedef struct hcg_kv {
    dsv4_kv_layout lay;
    dsv4_kv_buffer buf[HCG_MAX_BUFFERS];
    uint8_t *ref[HCG_MAX_BUFFERS]; /* what each device buffer was filled with */
    uint8_t *kinds;
} hcg_kv;

/* The device layout: `layers` layers (sliding, CSA, HCA in turn), `pages` pages and
 * `slots` state blocks, rows at the model's widths (fp8 rows of 584 bytes, fp8 index-K of
 * 132, a page of 256 tokens). */
void hcg_kv_new(hcg_kv *kv, uint32_t layers, uint32_t pages, uint32_t slots);
void hcg_kv_free(hcg_kv *kv);
/* Put the reference back into every device buffer (block i holds reference block i). */
void hcg_kv_restore(hcg_kv *kv);
/* Bytes of one page (paged) or one state block over every buffer. */
size_t hcg_unit_bytes(const hcg_kv *kv, bool paged);
/* Set these device blocks (paged or state, every buffer) to 0xff, so one that is read
 * before its load lands shows; waits for it. */
void hcg_scribble(hcg_kv *kv, bool paged, const uint32_t *ids, uint32_t n);

/* The mock plugin host with `stream` as the daemon's compute stream. */
const dsv4_host *hcg_host(void *stream);

/* A check of blocks dev_ids[i] of every buffer of layer (HCG_ALL_LAYERS: of every layer)
 * of one kind against reference blocks ref_ids[i]. */
typedef struct hcg_check hcg_check;
hcg_check *hcg_check_new(const hcg_kv *kv, bool paged, uint32_t layer, const uint32_t *dev_ids,
                         const uint32_t *ref_ids, uint32_t n);
/* Queue the hashing on stream (it runs when the stream gets there). */
void hcg_check_queue(hcg_check *c, void *stream);
/* Wait for stream; the number of blocks whose hash differs from the reference's. */
unsigned hcg_check_mismatches(hcg_check *c, void *stream);
uint32_t hcg_check_blocks(const hcg_check *c);
void hcg_check_free(hcg_check *c);

/* The same comparison on host memory: blocks host_ids[i] of every buffer of the host
 * layout (of one kind) against reference blocks ref_ids[i]. */
unsigned hcg_host_mismatches(const hcg_kv *kv, const dsv4_kv_layout *host, bool paged,
                             const uint32_t *host_ids, const uint32_t *ref_ids, uint32_t n);

/* Save every page and state block of kv to the same ids on host with an attached plugin
 * and wait for it; bails out on a failure. */
void hcg_save_all(const dsv4_hostcache_ops *ops, void *st, const hcg_kv *kv);
/* The race test: load every page and state block back (host block i into device block
 * n-1-i, set to 0xff first) and read each layer in order as the forward does right after
 * its fence: wait_layer on the host (stream_fence false), or stream_wait_layer on `stream`
 * with no host wait; the reads are checksum kernels queued on `stream`. Returns the
 * blocks read other than saved (stale or wrong); *blocks_p the blocks read, *running_p
 * whether the load was still running when load returned (poll), i.e. the fence had
 * something to wait for. Releases the ops (which waits for them). */
unsigned hcg_fenced_reads(const dsv4_hostcache_ops *ops, void *st, hcg_kv *kv, void *stream,
                          bool stream_fence, uint32_t *blocks_p, bool *running_p);
/* After hcg_fenced_reads: the blocks of every layer that differ from the saved ones now
 * that the loads are over. */
unsigned hcg_loaded_mismatches(hcg_kv *kv, void *stream);

/* What the fence tests share: the device layout (layers x pages x slots), its host pool,
 * a compute stream, and hostcache/<plugin> initialised with inject_delay = delay, attached
 * and with every page and state block saved. Bails out on a failure. */
typedef struct hcg_rig {
    hcg_kv kv;
    struct dsv4_host_pool *pool;
    void *compute; /* cudaStream_t */
    const dsv4_plugin_desc *desc;
    const dsv4_hostcache_ops *ops;
    void *conf, *state;
} hcg_rig;
void hcg_rig_open(hcg_rig *rig, const char *plugin, const char *delay, uint32_t layers,
                  uint32_t pages, uint32_t slots);
void hcg_rig_close(hcg_rig *rig);

/* Whether CUDA knows p as page-locked host memory. */
bool hcg_is_pinned(const void *p);

#endif
