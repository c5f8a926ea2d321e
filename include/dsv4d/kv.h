/* kv.h: the KV layout every path iterates (DESIGN.md §5).
 *
 * One logical page id addresses one block in *every* paged buffer of every layer: a page
 * covers `page_tokens` (256) source tokens, i.e. 64 CSA compressed rows, 64 index-K rows
 * and 2 HCA rows. Per-request state (window rings, compressor carry) lives in state blocks,
 * one slot id addressing one block in every state buffer. The buffer table below lists
 * every buffer once; the host tier, PD transfer, checksums, eviction and retraction all
 * walk it, so a buffer cannot be forgotten by one path (index-K is a buffer like the rest).
 *
 * The daemon owns the layout and the memory behind it; plugins get it read-only through
 * the host table and must not keep pointers past their fini.
 */
#ifndef DSV4D_KV_H
#define DSV4D_KV_H

#include <dsv4d/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dsv4_layer_kind {
    DSV4_LAYER_SLIDING = 0, /* window only */
    DSV4_LAYER_CSA = 1,     /* compressed sparse (m = 4) with the lightning indexer */
    DSV4_LAYER_HCA = 2,     /* heavily compressed (m = 128) */
} dsv4_layer_kind;

typedef enum dsv4_buf_kind {
    /* paged: one block per page */
    DSV4_BUF_CSA_KV = 0,      /* CSA compressed rows */
    DSV4_BUF_INDEXK = 1,      /* CSA index-K rows, in the indexk plugin's format */
    DSV4_BUF_HCA_KV = 2,      /* HCA compressed rows */
    /* state: one block per request state slot */
    DSV4_BUF_WINDOW = 3,      /* sliding-window ring of the last W latent rows */
    DSV4_BUF_CSA_CARRY = 4,   /* CSA main compressor carry */
    DSV4_BUF_INDEX_CARRY = 5, /* CSA indexer compressor carry */
    DSV4_BUF_HCA_CARRY = 6,   /* HCA compressor carry */
    DSV4_BUF_KIND_COUNT
} dsv4_buf_kind;

typedef enum dsv4_mem { DSV4_MEM_HOST = 0, DSV4_MEM_CUDA = 1 } dsv4_mem;

static inline bool dsv4_buf_is_paged(uint32_t kind)
{
    return kind <= DSV4_BUF_HCA_KV;
}

typedef struct dsv4_kv_buffer {
    uint32_t kind;          /* dsv4_buf_kind */
    uint32_t layer;         /* model layer it belongs to */
    uint32_t mem;           /* dsv4_mem */
    int32_t cuda_device;    /* ordinal when mem == DSV4_MEM_CUDA, else -1 */
    uint8_t *base;          /* block b starts at base + b * block_bytes */
    size_t block_bytes;     /* one page (paged) or one state block */
    uint32_t n_blocks;      /* pages or state slots */
    uint32_t rows_per_block;
    size_t row_bytes;       /* 0 where rows are not fixed-size (carry state) */
} dsv4_kv_buffer;

typedef struct dsv4_kv_layout {
    uint32_t struct_size;
    uint32_t page_tokens;        /* source tokens per page (256) */
    uint32_t n_pages;            /* pages in every paged buffer */
    uint32_t n_state_slots;      /* blocks in every state buffer */
    uint32_t n_layers;
    const uint8_t *layer_kind;   /* [n_layers] dsv4_layer_kind */
    uint32_t kv_dtype;           /* dsv4_kv_dtype of compressed and window rows */
    const char *indexk;          /* name of the indexk plugin that formats DSV4_BUF_INDEXK */
    uint32_t index_dim;          /* index-K row width (DI) */
    uint32_t n_buffers;
    const dsv4_kv_buffer *buffers;
    /* Appended in ABI 1.0 (read with DSV4_HAS_FIELD): where the buffers live when the pool
     * was allocated in shared memory, so a transport can hand another process on the host
     * a way to map them (transport/local). Every buffer then lies inside one mapping of
     * shm_fd at offset (base - shm_base). shm_fd is -1 for private memory. */
    int32_t shm_fd;
    const uint8_t *shm_base;
    size_t shm_bytes;
} dsv4_kv_layout;

#ifdef __cplusplus
}
#endif
#endif /* DSV4D_KV_H */
