/* prefix.c: what the prefix cache needs of the engine (engine.h): page references, spare state
 * slots for snapshots, copying a sequence's state into a snapshot, and starting a sequence from
 * cached pages and a snapshot.
 *
 * State is copied by walking the pool's buffer table: every buffer that is not paged is
 * per-slot state (window ring, every compressor carry), so no kind can be left out. */
#include "core/engine/engine_priv.h"

#include <errno.h>
#include <string.h>

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

int dsv4_engine_slot_alloc(dsv4_engine *eng, uint32_t *slot_p)
{
    return dsv4_kv_slot_alloc(eng->pool, slot_p);
}

void dsv4_engine_slot_free(dsv4_engine *eng, uint32_t slot)
{
    dsv4_kv_slot_free(eng->pool, slot);
}

/* Copy state block src over dst in every state buffer. */
static void dsv4_engine_state_copy(dsv4_engine *eng, uint32_t dst, uint32_t src)
{
    const dsv4_kv_layout *lay = dsv4_kv_pool_layout(eng->pool);
    for (uint32_t i = 0; i < lay->n_buffers; i++) {
        const dsv4_kv_buffer *b = &lay->buffers[i];
        if (!dsv4_buf_is_paged(b->kind))
            memcpy(b->base + dst * b->block_bytes, b->base + src * b->block_bytes, b->block_bytes);
    }
}

int dsv4_engine_seq_snapshot(dsv4_engine *eng, uint32_t seq, uint32_t slot)
{
    const dsv4_eseq *s = dsv4_engine_live(eng, seq);
    if (!s || slot >= eng->conf.n_slots || slot == s->slot)
        return -EINVAL;
    dsv4_engine_state_copy(eng, slot, s->slot);
    return 0;
}

int dsv4_engine_seq_adopt(dsv4_engine *eng, uint32_t seq, const uint32_t *pages, uint32_t n_pages,
                          uint32_t slot)
{
    dsv4_eseq *s = dsv4_engine_live(eng, seq);
    if (!s || s->len != 0 || slot >= eng->conf.n_slots || slot == s->slot ||
        n_pages > eng->conf.n_pages)
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
    dsv4_engine_state_copy(eng, s->slot, slot);
    return 0;
}
