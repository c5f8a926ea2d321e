/* prefix.c: what the prefix cache needs of the engine (engine.h): page references, spare state
 * slots for snapshots, copying a sequence's state into a snapshot, and starting a sequence from
 * cached pages and a snapshot.
 *
 * State is copied layer by layer through dsv4_kv_pool_layer(), the accessor that waits for
 * the host tier's load of that layer (DESIGN.md §9): a snapshot is read only once it has
 * landed, and no path reaches KV memory around the fence. Every buffer of a layer view
 * that is not paged is per-slot state (window ring, every compressor carry), so no kind
 * can be left out. */
#include "core/engine/engine_priv.h"

#include <errno.h>

static dsv4_eseq *dsv4_engine_live(const dsv4_engine *eng, uint32_t seq)
{
    return seq < eng->conf.n_slots && eng->seqs[seq].live ? &eng->seqs[seq] : NULL;
}

void dsv4_engine_page_ref(dsv4_engine *eng, uint32_t page)
{
    dsv4_kv_page_ref(eng->pool, page);
}

void dsv4_engine_page_unref(dsv4_engine *eng, uint32_t page)
{
    dsv4_kv_page_unref(eng->pool, page);
}

dsv4_kv_pool *dsv4_engine_kv_pool(dsv4_engine *eng)
{
    return eng->pool;
}

int dsv4_engine_page_alloc(dsv4_engine *eng, uint32_t *page_p)
{
    return dsv4_kv_page_alloc(eng->pool, page_p);
}

int dsv4_engine_slot_alloc(dsv4_engine *eng, uint32_t *slot_p)
{
    return dsv4_kv_slot_alloc(eng->pool, slot_p);
}

void dsv4_engine_slot_free(dsv4_engine *eng, uint32_t slot)
{
    dsv4_kv_slot_free(eng->pool, slot);
}

/* Copy state block src over dst in every state buffer of every layer (host or device
 * memory). 0, the fence's failure, or -EIO from a device copy. */
static int dsv4_engine_state_copy(dsv4_engine *eng, uint32_t dst, uint32_t src)
{
    uint32_t layers = dsv4_kv_pool_layout(eng->pool)->n_layers;
    for (uint32_t l = 0; l < layers; l++) {
        dsv4_kv_layer_view v;
        int rc = dsv4_kv_pool_layer(eng->pool, l, &v);
        if (rc != 0)
            return rc;
        for (uint32_t k = 0; rc == 0 && k < DSV4_BUF_KIND_COUNT; k++) {
            const dsv4_kv_buffer *b = v.buf[k];
            if (b && !dsv4_buf_is_paged(b->kind))
                rc = dsv4_kv_block_copy(b, dst, src);
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

int dsv4_engine_seq_snapshot(dsv4_engine *eng, uint32_t seq, uint32_t slot)
{
    const dsv4_eseq *s = dsv4_engine_live(eng, seq);
    if (!s || slot >= eng->conf.n_slots || slot == s->slot)
        return -EINVAL;
    return dsv4_engine_state_copy(eng, slot, s->slot);
}

int dsv4_engine_seq_adopt(dsv4_engine *eng, uint32_t seq, const uint32_t *pages, uint32_t n_pages,
                          uint32_t slot)
{
    dsv4_eseq *s = dsv4_engine_live(eng, seq);
    if (!s || s->len != 0 || n_pages > eng->conf.n_pages ||
        (slot != DSV4_ENGINE_NO_SLOT && (slot >= eng->conf.n_slots || slot == s->slot)))
        return -EINVAL;
    int rc = dsv4_eseq_reserve(s, n_pages);
    if (rc != 0)
        return rc;
    for (uint32_t i = 0; i < n_pages; i++) {
        dsv4_kv_page_ref(eng->pool, pages[i]);
        s->pages[i] = pages[i];
    }
    s->n_pages = n_pages;
    s->len = n_pages * eng->conf.page_tokens;
    return slot == DSV4_ENGINE_NO_SLOT ? 0 : dsv4_engine_state_copy(eng, s->slot, slot);
}
