/* hostcache.h: the host-memory KV tier family (plugins/hostcache/: off, sync, async).
 *
 * A hostcache plugin moves whole pages (every paged buffer of every layer) and state
 * blocks between the device layout and a host layout with the same buffer table
 * (DESIGN.md §9). Loads complete per layer: wait_layer() is the fence. The daemon calls it
 * from the one KV accessor every attention and indexer read goes through, so a layer's KV
 * cannot be read before its load has landed.
 */
#ifndef DSV4D_HOSTCACHE_H
#define DSV4D_HOSTCACHE_H

#include <dsv4d/kv.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSV4_HOSTCACHE_VERSION 1

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
    /* The fence: returns once `layer` of a load has landed (CPU), or has ordered the
     * daemon's compute stream after it (CUDA). */
    int (*wait_layer)(void *state, void *op, uint32_t layer);
    /* 0: the whole op is done; -EAGAIN: still running; else failed. */
    int (*poll)(void *state, void *op);
    void (*release)(void *state, void *op);
} dsv4_hostcache_ops;

#ifdef __cplusplus
}
#endif
#endif /* DSV4D_HOSTCACHE_H */
