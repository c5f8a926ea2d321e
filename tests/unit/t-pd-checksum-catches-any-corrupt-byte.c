/* t-pd-checksum-catches-any-corrupt-byte: the PD page checksums cover every buffer of the
 * layout's table (index-K and every carry state included). One flipped byte in any block
 * of a request — any paged buffer of any layer at any of its pages, or any state buffer at
 * its slot — fails verification, and the report names the page (its place in the request
 * and its id), the buffer kind and the layer; a byte outside the request is not the
 * request's business; a checksum list of the wrong length is malformed, not corrupt. */
#include <errno.h>
#include <string.h>

#include "core/pd/checksum.h"
#include "tests/plugin/transport-harness.h"
#include "tests/tap.h"

int main(void)
{
    tpool p = tpool_new(9, 3, false, 42);
    const dsv4_kv_layout *l = p.l;
    plan(6 + (int)l->n_buffers);

    const uint32_t pages[] = {7, 2, 5};
    dsv4_pd_blocks b = {pages, 3, true, 1};
    size_t n = dsv4_pd_sum_count(l, &b);
    uint32_t n_paged = 0, kinds = 0;
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        n_paged += dsv4_buf_is_paged(l->buffers[i].kind);
        kinds |= 1u << l->buffers[i].kind;
    }
    ok(kinds == (1u << DSV4_BUF_KIND_COUNT) - 1, "the test pool has every buffer kind");
    is_int((long long)n, n_paged * 3 + (l->n_buffers - n_paged),
           "one checksum per page per paged buffer and one per state buffer");
    uint64_t sums[256];
    dsv4_pd_sum_bad bad;
    uint32_t n_bad;
    ok(dsv4_pd_sum_compute(l, &b, sums, n) == 0 &&
           dsv4_pd_sum_verify(l, &b, sums, n, &bad, &n_bad) == 0,
       "an untouched request verifies");

    size_t pos = 0; /* where buffer i's checksums start in the list */
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        const dsv4_kv_buffer *buf = &l->buffers[i];
        bool paged = dsv4_buf_is_paged(buf->kind), all = true;
        uint32_t blocks = paged ? 3 : 1;
        for (uint32_t j = 0; j < blocks; j++) {
            uint32_t block = paged ? pages[j] : 1;
            /* a different byte each time, last byte of the block included */
            size_t at =
                j == blocks - 1 ? buf->block_bytes - 1 : (i * 131 + j * 17) % buf->block_bytes;
            uint8_t *byte = buf->base + block * buf->block_bytes + at;
            *byte ^= 0x10;
            int rc = dsv4_pd_sum_verify(l, &b, sums, n, &bad, &n_bad);
            *byte ^= 0x10;
            all = all && rc == DSV4_ECHECKSUM && n_bad == 1 && bad.buffer == i &&
                  bad.kind == buf->kind && bad.layer == buf->layer && bad.block == block &&
                  (!paged || bad.index == j) && bad.expected == sums[pos + j] &&
                  bad.got != bad.expected;
            if (rc != DSV4_ECHECKSUM)
                diag("buffer %u block %u: verify returned %d", i, block, rc);
        }
        ok(all, "a flipped byte in %s of layer %u is found at the right block",
           dsv4_pd_buf_kind_name(buf->kind), buf->layer);
        pos += blocks;
    }

    /* the report names page, buffer and layer */
    const dsv4_kv_buffer *ik = NULL;
    for (uint32_t i = 0; i < l->n_buffers; i++)
        if (l->buffers[i].kind == DSV4_BUF_INDEXK && l->buffers[i].layer == 3)
            ik = &l->buffers[i];
    ik->base[5 * ik->block_bytes + 3] ^= 1;
    char text[256] = "";
    if (dsv4_pd_sum_verify(l, &b, sums, n, &bad, &n_bad) == DSV4_ECHECKSUM)
        dsv4_pd_sum_bad_text(&bad, text, sizeof(text));
    is_str(text, "checksum mismatch (page 2 of the request = page 5 here, buffer index-k, layer 3)",
           "the mismatch report names page, buffer and layer");
    ik->base[5 * ik->block_bytes + 3] ^= 1;

    l->buffers[0].base[0] ^= 1; /* page 0 / slot 0 is not part of the request */
    ok(dsv4_pd_sum_verify(l, &b, sums, n, &bad, &n_bad) == 0,
       "a byte outside the request is ignored");
    l->buffers[0].base[0] ^= 1;
    ok(dsv4_pd_sum_verify(l, &b, sums, n - 1, &bad, &n_bad) == -EINVAL,
       "a checksum list of the wrong length is refused as malformed");
    tpool_free(&p);
    return done_testing();
}
