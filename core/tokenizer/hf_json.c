/* hf_json.c: builds a tokenizer from a Hugging Face tokenizer.json (byte-level BPE).
 *
 * Accepted, and checked field by field so a hostile or unsupported file is refused with
 * the field named rather than half-understood:
 *   model          type "BPE", vocab {token: id}, merges ["a b"] or [["a","b"]],
 *                  ignore_merges; no dropout, byte_fallback, subword prefix or suffix
 *   added_tokens   [{id, content, special, lstrip, rstrip, single_word false}]
 *   normalizer     null or a Sequence of nothing (DeepSeek's)
 *   pre_tokenizer  ByteLevel (add_prefix_space false), alone or last in a Sequence after
 *                  Split steps (pattern Regex or String; behavior Isolated or Removed)
 *   decoder        ByteLevel
 * post_processor is not applied: encode returns the ids of the text and callers place
 * BOS/EOS themselves (DeepSeek-V3's post_processor is ByteLevel, which adds nothing).
 * truncation and padding are batch options of HF's encode and do not apply here. */
#include "core/tokenizer/tokenizer_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "core/util/json.h"

/* Where in the document a check failed, and why, for the caller's "path: " prefix. */
typedef struct hf_err {
    char *buf;
    size_t len;
} hf_err;

static int __attribute__((format(printf, 2, 3))) fail(hf_err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->buf, e->len, fmt, ap);
    va_end(ap);
    return DSV4_EFORMAT;
}

/* obj[key] as a boolean: def when absent or null. */
static int get_bool(const json_t *obj, const char *key, bool def, bool *out_p, hf_err *e,
                    const char *where)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out_p = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return fail(e, "%s.%s: expected a boolean, got %s", where, key, dsv4_json_kind(v));
    *out_p = json_is_true(v);
    return 0;
}

/* obj[key] as a string (required). */
static int get_string(const json_t *obj, const char *key, const json_t **out_p, hf_err *e,
                      const char *where)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return fail(e, "%s: missing \"%s\"", where, key);
    if (!json_is_string(v))
        return fail(e, "%s.%s: expected a string, got %s", where, key, dsv4_json_kind(v));
    *out_p = v;
    return 0;
}

/* obj.type, required to be a string. */
static int get_type(const json_t *obj, const char **type_p, hf_err *e, const char *where)
{
    if (!json_is_object(obj))
        return fail(e, "%s: expected an object, got %s", where, dsv4_json_kind(obj));
    const json_t *t;
    int rc = get_string(obj, "type", &t, e, where);
    if (!rc)
        *type_p = json_string_value(t);
    return rc;
}

/* An id: an integer in 0..DSV4_TOK_MAX_IDS-1. */
static int check_id(const json_t *v, int32_t *id_p, hf_err *e, const char *where, const char *name)
{
    if (!json_is_integer(v))
        return fail(e, "%s: \"%s\": expected an integer id, got %s", where, name, dsv4_json_kind(v));
    json_int_t id = json_integer_value(v);
    if (id < 0 || id >= (json_int_t)DSV4_TOK_MAX_IDS)
        return fail(e, "%s: \"%s\": id %lld out of range (0..%u)", where, name, (long long)id,
                    DSV4_TOK_MAX_IDS - 1);
    *id_p = (int32_t)id;
    return 0;
}

/* model: type, options, the largest id in vocab into *max_p. */
static int check_model(const json_t *model, bool *ignore_merges_p, int32_t *max_p, hf_err *e)
{
    const char *type;
    int rc = get_type(model, &type, e, "model");
    if (rc)
        return rc;
    if (strcmp(type, "BPE") != 0)
        return fail(e, "model: type \"%s\" not supported (only BPE)", type);
    const json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout))
        return fail(e, "model.dropout: not supported (expected null)");
    bool byte_fallback;
    if ((rc = get_bool(model, "byte_fallback", false, &byte_fallback, e, "model")) ||
        (rc = get_bool(model, "ignore_merges", false, ignore_merges_p, e, "model")))
        return rc;
    if (byte_fallback)
        return fail(e, "model.byte_fallback: not supported (byte-level BPE needs none)");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        const json_t *v = json_object_get(model, affixes[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return fail(e, "model.%s: not supported (expected null)", affixes[i]);
    }
    const json_t *vocab = json_object_get(model, "vocab");
    if (!vocab)
        return fail(e, "model: missing \"vocab\"");
    if (!json_is_object(vocab))
        return fail(e, "model.vocab: expected an object, got %s", dsv4_json_kind(vocab));
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)vocab, key, v)
    {
        int32_t id;
        if ((rc = check_id(v, &id, e, "model.vocab", key)))
            return rc;
        if (id > *max_p)
            *max_p = id;
    }
    const json_t *merges = json_object_get(model, "merges");
    if (!merges)
        return fail(e, "model: missing \"merges\"");
    if (!json_is_array(merges))
        return fail(e, "model.merges: expected an array, got %s", dsv4_json_kind(merges));
    return 0;
}

/* added_tokens: shape of each entry, the largest id into *max_p. */
static int check_added(const json_t *added, int32_t *max_p, hf_err *e)
{
    if (!added || json_is_null(added))
        return 0;
    if (!json_is_array(added))
        return fail(e, "added_tokens: expected an array, got %s", dsv4_json_kind(added));
    size_t i;
    const json_t *t;
    json_array_foreach(added, i, t)
    {
        char where[64];
        snprintf(where, sizeof(where), "added_tokens[%zu]", i);
        if (!json_is_object(t))
            return fail(e, "%s: expected an object, got %s", where, dsv4_json_kind(t));
        const json_t *content, *idv = json_object_get(t, "id");
        int rc = get_string(t, "content", &content, e, where);
        if (rc)
            return rc;
        if (json_string_length(content) == 0)
            return fail(e, "%s.content: empty", where);
        if (!idv)
            return fail(e, "%s: missing \"id\"", where);
        int32_t id;
        if ((rc = check_id(idv, &id, e, where, json_string_value(content))))
            return rc;
        bool flag;
        static const char *const flags[] = {"special", "lstrip", "rstrip", "normalized"};
        for (size_t f = 0; f < 4; f++)
            if ((rc = get_bool(t, flags[f], false, &flag, e, where)))
                return rc;
        if ((rc = get_bool(t, "single_word", false, &flag, e, where)))
            return rc;
        if (flag)
            return fail(e, "%s.single_word: not supported", where);
        if (id > *max_p)
            *max_p = id;
    }
    return 0;
}

/* model.vocab into the BPE table and the pieces (byte-level text decoded to bytes; a
 * token outside the alphabet keeps its own UTF-8, as HF's ByteLevel decoder does). */
static int load_vocab(dsv4_tokenizer *tok, const json_t *vocab, hf_err *e)
{
    dsv4_tok_buf raw = {0};
    const char *key;
    const json_t *v;
    int rc = 0;
    json_object_foreach((json_t *)vocab, key, v)
    {
        int32_t id = (int32_t)json_integer_value(v);
        size_t len = strlen(key);
        if (tok->piece_len[id] != DSV4_TOK_NO_PIECE) {
            rc = fail(e, "model.vocab: \"%s\": id %d already used by another token", key, id);
            break;
        }
        if ((rc = dsv4_bpe_add_token(tok->bpe, key, len, id)))
            break;
        raw.n = 0;
        rc = dsv4_bytelevel_decode(key, len, &raw);
        if (rc == -EILSEQ)
            rc = dsv4_tok_buf_append(&raw, key, len);
        if (rc || (rc = dsv4_tok_set_piece(tok, id, raw.p, raw.n)))
            break;
    }
    dsv4_tok_buf_free(&raw);
    return rc;
}

/* model.merges in rank order: "a b" strings or ["a", "b"] pairs. */
static int load_merges(dsv4_tokenizer *tok, const json_t *merges, hf_err *e)
{
    size_t i;
    const json_t *m;
    json_array_foreach(merges, i, m)
    {
        const char *a, *b;
        size_t alen, blen;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return fail(e,
                            "model.merges[%zu]: \"%s\": expected two tokens split by one "
                            "space",
                            i, a);
            alen = (size_t)(sp - a);
            b = sp + 1;
            blen = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            alen = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            blen = json_string_length(json_array_get(m, 1));
        } else {
            return fail(e, "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"], got %s", i,
                        dsv4_json_kind(m));
        }
        char why[256];
        int rc = dsv4_bpe_add_merge(tok->bpe, a, alen, b, blen, why, sizeof(why));
        if (rc == DSV4_EFORMAT)
            return fail(e, "model.merges[%zu]: %s", i, why);
        if (rc)
            return rc;
    }
    return 0;
}

static int load_added(dsv4_tokenizer *tok, const json_t *added, hf_err *e)
{
    size_t i;
    const json_t *t;
    json_array_foreach(added, i, t)
    {
        const json_t *content = json_object_get(t, "content");
        bool special, lstrip, rstrip;
        get_bool(t, "special", false, &special, e, "");
        get_bool(t, "lstrip", false, &lstrip, e, "");
        get_bool(t, "rstrip", false, &rstrip, e, "");
        int rc = dsv4_tok_add_added(tok, (int32_t)json_integer_value(json_object_get(t, "id")),
                                    json_string_value(content), json_string_length(content),
                                    special, lstrip, rstrip);
        if (rc == -EEXIST)
            return fail(e, "added_tokens[%zu]: \"%s\": already added with another id", i,
                        json_string_value(content));
        if (rc)
            return rc;
    }
    return 0;
}

static int check_normalizer(const json_t *n, hf_err *e, const char *where)
{
    if (!n || json_is_null(n))
        return 0;
    const char *type;
    int rc = get_type(n, &type, e, where);
    if (rc)
        return rc;
    if (strcmp(type, "Sequence") != 0)
        return fail(e, "%s: type \"%s\" not supported", where, type);
    const json_t *list = json_object_get(n, "normalizers");
    if (!json_is_array(list))
        return fail(e, "%s.normalizers: expected an array", where);
    size_t i;
    const json_t *sub;
    json_array_foreach(list, i, sub)
    {
        char w[128];
        snprintf(w, sizeof(w), "%s.normalizers[%zu]", where, i);
        if ((rc = check_normalizer(sub, e, w)))
            return rc;
    }
    return 0;
}

/* The GPT-2 pattern ByteLevel splits with when use_regex is on. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int load_split(dsv4_pretok *pt, const json_t *s, hf_err *e, const char *where)
{
    const json_t *pattern = json_object_get(s, "pattern"), *re, *behavior;
    if (!json_is_object(pattern))
        return fail(e, "%s.pattern: expected an object with \"Regex\" or \"String\"", where);
    bool literal = !json_object_get(pattern, "Regex");
    int rc = get_string(pattern, literal ? "String" : "Regex", &re, e, where);
    if (rc)
        return rc;
    if ((rc = get_string(s, "behavior", &behavior, e, where)))
        return rc;
    dsv4_split_behavior b;
    if (strcmp(json_string_value(behavior), "Isolated") == 0)
        b = DSV4_SPLIT_ISOLATED;
    else if (strcmp(json_string_value(behavior), "Removed") == 0)
        b = DSV4_SPLIT_REMOVED;
    else
        return fail(e, "%s.behavior: \"%s\" not supported (Isolated or Removed)", where,
                    json_string_value(behavior));
    bool invert;
    if ((rc = get_bool(s, "invert", false, &invert, e, where)))
        return rc;
    char why[256];
    rc = dsv4_pretok_add_split(pt, json_string_value(re), json_string_length(re), literal, b,
                               invert, why, sizeof(why));
    if (rc == DSV4_EFORMAT)
        return fail(e, "%s.pattern: %s", where, why);
    return rc;
}

/* One pre-tokenizer step (recursing into Sequence); ByteLevel must come last. */
static int load_pretok(dsv4_pretok *pt, const json_t *p, bool *bytelevel_p, hf_err *e,
                       const char *where)
{
    const char *type;
    int rc = get_type(p, &type, e, where);
    if (rc)
        return rc;
    if (*bytelevel_p)
        return fail(e, "%s: %s after ByteLevel not supported", where, type);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list))
            return fail(e, "%s.pretokenizers: expected an array", where);
        size_t i;
        const json_t *sub;
        json_array_foreach(list, i, sub)
        {
            char w[128];
            snprintf(w, sizeof(w), "%s.pretokenizers[%zu]", where, i);
            if ((rc = load_pretok(pt, sub, bytelevel_p, e, w)))
                return rc;
        }
        return 0;
    }
    if (strcmp(type, "Split") == 0)
        return load_split(pt, p, e, where);
    if (strcmp(type, "ByteLevel") == 0) {
        bool prefix, use_regex;
        /* HF's defaults when the keys are absent: add_prefix_space and use_regex on. */
        if ((rc = get_bool(p, "add_prefix_space", true, &prefix, e, where)) ||
            (rc = get_bool(p, "use_regex", true, &use_regex, e, where)))
            return rc;
        if (prefix)
            return fail(e, "%s.add_prefix_space: not supported (expected false)", where);
        *bytelevel_p = true;
        if (!use_regex)
            return 0;
        char why[256];
        rc = dsv4_pretok_add_split(pt, gpt2_pattern, sizeof(gpt2_pattern) - 1, false,
                                   DSV4_SPLIT_ISOLATED, false, why, sizeof(why));
        return rc == DSV4_EFORMAT ? fail(e, "%s: %s", where, why) : rc;
    }
    return fail(e, "%s: type \"%s\" not supported", where, type);
}

static int hf_build(const json_t *root, dsv4_tokenizer **tok_p, hf_err *e)
{
    if (!json_is_object(root))
        return fail(e, "expected an object, got %s", dsv4_json_kind(root));
    const json_t *model = json_object_get(root, "model");
    const json_t *added = json_object_get(root, "added_tokens");
    if (!model)
        return fail(e, "missing \"model\"");
    bool ignore_merges;
    int32_t max_id = -1;
    int rc = check_model(model, &ignore_merges, &max_id, e);
    if (!rc)
        rc = check_added(added, &max_id, e);
    if (!rc)
        rc = check_normalizer(json_object_get(root, "normalizer"), e, "normalizer");
    if (rc)
        return rc;
    const json_t *pre = json_object_get(root, "pre_tokenizer");
    if (!pre || json_is_null(pre))
        return fail(e, "pre_tokenizer: missing (byte-level BPE needs ByteLevel)");
    const char *dtype;
    const json_t *dec = json_object_get(root, "decoder");
    if (!dec || json_is_null(dec))
        return fail(e, "decoder: missing (byte-level BPE needs ByteLevel)");
    if ((rc = get_type(dec, &dtype, e, "decoder")))
        return rc;
    if (strcmp(dtype, "ByteLevel") != 0)
        return fail(e, "decoder: type \"%s\" not supported (only ByteLevel)", dtype);

    dsv4_tokenizer *tok = dsv4_tok_alloc((uint32_t)(max_id + 1));
    if (!tok)
        return -ENOMEM;
    tok->bpe = dsv4_bpe_new(ignore_merges);
    tok->pretok = dsv4_pretok_new();
    if (!tok->bpe || !tok->pretok)
        rc = -ENOMEM;
    bool bytelevel = false;
    if (!rc)
        rc = load_pretok(tok->pretok, pre, &bytelevel, e, "pre_tokenizer");
    if (!rc && !bytelevel)
        rc = fail(e, "pre_tokenizer: no ByteLevel step (byte-level BPE needs one)");
    if (!rc)
        rc = load_vocab(tok, json_object_get(model, "vocab"), e);
    if (!rc)
        rc = load_merges(tok, json_object_get(model, "merges"), e);
    if (!rc) {
        char why[256];
        rc = dsv4_bpe_finish(tok->bpe, why, sizeof(why));
        if (rc == DSV4_EFORMAT)
            fail(e, "%s", why);
    }
    if (!rc && added && !json_is_null(added))
        rc = load_added(tok, added, e);
    if (!rc)
        rc = dsv4_tok_index_pieces(tok);
    if (rc) {
        dsv4_tokenizer_free(tok);
        return rc;
    }
    *tok_p = tok;
    return 0;
}

dsv4_tokenizer *dsv4_tokenizer_hf_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root) {
        snprintf(err, errlen, "%s: line %d column %d: %s", path, je.line, je.column, je.text);
        return NULL;
    }
    char why[512] = "";
    hf_err e = {why, sizeof(why)};
    dsv4_tokenizer *tok = NULL;
    int rc = hf_build(root, &tok, &e);
    json_decref(root);
    if (rc == -ENOMEM)
        snprintf(err, errlen, "%s: out of memory", path);
    else if (rc)
        snprintf(err, errlen, "%s: %s", path, why);
    return tok;
}
