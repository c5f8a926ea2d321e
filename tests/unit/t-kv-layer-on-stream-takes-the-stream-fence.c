/* t-kv-layer-on-stream-takes-the-stream-fence: the KV accessor fences a layer the way its
 * reader needs. dsv4_kv_pool_layer() and dsv4_kv_pool_layer_on() without a stream call the
 * host fence; with a stream they call the stream fence with that stream and layer (the
 * CUDA forward: its stream waits, the host does not), or the host fence where no stream
 * fence is installed; a failing stream fence leaves the view unset and is returned; removing
 * the fence removes the stream fence with it. */
#include <errno.h>
#include <string.h>

#include "core/engine/kvpool.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

typedef struct calls {
    int host, stream, fail;
    uint32_t layer;
    void *stream_seen;
} calls;

static int host_fence(void *ctx, uint32_t layer)
{
    calls *c = ctx;
    c->host++;
    c->layer = layer;
    return 0;
}

static int stream_fence(void *ctx, uint32_t layer, void *stream)
{
    calls *c = ctx;
    c->stream++;
    c->layer = layer;
    c->stream_seen = stream;
    return c->fail;
}

int main(void)
{
    plan(8);
    dsv4_registry *reg;
    const dsv4_plugin_desc *fp8 = dsv4_test_indexk(&reg, "fp8");
    dsv4_test_shape shape = dsv4_test_shape_default();
    dsv4_model *m = dsv4_test_model_new(&shape, 1);
    char err[256];
    dsv4_kv_pool_conf conf = {&m->cfg, DSV4_KV_BF16, 16, 10, 3, fp8->ops, "fp8"};
    dsv4_kv_pool *pool = dsv4_kv_pool_new(&conf, err, sizeof(err));
    if (!pool)
        bail_out("%s", err);
    int token; /* any non-NULL pointer stands for a cudaStream_t: the pool never reads it */
    void *s = &token;
    calls c = {0};
    dsv4_kv_layer_view v;

    dsv4_kv_pool_set_fence(pool, host_fence, &c);
    dsv4_kv_pool_set_stream_fence(pool, stream_fence);
    ok(dsv4_kv_pool_layer(pool, 1, &v) == 0 && dsv4_kv_pool_layer_on(pool, 2, NULL, &v) == 0 &&
           c.host == 2 && c.stream == 0 && c.layer == 2,
       "without a stream the host fence runs");
    memset(&c, 0, sizeof(c));
    ok(dsv4_kv_pool_layer_on(pool, 3, s, &v) == 0 && c.stream == 1 && c.host == 0 && c.layer == 3 &&
           c.stream_seen == s,
       "with a stream the stream fence runs, for that stream and layer, and the host's does not");
    ok(v.buf[DSV4_BUF_INDEXK] != NULL, "and the view of the layer is filled");

    memset(&c, 0, sizeof(c));
    c.fail = -EIO;
    memset(&v, 0, sizeof(v));
    is_int(dsv4_kv_pool_layer_on(pool, 1, s, &v), -EIO, "a failing stream fence is returned");
    ok(v.buf[DSV4_BUF_WINDOW] == NULL, "and the view is left unset");
    c.fail = 0;

    dsv4_kv_pool_set_stream_fence(pool, NULL);
    memset(&c, 0, sizeof(c));
    ok(dsv4_kv_pool_layer_on(pool, 0, s, &v) == 0 && c.host == 1 && c.stream == 0,
       "without a stream fence a stream reader gets the host fence");

    dsv4_kv_pool_set_stream_fence(pool, stream_fence);
    dsv4_kv_pool_set_fence(pool, NULL, NULL);
    memset(&c, 0, sizeof(c));
    ok(dsv4_kv_pool_layer_on(pool, 0, s, &v) == 0 && c.host == 0 && c.stream == 0,
       "removing the fence removes the stream fence with it");
    is_int(dsv4_kv_pool_layer_on(pool, 4, s, &v), -EINVAL, "a layer out of range is refused");

    dsv4_kv_pool_free(pool);
    dsv4_test_model_free(m);
    dsv4_registry_free(reg);
    return done_testing();
}
