/* t-model-loads-mkmodel-values: every synthetic checkpoint format (f32, bf16, fp8 with
 * FP8 block scales and packed MXFP4 experts, or with block-scaled FP8 experts), under both
 * naming schemes (Hugging Face's merging a layer's experts into gate_up_proj and down_proj)
 * and sharded, loads back to exactly the values the generator wrote (bit for bit after
 * dequantising), and those stay within each format's rounding of the f32 checkpoint's
 * values (so a misplaced scale or nibble, wrong in generator and loader alike, is still
 * caught). FP8 experts merged at widths where a scale block would hold rows of both w1 and
 * w3 are refused by the generator, as is an FP8 expert format under another dtype. */
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
    bool fp8_experts = c->o->experts && !strcmp(c->o->experts, "fp8");
    if (d->wclass == DSV4_WC_FP8 || (d->wclass == DSV4_WC_FP4 && fp8_experts))
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

/* Write, load and compare preset's checkpoint (experts: the expert format, NULL for the
 * default). */
static void roundtrip_experts(const char *root, const char *preset, const char *dtype,
                              const char *experts, const char *names, unsigned shards)
{
    char dir[512], err[512];
    snprintf(dir, sizeof(dir), "%s/%s-%s-%s-%s-%u", root, preset, dtype,
             experts ? experts : "default", names, shards);
    dsv4_mkmodel_opts o = {.preset = preset,
                           .seed = 42,
                           .dtype = dtype,
                           .names = names,
                           .experts = experts,
                           .shards = shards};
    int rc = dsv4_mkmodel_run(&o, dir, err, sizeof(err));
    if (!ok(rc == 0, "mkmodel %s %s%s %s shards %u", preset, dtype,
            experts ? (strcmp(experts, "fp8") ? " (fp4 experts)" : " (fp8 experts)") : "", names,
            shards))
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

static void roundtrip(const char *root, const char *dtype, const char *names, unsigned shards)
{
    roundtrip_experts(root, "tiny", dtype, NULL, names, shards);
}

/* Whether mkmodel refuses o, its message holding `says`. */
static bool refused(const char *root, dsv4_mkmodel_opts o, const char *says)
{
    char dir[512], err[512] = "";
    snprintf(dir, sizeof(dir), "%s/refused", root);
    int rc = dsv4_mkmodel_run(&o, dir, err, sizeof(err));
    if (rc == 0 || !strstr(err, says))
        diag("rc %d: %s", rc, err);
    return rc != 0 && strstr(err, says) != NULL;
}

int main(void)
{
    char root[] = "/tmp/t-model-XXXXXX";
    if (!mkdtemp(root))
        bail_out("mkdtemp failed");
    plan(4 * 10 + 2);
    static const char *const dtypes[] = {"f32", "bf16", "fp8"};
    for (int i = 0; i < 3; i++) {
        roundtrip(root, dtypes[i], "upstream", 1);
        roundtrip(root, dtypes[i], "hf", 1);
    }
    roundtrip(root, "fp8", "upstream", 2);
    roundtrip(root, "bf16", "hf", 3);
    /* block-scaled FP8 experts, per expert and merged (the small preset's moe_inter is 128) */
    roundtrip_experts(root, "small", "fp8", "fp8", "upstream", 1);
    roundtrip_experts(root, "small", "fp8", "fp8", "hf", 1);
    dsv4_mkmodel_opts o = {
        .preset = "tiny", .seed = 1, .dtype = "fp8", .names = "hf", .experts = "fp8", .shards = 1};
    ok(refused(root, o, "moe_inter a multiple of 128"),
       "FP8 experts merged at tiny's widths (moe_inter 32) are refused");
    o = (dsv4_mkmodel_opts){
        .preset = "tiny", .seed = 1, .dtype = "bf16", .experts = "fp8", .shards = 1};
    ok(refused(root, o, "needs dtype fp8"), "FP8 experts under dtype bf16 are refused");
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        diag("could not remove %s", root);
    return done_testing();
}
