/* t-gpu-logits-edits-and-logprobs-match-host: the CUDA forward's logit work around its
 * sampler (kernels/cuda/logits.h) against the host's: the edited copy of a batch of rows is
 * bit for bit dsv4_logit_edits_apply's (bias and penalty in double, each row's edits
 * scattered in one launch, the originals left alone), and the log-probabilities are the
 * serving loop's: the chosen token's within 2e-6 (its sums run in another order), the
 * alternatives dsv4_k_topk's ids in its order (ties to the lower id) with their values
 * within 2e-6, NaN where the host gets NaN (a row whose first logit is NaN). Rows of the
 * real vocabulary (129280): random, peaked, all equal, small integer ties, and one with
 * NaN first and -inf and huge values inside; a row that asks for nothing is left alone, and
 * bad edits are refused. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/adjust.h"
#include "core/engine/sample.h"
#include "kernels/cuda/logits.h"
#include "kernels/kernels.h"

#define V 129280u
#define ROWS 6
#define EDITS_A_ROW 3000

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

static double unit(uint64_t *s)
{
    return (double)lcg(s) * 0x1.0p-53;
}

/* Row r's logits (see the file comment for the kinds, by r). */
static void fill(float *x, uint32_t r)
{
    uint64_t s = 77 + r;
    for (uint32_t i = 0; i < V; i++) {
        double u = unit(&s), v = unit(&s);
        double g = sqrt(-2 * log(u + 1e-300)) * cos(6.283185307179586 * v);
        switch (r) {
        case 0: x[i] = (float)(3 * g); break;
        case 1: x[i] = (float)(g + (i == 4242 ? 25 : 0)); break;
        case 2: x[i] = 0.25f; break;
        case 3: x[i] = (float)(lcg(&s) % 5); break;
        case 4:
            x[i] = i == 0 ? NAN : i % 13 == 5 ? -INFINITY : i % 997 == 1 ? 3e4f : (float)g;
            break;
        default: x[i] = (float)(10 * g); break;
        }
    }
}

/* a and b agree within 2e-6, or are both NaN; *worst_p keeps the largest difference. */
static bool close_to(float a, float b, double *worst_p)
{
    if (a != a || b != b)
        return a != a && b != b;
    double d = fabs((double)a - b);
    *worst_p = d > *worst_p ? d : *worst_p;
    return d <= 2e-6 || a == b;
}

int main(void)
{
    gpu_require();
    plan(7);
    float *x = malloc((size_t)ROWS * V * sizeof(float)), *want_edited = malloc(V * sizeof(float));
    float *got_edited = malloc((size_t)ROWS * V * sizeof(float));
    uint32_t *idx = malloc(V * sizeof(uint32_t));
    dsv4_cuda_logit_edit *edits = malloc(ROWS * EDITS_A_ROW * sizeof(*edits));
    dsv4_logit_edit *row_edits = malloc(EDITS_A_ROW * sizeof(*row_edits));
    if (!x || !want_edited || !got_edited || !idx || !edits || !row_edits)
        bail_out("out of memory");
    for (uint32_t r = 0; r < ROWS; r++)
        fill(x + (size_t)r * V, r);
    /* each row's edits: distinct tokens (a stride through the vocabulary), biases and
     * penalties of every size and sign, -100 and +100 among them */
    uint32_t n_edits = 0;
    uint64_t s = 5;
    for (uint32_t r = 0; r < ROWS; r++)
        for (uint32_t j = 0; j < EDITS_A_ROW - 500 * r; j++) {
            int32_t tok = (int32_t)((j * 43u + r) % V);
            float bias = j % 3 == 0 ? 0 : j % 7 == 0 ? 100.0f : (float)(200 * unit(&s) - 100);
            double penalty = j % 2 ? (double)(j % 9) * 0.37 + 1.1 : 0;
            edits[n_edits++] = (dsv4_cuda_logit_edit){r, tok, bias, 0, penalty};
        }
    float *x_dev = gpu_alloc((size_t)ROWS * V * sizeof(float));
    int32_t tokens[ROWS] = {3, 4242, 17, 99, 12345, -1}, *tok_dev = gpu_alloc(sizeof(tokens));
    gpu_put(x_dev, x, (size_t)ROWS * V * sizeof(float));
    gpu_put(tok_dev, tokens, sizeof(tokens));
    dsv4_cuda_logits *w = dsv4_cuda_logits_new(ROWS, V);
    if (!w)
        bail_out("dsv4_cuda_logits_new failed");

    const float *edited_dev = NULL;
    int rc = dsv4_cuda_logits_edit(w, x_dev, ROWS, edits, n_edits, &edited_dev, NULL);
    gpu_sync();
    ok(rc == 0 && edited_dev, "%u edits over %u rows queued", n_edits, ROWS);
    gpu_get(got_edited, edited_dev, (size_t)ROWS * V * sizeof(float));
    uint32_t rows_same = 0, at = 0;
    for (uint32_t r = 0; r < ROWS; r++) {
        uint32_t n = 0;
        for (; at < n_edits && edits[at].row == r; at++)
            row_edits[n++] = (dsv4_logit_edit){edits[at].token, edits[at].bias, edits[at].penalty};
        dsv4_logit_edits_apply(want_edited, x + (size_t)r * V, V, row_edits, n);
        rows_same += memcmp(want_edited, got_edited + (size_t)r * V, V * sizeof(float)) == 0;
    }
    is_int(rows_same, ROWS, "the edited rows are dsv4_logit_edits_apply's, bit for bit");
    float *back = malloc((size_t)ROWS * V * sizeof(float));
    if (!back)
        bail_out("out of memory");
    gpu_get(back, x_dev, (size_t)ROWS * V * sizeof(float));
    ok(memcmp(back, x, (size_t)ROWS * V * sizeof(float)) == 0, "the original logits are untouched");

    /* rows ask for: nothing, the token only, 1, 5, 20 alternatives, and 20 for a row without
     * a token (its alternatives still come) */
    static const uint32_t wants[ROWS] = {0, 1, 1 + 1, 1 + 5, 1 + 20, 1 + 20};
    dsv4_cuda_logprobs_row *rows = calloc(ROWS, sizeof(*rows));
    dsv4_choice want;
    for (uint32_t r = 0; r < ROWS; r++) {
        rows[r].want = wants[r];
        rows[r].logprob = 1234.5f; /* must be overwritten where asked, kept where not */
    }
    rc = dsv4_cuda_logprobs(w, x_dev, ROWS, tok_dev, rows, NULL);
    gpu_sync();
    ok(rc == 0, "log-probabilities queued");
    uint32_t lp_ok = 0, top_ok = 0;
    double worst = 0;
    for (uint32_t r = 0; r < ROWS; r++) {
        if (!wants[r]) {
            lp_ok += rows[r].logprob == 1234.5f;
            top_ok++;
            continue;
        }
        const float *xr = x + (size_t)r * V;
        dsv4_sample_logprobs(xr, V, tokens[r] < 0 ? 0 : tokens[r], wants[r] - 1, idx, &want);
        lp_ok += tokens[r] < 0 ? rows[r].logprob == 1234.5f
                               : close_to(rows[r].logprob, want.logprob, &worst);
        bool same = true;
        for (uint32_t j = 0; j + 1 < wants[r]; j++)
            same = same && rows[r].top_id[j] == want.top[j].token &&
                   close_to(rows[r].top_logprob[j], want.top[j].logprob, &worst);
        top_ok += same;
    }
    is_int(lp_ok, ROWS,
           "the chosen tokens' log-probabilities are the host's (largest difference %.2g; NaN "
           "where the first logit is NaN; none for a row that asks for none or has no token)",
           worst);
    is_int(top_ok, ROWS, "the alternatives are dsv4_k_topk's, with the host's log-probabilities");

    dsv4_cuda_logit_edit bad_row = {ROWS, 1, 1, 0, 0}, bad_tok = {0, (int32_t)V, 1, 0, 0};
    ok(dsv4_cuda_logits_edit(w, x_dev, ROWS, &bad_row, 1, &edited_dev, NULL) == -EINVAL &&
           dsv4_cuda_logits_edit(w, x_dev, ROWS, &bad_tok, 1, &edited_dev, NULL) == -EINVAL &&
           dsv4_cuda_logits_edit(w, x_dev, ROWS + 1, edits, 0, &edited_dev, NULL) == -EINVAL,
       "an edit of a row or token out of range, and too many rows, are refused (-EINVAL)");
    dsv4_cuda_logits_free(w);
    gpu_free(x_dev);
    gpu_free(tok_dev);
    free(x);
    free(want_edited);
    free(got_edited);
    free(back);
    free(idx);
    free(edits);
    free(row_edits);
    free(rows);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
