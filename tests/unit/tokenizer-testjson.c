/* tokenizer-testjson.c: tokenizer.json documents for the tokenizer unit tests. */
#include "tests/unit/tokenizer-testjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/tap.h"

/* GPT-2's bytes_to_unicode, written out independently of core/tokenizer/bpe.c. */
static unsigned bytelevel_cp(unsigned b)
{
    static unsigned table[256];
    if (!table['!']) {
        unsigned n = 0;
        for (unsigned c = 0; c < 256; c++) {
            bool printable = (c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || c >= 0xae;
            table[c] = printable ? c : 256 + n++;
        }
    }
    return table[b];
}

char *tt_bytelevel(const char *raw)
{
    size_t n = strlen(raw);
    char *out = malloc(2 * n + 1), *o = out;
    if (!out)
        bail_out("out of memory");
    for (size_t i = 0; i < n; i++) {
        unsigned cp = bytelevel_cp((unsigned char)raw[i]);
        if (cp < 0x80) {
            *o++ = (char)cp;
        } else {
            *o++ = (char)(0xc0 | cp >> 6);
            *o++ = (char)(0x80 | (cp & 0x3f));
        }
    }
    *o = 0;
    return out;
}

void tt_vocab_add(json_t *root, const char *raw, int id)
{
    char *k = tt_bytelevel(raw);
    json_object_set_new(json_object_get(json_object_get(root, "model"), "vocab"), k,
                        json_integer(id));
    free(k);
}

json_t *tt_base(void)
{
    json_t *root =
        json_loads("{\"version\": \"1.0\", \"added_tokens\": [], \"normalizer\": null,"
                   " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false,"
                   "                     \"trim_offsets\": true, \"use_regex\": false},"
                   " \"post_processor\": null,"
                   " \"decoder\": {\"type\": \"ByteLevel\"},"
                   " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null,"
                   "            \"byte_fallback\": false, \"vocab\": {}, \"merges\": []}}",
                   0, NULL);
    if (!root)
        bail_out("tt_base: bad template");
    for (unsigned b = 0; b < 256; b++) {
        char raw[2] = {(char)b, 0};
        if (b == 0) {
            /* tt_vocab_add takes C strings: spell byte 0 (U+0100) directly. */
            json_object_set_new(json_object_get(json_object_get(root, "model"), "vocab"),
                                "\xc4\x80", json_integer(0));
            continue;
        }
        tt_vocab_add(root, raw, (int)b);
    }
    return root;
}

void tt_set(json_t *root, const char *path, const char *value)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    json_t *obj = root;
    char *key = buf, *dot;
    while ((dot = strchr(key, '.'))) {
        *dot = 0;
        obj = json_object_get(obj, key);
        if (!json_is_object(obj))
            bail_out("tt_set: %s: no object at %s", path, key);
        key = dot + 1;
    }
    if (!value) {
        json_object_del(obj, key);
        return;
    }
    json_error_t je;
    json_t *v = json_loads(value, JSON_DECODE_ANY, &je);
    if (!v)
        bail_out("tt_set: %s: bad value %s (%s)", path, value, je.text);
    json_object_set_new(obj, key, v);
}

dsv4_tokenizer *tt_load(const json_t *root, char *err, size_t errlen)
{
    char path[] = "/tmp/dsv4-tt-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || json_dumpfd(root, fd, 0) != 0)
        bail_out("tt_load: cannot write %s", path);
    close(fd);
    dsv4_tokenizer *tok = dsv4_tokenizer_hf_load(path, err, errlen);
    unlink(path);
    return tok;
}
