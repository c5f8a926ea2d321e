/* t-model-deferred-load-reads-and-fills: dsv4_model_load_deferred on the tiny preset written
 * as fp8 (FP8 block scales, MXFP4 experts) and as bf16. Its large weights cannot be read
 * before dsv4_model_fill (a read faults) and hold no memory. dsv4_model_read gives the bytes
 * of the whole load: every tensor alone, spans that cut rows at both ends, a span of several
 * tensors with what lies between them, the model's whole arena in chunks that cut rows and
 * tensors anywhere a float allows; the weights stay unfilled and unreadable after it, a span
 * that cuts a float is refused, memory that is not the model's is copied. A CPU engine over
 * it (which fills every weight for good) gives the loaded model's logits bit for bit, and
 * reads after the fill give the same bytes. On a model loaded whole fill does nothing and
 * read copies. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/model/model.h"
#include "core/model/tensors.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

#define PROMPT 12
#define FAULT_EXIT 42

/* One tensor of both models: where its values are and how many bytes. */
typedef struct tensor_ref {
    const void *whole, *deferred;
    size_t bytes, cols;
    bool large; /* a matrix the checkpoint stores narrower than f32: deferred */
} tensor_ref;

typedef struct refs {
    dsv4_model *whole, *deferred;
    tensor_ref *t;
    size_t n, cap;
} refs;

static int collect_fn(void *ctx, const dsv4_tensor_desc *d)
{
    refs *r = ctx;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        if (!(r->t = realloc(r->t, r->cap * sizeof(*r->t))))
            bail_out("out of memory");
    }
    size_t elem = d->wclass == DSV4_WC_INDEX ? sizeof(int32_t) : sizeof(float);
    const char *a = *dsv4_tensor_slot(r->whole, d), *b = *dsv4_tensor_slot(r->deferred, d);
    r->t[r->n++] = (tensor_ref){
        a + d->elem_offset * elem, b + d->elem_offset * elem, d->rows * d->cols * elem, d->cols,
        d->ndim == 2 && d->wclass != DSV4_WC_F32 && d->wclass != DSV4_WC_INDEX};
    return 0;
}

/* Whether reading the float in the middle of t's deferred copy faults (in a child, whose
 * SIGSEGV handler exits with FAULT_EXIT: a sanitizer's handler would report and abort). */
static void on_fault(int sig)
{
    (void)sig;
    _exit(FAULT_EXIT);
}

static bool read_faults(const tensor_ref *t)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction sa = {0};
        sa.sa_handler = on_fault;
        sigaction(SIGSEGV, &sa, NULL);
        volatile float v = ((const float *)t->deferred)[t->bytes / sizeof(float) / 2];
        (void)v;
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        bail_out("fork failed");
    return WIFEXITED(st) && WEXITSTATUS(st) == FAULT_EXIT;
}

/* Pages wholly inside t's deferred copy that are resident. */
static size_t resident_pages(const tensor_ref *t)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)t->deferred + page - 1) / page * page,
              hi = ((uintptr_t)t->deferred + t->bytes) / page * page;
    if (hi <= lo)
        return 0;
    size_t n = (hi - lo) / page, res = 0;
    unsigned char *v = malloc(n);
    if (!v || mincore((void *)lo, hi - lo, v) != 0)
        bail_out("mincore failed");
    for (size_t i = 0; i < n; i++)
        res += v[i] & 1;
    free(v);
    return res;
}

/* The tensors whose deferred copy differs from the whole load's. */
static size_t differing(const refs *r)
{
    size_t bad = 0;
    for (size_t i = 0; i < r->n; i++)
        bad += memcmp(r->t[i].whole, r->t[i].deferred, r->t[i].bytes) != 0;
    return bad;
}

/* The largest deferred tensor (several pages: the embeddings). */
static const tensor_ref *largest(const refs *r)
{
    const tensor_ref *big = NULL;
    for (size_t i = 0; i < r->n; i++)
        if (r->t[i].large && (!big || r->t[i].bytes > big->bytes))
            big = &r->t[i];
    return big;
}

static float *prefill_logits(const dsv4_model *m, const dsv4_plugin_desc *ik)
{
    /* the CPU backend, as dsv4_test_engine asks */
    dsv4_engine *eng = dsv4_test_engine(m, ik, 2, 32, DSV4_KV_F32);
    size_t V = m->cfg.vocab_size;
    float *out = malloc(PROMPT * V * sizeof(float));
    int32_t toks[PROMPT];
    dsv4_test_tokens(toks, PROMPT, (uint32_t)V, 5);
    const int32_t *tp[1] = {toks};
    uint32_t seq, len = PROMPT;
    if (!out || dsv4_engine_seq_new(eng, &seq) != 0 ||
        dsv4_engine_prefill(eng, 1, &seq, tp, &len, DSV4_LOGITS_ALL, &out) != 0)
        bail_out("prefill failed");
    dsv4_engine_free(eng);
    return out;
}

/* dsv4_model_read of [off, off + bytes) of both models' tensor t (offsets from the start of
 * t) into a buffer, against the whole load's bytes. */
static bool reads_as_whole(const refs *r, const tensor_ref *t, size_t off, size_t bytes)
{
    unsigned char *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        bail_out("out of memory");
    bool same = dsv4_model_read(r->deferred, (const char *)t->deferred + off, bytes, buf) == 0 &&
                memcmp(buf, (const char *)t->whole + off, bytes) == 0;
    free(buf);
    return same;
}

/* The tensors of a span read from the deferred model (all, from ld on) that differ from the
 * whole load's (the padding between tensors is whatever each arena held: not compared). */
static size_t span_differing(const refs *r, const unsigned char *all, const char *ld)
{
    size_t bad = 0;
    for (size_t i = 0; i < r->n; i++)
        bad +=
            memcmp(all + ((const char *)r->t[i].deferred - ld), r->t[i].whole, r->t[i].bytes) != 0;
    return bad;
}

/* The tensors at the same offsets from the first one in both models (the arenas are laid
 * out alike), and the span from the lowest to the highest byte of any tensor. */
static bool same_layout(const refs *r, const char **lo_w, const char **lo_d, size_t *span)
{
    const char *lw = r->t[0].whole, *ld = r->t[0].deferred, *hw = lw;
    for (size_t i = 0; i < r->n; i++) {
        const char *w = r->t[i].whole;
        if (w < lw)
            lw = w, ld = r->t[i].deferred;
        if (w + r->t[i].bytes > hw)
            hw = w + r->t[i].bytes;
    }
    *lo_w = lw, *lo_d = ld, *span = (size_t)(hw - lw);
    for (size_t i = 0; i < r->n; i++)
        if ((const char *)r->t[i].whole - lw != (const char *)r->t[i].deferred - ld)
            return false;
    return true;
}

static void check(const char *dtype, const dsv4_plugin_desc *ik)
{
    char dir[] = "/tmp/t-model-deferred-XXXXXX", err[512];
    dsv4_test_ckpt_new(dir, 3, dtype);
    refs r = {0};
    r.whole = dsv4_model_load(dir, err, sizeof(err));
    if (!r.whole)
        bail_out("load: %s", err);
    r.deferred = dsv4_model_load_deferred(dir, err, sizeof(err));
    ok(r.deferred != NULL, "tiny %s: the deferred load succeeds (%s)", dtype,
       r.deferred ? "ok" : err);
    if (!r.deferred)
        bail_out("cannot go on");
    dsv4_tensor_each(&r.whole->cfg, collect_fn, &r);
    const tensor_ref *big = largest(&r);
    if (!big || big->bytes < 4 * (size_t)sysconf(_SC_PAGESIZE))
        bail_out("tiny %s: no deferred tensor of several pages", dtype);

    ok(read_faults(big) && resident_pages(big) == 0,
       "tiny %s: a deferred weight (%zu bytes) faults when read before a fill, and holds no "
       "page",
       dtype, big->bytes);
    size_t bad = 0;
    for (size_t i = 0; i < r.n; i++)
        bad += !reads_as_whole(&r, &r.t[i], 0, r.t[i].bytes);
    is_int(bad, 0, "tiny %s: all %zu tensors read as the whole load's, bit for bit", dtype, r.n);
    /* a span from inside row 1 to inside row 5, and one inside row 2 */
    size_t C = big->cols, f = sizeof(float);
    ok(C > 8 && reads_as_whole(&r, big, (C + 3) * f, (4 * C + 5) * f) &&
           reads_as_whole(&r, big, (2 * C + 1) * f, (C - 2) * f),
       "tiny %s: spans that cut rows at either end read as the whole load's", dtype);
    ok(read_faults(big) && resident_pages(big) == 0,
       "tiny %s: after the reads the weight still faults and holds no page", dtype);

    const char *lw, *ld;
    size_t span;
    if (!ok(same_layout(&r, &lw, &ld, &span), "tiny %s: both loads lay their tensors out alike",
            dtype))
        bail_out("cannot compare the arenas");
    unsigned char *all = malloc(span);
    if (!all)
        bail_out("out of memory");
    /* chunks of 4 KiB + 12 bytes: they cut rows and tensors at every offset a float allows */
    int rc = 0;
    for (size_t o = 0, n; rc == 0 && o < span; o += n) {
        n = span - o < 4108 ? span - o : 4108;
        rc = dsv4_model_read(r.deferred, ld + o, n, all + o);
    }
    ok(rc == 0 && span_differing(&r, all, ld) == 0,
       "tiny %s: the whole arena (%zu bytes, every tensor and what lies between) read in chunks "
       "holds the whole load's tensors",
       dtype, span);
    float scratch[4];
    is_int(dsv4_model_read(r.deferred, (const char *)big->deferred + 2, 8, scratch) +
               dsv4_model_read(r.deferred, (const char *)big->deferred - 2, 8, scratch) +
               dsv4_model_read(r.deferred, big->deferred, 8, (char *)scratch + 1),
           -3 * EINVAL,
           "tiny %s: a span that cuts a float of a deferred weight, or starts off the floats' "
           "grid before one, or lands in an unaligned buffer, is refused",
           dtype);

    float outside[64], copied[64];
    for (size_t i = 0; i < 64; i++)
        outside[i] = 0.5f * (float)i - 7.0f;
    ok(dsv4_model_read(r.deferred, outside, sizeof(outside), copied) == 0 &&
           memcmp(outside, copied, sizeof(outside)) == 0,
       "tiny %s: memory that is none of the model's is copied as it is", dtype);

    float *want = prefill_logits(r.whole, ik), *got = prefill_logits(r.deferred, ik);
    size_t V = r.whole->cfg.vocab_size;
    ok(memcmp(want, got, PROMPT * V * sizeof(float)) == 0,
       "tiny %s: a CPU engine over it (every weight filled) gives the same logits, bitwise", dtype);
    memset(all, 0, span);
    ok(!read_faults(big) && differing(&r) == 0 && dsv4_model_read(r.deferred, ld, span, all) == 0 &&
           span_differing(&r, all, ld) == 0,
       "tiny %s: once filled, every weight is in place and reads the same", dtype);

    tensor_ref w = {big->whole, big->whole, big->bytes, big->cols, true};
    memset(all, 0, span);
    ok(!read_faults(&w) && dsv4_model_fill(r.whole) == 0 && differing(&r) == 0 &&
           dsv4_model_read(r.whole, lw, span, all) == 0 && span_differing(&r, all, ld) == 0,
       "tiny %s: on a model loaded whole, fill does nothing and read copies", dtype);
    free(all);
    free(want);
    free(got);
    free(r.t);
    dsv4_model_free(r.whole);
    dsv4_model_free(r.deferred);
    dsv4_test_ckpt_remove(dir);
}

int main(void)
{
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "f32");
    plan(2 * 12);
    check("fp8", ik);
    check("bf16", ik);
    dsv4_registry_free(reg);
    return done_testing();
}
