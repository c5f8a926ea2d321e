/* t-model-loads-mkmodel-values: every synthetic checkpoint format (f32, bf16, fp8 with
 * FP8 block scales and packed MXFP4 experts), under both naming schemes and sharded,
 * loads back to exactly the values the generator wrote (bit for bit after dequantising),
 * and those stay within each format's rounding of the f32 checkpoint's values (so a
 * misplaced scale or nibble, wrong in generator and loader alike, is still caught). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/mkmodel.h"
#include "core/model/model.h"
#include "core/model/tensors.h"
#include "tests/tap.h"

typedef struct cmp_ctx {
    const dsv4_mkmodel_opts *o;
    dsv4_model *m;
    size_t checked, bad, far;
    char first_bad[128], first_far[160];
} cmp_ctx;

/* Is got within the storage format's rounding of the f32 value x? amp: the tensor's
 * largest magnitude (scales are powers of two at most amp/2). */
static bool close_enough(const cmp_ctx *c, const dsv4_tensor_desc *d, float got, float x, float amp)
{
    float e = fabsf(got - x);
    if (d->wclass == DSV4_WC_F32 || d->wclass == DSV4_WC_INDEX || !strcmp(c->o->dtype, "f32"))
        return e == 0;
    if (!strcmp(c->o->dtype, "bf16") || d->wclass == DSV4_WC_BF16)
        return e <= fabsf(x) * 0x1p-8f;
    if (d->wclass == DSV4_WC_FP8)
        return e <= fabsf(x) * 0x1p-4f + amp * 0x1p-12f;
    return e <= fabsf(x) * 0.34f + amp * 0.125f; /* e2m1: 1 mantissa bit, saturates at 6 */
}

static int compare_fn(void *ctx, const dsv4_tensor_desc *d)
{
    cmp_ctx *c = ctx;
    size_t n = d->rows * d->cols, es = d->wclass == DSV4_WC_INDEX ? 4 : 4;
    void *want = malloc(n * es);
    uint64_t got_n = 0;
    const void *got = dsv4_model_weight(c->m, d->name, &got_n);
    if (!want || dsv4_mkmodel_values(c->o, &c->m->cfg, d, want) != 0 || !got || got_n != n ||
        memcmp(got, want, n * es) != 0) {
        if (!c->bad++)
            snprintf(c->first_bad, sizeof(c->first_bad), "%s", d->name);
    }
    dsv4_mkmodel_opts o32 = *c->o;
    o32.dtype = "f32";
    float *ref = malloc(n * es), amp = 0;
    if (ref && d->wclass != DSV4_WC_INDEX && dsv4_mkmodel_values(&o32, &c->m->cfg, d, ref) == 0) {
        for (size_t i = 0; i < n; i++)
            amp = fmaxf(amp, fabsf(ref[i]));
        for (size_t i = 0; got && i < n; i++) {
            float g = ((const float *)got)[i];
            if (!close_enough(c, d, g, ref[i], amp) && !c->far++)
                snprintf(c->first_far, sizeof(c->first_far), "%s[%zu]: %g, f32 %g", d->name, i,
                         (double)g, (double)ref[i]);
        }
    }
    c->checked++;
    free(ref);
    free(want);
    return 0;
}

static void roundtrip(const char *root, const char *dtype, const char *names, unsigned shards)
{
    char dir[512], err[512];
    snprintf(dir, sizeof(dir), "%s/%s-%s-%u", root, dtype, names, shards);
    dsv4_mkmodel_opts o = {
        .preset = "tiny", .seed = 42, .dtype = dtype, .names = names, .shards = shards};
    int rc = dsv4_mkmodel_run(&o, dir, err, sizeof(err));
    if (!ok(rc == 0, "mkmodel tiny %s %s shards %u", dtype, names, shards))
        diag("%s", err);
    dsv4_model *m = dsv4_model_load(dir, err, sizeof(err));
    if (!ok(m != NULL, "load %s", dir)) {
        diag("%s", err);
        skip(2, "not loaded");
        return;
    }
    cmp_ctx c = {.o = &o, .m = m};
    dsv4_tensor_each(&m->cfg, compare_fn, &c);
    if (!ok(c.bad == 0 && c.checked > 100, "%s %s shards %u: %zu tensors equal the generator's",
            dtype, names, shards, c.checked))
        diag("%zu differ, first %s", c.bad, c.first_bad);
    if (!ok(c.far == 0, "%s %s: values within %s rounding of the f32 checkpoint", dtype, names,
            dtype))
        diag("%zu elements too far, first %s", c.far, c.first_far);
    dsv4_model_free(m);
}

int main(void)
{
    char root[] = "/tmp/t-model-XXXXXX";
    if (!mkdtemp(root))
        bail_out("mkdtemp failed");
    plan(4 * 8);
    static const char *const dtypes[] = {"f32", "bf16", "fp8"};
    for (int i = 0; i < 3; i++) {
        roundtrip(root, dtypes[i], "upstream", 1);
        roundtrip(root, dtypes[i], "hf", 1);
    }
    roundtrip(root, "fp8", "upstream", 2);
    roundtrip(root, "bf16", "hf", 3);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        diag("could not remove %s", root);
    return done_testing();
}
