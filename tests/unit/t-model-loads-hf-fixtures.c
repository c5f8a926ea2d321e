/* t-model-loads-hf-fixtures: checkpoints written by transformers itself (the committed
 * parity fixtures: HF-internal names with merged experts, and save_pretrained's names with
 * per-expert tensors under `model.` and kv_norm spelt `attn.norm`) load, and their tensors
 * land in the right places: merged gate_up_proj rows 0..I are expert e's w1, rows I..2I its
 * w3. */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/model/safetensors.h"
#include "tests/tap.h"

static char fixtures[1024];

/* Does the loaded array equal n f32 elements of the raw tensor starting at element off? */
static bool same(const float *got, const dsv4_st_file *f, const char *name, size_t off, size_t n)
{
    const dsv4_st_tensor *t = dsv4_st_find(f, name);
    return got && t && t->dtype == DSV4_ST_F32 && (off + n) * 4 <= t->nbytes &&
           memcmp(got, (const char *)t->data + off * 4, n * 4) == 0;
}

static dsv4_model *load(const char *name, dsv4_st_file **raw_p)
{
    char dir[1200], path[1300], err[1024] = "";
    snprintf(dir, sizeof(dir), "%s/%s", fixtures, name);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    dsv4_model *m = dsv4_model_load(dir, err, sizeof(err));
    if (!ok(m != NULL, "%s loads", name))
        diag("%s", err);
    *raw_p = dsv4_st_open(path, err, sizeof(err));
    return m;
}

int main(void)
{
    const char *srcdir = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
    snprintf(fixtures, sizeof(fixtures), "%s/tests/fixtures/hf", srcdir);
    DIR *dp = opendir(fixtures);
    if (!dp)
        skip_all("no Hugging Face fixtures in %s", fixtures);
    plan(17);

    int n = 0, loaded = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        char dir[1400], err[1024];
        snprintf(dir, sizeof(dir), "%s/%s/config.json", fixtures, de->d_name);
        FILE *fp = fopen(dir, "r");
        if (!fp)
            continue;
        fclose(fp);
        snprintf(dir, sizeof(dir), "%s/%s", fixtures, de->d_name);
        dsv4_model *m = dsv4_model_load(dir, err, sizeof(err));
        n++;
        loaded += m != NULL;
        if (!m)
            diag("%s", err);
        dsv4_model_free(m);
    }
    closedir(dp);
    ok(n >= 5 && loaded == n, "every fixture loads (%d of %d)", loaded, n);

    /* HF-internal names, merged experts (E 6, I 16, H 32). */
    dsv4_st_file *raw;
    dsv4_model *m = load("all-types-hc4-yarn-t33", &raw);
    const dsv4_layer_weights *l2 = m ? &m->layers[2] : NULL;
    const size_t I = m ? m->cfg.moe_inter : 0, H = m ? m->cfg.hidden : 0;
    ok(m && m->cfg.moe_inter == 16 && m->cfg.hidden == 32 && m->cfg.n_experts == 6,
       "shapes as in the fixture");
    ok(l2 && same(l2->exp_gate + 3 * I * H, raw, "model.layers.2.mlp.experts.gate_up_proj",
                  (3 * 2 * I) * H, I * H),
       "expert 3 w1 = gate_up_proj[3, 0:I]");
    ok(l2 && same(l2->exp_up + 3 * I * H, raw, "model.layers.2.mlp.experts.gate_up_proj",
                  (3 * 2 * I + I) * H, I * H),
       "expert 3 w3 = gate_up_proj[3, I:2I]");
    ok(l2 && same(l2->exp_down + 5 * H * I, raw, "model.layers.2.mlp.experts.down_proj", 5 * H * I,
                  H * I),
       "expert 5 w2 = down_proj[5]");
    ok(l2 && same(l2->kv_norm, raw, "model.layers.2.self_attn.kv_norm.weight", 0, 32) &&
           same(l2->comp.norm, raw, "model.layers.2.self_attn.compressor.kv_norm.weight", 0, 32),
       "kv_norm and compressor.kv_norm");
    ok(m && same(m->head, raw, "lm_head.weight", 0, 96 * 32) &&
           same(m->hc_head.fn, raw, "model.hc_head.hc_fn", 0, 4 * 128),
       "lm_head and hc_head");
    ok(m && m->cfg.rope_compress.yarn && !m->cfg.rope_main.yarn, "YaRN on the compress rope only");
    dsv4_st_close(raw);
    dsv4_model_free(m);

    /* save_pretrained's names. */
    m = load("save-pretrained-t9", &raw);
    const dsv4_layer_weights *l1 = m ? &m->layers[1] : NULL;
    ok(l1 && same(l1->kv_norm, raw, "model.layers.1.attn.norm.weight", 0, 32),
       "kv_norm from model.layers.1.attn.norm.weight");
    ok(l1 && same(l1->comp.norm, raw, "model.layers.1.attn.compressor.norm.weight", 0, 32),
       "compressor norm from its upstream name under model.");
    ok(l1 && same(l1->exp_up + 2 * 16 * 32, raw, "model.layers.1.ffn.experts.2.w3.weight", 0,
                  16 * 32),
       "per-expert w3 under model.");
    ok(l1 &&
           same(l1->idx_weights, raw, "model.layers.1.attn.indexer.weights_proj.weight", 0, 2 * 32),
       "indexer weights_proj");
    ok(m && same(m->head, raw, "head.weight", 0, 96 * 32) &&
           same(m->embed, raw, "model.embed_tokens.weight", 0, 96 * 32),
       "head.weight and model.embed_tokens.weight");
    ok(l1 && same(l1->hc_attn.fn, raw, "model.layers.1.hc_attn_fn", 0, 24 * 128),
       "hc_attn_fn under model.");
    ok(m && m->layers[0].tid2eid != NULL && m->layers[1].tid2eid == NULL &&
           m->layers[1].gate_bias != NULL,
       "layer 0 hash-routed, layer 1 biased");
    dsv4_st_close(raw);
    dsv4_model_free(m);
    return done_testing();
}
