/* t-config-sample-sets-every-default: etc/dsv4d.ini, the commented sample, sets every key
 * of every core section table to exactly the table's default (so a key added to a table
 * without documenting it there fails here), has a comment line right above each key, and
 * has nothing the tables do not know. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config/config.h"
#include "core/config/reader.h"
#include "tests/tap.h"

static const struct {
    const char *name;
    const dsv4_option *options;
} sections[] = {
    {"core", dsv4_core_options},
    {"model", dsv4_model_options},
    {"server", dsv4_server_options},
    {"pd", dsv4_pd_options},
};

/* Line n (1-based) of the file, without its newline, or "" past the end. */
static const char *line_at(char **lines, size_t n_lines, int n)
{
    return n >= 1 && (size_t)n <= n_lines ? lines[n - 1] : "";
}

int main(void)
{
    const char *srcdir = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof(path), "%s/etc/dsv4d.ini", srcdir ? srcdir : ".");

    dsv4_diags diags;
    dsv4_diags_init(&diags);
    dsv4_ini *ini = dsv4_ini_read(path, &diags);
    if (!ini)
        bail_out("cannot read %s", path);
    is_int(diags.n, 0, "dsv4d.ini reads without diagnostics");

    /* the raw lines, to look at the comment above each key */
    FILE *f = fopen(path, "r");
    char *lines[1024], buf[1024];
    size_t n_lines = 0;
    while (f && n_lines < 1024 && fgets(buf, sizeof(buf), f)) {
        buf[strcspn(buf, "\n")] = '\0';
        lines[n_lines++] = strdup(buf);
    }
    if (f)
        fclose(f);

    for (size_t s = 0; s < sizeof(sections) / sizeof(sections[0]); s++) {
        const dsv4_ini_section *sec = dsv4_ini_section_find(ini, sections[s].name);
        ok(sec != NULL, "[%s] is in dsv4d.ini", sections[s].name);
        size_t n_opts = 0;
        for (const dsv4_option *o = sections[s].options; o->key; o++, n_opts++) {
            const dsv4_ini_entry *e = dsv4_ini_entry_find(sec, o->key);
            ok(e != NULL, "[%s] %s is in dsv4d.ini", sections[s].name, o->key);
            if (!e)
                continue;
            is_str(e->value, o->def, "[%s] %s is at its default", sections[s].name, o->key);
            ok(line_at(lines, n_lines, e->line - 1)[0] == ';', "[%s] %s has a comment above it",
               sections[s].name, o->key);
        }
        is_int(sec ? sec->n : 0, n_opts, "[%s] has no key the table lacks", sections[s].name);
    }
    for (size_t i = 0; i < n_lines; i++)
        free(lines[i]);
    dsv4_ini_free(ini);
    dsv4_diags_free(&diags);
    return done_testing();
}
