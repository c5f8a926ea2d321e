/* t-model-load-rejects-bad-checkpoint: a checkpoint with a missing tensor, a wrong shape,
 * an unsupported dtype, a missing or malformed block scale, out-of-range hash routes, a bad
 * shard index or a truncated file is refused with a message naming the file and tensor;
 * MTP tensors are ignored and the HF indexer name without `scorer.` is accepted. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/mkmodel.h"
#include "core/model/model.h"
#include "core/model/safetensors.h"
#include "core/model/tensors.h"
#include "tests/tap.h"

static char root[] = "/tmp/t-model-bad-XXXXXX";

typedef struct edit {
    const char *name;
    const char *rename; /* NULL: keep */
    bool drop, add;     /* add: a new tensor with the fields below */
    int dtype;          /* -1: keep */
    uint32_t ndim;      /* 0 with shape unset: keep */
    uint64_t shape[4];
    const void *data; /* NULL: keep */
} edit;

/* dir/name: the tiny checkpoint (fp8, names as given) with the edits applied. */
static const char *variant(const char *name, const char *names, const edit *edits, size_t n)
{
    static char dir[600];
    char err[512], path[700];
    snprintf(dir, sizeof(dir), "%s/%s", root, name);
    if (dsv4_mkmodel_write("tiny", 9, "fp8", names, dir, err, sizeof(err)) != 0)
        bail_out("%s", err);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    dsv4_st_file *f = dsv4_st_open(path, err, sizeof(err));
    if (!f)
        bail_out("%s", err);
    dsv4_st_writer *w = dsv4_st_writer_new();
    for (size_t i = 0; i < dsv4_st_count(f); i++) {
        const dsv4_st_tensor *t = dsv4_st_at(f, i);
        const edit *e = NULL;
        for (size_t j = 0; j < n; j++)
            if (!edits[j].add && strcmp(edits[j].name, t->name) == 0)
                e = &edits[j];
        if (e && e->drop)
            continue;
        dsv4_st_writer_add(w, e && e->rename ? e->rename : t->name,
                           e && e->dtype >= 0 ? (dsv4_st_dtype)e->dtype : t->dtype,
                           e && e->ndim ? e->ndim : t->ndim, e && e->ndim ? e->shape : t->shape,
                           e && e->data ? e->data : t->data, err, sizeof(err));
    }
    for (size_t j = 0; j < n; j++)
        if (edits[j].add)
            dsv4_st_writer_add(w, edits[j].name, (dsv4_st_dtype)edits[j].dtype, edits[j].ndim,
                               edits[j].shape, edits[j].data, err, sizeof(err));
    if (dsv4_st_writer_write(w, path, err, sizeof(err)) != 0)
        bail_out("%s", err);
    dsv4_st_writer_free(w);
    dsv4_st_close(f);
    return dir;
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *fp = fopen(path, "w");
    if (!fp)
        bail_out("cannot write %s", path);
    fputs(text, fp);
    fclose(fp);
}

static void refused(const char *dir, const char *want, const char *what)
{
    char err[1024] = "";
    dsv4_model *m = dsv4_model_load(dir, err, sizeof(err));
    ok(m == NULL, "refused: %s", what);
    has_str(err, want, "%s: the message says why", what);
    dsv4_model_free(m);
}

#define E(...) (const edit[]){__VA_ARGS__}, sizeof((const edit[]){__VA_ARGS__}) / sizeof(edit)

int main(void)
{
    if (!mkdtemp(root))
        bail_out("mkdtemp failed");
    plan(2 * 20 + 3);
    const char *d;

    d = variant("missing", "upstream",
                E({.name = "layers.2.attn.wkv.weight", .drop = true, .dtype = -1}));
    refused(d,
            "tensor layers.2.attn.wkv.weight is missing (nor found as "
            "model.layers.2.self_attn.kv_proj.weight)",
            "a missing tensor");
    d = variant("shape", "upstream",
                E({.name = "layers.1.attn.attn_sink", .dtype = -1, .ndim = 2, .shape = {2, 2}}));
    refused(d, "model.safetensors: layers.1.attn.attn_sink: shape [2,2], expected [4] (F32)",
            "a wrong shape");
    d = variant("f16", "upstream", E({.name = "layers.0.attn_norm.weight", .dtype = DSV4_ST_F16}));
    refused(d, "layers.0.attn_norm.weight: dtype F16 is not supported", "an unsupported dtype");
    d = variant("i32w", "upstream",
                E({.name = "head.weight", .dtype = DSV4_ST_I32, .ndim = 2, .shape = {160, 64}}));
    refused(d, "head.weight: dtype I32 is not supported", "an integer weight");
    d = variant("noscale", "upstream",
                E({.name = "layers.0.attn.wq_a.scale", .drop = true, .dtype = -1}));
    refused(d,
            "layers.0.attn.wq_a.weight: F8_E4M3 weight without its scale "
            "(layers.0.attn.wq_a.scale or layers.0.attn.wq_a.weight_scale_inv)",
            "an FP8 weight without its scale");
    d = variant("scaledtype", "upstream",
                E({.name = "layers.0.attn.wq_a.scale", .dtype = DSV4_ST_U8}));
    refused(d, "layers.0.attn.wq_a.scale: scale dtype U8, expected F8_E8M0 or F32",
            "a scale of the wrong dtype");
    d = variant("scaleshape", "upstream",
                E({.name = "layers.0.attn.wq_a.scale", .dtype = -1, .ndim = 1, .shape = {1}}));
    refused(d, "layers.0.attn.wq_a.scale: shape [1], expected [1,1]", "a scale of the wrong shape");
    d = variant("fp8vec", "upstream",
                E({.name = "layers.0.attn_norm.weight", .dtype = DSV4_ST_F8_E4M3}));
    refused(d, "layers.0.attn_norm.weight: dtype F8_E4M3 cannot hold this tensor (not a matrix)",
            "an FP8 vector");
    d = variant(
        "fp4shape", "upstream",
        E({.name = "layers.3.ffn.experts.5.w2.weight", .dtype = -1, .ndim = 2, .shape = {32, 32}}));
    refused(d, "layers.3.ffn.experts.5.w2.weight: shape [32,32], expected [64,16] (I8)",
            "packed experts of the wrong shape");
    static const int32_t bad_route[2] = {3, 8};
    d = variant("route", "upstream",
                E({.name = "layers.1.ffn.gate.tid2eid",
                   .dtype = -1,
                   .ndim = 2,
                   .shape = {1, 2},
                   .data = bad_route}));
    refused(d, "layers.1.ffn.gate.tid2eid: shape [1,2], expected [320,2] (I32)",
            "a hash table of the wrong shape");
    static int32_t routes[640];
    for (int i = 0; i < 640; i++)
        routes[i] = i % 8;
    routes[7] = 8;
    d = variant("route8", "upstream",
                E({.name = "layers.1.ffn.gate.tid2eid", .dtype = -1, .data = routes}));
    refused(d, "layers.1.ffn.gate.tid2eid: entry 7 is 8, not an expert id (0..7)",
            "a hash route past the last expert");
    d = variant("routef", "upstream",
                E({.name = "layers.0.ffn.gate.tid2eid", .dtype = DSV4_ST_F32}));
    refused(d, "layers.0.ffn.gate.tid2eid: dtype F32, expected I32 or I64", "float hash routes");

    /* Folder-level failures. */
    d = variant("nockpt", "upstream", NULL, 0);
    char path[700];
    snprintf(path, sizeof(path), "%s/model.safetensors", d);
    unlink(path);
    refused(d, "no model.safetensors or model.safetensors.index.json", "no weights file");
    write_text(d, "model.safetensors.index.json",
               "{\"weight_map\": {\"embed.weight\": \"../model.safetensors\"}}");
    refused(d, "shard name '../model.safetensors' is not a plain file name", "a shard outside");
    write_text(d, "model.safetensors.index.json", "{\"weight_map\": [1]}");
    refused(d, "weight_map is missing or not an object", "an index without weight_map");
    d = variant("index", "upstream", NULL, 0);
    write_text(d, "model.safetensors.index.json",
               "{\"weight_map\": {\"norm.weight\": \"model.safetensors\", "
               "\"mtp.0.norm.weight\": \"model.safetensors\"}}");
    refused(d, "mtp.0.norm.weight is mapped to model.safetensors, which does not hold it",
            "an index naming a tensor its shard lacks");
    d = variant("noconfig", "upstream", NULL, 0);
    snprintf(path, sizeof(path), "%s/config.json", d);
    unlink(path);
    refused(d, "config.json: cannot open", "no config.json");
    write_text(d, "config.json", "{\"num_hidden_layers\": 2}");
    refused(d, "config.json: neither layer_types nor compress_ratios", "a config without layers");
    write_text(d, "config.json",
               "{\"num_hidden_layers\": 1, \"layer_types\": [\"sliding_attention\"], "
               "\"hidden_size\": 16777216, \"moe_intermediate_size\": 16777216, "
               "\"n_routed_experts\": 65536}");
    refused(d, "layers.0.ffn.experts.0.w1.weight: too large for this machine",
            "sizes whose product overflows");
    d = variant("truncated", "upstream", NULL, 0);
    snprintf(path, sizeof(path), "%s/model.safetensors", d);
    if (truncate(path, 300000) != 0)
        bail_out("truncate failed");
    refused(d, "outside the data area", "a truncated weights file");

    /* Accepted variations. */
    static const float mtp[4] = {1, 2, 3, 4};
    char err[1024] = "";
    d = variant("mtp", "upstream",
                E({.name = "mtp.0.enorm.weight",
                   .add = true,
                   .dtype = DSV4_ST_F32,
                   .ndim = 1,
                   .shape = {4},
                   .data = mtp}));
    dsv4_model *m = dsv4_model_load(d, err, sizeof(err));
    ok(m != NULL, "mtp.* tensors are ignored");
    if (!m)
        diag("%s", err);
    dsv4_model_free(m);

    const char *scorer = "model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight";
    d = variant("noscorer", "hf",
                E({.name = scorer,
                   .dtype = -1,
                   .rename = "model.layers.2.self_attn.compressor.indexer."
                             "weights_proj.weight"}));
    m = dsv4_model_load(d, err, sizeof(err));
    if (!ok(m != NULL, "the indexer's weights_proj without scorer. loads"))
        diag("%s", err);
    dsv4_mkmodel_opts o = {.preset = "tiny", .seed = 9, .dtype = "fp8", .names = "hf"};
    dsv4_tensor_desc want_d;
    float want[2 * 64];
    uint64_t n = 0;
    const float *got =
        m ? dsv4_model_weight(m, "layers.2.attn.indexer.weights_proj.weight", &n) : NULL;
    memset(&want_d, 0, sizeof(want_d));
    snprintf(want_d.name, sizeof(want_d.name), "layers.2.attn.indexer.weights_proj.weight");
    want_d.wclass = DSV4_WC_BF16;
    want_d.init = DSV4_WI_LINEAR;
    want_d.ndim = 2;
    want_d.rows = 2;
    want_d.cols = 64;
    ok(got && n == 128 && m && dsv4_mkmodel_values(&o, &m->cfg, &want_d, want) == 0 &&
           memcmp(got, want, sizeof(want)) == 0,
       "with the generator's values");
    dsv4_model_free(m);

    snprintf(path, sizeof(path), "rm -rf '%s'", root);
    if (system(path) != 0)
        diag("could not remove %s", root);
    return done_testing();
}
