/* t-engine-backend-resolves-device: [core] device reaches the engine as a backend request.
 * device = cpu runs on the CPU; where no CUDA device answers (or the build has none),
 * device = auto falls back to the CPU and device = cuda fails with a message that says so.
 * Where a device answers, device = auto takes CUDA unless a selected plugin's check hook
 * refuses device = cuda (transport/ucx moves host pools only), and then it runs on the
 * CPU. */
#include "config.h"

#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

static dsv4_engine *engine(const dsv4_model *m, const dsv4_plugin_desc *ik, dsv4_backend be,
                           const dsv4_plugin_desc *const *plugins, char *err, size_t errlen)
{
    dsv4_engine_conf conf = {.threads = 1,
                             .kv_dtype = DSV4_KV_F32,
                             .n_pages = 8,
                             .n_slots = 2,
                             .page_tokens = 16,
                             .step_tokens = 16,
                             .indexk = ik,
                             .backend = be,
                             .cuda_device = -1,
                             .plugins = plugins};
    return dsv4_engine_new(m, &conf, err, errlen);
}

int main(void)
{
    dsv4_test_shape shape = dsv4_test_shape_default();
    dsv4_model *m = dsv4_test_model_new(&shape, 3);
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "f32");
    char err[512] = "";

    plan(4);
    dsv4_engine *e = engine(m, ik, DSV4_BACKEND_CPU, NULL, err, sizeof(err));
    ok(e && dsv4_engine_backend(e) == DSV4_BACKEND_CPU, "device = cpu runs on the cpu");
    dsv4_engine_free(e);

    e = engine(m, ik, DSV4_BACKEND_CUDA, NULL, err, sizeof(err));
    bool gpu = e != NULL;
    if (gpu)
        ok(dsv4_engine_backend(e) == DSV4_BACKEND_CUDA, "device = cuda runs on the device");
    else
        has_str(err, "engine: device = cuda, but ", "device = cuda without a device: %s", err);
    dsv4_engine_free(e);
    e = engine(m, ik, DSV4_BACKEND_AUTO, NULL, err, sizeof(err));
    ok(e && dsv4_engine_backend(e) == (gpu ? DSV4_BACKEND_CUDA : DSV4_BACKEND_CPU),
       "device = auto takes the device when one answers, else the cpu");
    dsv4_engine_free(e);
    if (gpu) {
        const dsv4_plugin_desc *plugins[DSV4_FAMILY_COUNT] = {NULL};
        plugins[DSV4_FAMILY_TRANSPORT] =
            dsv4_registry_find(reg, DSV4_FAMILY_TRANSPORT, "ucx", NULL);
        e = plugins[DSV4_FAMILY_TRANSPORT]
                ? engine(m, ik, DSV4_BACKEND_AUTO, plugins, err, sizeof(err))
                : NULL;
        ok(e && dsv4_engine_backend(e) == DSV4_BACKEND_CPU,
           "device = auto stays on the cpu when transport/ucx refuses device = cuda");
        dsv4_engine_free(e);
    } else {
        skip(1, "no CUDA device answers: a plugin's refusal of device = cuda is not reached");
    }
    dsv4_registry_free(reg);
    dsv4_test_model_free(m);
    return done_testing();
}
