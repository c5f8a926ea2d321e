/* t-tokenizer-rejects-hostile-json.c: a tokenizer.json with missing fields, wrong types,
 * bad ids, broken merges or unsupported features is refused, and the message names the
 * field and the problem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tokenizer/tokenizer.h"
#include "tests/tap.h"
#include "tests/unit/tokenizer-testjson.h"

/* One change to the valid base document (up to two paths) and the text the error must
 * contain. */
typedef struct hostile {
    const char *path, *value;
    const char *path2, *value2;
    const char *expect;
} hostile;

static const hostile cases[] = {
    {"model", NULL, NULL, NULL, "missing \"model\""},
    {"model", "[]", NULL, NULL, "model: expected an object, got an array"},
    {"model.type", NULL, NULL, NULL, "model: missing \"type\""},
    {"model.type", "7", NULL, NULL, "model.type: expected a string, got an integer"},
    {"model.type", "\"WordPiece\"", NULL, NULL, "model: type \"WordPiece\" not supported"},
    {"model.vocab", NULL, NULL, NULL, "model: missing \"vocab\""},
    {"model.vocab", "[1, 2]", NULL, NULL, "model.vocab: expected an object, got an array"},
    {"model.vocab.x", "\"1\"", NULL, NULL,
     "model.vocab: \"x\": expected an integer id, got a string"},
    {"model.vocab.x", "-1", NULL, NULL, "model.vocab: \"x\": id -1 out of range"},
    {"model.vocab.x", "1e3", NULL, NULL, "expected an integer id, got a number"},
    {"model.vocab.x", "4294967296", NULL, NULL, "id 4294967296 out of range"},
    {"model.vocab.x", "65", NULL, NULL, "id 65 already used by another token"},
    {"model.vocab.A", NULL, NULL, NULL, "model.vocab: no token for byte 0x41"},
    {"model.merges", NULL, NULL, NULL, "model: missing \"merges\""},
    {"model.merges", "{}", NULL, NULL, "model.merges: expected an array, got an object"},
    {"model.merges", "[\"a b\", 5]", "model.vocab.ab", "300", "model.merges[1]: expected \"a b\""},
    {"model.merges", "[\"ab\"]", NULL, NULL, "model.merges[0]: \"ab\": expected two tokens"},
    {"model.merges", "[\"a b c\"]", NULL, NULL, "expected two tokens split by one space"},
    {"model.merges", "[[\"a\"]]", NULL, NULL, "model.merges[0]: expected"},
    {"model.merges", "[\"a zz\"]", NULL, NULL, "model.merges[0]: token \"zz\" not in model.vocab"},
    {"model.merges", "[\"a b\"]", NULL, NULL,
     "model.merges[0]: merged token \"ab\" not in model.vocab"},
    {"model.dropout", "0.1", NULL, NULL, "model.dropout: not supported"},
    {"model.byte_fallback", "true", NULL, NULL, "model.byte_fallback: not supported"},
    {"model.byte_fallback", "\"no\"", NULL, NULL,
     "model.byte_fallback: expected a boolean, got a string"},
    {"model.end_of_word_suffix", "\"</w>\"", NULL, NULL, "model.end_of_word_suffix: not supported"},
    {"added_tokens", "{}", NULL, NULL, "added_tokens: expected an array, got an object"},
    {"added_tokens", "[7]", NULL, NULL, "added_tokens[0]: expected an object, got an integer"},
    {"added_tokens", "[{\"id\": 300}]", NULL, NULL, "added_tokens[0]: missing \"content\""},
    {"added_tokens", "[{\"id\": 300, \"content\": 3}]", NULL, NULL,
     "added_tokens[0].content: expected a string"},
    {"added_tokens", "[{\"id\": 300, \"content\": \"\"}]", NULL, NULL,
     "added_tokens[0].content: empty"},
    {"added_tokens", "[{\"content\": \"<s>\"}]", NULL, NULL, "added_tokens[0]: missing \"id\""},
    {"added_tokens", "[{\"id\": \"300\", \"content\": \"<s>\"}]", NULL, NULL,
     "added_tokens[0]: \"<s>\": expected an integer id"},
    {"added_tokens", "[{\"id\": 99999999, \"content\": \"<s>\"}]", NULL, NULL,
     "id 99999999 out of range"},
    {"added_tokens", "[{\"id\": 300, \"content\": \"<s>\", \"special\": \"yes\"}]", NULL, NULL,
     "added_tokens[0].special: expected a boolean"},
    {"added_tokens", "[{\"id\": 300, \"content\": \"<s>\", \"single_word\": true}]", NULL, NULL,
     "added_tokens[0].single_word: not supported"},
    {"added_tokens", "[{\"id\": 300, \"content\": \"<s>\"}, {\"id\": 301, \"content\": \"<s>\"}]",
     NULL, NULL, "added_tokens[1]: \"<s>\": already added with another id"},
    {"normalizer", "{\"type\": \"NFC\"}", NULL, NULL, "normalizer: type \"NFC\" not supported"},
    {"normalizer", "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Lowercase\"}]}", NULL,
     NULL, "normalizer.normalizers[0]: type \"Lowercase\" not supported"},
    {"normalizer", "{\"type\": \"Sequence\"}", NULL, NULL,
     "normalizer.normalizers: expected an array"},
    {"normalizer", "[]", NULL, NULL, "normalizer: expected an object, got an array"},
    {"pre_tokenizer", NULL, NULL, NULL, "pre_tokenizer: missing"},
    {"pre_tokenizer", "{\"type\": \"Whitespace\"}", NULL, NULL,
     "pre_tokenizer: type \"Whitespace\" not supported"},
    {"pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": []}", NULL, NULL,
     "pre_tokenizer: no ByteLevel step"},
    {"pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": 3}", NULL, NULL,
     "pre_tokenizer.pretokenizers: expected an array"},
    {"pre_tokenizer", "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", NULL, NULL,
     "pre_tokenizer.add_prefix_space: not supported"},
    {"pre_tokenizer", "{\"type\": \"ByteLevel\"}", NULL, NULL,
     "pre_tokenizer.add_prefix_space: not supported"},
    {"pre_tokenizer",
     "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\", \"add_prefix_space\": "
     "false}, {\"type\": \"Split\"}]}",
     NULL, NULL, "pre_tokenizer.pretokenizers[1]: Split after ByteLevel not supported"},
    {"pre_tokenizer",
     "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
     "\"(\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"add_prefix_space\": "
     "false}]}",
     NULL, NULL,
     "pre_tokenizer.pretokenizers[0].pattern: regex does not compile (missing closing parenthesis "
     "at offset 1)"},
    {"pre_tokenizer",
     "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
     "\"[^\\\\S]\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"add_prefix_space\": "
     "false}]}",
     NULL, NULL, "\\S inside a character class not supported"},
    {"pre_tokenizer",
     "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
     "\"a\"}, \"behavior\": \"Contiguous\"}, {\"type\": \"ByteLevel\", \"add_prefix_space\": "
     "false}]}",
     NULL, NULL, "pre_tokenizer.pretokenizers[0].behavior: \"Contiguous\" not supported"},
    {"pre_tokenizer",
     "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": \"a\", "
     "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false}]}",
     NULL, NULL, "pre_tokenizer.pretokenizers[0].pattern: expected an object"},
    {"pre_tokenizer",
     "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
     "1}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false}]}",
     NULL, NULL, "pre_tokenizer.pretokenizers[0].Regex: expected a string"},
    {"decoder", NULL, NULL, NULL, "decoder: missing"},
    {"decoder", "{\"type\": \"WordPiece\"}", NULL, NULL,
     "decoder: type \"WordPiece\" not supported"},
    {"decoder", "{}", NULL, NULL, "decoder: missing \"type\""},
};

int main(void)
{
    size_t n = sizeof(cases) / sizeof(cases[0]);
    plan((int)(2 * n) + 5);
    char err[512];

    json_t *base = tt_base();
    dsv4_tokenizer *tok = tt_load(base, err, sizeof(err));
    if (!ok(tok != NULL, "the unchanged base document loads"))
        diag("%s", err);
    dsv4_tokenizer_free(tok);

    for (size_t i = 0; i < n; i++) {
        const hostile *h = &cases[i];
        json_t *doc = json_deep_copy(base);
        tt_set(doc, h->path, h->value);
        if (h->path2)
            tt_set(doc, h->path2, h->value2);
        err[0] = 0;
        tok = tt_load(doc, err, sizeof(err));
        ok(tok == NULL, "%s = %s is refused", h->path, h->value ? h->value : "(deleted)");
        has_str(err, h->expect, "%s = %s: message names the problem", h->path,
                h->value ? h->value : "(deleted)");
        dsv4_tokenizer_free(tok);
        json_decref(doc);
    }
    json_decref(base);

    /* Whole-file failures: not JSON, not an object, duplicate keys, no such file. */
    static const struct {
        const char *text, *expect;
    } files[] = {
        {"{\"model\": ", "line 1 column"},
        {"[]", "expected an object, got an array"},
        {"{\"model\": {}, \"model\": {}}", "duplicate object key"},
    };
    for (size_t i = 0; i < 3; i++) {
        char path[] = "/tmp/dsv4-tt-XXXXXX";
        int fd = mkstemp(path);
        FILE *f = fdopen(fd, "w");
        fputs(files[i].text, f);
        fclose(f);
        tok = dsv4_tokenizer_hf_load(path, err, sizeof(err));
        ok(tok == NULL && strstr(err, files[i].expect) && strstr(err, path), "file %s refused: %s",
           files[i].text, err);
        unlink(path);
    }
    tok = dsv4_tokenizer_hf_load("/nonexistent/tokenizer.json", err, sizeof(err));
    ok(tok == NULL && strstr(err, "/nonexistent/tokenizer.json: cannot open (No such file"),
       "missing file named: %s", err);
    return done_testing();
}
