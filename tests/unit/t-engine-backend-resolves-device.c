/* t-engine-backend-resolves-device: [core] device reaches the engine as a backend request.
 * device = cpu runs on the CPU; where no CUDA device answers (or the build has none),
 * device = auto falls back to the CPU and device = cuda fails with a message that says so.
 * Where a device answers, device = auto takes CUDA unless a selected plugin's check hook
 * refuses device = cuda, and then it runs on the CPU: transport/chaos refuses it when it
 * corrupts (it copies pages through host memory), which the configuration check reports
 * everywhere. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config/config.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

static dsv4_engine *engine(const dsv4_model *m, const dsv4_plugin_desc *ik, dsv4_backend be,
                           const dsv4_config *conf_file, char *err, size_t errlen)
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
                             .selection = conf_file ? &conf_file->selection : NULL,
                             .plugins = conf_file ? conf_file->desc : NULL};
    return dsv4_engine_new(m, &conf, err, errlen);
}

/* A configuration selecting transport/chaos (around local, corrupting 10%) on device. */
static dsv4_config *chaos_config(const dsv4_registry *reg, const char *device, dsv4_diags *diags)
{
    char path[] = "/tmp/t-engine-backend.XXXXXX", text[256];
    int fd = mkstemp(path);
    int len = snprintf(text, sizeof(text),
                       "[core]\ndevice = %s\n\n[transport]\nplugin = chaos\n\n"
                       "[transport.chaos]\ninner = local\ncorrupt = 10\n",
                       device);
    if (fd < 0 || write(fd, text, (size_t)len) != len)
        bail_out("cannot write %s", path);
    close(fd);
    dsv4_config *conf = dsv4_config_load(path, reg, diags);
    unlink(path);
    return conf;
}

int main(void)
{
    dsv4_test_shape shape = dsv4_test_shape_default();
    dsv4_model *m = dsv4_test_model_new(&shape, 3);
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "f32");
    char err[512] = "";

    plan(5);
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

    /* transport/chaos with corrupt > 0: the check refuses device = cuda with its reason */
    dsv4_diags diags;
    dsv4_diags_init(&diags);
    dsv4_config *cuda_conf = chaos_config(reg, "cuda", &diags);
    if (!cuda_conf)
        bail_out("the device = cuda chaos config does not load");
    dsv4_config_check(cuda_conf, &diags);
    char got[512] = "";
    for (size_t i = 0; i < diags.n && !strstr(got, "corrupt copies"); i++)
        dsv4_diag_format(&diags.v[i], got, sizeof(got));
    has_str(got, "corrupt copies a page through host memory: device pools (device = cuda) are "
                 "not supported", "transport/chaos refuses corrupt on device = cuda: %s", got);
    dsv4_config_free(cuda_conf);
    dsv4_diags_free(&diags);
    dsv4_diags_init(&diags);
    if (gpu) {
        dsv4_config *auto_conf = chaos_config(reg, "auto", &diags);
        if (!auto_conf)
            bail_out("the device = auto chaos config does not load");
        e = engine(m, ik, DSV4_BACKEND_AUTO, auto_conf, err, sizeof(err));
        ok(e && dsv4_engine_backend(e) == DSV4_BACKEND_CPU,
           "device = auto stays on the cpu when transport/chaos refuses device = cuda");
        dsv4_engine_free(e);
        dsv4_config_free(auto_conf);
    } else {
        skip(1, "no CUDA device answers: a plugin's refusal of device = cuda is not reached");
    }
    dsv4_diags_free(&diags);
    dsv4_registry_free(reg);
    dsv4_test_model_free(m);
    return done_testing();
}
