/* t-radix-match-insert-evict: the prefix cache's page trie on its own (no engine).
 * A match is the longest whole-page prefix ending at a node with a state snapshot, or at
 * any node for a match of pages only (a decode server's); an insert references only pages
 * it did not have, keeps a snapshot at the page it is given and frees one it does not need;
 * locked paths survive eviction; eviction takes least recently used leaves first and
 * gives every page reference and slot back, so the counts return to zero. */
#include <errno.h>
#include <string.h>

#include "core/serve/radix.h"
#include "tests/tap.h"

#define PT 4
#define NP 64

static int refs[NP];
static int slots_freed[NP];

static void page_ref(void *ctx, uint32_t page)
{
    refs[page]++;
}

static void page_unref(void *ctx, uint32_t page)
{
    refs[page]--;
}

static void slot_free(void *ctx, uint32_t slot)
{
    slots_freed[slot]++;
}

static int total_refs(void)
{
    int n = 0;
    for (int i = 0; i < NP; i++)
        n += refs[i];
    return n;
}

int main(void)
{
    plan(32);
    dsv4_radix_hooks hooks = {
        .page_ref = page_ref, .page_unref = page_unref, .slot_free = slot_free};
    dsv4_radix *rx = dsv4_radix_new(PT, &hooks, false);
    dsv4_radix_node *node = NULL;
    uint32_t got[8];
    /* conversation a: 3 pages + 2 tokens; b shares a's first page then differs */
    int32_t a[14] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    int32_t b[12] = {1, 2, 3, 4, 50, 60, 70, 80, 90, 91, 92, 93};
    uint32_t a_pages[3] = {10, 11, 12}, b_pages[3] = {20, 21, 22};

    is_int(dsv4_radix_match(rx, a, 14, DSV4_RADIX_WITH_STATE, got, &node), 0, "empty cache misses");
    ok(dsv4_radix_insert(rx, a, 3, a_pages, 3, 5) == 0, "insert 3 pages with a snapshot");
    ok(refs[10] == 1 && refs[11] == 1 && refs[12] == 1, "each cached page referenced once");
    is_int(dsv4_radix_match(rx, a, 14, DSV4_RADIX_WITH_STATE, got, &node), 3,
           "a longer prompt matches 3 pages");
    ok(got[0] == 10 && got[1] == 11 && got[2] == 12, "the matched pages in order");
    is_int(dsv4_radix_node_slot(node), 5, "the match carries its snapshot slot");
    is_int(dsv4_radix_match(rx, a, 11, DSV4_RADIX_WITH_STATE, NULL, NULL), 0,
           "a prefix ending where no snapshot is kept misses");

    ok(dsv4_radix_insert(rx, b, 3, b_pages, 3, 6) == 0, "insert a branch sharing one page");
    ok(refs[20] == 0 && refs[21] == 1 && refs[22] == 1,
       "the shared page is not referenced again, the new ones are");
    is_int(dsv4_radix_pages(rx), 5, "5 pages cached");
    is_int(dsv4_radix_match(rx, b, 12, DSV4_RADIX_WITH_STATE, got, &node), 3, "the branch matches");
    ok(got[0] == 10 && got[1] == 21, "through the shared first page");

    ok(dsv4_radix_insert(rx, a, 2, a_pages, 2, 7) == 0 &&
           dsv4_radix_match(rx, a, 9, DSV4_RADIX_WITH_STATE, got, &node) == 2,
       "a snapshot added at an inner node makes a shorter match possible");
    ok(dsv4_radix_insert(rx, a, 3, a_pages, 3, 8) == 0 && slots_freed[8] == 1,
       "a second snapshot for the same node is freed");
    is_int(dsv4_radix_slots(rx), 3, "3 snapshots held");

    /* lock b's path: a's last page is the only unlocked leaf, then a's middle one */
    dsv4_radix_match(rx, b, 12, DSV4_RADIX_WITH_STATE, got, &node);
    dsv4_radix_lock(rx, node);
    is_int(dsv4_radix_pages_unlocked(rx), 2, "locking b's path leaves a's two own pages");
    uint32_t slots = 0;
    is_int(dsv4_radix_evict(rx, 1, 0, &slots), 1, "evicting one page takes one leaf");
    ok(refs[12] == 0 && slots_freed[5] == 1 && slots == 1,
       "the unlocked leaf went, with its snapshot");
    is_int(dsv4_radix_evict(rx, 100, 100, NULL), 1, "the rest of a's own path is evicted");
    ok(refs[10] == 1 && refs[21] == 1 && refs[22] == 1, "the locked path is kept");

    dsv4_radix_unlock(rx, node);
    is_int(dsv4_radix_pages_unlocked(rx), 3, "unlocked again");
    is_int(dsv4_radix_evict(rx, 100, 100, NULL), 3, "everything can be evicted now");
    ok(total_refs() == 0 && dsv4_radix_pages(rx) == 0 && dsv4_radix_slots(rx) == 0,
       "no page reference or slot is left");

    /* pages without a snapshot (a decode server's PD requests need only pages) */
    ok(dsv4_radix_insert(rx, a, 3, a_pages, 1, 30) == 0 && refs[12] == 1,
       "insert 3 pages with the snapshot after the first");
    ok(dsv4_radix_match(rx, a, 14, DSV4_RADIX_WITH_STATE, got, &node) == 1 &&
           dsv4_radix_node_slot(node) == 30,
       "a match that needs the state ends at that snapshot");
    ok(dsv4_radix_match(rx, a, 14, DSV4_RADIX_PAGES, got, &node) == 3 && got[2] == 12 &&
           dsv4_radix_node_slot(node) == DSV4_RADIX_NO_SLOT,
       "a match of pages only takes all 3 (its end has no snapshot)");
    is_int(dsv4_radix_match(rx, a, 11, DSV4_RADIX_PAGES, NULL, NULL), 2,
           "and stops at the whole pages of a shorter prompt");
    dsv4_radix_found f = dsv4_radix_peek(rx, a, 14, DSV4_RADIX_PAGES);
    ok(f.pages == 3 && f.on_host == 0 && f.locked == 0,
       "a peek sees the same, none of it on host or locked");
    dsv4_radix_match(rx, a, 11, DSV4_RADIX_PAGES, got, &node);
    dsv4_radix_lock(rx, node);
    f = dsv4_radix_peek(rx, a, 14, DSV4_RADIX_PAGES);
    ok(f.pages == 3 && f.locked == 2 && dsv4_radix_pages_unlocked(rx) == 1,
       "with its first 2 pages locked, a peek counts them locked (one page left unlocked)");
    dsv4_radix_unlock(rx, node);
    ok(dsv4_radix_insert(rx, a, 2, a_pages, 3, 31) == -EINVAL && slots_freed[31] == 1 &&
           dsv4_radix_slots(rx) == 1,
       "a snapshot past the pages inserted is refused, its slot freed");
    ok(dsv4_radix_insert(rx, b, 3, b_pages, 0, 32) == 0 && slots_freed[32] == 1 &&
           dsv4_radix_match(rx, b, 12, DSV4_RADIX_PAGES, NULL, NULL) == 3,
       "a snapshot at no page is freed, the pages cached");
    dsv4_radix_evict(rx, 100, 100, NULL);

    /* free gives back what is still cached */
    dsv4_radix_insert(rx, a, 3, a_pages, 3, 9);
    dsv4_radix_free(rx);
    ok(total_refs() == 0 && slots_freed[9] == 1, "free gives every page and slot back");
    return done_testing();
}
