/* t-gpu-indexk-store-cuda-matches-host-store: each indexk plugin's store_cuda writes the
 * same bytes into its pages as its host store, for rows that reach every corner of the
 * encoders: uniform values, all-zero rows and rows below the fp8 amax floor, exponents from
 * 2^-40 to 2^127 and FLT_MAX, f32 subnormals, exact e4m3 rounding ties (amax 448, so the
 * scale is exactly 1), values a few ulps either side of a tie at a scale that is not a
 * power of two (where x (1 / scale) and x / scale can round apart), signed zeros, and NaN
 * and infinities with reject_nonfinite off; slots in shuffled pages and rows, around bytes
 * that must stay as they were. With reject_nonfinite on, a batch holding a NaN is refused
 * as store refuses it: nothing written, the refusal flag set; so is a slot row past the
 * page with it off; a dim that is not a multiple of 4 is -ENOTSUP (the forward then
 * stores through the host). */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include "tests/plugin/indexk-bounds.h"
#include "tests/plugin/plugin-harness.h"

#include <dsv4d/indexk.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PAGES 24u /* 192 slots at the smallest page (8 rows): room for N_ROWS */
#define N_ROWS 160u

typedef struct variant {
    indexk_fmt fmt;
    const char *scale_format;
    uint32_t rows_per_page, dim;
} variant;

/* Row i of the batch, one of nine kinds (i % 9) of values. */
static void fill_row(float *row, uint32_t dim, uint32_t i)
{
    /* kind 7's amax, its scale fmaxf(amax, 1e-4) / 448 as fp8.c's */
    const float tie_amax = i % 9 == 7 ? (float)plugtest_uniform(1.0, 300.0) : 0.0f;
    for (uint32_t d = 0; d < dim; d++) {
        double sign = plugtest_uniform(0, 1) < 0.5 ? -1.0 : 1.0;
        switch (i % 9) {
        case 0: row[d] = (float)plugtest_uniform(-2.0, 2.0); break;
        case 1: row[d] = 0.0f; break;
        case 2: row[d] = (float)(sign * plugtest_uniform(0, 1e-5)); break; /* amax < floor */
        case 3:
            row[d] =
                (float)(sign * ldexp(plugtest_uniform(1, 2), (int)(plugtest_rand() % 80) - 40));
            break;
        case 4:
            row[d] = d == 0 ? FLT_MAX
                            : (float)(sign * ldexp(plugtest_uniform(1, 2),
                                                   100 + (int)(plugtest_rand() % 27)));
            break;
        case 5: row[d] = d == 1 ? 1.0f : (float)(sign * ldexp(plugtest_uniform(0, 1), -126)); break;
        case 6: /* amax 448 makes the fp8 scale 1: e4m3 midpoints are exact ties */
            row[d] = d == 0
                         ? 448.0f
                         : (float)(sign * ldexp((8.0 + (double)(plugtest_rand() % 8) + 0.5) / 8.0,
                                                (int)(plugtest_rand() % 18) - 10));
            break;
        case 7: { /* x / scale a few ulps from an e4m3 tie */
            float x = (float)(ldexp((8.0 + (double)(plugtest_rand() % 8) + 0.5) / 8.0,
                                    (int)(plugtest_rand() % 17) - 9) *
                              (tie_amax / 448.0f));
            for (int ulps = (int)(plugtest_rand() % 7) - 3; ulps; ulps -= ulps > 0 ? 1 : -1)
                x = nextafterf(x, ulps > 0 ? INFINITY : 0.0f);
            row[d] = d == 0 ? tie_amax : (float)sign * x;
            break;
        }
        default: {
            static const float odd[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 3.0f};
            row[d] = d < 6 ? odd[d] : (float)plugtest_uniform(-5.0, 5.0);
            if (d == 0 && i % 18 == 17)
                row[d] = -NAN;
        }
        }
    }
}

/* The n slots of the batch: distinct, in shuffled pages and rows. */
static void shuffle_slots(dsv4_indexk_slot *slots, uint32_t n, uint32_t rows_per_page)
{
    uint32_t total = N_PAGES * rows_per_page, *perm = malloc(total * sizeof *perm);
    if (!perm || n > total)
        bail_out("%u distinct slots asked of %u", n, total);
    for (uint32_t i = 0; i < total; i++)
        perm[i] = i;
    for (uint32_t i = total - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(plugtest_rand() % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (uint32_t i = 0; i < n; i++)
        slots[i] = (dsv4_indexk_slot){perm[i] / rows_per_page, perm[i] % rows_per_page};
    free(perm);
}

typedef struct rig {
    const dsv4_plugin_desc *desc;
    const dsv4_indexk_ops *ops;
    void *conf, *state;
    dsv4_indexk_geom g;
    size_t pool_bytes;
    uint8_t *host, *got;
    void *pool_dev, *rows_dev, *slots_dev, *refused_dev;
} rig;

static void rig_open(rig *r, const variant *v, const char *reject)
{
    r->desc = plugtest_open("indexk", indexk_fmt_names[v->fmt]);
    r->ops = r->desc->ops;
    r->conf = v->scale_format ? plugtest_config(r->desc, "scale_format", v->scale_format,
                                                "reject_nonfinite", reject, NULL)
                              : plugtest_config(r->desc, "reject_nonfinite", reject, NULL);
    r->state = plugtest_init(r->desc, r->conf);
    r->g = (dsv4_indexk_geom){
        .struct_size = sizeof r->g, .dim = v->dim, .rows_per_page = v->rows_per_page};
    r->pool_bytes = N_PAGES * r->ops->page_bytes(&r->g);
    r->host = malloc(r->pool_bytes);
    r->got = malloc(r->pool_bytes);
    /* both pools start as the same noise, so a byte written on one side only shows */
    for (size_t i = 0; i < r->pool_bytes; i++)
        r->host[i] = (uint8_t)plugtest_rand();
    r->pool_dev = gpu_alloc(r->pool_bytes);
    gpu_put(r->pool_dev, r->host, r->pool_bytes);
    r->rows_dev = gpu_alloc((size_t)N_ROWS * v->dim * sizeof(float));
    r->slots_dev = gpu_alloc(N_ROWS * sizeof(dsv4_indexk_slot));
    r->refused_dev = gpu_alloc(sizeof(uint32_t));
    gpu_put(r->refused_dev, &(uint32_t){0}, sizeof(uint32_t));
}

static void rig_close(rig *r)
{
    gpu_free(r->pool_dev);
    gpu_free(r->rows_dev);
    gpu_free(r->slots_dev);
    gpu_free(r->refused_dev);
    r->desc->fini(r->state);
    plugtest_config_free(r->desc, r->conf);
    free(r->host);
    free(r->got);
}

/* store_cuda of the batch; returns its status, the device pool in r->got, *refused_p. */
static int rig_store(rig *r, const float *rows, const dsv4_indexk_slot *slots, uint32_t n,
                     uint32_t *refused_p)
{
    gpu_put(r->rows_dev, rows, (size_t)n * r->g.dim * sizeof(float));
    gpu_put(r->slots_dev, slots, n * sizeof *slots);
    int rc = r->ops->store_cuda(r->state, &r->g, r->pool_dev, r->rows_dev, r->slots_dev, n,
                                r->refused_dev, NULL);
    gpu_sync();
    gpu_get(r->got, r->pool_dev, r->pool_bytes);
    gpu_get(refused_p, r->refused_dev, sizeof *refused_p);
    return rc;
}

static void first_difference(const rig *r, const char *label)
{
    for (size_t i = 0; i < r->pool_bytes; i++)
        if (r->host[i] != r->got[i]) {
            size_t pb = r->pool_bytes / N_PAGES;
            diag("%s: first difference at page %zu byte %zu: host 0x%02x, device 0x%02x", label,
                 i / pb, i % pb, r->host[i], r->got[i]);
            return;
        }
}

static void run_match(const variant *v)
{
    rig r;
    char label[64];
    float *rows = malloc((size_t)N_ROWS * v->dim * sizeof *rows);
    dsv4_indexk_slot *slots = malloc(N_ROWS * sizeof *slots);
    uint32_t refused = 0;

    rig_open(&r, v, "false");
    snprintf(label, sizeof label, "%s%s%s %ux%u", indexk_fmt_names[v->fmt],
             v->scale_format ? "/" : "", v->scale_format ? v->scale_format : "", v->rows_per_page,
             v->dim);
    ok(DSV4_HAS_FIELD(r.ops, dsv4_indexk_ops, store_cuda) && r.ops->store_cuda,
       "%s: the plugin has store_cuda", label);
    for (uint32_t i = 0; i < N_ROWS; i++)
        fill_row(rows + (size_t)i * v->dim, v->dim, i);
    shuffle_slots(slots, N_ROWS, v->rows_per_page);
    if (r.ops->store(r.state, &r.g, r.host, rows, slots, N_ROWS) != 0)
        bail_out("%s: host store failed", label);
    is_int(rig_store(&r, rows, slots, N_ROWS, &refused), 0, "%s: store_cuda queued", label);
    is_int(refused, 0, "%s: and did not refuse", label);
    first_difference(&r, label);
    ok(!memcmp(r.host, r.got, r.pool_bytes), "%s: every byte of every page as the host store's",
       label);
    rig_close(&r);
    free(rows);
    free(slots);
}

/* A batch store must refuse: nothing written, the flag set, and the host store agrees. */
static void run_refused(const variant *v, const char *reject, bool bad_row, const char *why)
{
    rig r;
    const uint32_t n = 24;
    float *rows = malloc((size_t)n * v->dim * sizeof *rows);
    dsv4_indexk_slot *slots = malloc(n * sizeof *slots);
    uint32_t refused = 0;

    rig_open(&r, v, reject);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t d = 0; d < v->dim; d++)
            rows[(size_t)i * v->dim + d] = (float)plugtest_uniform(-1.0, 1.0);
    shuffle_slots(slots, n, v->rows_per_page);
    if (bad_row)
        slots[n / 2].row = v->rows_per_page;
    else
        rows[(size_t)(n - 1) * v->dim + v->dim - 1] = NAN;
    int host_rc = r.ops->store(r.state, &r.g, r.host, rows, slots, n);
    is_int(rig_store(&r, rows, slots, n, &refused), 0, "%s %s: store_cuda queued",
           indexk_fmt_names[v->fmt], why);
    ok(refused != 0 && host_rc == (bad_row ? -EINVAL : -EDOM),
       "%s %s: refused on the device (flag %u) as on the host (%d)", indexk_fmt_names[v->fmt], why,
       refused, host_rc);
    ok(!memcmp(r.host, r.got, r.pool_bytes), "%s %s: no page written", indexk_fmt_names[v->fmt],
       why);
    rig_close(&r);
    free(rows);
    free(slots);
}

int main(void)
{
    static const variant variants[] = {
        {INDEXK_F32, NULL, 64, 128},    {INDEXK_BF16, NULL, 64, 128},  {INDEXK_FP8, NULL, 64, 128},
        {INDEXK_FP8, "ue8m0", 64, 128}, {INDEXK_F32, NULL, 8, 32},     {INDEXK_BF16, NULL, 8, 32},
        {INDEXK_FP8, NULL, 8, 32},      {INDEXK_FP8, "ue8m0", 16, 64},
    };
    const size_t nv = sizeof variants / sizeof variants[0];

    gpu_require();
    plan((int)(nv * 4 + 4 * 3 + 1));
    for (size_t i = 0; i < nv; i++)
        run_match(&variants[i]);
    for (size_t i = 0; i < 3; i++)
        run_refused(&variants[i], "true", false, "with a NaN (reject_nonfinite on)");
    run_refused(&variants[2], "false", true, "with a slot row past the page");

    rig r;
    variant odd = {INDEXK_BF16, NULL, 8, 6};
    rig_open(&r, &odd, "true");
    is_int(r.ops->store_cuda(r.state, &r.g, r.pool_dev, r.rows_dev, r.slots_dev, 1, r.refused_dev,
                             NULL),
           -ENOTSUP, "dim 6 (rows not written as whole groups of 4 values) is -ENOTSUP");
    rig_close(&r);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
