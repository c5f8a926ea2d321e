/* t-mkmodel-recognises-its-checkpoint: dsv4_mkmodel_is_written, which dsv4d asks before it
 * serves the embedded tiny model from its folder, says yes only for the checkpoint the
 * options write: not for another seed, dtype or layer count, not for a config.json whose
 * shapes differ (what an older version's tiny preset left behind), not without a
 * config.json (a write that did not finish) or a folder; and a rewrite over a stale one is
 * recognised again. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/mkmodel.h"
#include "tests/tap.h"

static char root[] = "/tmp/t-mkmodel-own-XXXXXX";

/* Replace the first `"key": old,` of dir/config.json by `"key": new,`. */
static void edit_config(const char *dir, const char *key, const char *old, const char *new)
{
    char path[700], from[96], to[96];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    snprintf(from, sizeof(from), "\"%s\": %s,", key, old);
    snprintf(to, sizeof(to), "\"%s\": %s,", key, new);
    FILE *f = fopen(path, "r");
    static char text[1 << 16];
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    char *at = strstr(text, from);
    if (!at)
        bail_out("%s: no %s", path, from);
    f = fopen(path, "w");
    if (!f)
        bail_out("%s: cannot write", path);
    fprintf(f, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    fclose(f);
}

int main(void)
{
    char dir[600], cfg[700], err[512];
    plan(10);
    if (!mkdtemp(root))
        bail_out("mkdtemp");
    snprintf(dir, sizeof(dir), "%s/tiny", root);
    snprintf(cfg, sizeof(cfg), "%s/config.json", dir);
    const dsv4_mkmodel_opts tiny = {.preset = "tiny", .seed = 3, .shards = 1};

    ok(!dsv4_mkmodel_is_written(&tiny, dir), "no folder: not written");
    if (!ok(dsv4_mkmodel_run(&tiny, dir, err, sizeof(err)) == 0, "tiny, seed 3, written"))
        diag("%s", err);
    ok(dsv4_mkmodel_is_written(&tiny, dir), "the same options: written");

    dsv4_mkmodel_opts other = tiny;
    other.seed = 4;
    ok(!dsv4_mkmodel_is_written(&other, dir), "another seed: not written");
    other = tiny;
    other.dtype = "bf16";
    ok(!dsv4_mkmodel_is_written(&other, dir), "another dtype: not written");
    other = tiny;
    other.layers = 4;
    ok(!dsv4_mkmodel_is_written(&other, dir), "another layer count: not written");
    other = tiny;
    other.preset = "no-such-preset";
    ok(!dsv4_mkmodel_is_written(&other, dir), "an unknown preset: not written");

    /* an older version's tiny preset: heads of 64 rather than 80 */
    edit_config(dir, "head_dim", "80", "64");
    ok(!dsv4_mkmodel_is_written(&tiny, dir), "a config.json of other shapes: not written");
    ok(dsv4_mkmodel_run(&tiny, dir, err, sizeof(err)) == 0 && dsv4_mkmodel_is_written(&tiny, dir),
       "rewritten over it: written again");

    unlink(cfg);
    ok(!dsv4_mkmodel_is_written(&tiny, dir), "weights without config.json: not written");

    char rm[700];
    snprintf(rm, sizeof(rm), "rm -rf '%s'", root);
    if (system(rm) != 0)
        diag("could not remove %s", root);
    return done_testing();
}
