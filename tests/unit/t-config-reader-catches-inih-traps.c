/* t-config-reader-catches-inih-traps: the INI reader hands back what inih parses
 * correctly (values stripped of inline comments, CRLF and BOM handled, `key: value`), and
 * turns each of inih's silent traps into an error at the right line while the lines
 * around it still parse: the line-length limit exactly at its edge, indented continuation
 * lines, names inih would truncate, keys under a rejected header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config/reader.h"
#include "tests/tap.h"

static char path[64];
static dsv4_diags diags;

/* Write text to a scratch file and read it; the diagnostics land in `diags`. */
static dsv4_ini *read_text(const char *text)
{
    strcpy(path, "/tmp/t-config-reader.XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        bail_out("cannot write %s", path);
    close(fd);
    dsv4_diags_free(&diags);
    dsv4_ini *ini = dsv4_ini_read(path, &diags);
    unlink(path);
    return ini;
}

static const char *value_of(const dsv4_ini *ini, const char *section, const char *key)
{
    const dsv4_ini_entry *e = dsv4_ini_entry_find(dsv4_ini_section_find(ini, section), key);
    return e ? e->value : "(absent)";
}

static int line_of(const dsv4_ini *ini, const char *section, const char *key)
{
    const dsv4_ini_entry *e = dsv4_ini_entry_find(dsv4_ini_section_find(ini, section), key);
    return e ? e->line : -1;
}

/* The one diagnostic expected, formatted without the scratch file's name. */
static void only_error(int line, const char *want, const char *what)
{
    char got[1024] = "(none)";
    is_int(diags.n, 1, "%s: one diagnostic", what);
    if (diags.n >= 1) {
        dsv4_diag_entry e = diags.v[0];
        e.file = NULL;
        dsv4_diag_format(&e, got, sizeof(got));
        is_int(e.line, line, "%s: at line %d", what, line);
    } else {
        ok(false, "%s: at line %d", what, line);
    }
    is_str(got, want, "%s: message", what);
}

int main(void)
{
    dsv4_diags_init(&diags);
    dsv4_ini *ini;

    ini = read_text("\xEF\xBB\xBF; comment\r\n[core]\r\nthreads = 4 ; workers\r\n"
                    "log_level: debug\r\n# another comment\r\n\r\n[model]\r\npath = a;b\r\n"
                    "  ; an indented comment is still a comment\r\n");
    is_int(diags.n, 0, "a well-formed file has no diagnostics");
    is_str(value_of(ini, "core", "threads"), "4", "an inline ';' comment is stripped");
    is_str(value_of(ini, "core", "log_level"), "debug", "key: value is a pair too");
    is_str(value_of(ini, "model", "path"), "a;b", "';' without a space before is kept");
    is_int(line_of(ini, "core", "log_level"), 4, "entries know their line (CRLF, BOM)");
    is_int(dsv4_ini_section_find(ini, "model")->line, 7, "sections know their header line");
    dsv4_ini_free(ini);

    /* The line-length edge: inih keeps a line of ini_max_line - 3 characters. */
    size_t max = dsv4_ini_max_line();
    ok(max >= 64, "inih's line limit is known (%zu)", max);
    char *text = malloc(2 * max + 64);
    char *fits = malloc(max + 2), *over = malloc(max + 2);
    memset(fits, 'a', max);
    memcpy(fits, "api_key = ", 10);
    fits[max] = '\0';
    memcpy(over, fits, max);
    over[max] = 'b';
    over[max + 1] = '\0';
    sprintf(text, "[server]\n%s\n", fits);
    ini = read_text(text);
    is_int(diags.n, 0, "a line of exactly %zu characters is fine", max);
    is_int(strlen(value_of(ini, "server", "api_key")), max - 10, "and its value is whole");
    dsv4_ini_free(ini);
    sprintf(text, "[server]\n%s\nlisten = 1.2.3.4:5\n", over);
    ini = read_text(text);
    char want[128];
    snprintf(want, sizeof(want), "line is %zu characters long (inih reads at most %zu; shorten it)",
             max + 1, max);
    only_error(2, want, "one character more");
    is_str(value_of(ini, "server", "api_key"), "(absent)", "the long line is not half-read");
    is_str(value_of(ini, "server", "listen"), "1.2.3.4:5", "the next line still parses");
    dsv4_ini_free(ini);
    /* An over-long header hides which section its keys are in: none of them is filed. */
    sprintf(text, "[core]\nthreads = 1\n[%s]\nthreads = 2\n", over);
    ini = read_text(text);
    is_int(diags.n, 1, "over-long header: one diagnostic");
    is_str(value_of(ini, "core", "threads"), "1",
           "over-long header: keys below are not filed "
           "under the previous section");
    dsv4_ini_free(ini);
    free(text);
    free(fits);
    free(over);

    ini = read_text("[server]\nlisten = 1.2.3.4:5\n\n   max_running = 8\nrole = unified\n");
    only_error(4,
               "[server] listen: indented line would be read as a continuation of this value "
               "(remove the indentation)",
               "indented line after a key, even past a blank line");
    is_str(value_of(ini, "server", "listen"), "1.2.3.4:5", "the value is not extended");
    is_str(value_of(ini, "server", "role"), "unified", "the next key still parses");
    dsv4_ini_free(ini);

    ini = read_text("[server]\n  listen = 1.2.3.4:5\n");
    is_int(diags.n, 0, "an indented key right after a header is not a continuation");
    is_str(value_of(ini, "server", "listen"), "1.2.3.4:5", "and it parses");
    dsv4_ini_free(ini);

    /* 49 characters is the longest name inih keeps whole. */
    ini = read_text("[core]\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa = 1\n"
                    "[bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb]\n");
    is_int(diags.n, 0, "49-character key and section names are fine");
    ok(dsv4_ini_section_find(ini, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb") != NULL,
       "and the section keeps its whole name");
    dsv4_ini_free(ini);
    ini = read_text("[cccccccccccccccccccccccccccccccccccccccccccccccccc]\nk = v\n[core]\nx = 1\n");
    only_error(1,
               "[cccccccccccccccccccccccccccccccccccccccccccccccccc] section name is too long "
               "(inih keeps 49 characters)",
               "50-character section name");
    ok(dsv4_ini_section_find(ini, "ccccccccccccccccccccccccccccccccccccccccccccccccc") == NULL,
       "no truncated section is made up");
    is_str(value_of(ini, "core", "x"), "1", "the next section still parses");
    dsv4_ini_free(ini);

    ini = read_text("[core]\nthreads = 1\n[core]\nthreads = 2\nlog_level = warn\n");
    is_int(diags.n, 2, "a repeated section and the key it repeats are both reported");
    is_str(value_of(ini, "core", "threads"), "1", "the first value of a duplicate key stays");
    is_str(value_of(ini, "core", "log_level"), "warn", "keys of a repeated section join it");
    dsv4_ini_free(ini);

    ini = read_text("[core]\nthreads\n");
    only_error(2, "[core] malformed line (expected key = value)", "a line without '='");
    dsv4_ini_free(ini);

    ini = read_text("");
    ok(ini && ini->n == 0 && diags.n == 0, "an empty file is an empty document");
    dsv4_ini_free(ini);
    ini = dsv4_ini_read("/nonexistent/dsv4d.ini", (dsv4_diags_free(&diags), &diags));
    ok(ini == NULL, "an unreadable file gives no document");
    if (diags.n == 1) {
        char got[256];
        dsv4_diag_format(&diags.v[0], got, sizeof(got));
        is_str(got,
               "/nonexistent/dsv4d.ini: cannot read the configuration (No such file or directory)",
               "and says which file and why");
    } else {
        ok(false, "one diagnostic for an unreadable file");
    }
    dsv4_diags_free(&diags);
    return done_testing();
}
