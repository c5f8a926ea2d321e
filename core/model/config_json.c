/* config_json.c: DeepSeek-V4 config.json to dsv4_model_config (spec §1), current Hugging
 * Face keys and the legacy ones, with range and consistency checks. */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/json.h"
#include "core/util/status.h"

/* Sizes above this are refused so that products of two or three of them stay far from
 * overflowing 64 bits in the loader. */
#define DIM_MAX (1u << 24)

typedef struct cfg_parser {
    json_t *root;
    char *err;
    size_t errlen;
    int rc;
} cfg_parser;

static void fail(cfg_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(cfg_parser *p, const char *fmt, ...)
{
    if (p->rc)
        return;
    int n = snprintf(p->err, p->errlen, "config.json: ");
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < p->errlen)
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    p->rc = DSV4_EFORMAT;
}

/* json null counts as absent, as in Hugging Face's configs. */
static json_t *get(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* An integer in [lo, hi]; def (Hugging Face's default) when absent. */
static uint32_t get_uint(cfg_parser *p, json_t *obj, const char *key, uint32_t def, long long lo,
                         long long hi)
{
    json_t *v = get(obj, key);
    if (!v)
        return def;
    if (!json_is_integer(v)) {
        fail(p, "%s must be an integer (got %s)", key, dsv4_json_kind(v));
        return 0;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        fail(p, "%s is %lld (allowed %lld..%lld)", key, x, lo, hi);
        return 0;
    }
    return (uint32_t)x;
}

static double get_num(cfg_parser *p, json_t *obj, const char *key, double def, double lo, double hi)
{
    json_t *v = get(obj, key);
    if (!v)
        return def;
    if (!json_is_number(v)) {
        fail(p, "%s must be a number (got %s)", key, dsv4_json_kind(v));
        return def;
    }
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) {
        fail(p, "%s is %g (allowed %g..%g)", key, x, lo, hi);
        return def;
    }
    return x;
}

static bool get_bool(cfg_parser *p, json_t *obj, const char *key, bool def)
{
    json_t *v = get(obj, key);
    if (!v)
        return def;
    if (!json_is_boolean(v)) {
        fail(p, "%s must be true or false (got %s)", key, dsv4_json_kind(v));
        return def;
    }
    return json_is_true(v);
}

/* The index of v in names[]; label names the key in messages. */
static int enum_value(cfg_parser *p, json_t *v, const char *label, const char *const *names, int n,
                      int def)
{
    for (int i = 0; json_is_string(v) && i < n; i++)
        if (strcmp(json_string_value(v), names[i]) == 0)
            return i;
    char allowed[160] = "";
    for (int i = 0; i < n; i++)
        snprintf(allowed + strlen(allowed), sizeof(allowed) - strlen(allowed), "%s%s",
                 i ? ", " : "", names[i]);
    if (json_is_string(v))
        fail(p, "%s '%s' is not supported (one of %s)", label, json_string_value(v), allowed);
    else
        fail(p, "%s must be a string (got %s)", label, dsv4_json_kind(v));
    return def;
}

/* One of names[] (index returned), def when absent. */
static int get_enum(cfg_parser *p, json_t *obj, const char *key, const char *const *names, int n,
                    int def)
{
    json_t *v = get(obj, key);
    return v ? enum_value(p, v, key, names, n, def) : def;
}

/* bos/eos: an integer or a list whose first entry is used; def when the key is absent
 * (Hugging Face's default), -1 when it is null. */
static int32_t get_token(cfg_parser *p, json_t *obj, const char *key, int32_t def, uint32_t vocab)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return def < (int32_t)vocab ? def : -1;
    if (json_is_array(v))
        v = json_array_get(v, 0);
    if (!v || json_is_null(v))
        return -1;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) >= (json_int_t)vocab) {
        fail(p, "%s must be a token id below vocab_size %u", key, vocab);
        return -1;
    }
    return (int32_t)json_integer_value(v);
}

/* The rope dims R = int(head_dim * partial_rotary_factor), as Hugging Face truncates it;
 * fallback when obj has no partial_rotary_factor. */
static uint32_t rope_dims(cfg_parser *p, json_t *obj, uint32_t head_dim, uint32_t fallback)
{
    if (!get(obj, "partial_rotary_factor"))
        return fallback;
    double prf = get_num(p, obj, "partial_rotary_factor", 0, 0, 1);
    return (uint32_t)floor(prf * head_dim + 1e-9);
}

/* A rope description: {rope_type (or legacy type): default|yarn, rope_theta, factor,
 * original_max_position_embeddings, beta_fast, beta_slow}. attention_factor is not read:
 * DeepSeek-V4 forces it to 1. theta overrides the object's rope_theta when non-zero (the
 * legacy forms take it from compress_rope_theta). */
static void parse_rope(cfg_parser *p, json_t *o, const char *what, double theta, uint64_t max_pos,
                       dsv4_rope_conf *r)
{
    if (!json_is_object(o)) {
        fail(p, "%s must be an object (got %s)", what, dsv4_json_kind(o));
        return;
    }
    static const char *const types[] = {"default", "yarn"};
    const char *tkey = get(o, "rope_type") ? "rope_type" : "type";
    char label[64];
    snprintf(label, sizeof(label), "%s.%s", what, tkey);
    json_t *t = get(o, tkey);
    r->yarn = t && enum_value(p, t, label, types, 2, 0) == 1;
    r->theta = theta ? theta : get_num(p, o, "rope_theta", 10000, 1, 1e12);
    if (r->yarn) {
        if (!get(o, "factor"))
            fail(p, "%s: yarn needs factor", what);
        r->factor = get_num(p, o, "factor", 1, 1, 1e6);
        r->original_max_pos =
            get_num(p, o, "original_max_position_embeddings", (double)max_pos, 1, 1e15);
        r->beta_fast = get_num(p, o, "beta_fast", 32, 0, 1e6);
        r->beta_slow = get_num(p, o, "beta_slow", 1, 0, 1e6);
    }
}

/* Hugging Face's __post_init__: rope_parameters {main, compress} when nested; otherwise
 * main = plain rope_theta, compress = compress_rope_theta plus whatever rope_parameters
 * (or the legacy rope_scaling) holds, e.g. YaRN. YaRN never comes from a default. */
static void parse_ropes(cfg_parser *p, dsv4_model_config *c)
{
    json_t *root = p->root;
    /* partial_rotary_factor, else the legacy qk_rope_head_dim, else 64/512 of head_dim */
    uint32_t R = get(root, "qk_rope_head_dim")
                     ? get_uint(p, root, "qk_rope_head_dim", 0, 0, DIM_MAX)
                     : (uint32_t)floor(c->head_dim * 0.125 + 1e-9);
    R = rope_dims(p, root, c->head_dim, R);
    c->rope_main.dims = c->rope_compress.dims = R;

    json_t *rp = get(root, "rope_parameters");
    if (!rp)
        rp = get(root, "rope_scaling");
    if (rp && !json_is_object(rp)) {
        fail(p, "rope_parameters must be an object (got %s)", dsv4_json_kind(rp));
        return;
    }
    json_t *main = rp ? get(rp, "main") : NULL, *comp = rp ? get(rp, "compress") : NULL;
    if (json_is_object(main) && json_is_object(comp)) {
        parse_rope(p, main, "rope_parameters.main", 0, c->max_positions, &c->rope_main);
        parse_rope(p, comp, "rope_parameters.compress", 0, c->max_positions, &c->rope_compress);
        c->rope_main.dims = rope_dims(p, main, c->head_dim, R);
        c->rope_compress.dims = rope_dims(p, comp, c->head_dim, R);
        return;
    }
    c->rope_main.theta = get_num(p, root, "rope_theta", 10000, 1, 1e12);
    double ctheta = get_num(p, root, "compress_rope_theta", 160000, 1, 1e12);
    if (rp)
        parse_rope(p, rp, get(root, "rope_parameters") ? "rope_parameters" : "rope_scaling", ctheta,
                   c->max_positions, &c->rope_compress);
    else
        c->rope_compress.theta = ctheta;
}

static void parse_layers(cfg_parser *p, dsv4_model_config *c)
{
    json_t *root = p->root;
    const uint32_t L = c->n_layers;
    json_t *rates = get(root, "compress_rates");
    if (rates && !json_is_object(rates))
        fail(p, "compress_rates must be an object (got %s)", dsv4_json_kind(rates));
    json_t *ro = rates ? rates : root;
    c->rate_csa = get_uint(p, ro, rates ? "compressed_sparse_attention" : "compress_rate_csa", 4, 1,
                           1u << 20);
    c->rate_hca = get_uint(p, ro, rates ? "heavily_compressed_attention" : "compress_rate_hca", 128,
                           1, 1u << 20);

    /* Lists longer than num_hidden_layers are cut (Hugging Face does the same; the real
     * compress_ratios has an entry for the MTP layer). */
    json_t *lt = get(root, "layer_types"), *cr = get(root, "compress_ratios");
    if (lt) {
        static const char *const kinds[] = {"sliding_attention", "compressed_sparse_attention",
                                            "heavily_compressed_attention"};
        if (!json_is_array(lt) || json_array_size(lt) < L) {
            fail(p, "layer_types has %zu entries, expected %u", json_array_size(lt), L);
            return;
        }
        for (uint32_t l = 0; l < L && !p->rc; l++) {
            char label[32];
            snprintf(label, sizeof(label), "layer_types[%u]", l);
            c->layer_kind[l] = (uint8_t)enum_value(p, json_array_get(lt, l), label, kinds, 3, 0);
        }
    } else if (cr) {
        /* Legacy: 0 sliding, 4 CSA, 128 HCA, whatever the compress rates are. */
        if (!json_is_array(cr) || json_array_size(cr) < L) {
            fail(p, "compress_ratios has %zu entries, expected %u", json_array_size(cr), L);
            return;
        }
        for (uint32_t l = 0; l < L; l++) {
            json_t *v = json_array_get(cr, l);
            json_int_t r = json_is_integer(v) ? json_integer_value(v) : -1;
            if (r != 0 && r != 4 && r != 128) {
                fail(p, "compress_ratios[%u] must be 0, 4 or 128", l);
                return;
            }
            c->layer_kind[l] = r == 0   ? DSV4_LAYER_SLIDING
                               : r == 4 ? DSV4_LAYER_CSA
                                        : DSV4_LAYER_HCA;
        }
    } else {
        fail(p, "neither layer_types nor compress_ratios is given (the layer pattern is not "
                "guessed)");
        return;
    }

    json_t *mt = get(root, "mlp_layer_types");
    if (mt) {
        static const char *const kinds[] = {"moe", "hash_moe"};
        if (!json_is_array(mt) || json_array_size(mt) < L) {
            fail(p, "mlp_layer_types has %zu entries, expected %u", json_array_size(mt), L);
            return;
        }
        for (uint32_t l = 0; l < L && !p->rc; l++) {
            char label[40];
            snprintf(label, sizeof(label), "mlp_layer_types[%u]", l);
            c->hash_moe[l] = enum_value(p, json_array_get(mt, l), label, kinds, 2, 0) == 1;
        }
    } else {
        /* num_hash_layers (legacy), default 3: that many hash layers first */
        uint32_t nh = get_uint(p, root, "num_hash_layers", 3, 0, DIM_MAX);
        for (uint32_t l = 0; l < L; l++)
            c->hash_moe[l] = l < nh;
    }
}

static void check(cfg_parser *p, const dsv4_model_config *c)
{
    const uint32_t R = c->rope_main.dims;
    if (p->rc)
        return;
    if (R == 0 || R % 2 || R >= c->head_dim || c->rope_compress.dims != R)
        fail(p, "rope dims %u (compress %u) must be even, non-zero, equal and below head_dim %u", R,
             c->rope_compress.dims, c->head_dim);
    else if (R > c->index_dim)
        fail(p, "index_head_dim %u is smaller than the rope dims %u", c->index_dim, R);
    else if ((uint64_t)c->n_heads * c->head_dim % c->o_groups)
        fail(p, "num_attention_heads * head_dim (%llu) is not divisible by o_groups %u",
             (unsigned long long)c->n_heads * c->head_dim, c->o_groups);
    else if (c->top_k > c->n_experts)
        fail(p, "num_experts_per_tok %u exceeds n_routed_experts %u", c->top_k, c->n_experts);
}

int dsv4_model_config_parse(const char *json, size_t len, dsv4_model_config *cfg, char *err,
                            size_t errlen)
{
    cfg_parser p = {.err = err, .errlen = errlen};
    json_error_t jerr;
    p.root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!p.root) {
        snprintf(err, errlen, "config.json: not valid JSON (%s, line %d)", jerr.text, jerr.line);
        return DSV4_EFORMAT;
    }
    if (!json_is_object(p.root)) {
        fail(&p, "top level must be an object (got %s)", dsv4_json_kind(p.root));
        json_decref(p.root);
        return p.rc;
    }
    json_t *r = p.root;
    dsv4_model_config c;
    memset(&c, 0, sizeof(c));
    c.vocab_size = get_uint(&p, r, "vocab_size", 129280, 1, DIM_MAX);
    c.hidden = get_uint(&p, r, "hidden_size", 4096, 1, DIM_MAX);
    c.n_layers = get_uint(&p, r, "num_hidden_layers", 43, 1, DSV4_MAX_LAYERS);
    c.n_heads = get_uint(&p, r, "num_attention_heads", 64, 1, 4096);
    c.head_dim = get_uint(&p, r, "head_dim", 512, 2, 1u << 16);
    c.q_lora_rank = get_uint(&p, r, "q_lora_rank", 1024, 1, DIM_MAX);
    c.o_groups = get_uint(&p, r, "o_groups", 8, 1, 4096);
    c.o_lora_rank = get_uint(&p, r, "o_lora_rank", 1024, 1, DIM_MAX);
    c.window = get_uint(&p, r, "sliding_window", 128, 1, DIM_MAX);
    c.n_experts = get_uint(&p, r, "n_routed_experts", 256, 1, 1u << 16);
    c.n_shared_experts = get_uint(&p, r, "n_shared_experts", 1, 0, 1);
    c.top_k = get_uint(&p, r, "num_experts_per_tok", 6, 1, 1u << 16);
    c.moe_inter = get_uint(&p, r, "moe_intermediate_size", 2048, 1, DIM_MAX);
    c.index_heads = get_uint(&p, r, "index_n_heads", 64, 1, 4096);
    c.index_dim = get_uint(&p, r, "index_head_dim", 128, 2, 1u << 16);
    c.index_topk = get_uint(&p, r, "index_topk", 512, 1, DIM_MAX);
    c.hc_mult = get_uint(&p, r, "hc_mult", 4, 1, 64);
    c.hc_sinkhorn_iters = get_uint(&p, r, "hc_sinkhorn_iters", 20, 1, 1000);
    c.hc_eps = get_num(&p, r, "hc_eps", 1e-6, 0, 1);
    c.rms_eps = get_num(&p, r, "rms_norm_eps", 1e-6, 0, 1);
    c.routed_scale = get_num(&p, r, "routed_scaling_factor", 1.5, 0, 1e6);
    c.norm_topk_prob = get_bool(&p, r, "norm_topk_prob", true);
    /* swiglu_limit: absent means the Hugging Face default 10, null means no clamp. */
    c.swiglu_limit = json_is_null(json_object_get(r, "swiglu_limit"))
                         ? 0
                         : get_num(&p, r, "swiglu_limit", 10, 0, 1e30);
    static const char *const scorings[] = {"sqrtsoftplus", "sigmoid", "softmax"};
    c.scoring = (dsv4_scoring)get_enum(&p, r, "scoring_func", scorings, 3, 0);
    static const char *const acts[] = {"silu", "gelu"};
    c.act = (dsv4_act)get_enum(&p, r, "hidden_act", acts, 2, 0);
    c.max_positions = get_uint(&p, r, "max_position_embeddings", 1048576, 1, UINT32_MAX);
    (void)get_uint(&p, r, "num_key_value_heads", 1, 1, 1);
    if (get_bool(&p, r, "tie_word_embeddings", false))
        fail(&p, "tie_word_embeddings true is not supported (DeepSeek-V4 has a separate head)");
    if (!p.rc) {
        c.bos_id = get_token(&p, r, "bos_token_id", 0, c.vocab_size);
        c.eos_id = get_token(&p, r, "eos_token_id", 1, c.vocab_size);
    }
    if (!p.rc)
        parse_ropes(&p, &c);
    if (!p.rc)
        parse_layers(&p, &c);
    check(&p, &c);
    json_decref(p.root);
    if (p.rc)
        return p.rc;
    *cfg = c;
    return 0;
}
