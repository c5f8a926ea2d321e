/* checksum.h: page checksums of a PD transfer (DESIGN.md §8, §10).
 *
 * The prefill side computes one XXH64 per block a request occupies, in every buffer of
 * the layout's buffer table (index-K and carry state included: no kind is skipped), and
 * sends the list in its completion message; the decode side recomputes it over the pages
 * it reserved and refuses the request on any difference, naming page, buffer and layer.
 *
 * The list is compact: one uint64 per (buffer, block) and nothing else, because both
 * sides derive the order from their identical buffer tables (the handshake refuses a
 * peer whose table differs). Order: buffers in table order; within a paged buffer the
 * request's pages in request order; a state buffer contributes its one slot, only when the
 * transfer carries state. The sender's pages and the receiver's pages are different ids
 * for the same data, so each side passes its own list.
 */
#ifndef DSV4_CORE_PD_CHECKSUM_H
#define DSV4_CORE_PD_CHECKSUM_H

#include <dsv4d/kv.h>

/* The blocks of one request in one pool. */
typedef struct dsv4_pd_blocks {
    const uint32_t *pages; /* page ids, in request order */
    uint32_t n_pages;
    bool with_state; /* the request's state slot is part of the transfer */
    uint32_t slot;
} dsv4_pd_blocks;

/* Where the first mismatch is. */
typedef struct dsv4_pd_sum_bad {
    uint32_t buffer; /* index in the buffer table */
    uint32_t kind;   /* dsv4_buf_kind */
    uint32_t layer;
    uint32_t index; /* position in the request's page list (paged buffers) */
    uint32_t block; /* page id or state slot in the verifying pool */
    uint64_t expected, got;
} dsv4_pd_sum_bad;

/* "csa-kv", "index-k", "hca-kv", "window", "csa-carry", "index-carry", "hca-carry". */
const char *dsv4_pd_buf_kind_name(uint32_t kind);

/* Number of checksums a request of these blocks has in this layout. */
size_t dsv4_pd_sum_count(const dsv4_kv_layout *l, const dsv4_pd_blocks *b);

/* Fills sums[n_sums]. 0, or -EINVAL when n_sums is not dsv4_pd_sum_count() or a page or
 * the slot is out of range; -ENOTSUP for a pool that mixes memories or devices, or lives
 * in device memory in a build without CUDA; a CUDA failure as a negative errno. */
int dsv4_pd_sum_compute(const dsv4_kv_layout *l, const dsv4_pd_blocks *b, uint64_t *sums,
                        size_t n_sums);

/* Recomputes and compares with expected[n_sums]. 0 when every block matches;
 * DSV4_ECHECKSUM with the first mismatch in *bad_p and the number of mismatching blocks in
 * *n_bad_p; the failures of dsv4_pd_sum_compute (a count that does not fit the layout is a
 * malformed completion, not a corruption); -ENOMEM. */
int dsv4_pd_sum_verify(const dsv4_kv_layout *l, const dsv4_pd_blocks *b, const uint64_t *expected,
                       size_t n_sums, dsv4_pd_sum_bad *bad_p, uint32_t *n_bad_p);

/* "checksum mismatch (page 3 of the request = page 17 here, buffer index-k, layer 1)" or
 * the state-slot form, for logs and error replies. */
void dsv4_pd_sum_bad_text(const dsv4_pd_sum_bad *bad, char *buf, size_t len);

#endif
