/* hostcache.h: the host-memory KV tier family (plugins/hostcache/: off, sync, async).
 *
 * A hostcache plugin moves whole pages (every paged buffer of every layer) and state
 * blocks between the device layout and a host layout with the same buffer table
 * (DESIGN.md §9). Loads complete per layer: wait_layer() is the fence. The daemon calls it
 * from the one KV accessor every attention and indexer read goes through, so a layer's KV
 * cannot be read before its load has landed.
 *
 * Ops: save/load move pages, save_state/load_state (appended; check struct_size) move
 * state blocks (dsv4_page_copy then holds slot ids). An op of either kind is tracked by
 * wait_layer/poll/release, and wait_layer is a fence for saves as well (the layer is on
 * host). release may be called on a running op: it waits for the op to finish first, so
 * memory an op reads or writes is never given back under it.
 *
 * CUDA: when the device layout's buffers are in CUDA memory (dsv4_kv_buffer.mem), attach
 * page-locks the host layout's memory (cudaHostRegister) until fini, so copies run at
 * PCIe speed; ops are queued on the plugin's own copy stream after the work already queued
 * on the daemon's compute stream (dsv4_host.cuda_stream), one batch of copies per layer
 * and one CUDA event per layer. wait_layer then blocks the host until the layer's event
 * (the fence the CPU forward and host readers need); stream_wait_layer (appended) orders a
 * CUDA stream after it without blocking the host (the fence a CUDA forward can use).
 *
 * Config: every hostcache plugin that keeps pages on host starts its config struct with
 * dsv4_hostcache_config; the daemon sizes the host pool and applies the write policy from
 * it. A plugin whose config_size is smaller (off) keeps nothing on host.
 */
#ifndef DSV4D_HOSTCACHE_H
#define DSV4D_HOSTCACHE_H

#include <dsv4d/kv.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSV4_HOSTCACHE_VERSION 1

/* When a page is backed up to host (reference/sglang.md §3.2): at its first use, at its
 * second use, or only when it is evicted from the device. */
typedef enum dsv4_hostcache_policy {
    DSV4_HOSTCACHE_WRITE_THROUGH = 0,
    DSV4_HOSTCACHE_WRITE_THROUGH_SELECTIVE = 1,
    DSV4_HOSTCACHE_WRITE_BACK = 2,
} dsv4_hostcache_policy;

/* The head of the config struct of every plugin that keeps pages on host. */
typedef struct dsv4_hostcache_config {
    uint64_t host_size;   /* bytes of host memory for pages (key host_size) */
    int64_t host_slots;   /* state blocks kept on host (key host_slots) */
    int write_policy;     /* dsv4_hostcache_policy (key write_policy) */
} dsv4_hostcache_config;

typedef struct dsv4_page_copy {
    uint32_t device_page;
    uint32_t host_page;
} dsv4_page_copy;

typedef struct dsv4_hostcache_ops {
    uint32_t struct_size;
    /* Bind the device layout and the host layout (same buffers, host memory). */
    int (*attach)(void *state, const dsv4_kv_layout *device, const dsv4_kv_layout *host);
    /* Copy device pages to host pages, every buffer. Asynchronous; *op_p tracks it. */
    int (*save)(void *state, const dsv4_page_copy *pages, size_t n, void **op_p);
    /* Start copying host pages to device pages, layer by layer. */
    int (*load)(void *state, const dsv4_page_copy *pages, size_t n, void **op_p);
    /* The fence: returns once `layer` of the op has landed, in host or CUDA memory alike
     * (on CUDA the host waits for the layer's event). */
    int (*wait_layer)(void *state, void *op, uint32_t layer);
    /* 0: the whole op is done; -EAGAIN: still running; else failed. */
    int (*poll)(void *state, void *op);
    void (*release)(void *state, void *op);
    /* Appended: the same as save and load, for state blocks (window ring, compressor
     * carry); the ids in dsv4_page_copy are state slots. */
    int (*save_state)(void *state, const dsv4_page_copy *slots, size_t n, void **op_p);
    int (*load_state)(void *state, const dsv4_page_copy *slots, size_t n, void **op_p);
    /* Appended: the fence without blocking the host. On a CUDA device layout, orders
     * `stream` (a cudaStream_t; NULL = the legacy default stream) after `layer` of the op
     * has landed, so kernels queued on it afterwards read the loaded blocks, and returns at
     * once. On a host layout it is wait_layer (the host waits; stream is ignored). 0,
     * -EINVAL (no op, layer out of range), -EIO (CUDA refused the wait). */
    int (*stream_wait_layer)(void *state, void *op, uint32_t layer, void *stream);
} dsv4_hostcache_ops;

#ifdef __cplusplus
}
#endif
#endif /* DSV4D_HOSTCACHE_H */
