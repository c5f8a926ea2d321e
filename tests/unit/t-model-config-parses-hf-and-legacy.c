/* t-model-config-parses-hf-and-legacy: config.json in the current Hugging Face form, the
 * legacy form of the real V4-Flash release, the diff-only form save_pretrained writes and
 * mkmodel's own output all parse to the right configuration; inconsistent or malformed
 * configs are refused with a message that names the key. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/mkmodel.h"
#include "core/model/model.h"
#include "tests/tap.h"

typedef struct kv {
    const char *key, *value; /* value NULL: drop the key */
} kv;

/* A small valid configuration; each case replaces, adds or drops keys. */
static const kv base[] = {
    {"vocab_size", "320"},
    {"hidden_size", "64"},
    {"num_hidden_layers", "4"},
    {"num_attention_heads", "4"},
    {"head_dim", "64"},
    {"q_lora_rank", "32"},
    {"o_lora_rank", "16"},
    {"sliding_window", "16"},
    {"n_routed_experts", "8"},
    {"num_experts_per_tok", "2"},
    {"moe_intermediate_size", "32"},
    {"index_n_heads", "2"},
    {"index_head_dim", "32"},
    {"index_topk", "4"},
    {"hc_mult", "2"},
    {"qk_rope_head_dim", "16"},
    {"layer_types", "[\"sliding_attention\", \"compressed_sparse_attention\", "
                    "\"heavily_compressed_attention\", \"compressed_sparse_attention\"]"},
    {"mlp_layer_types", "[\"hash_moe\", \"moe\", \"moe\", \"moe\"]"},
};

static int parse_with(const kv *edits, size_t n, dsv4_model_config *c, char *err, size_t errlen)
{
    char json[4096];
    size_t o = (size_t)snprintf(json, sizeof(json), "{");
    const char *sep = "";
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) {
        bool edited = false;
        for (size_t j = 0; j < n; j++)
            edited |= strcmp(edits[j].key, base[i].key) == 0;
        if (!edited) {
            o += (size_t)snprintf(json + o, sizeof(json) - o, "%s\"%s\": %s", sep, base[i].key,
                                  base[i].value);
            sep = ", ";
        }
    }
    for (size_t j = 0; j < n; j++) {
        if (edits[j].value) {
            o += (size_t)snprintf(json + o, sizeof(json) - o, "%s\"%s\": %s", sep, edits[j].key,
                                  edits[j].value);
            sep = ", ";
        }
    }
    snprintf(json + o, sizeof(json) - o, "}");
    return dsv4_model_config_parse(json, strlen(json), c, err, errlen);
}

#define EDITS(...) (const kv[]){__VA_ARGS__}, sizeof((const kv[]){__VA_ARGS__}) / sizeof(kv)

static void rejects(const kv *edits, size_t n, const char *want)
{
    dsv4_model_config c;
    char err[512] = "";
    int rc = parse_with(edits, n, &c, err, sizeof(err));
    ok(rc == DSV4_EFORMAT, "refused: %s", want);
    has_str(err, want, "message for %s = %s", edits[0].key,
            edits[0].value ? edits[0].value : "(dropped)");
}

static char *slurp(const char *path, size_t *len_p)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        bail_out("cannot open %s", path);
    static char buf[1 << 16];
    *len_p = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[*len_p] = '\0';
    return buf;
}

static void legacy_flash(void)
{
    const char *srcdir = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
    char path[1024], err[512] = "";
    snprintf(path, sizeof(path), "%s/tests/fixtures/model/v4-flash-legacy-config.json", srcdir);
    size_t len;
    const char *text = slurp(path, &len);
    dsv4_model_config c;
    int rc = dsv4_model_config_parse(text, len, &c, err, sizeof(err));
    if (!ok(rc == 0, "the legacy V4-Flash config.json parses"))
        diag("%s", err);
    int csa = 0, hca = 0, pattern_ok = 1;
    for (uint32_t l = 0; l < c.n_layers; l++) {
        int want = l < 2 ? DSV4_LAYER_SLIDING : l % 2 ? DSV4_LAYER_HCA : DSV4_LAYER_CSA;
        pattern_ok &= c.layer_kind[l] == want;
        csa += c.layer_kind[l] == DSV4_LAYER_CSA;
        hca += c.layer_kind[l] == DSV4_LAYER_HCA;
    }
    ok(c.n_layers == 43 && pattern_ok && csa == 21 && hca == 20,
       "compress_ratios (44 entries) gives 43 layers: 2 sliding, 21 CSA, 20 HCA");
    ok(c.hash_moe[0] && c.hash_moe[2] && !c.hash_moe[3], "num_hash_layers 3: layers 0..2 hash");
    ok(c.rope_main.dims == 64 && c.rope_compress.dims == 64, "qk_rope_head_dim 64");
    ok(c.rope_main.theta == 10000 && !c.rope_main.yarn, "sliding rope: theta 1e4, no YaRN");
    ok(c.rope_compress.theta == 160000 && c.rope_compress.yarn && c.rope_compress.factor == 16 &&
           c.rope_compress.original_max_pos == 65536 && c.rope_compress.beta_fast == 32 &&
           c.rope_compress.beta_slow == 1,
       "rope_scaling is YaRN on the compress rope (theta 1.6e5, factor 16, L0 65536, 32/1)");
    ok(c.rate_csa == 4 && c.rate_hca == 128 && c.n_experts == 256 && c.top_k == 6 &&
           c.moe_inter == 2048 && c.o_groups == 8 && c.o_lora_rank == 1024 && c.index_heads == 64 &&
           c.index_dim == 128 && c.index_topk == 512 && c.hc_mult == 4,
       "widths as in the spec");
    ok(c.scoring == DSV4_SCORE_SQRTSOFTPLUS && c.routed_scale == 1.5 && c.swiglu_limit == 10 &&
           c.act == DSV4_ACT_SILU && c.bos_id == 0 && c.eos_id == 1 && c.rms_eps == 1e-6 &&
           c.hc_sinkhorn_iters == 20 && c.max_positions == 1048576,
       "router, activation, tokens, eps as in the spec");
}

static void current_forms(void)
{
    dsv4_model_config c;
    char err[512] = "";
    int rc = parse_with(
        EDITS({"qk_rope_head_dim", NULL}, {"head_dim", "32"}, {"index_head_dim", "16"},
              {"o_groups", "2"},
              {"compress_rates", "{\"compressed_sparse_attention\": 4, "
                                 "\"heavily_compressed_attention\": 16}"},
              {"rope_parameters",
               "{\"main\": {\"rope_type\": \"default\", \"rope_theta\": 5000.0, "
               "\"partial_rotary_factor\": 0.25}, \"compress\": {\"rope_type\": \"yarn\", "
               "\"rope_theta\": 80000.0, \"factor\": 4, \"original_max_position_embeddings\": "
               "64, \"beta_fast\": 16, \"beta_slow\": 2, \"attention_factor\": 1.0, "
               "\"partial_rotary_factor\": 0.25}}"},
              {"hidden_act", "\"gelu\""}, {"bos_token_id", "null"}, {"eos_token_id", "[7, 8]"},
              {"swiglu_limit", "null"}, {"scoring_func", "\"sigmoid\""}),
        &c, err, sizeof(err));
    if (!ok(rc == 0, "the nested rope_parameters form parses"))
        diag("%s", err);
    ok(c.layer_kind[0] == DSV4_LAYER_SLIDING && c.layer_kind[1] == DSV4_LAYER_CSA &&
           c.layer_kind[2] == DSV4_LAYER_HCA && c.hash_moe[0] && !c.hash_moe[1],
       "layer_types and mlp_layer_types");
    ok(c.rope_main.dims == 8 && c.rope_main.theta == 5000 && !c.rope_main.yarn &&
           c.rope_compress.theta == 80000 && c.rope_compress.yarn && c.rope_compress.factor == 4 &&
           c.rope_compress.original_max_pos == 64 && c.rope_compress.beta_fast == 16,
       "rope_parameters main and compress, partial_rotary_factor 0.25 of 32 = 8 dims");
    ok(c.rate_hca == 16 && c.act == DSV4_ACT_GELU && c.bos_id == -1 && c.eos_id == 7 &&
           c.swiglu_limit == 0 && c.scoring == DSV4_SCORE_SIGMOID,
       "compress_rates, gelu, null bos, eos list, null swiglu_limit, sigmoid");

    /* Flat rope_parameters (or legacy rope_scaling) apply to the compress rope only. */
    rc = parse_with(EDITS({"rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 16}"},
                          {"compress_rope_theta", "1000.0"}),
                    &c, err, sizeof(err));
    ok(rc == 0 && !c.rope_main.yarn && c.rope_compress.yarn && c.rope_compress.theta == 1000 &&
           c.rope_compress.original_max_pos == 1048576 && c.rope_compress.beta_fast == 32,
       "flat rope_parameters: YaRN on the compress rope, L0 defaults to max positions");
    rc = parse_with(EDITS({"rope_theta", "20000"}), &c, err, sizeof(err));
    ok(rc == 0 && !c.rope_main.yarn && !c.rope_compress.yarn && c.rope_main.theta == 20000 &&
           c.rope_compress.theta == 160000,
       "no rope_scaling: no YaRN anywhere");

    /* save_pretrained writes only keys that differ from Hugging Face's defaults. */
    const char *diff = "{\"num_hidden_layers\": 2, \"layer_types\": "
                       "[\"compressed_sparse_attention\", \"heavily_compressed_attention\"]}";
    rc = dsv4_model_config_parse(diff, strlen(diff), &c, err, sizeof(err));
    ok(rc == 0 && c.hidden == 4096 && c.n_heads == 64 && c.vocab_size == 129280 && c.hash_moe[0] &&
           c.hash_moe[1] && c.rope_main.dims == 64 && c.bos_id == 0 && c.eos_id == 1 &&
           c.swiglu_limit == 10,
       "diff-only config: absent keys take Hugging Face's defaults (3 hash layers, 64 rope dims)");
}

static void mkmodel_config(void)
{
    char dir[] = "/tmp/t-model-config-XXXXXX", err[512] = "", path[600];
    if (!mkdtemp(dir))
        bail_out("mkdtemp failed");
    int rc = dsv4_mkmodel_write("tiny", 1, "fp8", "hf", dir, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/config.json", dir);
    size_t len;
    const char *text = rc == 0 ? slurp(path, &len) : "";
    dsv4_model_config got, want;
    dsv4_mkmodel_preset("tiny", &want);
    rc = dsv4_model_config_parse(text, strlen(text), &got, err, sizeof(err));
    if (!ok(rc == 0, "mkmodel's config.json parses"))
        diag("%s", err);
    ok(got.vocab_size == want.vocab_size && got.hidden == want.hidden &&
           got.n_layers == want.n_layers && got.n_heads == want.n_heads &&
           got.head_dim == want.head_dim && got.q_lora_rank == want.q_lora_rank &&
           got.o_groups == want.o_groups && got.o_lora_rank == want.o_lora_rank &&
           got.window == want.window &&
           !memcmp(got.layer_kind, want.layer_kind, sizeof(got.layer_kind)) &&
           !memcmp(got.hash_moe, want.hash_moe, sizeof(got.hash_moe)) &&
           got.rate_csa == want.rate_csa && got.rate_hca == want.rate_hca &&
           got.n_experts == want.n_experts && got.top_k == want.top_k &&
           got.moe_inter == want.moe_inter && got.index_heads == want.index_heads &&
           got.index_dim == want.index_dim && got.index_topk == want.index_topk &&
           got.hc_mult == want.hc_mult && got.bos_id == want.bos_id && got.eos_id == want.eos_id &&
           !memcmp(&got.rope_compress, &want.rope_compress, sizeof(got.rope_compress)) &&
           !memcmp(&got.rope_main, &want.rope_main, sizeof(got.rope_main)),
       "it gives back the tiny preset");
    ok(want.o_groups != want.n_heads && want.hc_mult == 2 && want.rate_hca == 16 &&
           want.layer_kind[2] == DSV4_LAYER_CSA && want.layer_kind[3] == DSV4_LAYER_HCA &&
           want.hash_moe[2] && !want.hash_moe[3] && want.vocab_size == 320 && want.bos_id == 256,
       "tiny covers sliding/CSA/HCA, hash and routed MoE, o_groups != heads");
    dsv4_model_config fl;
    int csa = 0;
    dsv4_mkmodel_preset("flash-shape", &fl);
    for (uint32_t l = 0; l < fl.n_layers; l++)
        csa += fl.layer_kind[l] == DSV4_LAYER_CSA;
    ok(fl.n_layers == 43 && csa == 21 && fl.hidden == 4096 && fl.head_dim == 512 &&
           fl.n_heads == 64 && fl.n_experts == 8 && fl.moe_inter == 2048,
       "flash-shape has the V4-Flash widths and layer pattern with 8 experts");
    snprintf(path, sizeof(path), "rm -rf '%s'", dir);
    if (system(path) != 0)
        diag("could not remove %s", dir);
}

int main(void)
{
    plan(8 + 7 + 4 + 2 * 23);
    legacy_flash();
    current_forms();
    mkmodel_config();

    rejects(EDITS({"layer_types", NULL}), "neither layer_types nor compress_ratios is given");
    rejects(EDITS({"layer_types", "[\"sliding_attention\", \"sliding_attention\", "
                                  "\"sliding_attention\"]"}),
            "config.json: layer_types has 3 entries, expected 4");
    rejects(EDITS({"layer_types", "[\"sliding_attention\", \"full_attention\", "
                                  "\"sliding_attention\", \"sliding_attention\"]"}),
            "layer_types[1] 'full_attention' is not supported");
    rejects(EDITS({"layer_types", NULL}, {"compress_ratios", "[0, 4, 8, 128]"}),
            "compress_ratios[2] must be 0, 4 or 128");
    rejects(EDITS({"layer_types", NULL}, {"compress_ratios", "[0, 4]"}),
            "compress_ratios has 2 entries, expected 4");
    rejects(EDITS({"mlp_layer_types", "[\"moe\"]"}), "mlp_layer_types has 1 entries, expected 4");
    rejects(EDITS({"mlp_layer_types", "[\"moe\", \"dense\", \"moe\", \"moe\"]"}),
            "mlp_layer_types[1] 'dense' is not supported");
    rejects(EDITS({"hidden_size", "\"64\""}), "hidden_size must be an integer (got a string)");
    rejects(EDITS({"hidden_size", "0"}), "hidden_size is 0 (allowed 1..");
    rejects(EDITS({"num_hidden_layers", "200"}), "num_hidden_layers is 200 (allowed 1..128)");
    rejects(EDITS({"num_experts_per_tok", "9"}),
            "num_experts_per_tok 9 exceeds n_routed_experts 8");
    rejects(EDITS({"o_groups", "3"}),
            "num_attention_heads * head_dim (256) is not divisible by o_groups 3");
    rejects(EDITS({"qk_rope_head_dim", "64"}),
            "must be even, non-zero, equal and below head_dim 64");
    rejects(EDITS({"index_head_dim", "8"}), "index_head_dim 8 is smaller than the rope dims 16");
    rejects(EDITS({"hidden_act", "\"relu\""}),
            "hidden_act 'relu' is not supported (one of silu, gelu)");
    rejects(EDITS({"scoring_func", "3"}), "scoring_func must be a string (got an integer)");
    rejects(EDITS({"rope_scaling", "{\"type\": \"yarn\"}"}), "rope_scaling: yarn needs factor");
    rejects(EDITS({"rope_parameters", "[1]"}), "rope_parameters must be an object (got an array)");
    rejects(EDITS({"rope_scaling", "{\"type\": \"llama3\", \"factor\": 2}"}),
            "rope_scaling.type 'llama3' is not supported");
    rejects(EDITS({"tie_word_embeddings", "true"}), "tie_word_embeddings true is not supported");
    rejects(EDITS({"num_key_value_heads", "2"}), "num_key_value_heads is 2 (allowed 1..1)");
    rejects(EDITS({"bos_token_id", "320"}), "bos_token_id must be a token id below vocab_size 320");
    rejects(EDITS({"vocab_size", "320, \"vocab_size\": 321"}),
            "config.json: not valid JSON (duplicate");
    return done_testing();
}
