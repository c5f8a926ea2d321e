/* t-config-schema-parses-typed-values: every option type of schema.h parses exactly its
 * documented syntax, rejects the rest with a reason that quotes the value, enforces ranges
 * at their edges, refuses overflow, and leaves the struct untouched on failure. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/config/schema.h"
#include "tests/tap.h"

typedef struct conf {
    bool b;
    int64_t i;
    uint64_t size;
    int64_t ms;
    int e;
    const char *s;
    const char *p;
    int64_t open_i;
} conf;

static const char *const dtypes[] = {"f32", "bf16", "fp8", NULL};

static const dsv4_option opts[] = {
    {"b", DSV4_OPT_BOOL, "false", 0, -1, NULL, "a bool", offsetof(conf, b)},
    {"i", DSV4_OPT_INT, "4", -8, 64, NULL, "an int", offsetof(conf, i)},
    {"size", DSV4_OPT_SIZE, "64M", 4096, 1ll << 40, NULL, "a size", offsetof(conf, size)},
    {"ms", DSV4_OPT_DURATION, "30s", 100, 600000, NULL, "a duration", offsetof(conf, ms)},
    {"e", DSV4_OPT_ENUM, "bf16", 0, -1, dtypes, "an enum", offsetof(conf, e)},
    {"s", DSV4_OPT_STRING, "", 0, -1, NULL, "a string", offsetof(conf, s)},
    {"p", DSV4_OPT_PATH, NULL, 0, -1, NULL, "a path", offsetof(conf, p)},
    {"open_i", DSV4_OPT_INT, "0", 0, INT64_MAX, NULL, "bounded below", offsetof(conf, open_i)},
    {NULL, 0, NULL, 0, 0, NULL, NULL, 0},
};

static char err[512];

/* Set key to text; returns the status and leaves the reason in err. */
static int set(conf *c, const char *key, const char *text)
{
    err[0] = '\0';
    return dsv4_schema_set(dsv4_schema_find(opts, key), c, text, err, sizeof(err));
}

static void rejects(conf *c, const char *key, const char *text, const char *reason)
{
    conf before = *c;
    int rc = set(c, key, text);
    is_int(rc, DSV4_ECONFIG, "%s = '%s' is rejected", key, text);
    is_str(err, reason, "%s = '%s' says why", key, text);
    ok(memcmp(&before, c, sizeof(*c)) == 0, "%s = '%s' leaves the struct unchanged", key, text);
}

static void range_text_is(const char *key, const char *want)
{
    char buf[128];
    dsv4_schema_range_text(dsv4_schema_find(opts, key), buf, sizeof(buf));
    is_str(buf, want, "range text of %s", key);
}

int main(void)
{
    conf c;
    memset(&c, 0, sizeof(c));
    is_int(dsv4_schema_defaults(opts, &c, err, sizeof(err)), 0, "defaults apply");
    ok(!c.b && c.i == 4 && c.size == 64ull << 20 && c.ms == 30000 && c.e == 1,
       "defaults are typed (false, 4, 64M, 30s, bf16)");
    is_str(c.s, "", "string default is the empty string");
    ok(c.p == NULL, "an option without a default is left zero");

    /* bool */
    const char *truths[] = {"true", "yes", "on", "1", "TRUE", "Yes"};
    for (size_t i = 0; i < sizeof(truths) / sizeof(truths[0]); i++) {
        c.b = false;
        ok(set(&c, "b", truths[i]) == 0 && c.b, "bool '%s' is true", truths[i]);
    }
    const char *lies[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
        c.b = true;
        ok(set(&c, "b", lies[i]) == 0 && !c.b, "bool '%s' is false", lies[i]);
    }
    rejects(&c, "b", "2", "expected a boolean (true/false, yes/no, on/off, 1/0), got '2'");
    rejects(&c, "b", "", "expected a boolean (true/false, yes/no, on/off, 1/0), got ''");

    /* int: edges, signs, junk, overflow */
    ok(set(&c, "i", "-8") == 0 && c.i == -8, "int at its minimum");
    ok(set(&c, "i", "64") == 0 && c.i == 64, "int at its maximum");
    ok(set(&c, "i", "+7") == 0 && c.i == 7, "int with a plus sign");
    rejects(&c, "i", "65", "'65' is out of range (expected -8..64)");
    rejects(&c, "i", "-9", "'-9' is out of range (expected -8..64)");
    rejects(&c, "i", "12abc", "expected an integer like 42, got '12abc'");
    rejects(&c, "i", "", "expected an integer like 42, got ''");
    rejects(&c, "i", "0x10", "expected an integer like 42, got '0x10'");
    rejects(&c, "i", "-", "expected an integer like 42, got '-'");
    rejects(&c, "i", "99999999999999999999",
            "'99999999999999999999' is too large (expected -8..64)");
    ok(set(&c, "open_i", "9223372036854775807") == 0 && c.open_i == INT64_MAX,
       "int64 maximum is accepted");
    rejects(&c, "open_i", "9223372036854775808",
            "'9223372036854775808' is too large (expected 0..)");
    rejects(&c, "open_i", "-1", "'-1' is out of range (expected 0..)");

    /* size */
    ok(set(&c, "size", "4K") == 0 && c.size == 4096, "size 4K is 4096 bytes (the minimum)");
    ok(set(&c, "size", "4096") == 0 && c.size == 4096, "size without suffix is bytes");
    ok(set(&c, "size", "512M") == 0 && c.size == 512ull << 20, "size 512M");
    ok(set(&c, "size", "3G") == 0 && c.size == 3ull << 30, "size 3G");
    ok(set(&c, "size", "1T") == 0 && c.size == 1ull << 40, "size 1T (the maximum)");
    ok(set(&c, "size", "1m") != 0, "lower-case suffixes are not sizes");
    rejects(&c, "size", "12Q", "expected a size like 64M (suffix K, M, G or T), got '12Q'");
    rejects(&c, "size", "-1M", "expected a size like 64M (suffix K, M, G or T), got '-1M'");
    rejects(&c, "size", "M", "expected a size like 64M (suffix K, M, G or T), got 'M'");
    rejects(&c, "size", "1.5G", "expected a size like 64M (suffix K, M, G or T), got '1.5G'");
    rejects(&c, "size", "2T", "'2T' is out of range (expected 4K..1T)");
    rejects(&c, "size", "4095", "'4095' is out of range (expected 4K..1T)");
    rejects(&c, "size", "16777216T", "'16777216T' is too large (expected 4K..1T)");

    /* duration: a unit is required */
    ok(set(&c, "ms", "100ms") == 0 && c.ms == 100, "duration 100ms (the minimum)");
    ok(set(&c, "ms", "45s") == 0 && c.ms == 45000, "duration 45s");
    ok(set(&c, "ms", "10m") == 0 && c.ms == 600000, "duration 10m (the maximum)");
    rejects(&c, "ms", "30", "expected a duration like 500ms, 30s or 5m, got '30'");
    rejects(&c, "ms", "30 s", "expected a duration like 500ms, 30s or 5m, got '30 s'");
    rejects(&c, "ms", "1h", "expected a duration like 500ms, 30s or 5m, got '1h'");
    rejects(&c, "ms", "99ms", "'99ms' is out of range (expected 100ms..10m)");
    rejects(&c, "ms", "11m", "'11m' is out of range (expected 100ms..10m)");
    rejects(&c, "ms", "9223372036854775807m",
            "'9223372036854775807m' is too large (expected 100ms..10m)");

    /* enum */
    ok(set(&c, "e", "fp8") == 0 && c.e == 2, "enum fp8 is index 2");
    ok(set(&c, "e", "f32") == 0 && c.e == 0, "enum f32 is index 0");
    rejects(&c, "e", "fp16", "expected one of f32|bf16|fp8, got 'fp16'");
    rejects(&c, "e", "FP8", "expected one of f32|bf16|fp8, got 'FP8'");

    /* string and path */
    ok(set(&c, "s", "hello world") == 0 && strcmp(c.s, "hello world") == 0, "string keeps text");
    ok(set(&c, "s", "") == 0 && strcmp(c.s, "") == 0, "string may be empty");
    ok(set(&c, "p", "/var/lib/model") == 0 && strcmp(c.p, "/var/lib/model") == 0, "path");
    rejects(&c, "p", "", "expected a path, got an empty value");

    /* descriptions for describe and the man pages */
    range_text_is("i", "-8..64");
    range_text_is("size", "4K..1T");
    range_text_is("ms", "100ms..10m");
    range_text_is("e", "f32|bf16|fp8");
    range_text_is("open_i", "0..");
    range_text_is("b", "");
    range_text_is("s", "");
    is_str(dsv4_opt_type_name(DSV4_OPT_SIZE), "size", "type name size");
    is_str(dsv4_opt_type_name(DSV4_OPT_DURATION), "duration", "type name duration");
    ok(dsv4_schema_find(opts, "nope") == NULL, "find of an unknown key is NULL");

    /* a table whose own default is bad is reported as such */
    static const dsv4_option bad[] = {
        {"k", DSV4_OPT_DURATION, "5", 0, -1, NULL, "bad default", 0},
        {NULL, 0, NULL, 0, 0, NULL, NULL, 0},
    };
    int64_t slot = 0;
    is_int(dsv4_schema_defaults(bad, &slot, err, sizeof(err)), DSV4_ECONFIG, "bad default fails");
    is_str(err, "default of k is invalid (expected a duration like 500ms, 30s or 5m, got '5')",
           "bad default names the key");

    dsv4_schema_release(opts, &c);
    ok(c.s == NULL && c.p == NULL, "release frees and clears strings");
    return done_testing();
}
