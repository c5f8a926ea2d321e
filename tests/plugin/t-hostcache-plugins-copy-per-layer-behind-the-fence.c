/* t-hostcache-plugins-copy-per-layer-behind-the-fence: the built hostcache plugins obey
 * the loader's rules; off refuses save and load; sync, async and the unfenced control
 * refuse a host layout that does not mirror the device buffer table and ids out of
 * range; async's wait_layer(l) returns only once layer l of a delayed load is in device
 * memory (pages and state blocks alike), and poll/release see the whole op through;
 * on host layouts stream_wait_layer fences as wait_layer does; unfenced is flagged
 * test-only. Layouts are hand-built: 3 layers, each with one paged
 * and one state buffer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <dsv4d/hostcache.h>

#include "tests/plugin/plugin-harness.h"
#include "tests/tap.h"

#define LAYERS 3
#define PAGES 4
#define SLOTS 3
#define BLOCK 96

typedef struct mem {
    dsv4_kv_buffer buf[2 * LAYERS];
    dsv4_kv_layout lay;
} mem;

static void mem_init(mem *m, uint8_t fill)
{
    for (uint32_t l = 0; l < LAYERS; l++)
        for (uint32_t s = 0; s < 2; s++) {
            uint32_t n = s ? SLOTS : PAGES;
            dsv4_kv_buffer *b = &m->buf[2 * l + s];
            *b = (dsv4_kv_buffer){.kind = s ? DSV4_BUF_WINDOW : DSV4_BUF_INDEXK,
                                  .layer = l,
                                  .mem = DSV4_MEM_HOST,
                                  .cuda_device = -1,
                                  .base = malloc(BLOCK * n),
                                  .block_bytes = BLOCK,
                                  .n_blocks = n};
            memset(b->base, fill + (int)(2 * l + s), BLOCK * n);
        }
    m->lay = (dsv4_kv_layout){.struct_size = sizeof(m->lay),
                              .page_tokens = 16,
                              .n_pages = PAGES,
                              .n_state_slots = SLOTS,
                              .n_layers = LAYERS,
                              .n_buffers = 2 * LAYERS,
                              .buffers = m->buf};
}

static void mem_free(mem *m)
{
    for (int i = 0; i < 2 * LAYERS; i++)
        free(m->buf[i].base);
}

/* Is block `id` of layer l's paged (state) buffer in dev equal to block hid in hst? */
static bool landed(const mem *dev, uint32_t id, const mem *hst, uint32_t hid, uint32_t l, int s)
{
    const dsv4_kv_buffer *d = &dev->buf[2 * l + s], *h = &hst->buf[2 * l + s];
    return memcmp(d->base + id * BLOCK, h->base + hid * BLOCK, BLOCK) == 0;
}

int main(void)
{
    static const char *names[] = {"off", "sync", "async", "unfenced"};
    plan(4 * PLUGTEST_DESC_TESTS + 3 + 3 * 3 + 5);
    const dsv4_plugin_desc *d[4];
    for (int i = 0; i < 4; i++) {
        d[i] = plugtest_open("hostcache", names[i]);
        plugtest_check_desc(d[i], DSV4_FAMILY_HOSTCACHE, DSV4_HOSTCACHE_VERSION, names[i],
                            sizeof(dsv4_hostcache_ops));
    }
    mem dev, hst;
    mem_init(&dev, 0x10);
    mem_init(&hst, 0x80);
    dsv4_page_copy pc[2] = {{.device_page = 3, .host_page = 1}, {.device_page = 0, .host_page = 2}};
    void *op = NULL;

    /* off */
    void *conf = plugtest_config(d[0], NULL), *st = plugtest_init(d[0], conf);
    const dsv4_hostcache_ops *ops = d[0]->ops;
    ok(ops->attach(st, &dev.lay, &hst.lay) == 0, "off: attach");
    is_int(ops->save(st, pc, 2, &op), -ENOTSUP, "off: save refused");
    is_int(ops->load_state(st, pc, 1, &op), -ENOTSUP, "off: load_state refused");
    d[0]->fini(st);
    plugtest_config_free(d[0], conf);

    for (int i = 1; i < 4; i++) {
        ops = d[i]->ops;
        conf = i == 1 ? plugtest_config(d[i], NULL)
                      : plugtest_config(d[i], "inject_delay", "10ms", NULL);
        st = plugtest_init(d[i], conf);
        mem odd;
        mem_init(&odd, 0);
        odd.buf[3].block_bytes = BLOCK / 2;
        is_int(ops->attach(st, &dev.lay, &odd.lay), -EINVAL,
               "%s: a host layout that does not mirror the device is refused", names[i]);
        mem_free(&odd);
        ok(ops->attach(st, &dev.lay, &hst.lay) == 0, "%s: attach", names[i]);
        dsv4_page_copy bad = {.device_page = PAGES, .host_page = 0};
        is_int(ops->load(st, &bad, 1, &op), -EINVAL, "%s: a page out of range is refused",
               names[i]);
        d[i]->fini(st);
        plugtest_config_free(d[i], conf);
    }

    /* async: each wait_layer returns with that layer in device memory */
    ops = d[2]->ops;
    conf = plugtest_config(d[2], "inject_delay", "10ms", NULL);
    st = plugtest_init(d[2], conf);
    ops->attach(st, &dev.lay, &hst.lay);
    void *pop = NULL, *sop = NULL;
    bool fenced = ops->load(st, pc, 2, &pop) == 0 && ops->load_state(st, pc + 1, 1, &sop) == 0;
    for (uint32_t l = 0; l < LAYERS && fenced; l++) {
        fenced = ops->wait_layer(st, pop, l) == 0 && ops->wait_layer(st, sop, l) == 0 &&
                 landed(&dev, 3, &hst, 1, l, 0) && landed(&dev, 0, &hst, 2, l, 0) &&
                 landed(&dev, 0, &hst, 2, l, 1);
    }
    ok(fenced, "async: after wait_layer(l), layer l's pages and state block have landed");
    is_int(ops->poll(st, pop), 0, "async: poll reports the finished op done");
    is_int(ops->wait_layer(st, pop, LAYERS), -EINVAL, "async: a layer out of range is refused");
    ops->release(st, pop);
    ops->release(st, sop);
    /* on a host layout the stream fence is the host fence: the stream is ignored (the
     * device memory is made anew, so nothing has landed before this load) */
    mem_free(&dev);
    mem_init(&dev, 0x10);
    fenced = ops->load(st, pc, 2, &pop) == 0;
    for (uint32_t l = 0; l < LAYERS && fenced; l++)
        fenced = ops->stream_wait_layer(st, pop, l, NULL) == 0 && landed(&dev, 3, &hst, 1, l, 0) &&
                 landed(&dev, 0, &hst, 2, l, 0);
    ok(fenced, "async: on host layouts stream_wait_layer(l) returns with layer l landed too");
    ops->release(st, pop);
    d[2]->fini(st);
    plugtest_config_free(d[2], conf);
    ok((d[3]->flags & DSV4_PLUGIN_TEST_ONLY) && !(d[2]->flags & DSV4_PLUGIN_TEST_ONLY),
       "unfenced is flagged test-only, async is not");
    mem_free(&dev);
    mem_free(&hst);
    return done_testing();
}
